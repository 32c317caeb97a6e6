"""The native GGUF forward (noc_assistant.serving.native) against transformers on the same file.

Fast tests write a tiny random Llama (3 layers, hidden 64, 4 heads, 2 KV heads) to a GGUF file
in a tmp dir, quantised as the packaged model is (Q4_1 matrices, Q8_0 tied embedding, F32
norms), plus a variant with F32/F16 matrices and mixed types across layers, and compare with
transformers' own GGUF loader (dequantised fp32, the reference). The slow test runs the packaged
SmolLM2 GGUF.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import gguf
import numpy as np
import pytest
import torch

from noc_assistant.serving.backends import load_default
from noc_assistant.serving.errors import ModelLoadError, RequestError
from noc_assistant.serving.loading import (
    ByteTokenizer,
    HFTokenizer,
    TargetModel,
    build_target_layer_ids,
)
from noc_assistant.serving.native import (
    PREFILL_MIN_TOKENS,
    FastTokenizer,
    NativeLlama,
    NativeTargetModel,
    StaticKVCache,
    load_native_gguf,
    read_gguf_header,
)

Q4_1 = gguf.GGMLQuantizationType.Q4_1
Q8_0 = gguf.GGMLQuantizationType.Q8_0
F16 = gguf.GGMLQuantizationType.F16
F32 = gguf.GGMLQuantizationType.F32

LAYERS, HIDDEN, HEADS, KV_HEADS, FFN, VOCAB = 3, 64, 4, 2, 128, ByteTokenizer.vocab_size


def _to_gguf_rows(w: np.ndarray, n_head: int) -> np.ndarray:
    """Hugging Face q/k row order -> GGUF's interleaved rotary order (as llama.cpp converts)."""
    return (
        w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
        .swapaxes(1, 2)
        .reshape(w.shape)
    )


def write_tiny_gguf(
    path: Path,
    *,
    seed: int = 0,
    types: Callable[[str, int], gguf.GGMLQuantizationType] | None = None,
    skip: str = "",
) -> Path:
    """A random Llama GGUF; ``types(role, layer)`` picks each matrix's type (default: the
    packaged model's, Q4_1, with a Q8_0 embedding); tensor ``skip`` is left out."""
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    hd = HIDDEN // HEADS
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(LAYERS)
    w.add_context_length(256)
    w.add_embedding_length(HIDDEN)
    w.add_feed_forward_length(FFN)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(hd)
    w.add_vocab_size(VOCAB)

    def add(name: str, a: np.ndarray, t: gguf.GGMLQuantizationType) -> None:
        a = a.astype(np.float32)
        if name == skip:
            return
        if t in (Q4_1, Q8_0):
            w.add_tensor(name, gguf.quants.quantize(a, t), raw_dtype=t)
        elif t == F16:
            w.add_tensor(name, a.astype(np.float16))
        else:
            w.add_tensor(name, a)

    def pick(role: str, layer: int) -> gguf.GGMLQuantizationType:
        if types is not None:
            return types(role, layer)
        return Q8_0 if role == "token_embd" else Q4_1

    add("token_embd.weight", rng.standard_normal((VOCAB, HIDDEN)) * 0.5, pick("token_embd", -1))
    for i in range(LAYERS):
        b = f"blk.{i}."
        add(b + "attn_norm.weight", 1 + 0.1 * rng.standard_normal(HIDDEN), F32)
        add(b + "ffn_norm.weight", 1 + 0.1 * rng.standard_normal(HIDDEN), F32)
        q = rng.standard_normal((HEADS * hd, HIDDEN)) * 0.25
        k = rng.standard_normal((KV_HEADS * hd, HIDDEN)) * 0.25
        add(b + "attn_q.weight", _to_gguf_rows(q, HEADS), pick("attn_q", i))
        add(b + "attn_k.weight", _to_gguf_rows(k, KV_HEADS), pick("attn_k", i))
        add(b + "attn_v.weight", rng.standard_normal((KV_HEADS * hd, HIDDEN)) * 0.25, pick("v", i))
        add(b + "attn_output.weight", rng.standard_normal((HIDDEN, HIDDEN)) * 0.2, pick("o", i))
        add(b + "ffn_gate.weight", rng.standard_normal((FFN, HIDDEN)) * 0.25, pick("gate", i))
        add(b + "ffn_up.weight", rng.standard_normal((FFN, HIDDEN)) * 0.25, pick("up", i))
        add(b + "ffn_down.weight", rng.standard_normal((HIDDEN, FFN)) * 0.2, pick("down", i))
    add("output_norm.weight", 1 + 0.1 * rng.standard_normal(HIDDEN), F32)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _mixed(role: str, layer: int) -> gguf.GGMLQuantizationType:
    """F32 embedding, F16 attention, and the MLP's type changing from layer to layer."""
    if role == "token_embd":
        return F32
    if role in ("attn_q", "attn_k", "v", "o"):
        return F16
    return (Q4_1, Q8_0, F32)[layer % 3]


def _reference(path: Path) -> TargetModel:
    """transformers' fp32 dequantisation of the file, wrapped like the engine's targets."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(
        path.parent, gguf_file=path.name, dtype=torch.float32
    )
    return TargetModel(model, ByteTokenizer(), "ref", n_taps=2)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("gguf")
    return {
        "q": write_tiny_gguf(d / "q" / "tiny.gguf"),
        "mixed": write_tiny_gguf(d / "m" / "tiny.gguf", seed=1, types=_mixed),
    }


@pytest.fixture(scope="module")
def pair(files: dict[str, Path]) -> tuple[NativeTargetModel, TargetModel]:
    return load_native_gguf(files["q"], tokenizer=ByteTokenizer(), n_taps=2), _reference(files["q"])


def _greedy(t: TargetModel, prompt: list[int], n: int) -> list[int]:
    cache = t.new_cache()
    logits = t.forward(prompt, cache).logits[-1]
    out: list[int] = []
    for _ in range(n):
        out.append(int(torch.argmax(logits)))
        logits = t.forward([out[-1]], cache).logits[-1]
    return out


PROMPTS = ["amf-2 down since 14:02", "GTP-U path failure upf-3 sgw-1", "Summarize: 5G core alarm"]


def test_header_matches_gguf_reader(files: dict[str, Path]) -> None:
    for p in files.values():
        meta, tensors = read_gguf_header(p)
        reader = gguf.GGUFReader(p)
        assert len(tensors) == len(reader.tensors)
        for t in reader.tensors:
            mine = tensors[t.name]
            assert mine.offset == t.data_offset and mine.n_bytes == t.n_bytes
            assert mine.shape == tuple(int(s) for s in t.shape)
            assert mine.ggml_type == int(t.tensor_type)
        assert meta["llama.attention.head_count_kv"] == KV_HEADS
        assert meta["general.architecture"] == "llama"


@pytest.mark.parametrize("kind", ["q", "mixed"])
def test_logits_and_taps_match_transformers(files: dict[str, Path], kind: str) -> None:
    nat = load_native_gguf(files[kind], tokenizer=ByteTokenizer(), n_taps=2)
    ref = _reference(files[kind])
    assert nat.tap_layers == ref.tap_layers == build_target_layer_ids(LAYERS, 2)
    ids = ByteTokenizer().chat_prompt([{"role": "user", "content": PROMPTS[0]}])
    a = nat.forward(ids, nat.new_cache())
    b = ref.forward(ids, ref.new_cache())
    assert a.logits.shape == b.logits.shape == (len(ids), VOCAB)
    assert a.features.shape == b.features.shape == (len(ids), 2 * HIDDEN)
    assert a.logits.dtype == a.features.dtype == torch.float32
    scale = float(b.logits.abs().max())
    assert float((a.logits - b.logits).abs().max()) < 1e-5 * scale
    fscale = float(b.features.abs().max())
    assert float((a.features - b.features).abs().max()) < 1e-5 * fscale
    assert torch.equal(a.logits.argmax(-1), b.logits.argmax(-1))


def test_greedy_equals_transformers(pair: tuple[NativeTargetModel, TargetModel]) -> None:
    nat, ref = pair
    tok = ByteTokenizer()
    for q in PROMPTS:
        prompt = tok.chat_prompt([{"role": "user", "content": q}])
        assert _greedy(nat, prompt, 48) == _greedy(ref, prompt, 48)


def test_multi_token_rows_equal_single_token_forwards(
    pair: tuple[NativeTargetModel, TargetModel],
) -> None:
    """Batch invariance: a verify round's rows are bit-identical to one-token decoding."""
    nat, _ = pair
    ids = ByteTokenizer().encode("upf-3 GTP-U path failure, 2 alarms")
    whole = nat.forward(ids, nat.new_cache())
    cache = nat.new_cache()
    for i, t in enumerate(ids):
        one = nat.forward([t], cache)
        assert torch.equal(one.logits[0], whole.logits[i])
        assert torch.equal(one.features[0], whole.features[i])


def test_forward_many_rows_equal_each_sequence_alone(
    pair: tuple[NativeTargetModel, TargetModel],
) -> None:
    """Batched decoding: sequences at different positions (a decoding step, a verify round, a
    long prompt run on its own) share one call, and each gets exactly its own forward's rows."""
    nat, _ = pair
    tok = ByteTokenizer()
    texts = ["amf-2 down", "GTP-U path failure on upf-3 since 14:02", "N4 latency"]
    steps = [tok.encode(" up"), tok.encode(" x y"), tok.encode(" high")]
    long = tok.encode("registration storm " * 5)
    assert len(long) >= PREFILL_MIN_TOKENS

    def started() -> list[StaticKVCache]:
        caches = [nat.native.new_cache() for _ in texts]
        for t, c in zip(texts, caches, strict=True):
            nat.forward(tok.encode(t), c)
        return caches

    one_by_one = started()
    alone = [nat.forward(s, c) for s, c in zip(steps, one_by_one, strict=True)]
    caches = started()
    batched = nat.forward_many([*zip(steps, caches, strict=True), (long, nat.new_cache())])
    for a, b in zip(alone, batched, strict=False):
        assert torch.equal(a.logits, b.logits)
        assert torch.equal(a.features, b.features)
    assert [c.length for c in caches] == [c.length for c in one_by_one]
    assert torch.equal(batched[-1].logits, nat.forward(long, nat.new_cache()).logits)
    with pytest.raises(ValueError, match="distinct cache"):
        nat.forward_many([(steps[0], caches[0]), (steps[1], caches[0])])


def test_crop_then_forward_equals_fresh(pair: tuple[NativeTargetModel, TargetModel]) -> None:
    nat, _ = pair
    tok = ByteTokenizer()
    a, rejected, c = tok.encode("amf-2 down"), tok.encode(" XXXX"), tok.encode(" since 14:02")
    cache = nat.native.new_cache(capacity=4)  # small: forwards below grow it (a copy)
    nat.forward(a, cache)
    nat.forward(rejected, cache)
    assert cache.length == len(a) + len(rejected) and cache.capacity >= cache.length
    cache.crop(len(a))
    assert cache.length == len(a)
    cache.crop(len(a) + 3)  # never grows
    assert cache.length == len(a)
    got = nat.forward(c, cache)
    fresh = nat.forward(a + c, nat.new_cache())
    assert torch.equal(got.logits, fresh.logits[len(a) :])
    assert torch.equal(got.features, fresh.features[len(a) :])


def test_long_prompt_blas_path(pair: tuple[NativeTargetModel, TargetModel]) -> None:
    """A prompt of >= PREFILL_MIN_TOKENS tokens goes through BLAS on dequantised weights: same
    values up to summation order, and decoding after it matches transformers."""
    nat, ref = pair
    tok = ByteTokenizer()
    text = "amf-2 registration success rate dropped to 71.5%, GTP-U path failure on upf-3. " * 2
    ids = tok.chat_prompt([{"role": "user", "content": text}])
    assert len(ids) >= PREFILL_MIN_TOKENS
    a, b = nat.forward(ids, nat.new_cache()), ref.forward(ids, ref.new_cache())
    assert float((a.logits - b.logits).abs().max()) < 1e-5 * float(b.logits.abs().max())
    assert float((a.features - b.features).abs().max()) < 1e-5 * float(b.features.abs().max())
    # the kernels' rows agree too (one token at a time)
    cache = nat.new_cache()
    nat.forward(ids[:-1], cache)
    last = nat.forward(ids[-1:], cache)
    assert torch.allclose(
        last.logits[0], a.logits[-1], rtol=0, atol=1e-5 * float(b.logits.abs().max())
    )
    assert _greedy(nat, ids, 24) == _greedy(ref, ids, 24)


def test_last_logits_only(pair: tuple[NativeTargetModel, TargetModel]) -> None:
    nat, ref = pair
    ids = ByteTokenizer().encode("N4 session setup latency 41 ms")
    full = nat.forward(ids, nat.new_cache())
    last = nat.forward(ids, nat.new_cache(), all_logits=False)
    assert last.logits.shape == (1, VOCAB)
    assert torch.equal(last.logits[0], full.logits[-1])
    assert torch.equal(last.features, full.features)
    r = ref.forward(ids, ref.new_cache(), all_logits=False)
    assert r.logits.shape == (1, VOCAB)
    assert torch.allclose(r.logits[0], full.logits[-1], atol=1e-4)


def test_fast_tokenizer_equals_transformers(tmp_path: Path) -> None:
    """FastTokenizer on a saved tokeniser folder gives transformers' ids, text and EOS set."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    words = ["amf-2", "down", "since", "upf-3", "GTP-U", "path", "failure", "!", "?", "ok"]
    specials = ["<unk>", "<|im_start|>", "<|im_end|>", "<|endoftext|>"]
    vocab = {w: i for i, w in enumerate([*specials, *words])}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    template = (
        "{% for m in messages %}{{ '<|im_start|>' + m['role'] + ' ' + m['content'] + "
        "'<|im_end|>' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant' }}"
        "{% endif %}"
    )
    hf = PreTrainedTokenizerFast(
        tokenizer_object=core,
        unk_token="<unk>",
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        additional_special_tokens=["<|endoftext|>"],
    )
    hf.chat_template = template
    hf.save_pretrained(tmp_path)
    fast, ref = FastTokenizer(tmp_path), HFTokenizer(AutoTokenizer.from_pretrained(tmp_path))
    assert fast.eos_token_ids == ref.eos_token_ids
    for text in ["amf-2 down since", "upf-3 GTP-U path failure !", "unknown words ok ?", ""]:
        assert fast.encode(text) == ref.encode(text)
        ids = [*ref.encode(text), vocab["<|im_end|>"]]
        assert fast.decode(ids) == ref.decode(ids)
    chat = [{"role": "user", "content": "amf-2 down ?"}, {"role": "assistant", "content": "ok"}]
    assert fast.chat_prompt(chat) == ref.chat_prompt(chat)
    with pytest.raises(ModelLoadError):
        FastTokenizer(tmp_path / "missing")


def test_target_contract(pair: tuple[NativeTargetModel, TargetModel]) -> None:
    nat, ref = pair
    assert isinstance(nat, TargetModel)
    for attr in ("hidden_size", "num_layers", "num_heads", "num_kv_heads", "vocab_size"):
        assert getattr(nat, attr) == getattr(ref, attr), attr
    assert nat.max_positions == 256 and nat.device.type == "cpu" and nat.dtype == torch.float32
    ids = torch.tensor([[1, 2, 3], [250, 0, 7]])
    assert torch.equal(nat.embed(ids), ref.embed(ids))
    assert torch.equal(nat.lm_head_weight, ref.lm_head_weight)
    emb = nat.model.get_input_embeddings().weight
    assert torch.equal(emb, ref.model.get_input_embeddings().weight)
    assert nat.model.config.hidden_size == HIDDEN
    assert nat.forward([], nat.new_cache()).logits.shape == (0, VOCAB)
    with pytest.raises(TypeError):
        nat.forward([1, 2], ref.new_cache())
    cache = nat.new_cache()
    assert isinstance(cache, StaticKVCache) and cache.length == 0
    with pytest.raises(ValueError):
        nat.forward([VOCAB], cache)
    assert cache.length == 0
    # features_batch goes through the transformers model of the same file
    fb = nat.features_batch(torch.tensor([[5, 6, 7]]))
    rb = ref.features_batch(torch.tensor([[5, 6, 7]]))
    assert torch.allclose(fb.logits, rb.logits) and torch.allclose(fb.features, rb.features)


def test_context_overflow_is_a_request_error(pair: tuple[NativeTargetModel, TargetModel]) -> None:
    nat, _ = pair
    cache = nat.new_cache()
    nat.forward(list(range(200)), cache, all_logits=False)
    with pytest.raises(RequestError, match="context"):
        nat.forward(list(range(57)), cache)  # 257 > 256 positions
    assert cache.length == 200


def test_wide_vectors_only_before_numba_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    from noc_assistant.serving.native import jit

    assert jit._prefer_wide_vectors() is False  # numba is set up by now: never changed late
    monkeypatch.setenv("NOC_LLM_WIDE_VECTORS", "0")
    assert jit._prefer_wide_vectors() is False


def test_load_errors(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="not found"):
        NativeLlama(tmp_path / "none.gguf")
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGML" + b"\0" * 64)
    with pytest.raises(ModelLoadError, match="bad magic"):
        NativeLlama(bad)
    # a file whose layer 2 lacks its down projection: the error names the file and tensor
    cut = write_tiny_gguf(tmp_path / "cut.gguf", skip="blk.2.ffn_down.weight")
    with pytest.raises(ModelLoadError, match=r"cut\.gguf.*blk\.2\.ffn_down\.weight"):
        NativeLlama(cut)


@pytest.mark.slow
def test_smollm2_greedy_equals_fp32_gguf_reference() -> None:
    """The packaged Q4_1 SmolLM2: 48 greedy tokens on 3 chat prompts equal transformers' fp32
    dequantisation of the same GGUF (``load_gguf``), token for token."""
    from noc_assistant.serving.loading import default_gguf_path, load_gguf

    nat = load_default(backend="native")
    assert isinstance(nat, NativeTargetModel)
    ref = load_gguf(default_gguf_path())
    qs = [
        "Summarize: AMF registration success rate dropped from 99.2% to 71.5% on amf-2.",
        "Write a short e-mail to Vodafone IPX about a GTP-U path failure between upf-3 and sgw-1.",
        "What should a NOC engineer check first when SCTP associations to an MME flap?",
    ]
    assert isinstance(nat.tokenizer, FastTokenizer)
    assert nat.tokenizer.eos_token_ids == ref.tokenizer.eos_token_ids
    for q in qs:
        prompt = nat.tokenizer.chat_prompt([{"role": "user", "content": q}])
        assert prompt == ref.tokenizer.chat_prompt([{"role": "user", "content": q}])
        out = _greedy(nat, prompt, 48)
        assert out == _greedy(ref, prompt, 48), q
        assert nat.tokenizer.decode(out) == ref.tokenizer.decode(out)
