"""Lossless greedy speculative decoding, drafters, DSpine parts, and speculative sampling."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import pytest
import torch
from scipy.stats import chisquare

from noc_assistant.serving.cache import KVCache
from noc_assistant.serving.draft_heads import (
    BlockDrafterModel,
    DrafterConfig,
    NeuralDrafter,
    OracleDrafter,
    Proposal,
    load_drafter,
    new_drafter,
    save_drafter,
)
from noc_assistant.serving.errors import ModelLoadError, RequestError
from noc_assistant.serving.loading import TargetModel, TargetOutput, tiny_qwen3
from noc_assistant.serving.speculative import generate, greedy_reference, stream_tokens

PROMPTS = [
    "Summarize: AMF registration success rate dropped from 99.2% to 71.5% on amf-2.",
    "Write a short e-mail to the partner NOC about PFCP heartbeat failures on smf-1.",
]


def _prompt(t: TargetModel, i: int = 0) -> list[int]:
    return t.tokenizer.chat_prompt([{"role": "user", "content": PROMPTS[i]}])


class Recorder:
    """Wraps a drafter and records every proposal."""

    def __init__(self, inner: NeuralDrafter) -> None:
        self.inner = inner
        self.block_size = inner.block_size
        self.proposals: list[list[int]] = []

    def begin(self, features: torch.Tensor) -> None:
        self.inner.begin(features)

    def extend(self, features: torch.Tensor) -> None:
        self.inner.extend(features)

    def propose(
        self,
        tokens: Sequence[int],
        temperature: float = 0.0,
        generator: torch.Generator | None = None,
    ) -> Proposal:
        p = self.inner.propose(tokens, temperature, generator)
        self.proposals.append(list(p.tokens))
        return p


def test_kv_cache_crop_matches_fresh_forward(tiny: TargetModel) -> None:
    ids = _prompt(tiny)[:20]
    full = tiny.forward(ids, tiny.new_cache()).logits
    cache = tiny.new_cache()
    tiny.forward([*ids[:12], 7, 7, 7], cache)
    cache.crop(12)
    assert cache.length == 12
    part = tiny.forward(ids[12:], cache).logits
    assert torch.allclose(part, full[12:], atol=1e-4)
    assert KVCache().length == 0


def test_tiny_model_is_seeded() -> None:
    a, b, c = tiny_qwen3(seed=3), tiny_qwen3(seed=3), tiny_qwen3(seed=4)
    ids = [1, 2, 3, 4]
    la = a.forward(ids, a.new_cache()).logits
    assert torch.equal(la, b.forward(ids, b.new_cache()).logits)
    assert not torch.allclose(la, c.forward(ids, c.new_cache()).logits)


def test_greedy_reference_matches_recompute(tiny: TargetModel) -> None:
    p = _prompt(tiny)
    ref = greedy_reference(tiny, p, 12)
    seq = list(p)
    for _ in range(12):
        logits = tiny.forward(seq, tiny.new_cache()).logits[-1]
        seq.append(int(logits.argmax()))
    assert ref == seq[len(p) :]


@pytest.mark.parametrize("block", [2, 4, 8, 16])
@pytest.mark.parametrize("kind", ["dflash", "dspine", "oracle"])
def test_lossless_greedy_untrained_and_oracle(tiny: TargetModel, block: int, kind: str) -> None:
    p = _prompt(tiny, block % 2)
    max_tokens = 45  # not a multiple of any block size
    ref = greedy_reference(tiny, p, max_tokens)
    assert len(ref) == max_tokens
    if kind == "oracle":
        longer = greedy_reference(tiny, p, max_tokens + block)
        drafter: object = OracleDrafter([*p, *longer], block)
    else:
        cfg = DrafterConfig.for_target(tiny, block_size=block, dspine=kind == "dspine")
        drafter = NeuralDrafter(new_drafter(tiny, cfg, seed=block))
    res = generate(tiny, drafter, p, max_tokens)  # type: ignore[arg-type]
    assert res.tokens == ref
    assert res.stats.finish_reason == "length"
    if kind == "oracle":
        assert res.stats.accepted_tokens == res.stats.draft_tokens
        assert res.stats.rounds == -(-(max_tokens - 1) // block)


@pytest.mark.parametrize("block", [4, 8])
def test_lossless_greedy_trained(
    tiny: TargetModel, tiny_trained: dict[int, BlockDrafterModel], block: int
) -> None:
    for i in range(2):
        p = _prompt(tiny, i)
        ref = greedy_reference(tiny, p, 40)
        res = generate(tiny, NeuralDrafter(tiny_trained[block]), p, 40)
        assert res.tokens == ref
    # training made the drafter useful on this model's own text
    assert res.stats.mean_accept_length > 1.3


def test_eos_inside_accepted_run(tiny: TargetModel) -> None:
    p = _prompt(tiny)
    ref = greedy_reference(tiny, p, 40)
    cut = next(i for i in range(6, 40) if ref[i] not in ref[:i])
    eos_tok = ref[cut]

    class Tok:
        def __init__(self, inner: object) -> None:
            self.inner = inner

        def __getattr__(self, name: str) -> object:
            return getattr(self.inner, name)

        @property
        def eos_token_ids(self) -> frozenset[int]:
            return frozenset({eos_tok})

    t2 = TargetModel(tiny.model, Tok(tiny.tokenizer), "tiny-eos", n_taps=2)  # type: ignore[arg-type]
    res = generate(t2, OracleDrafter([*p, *ref], 16), p, 40)
    assert res.tokens == ref[:cut]
    assert res.stats.finish_reason == "stop"
    assert greedy_reference(t2, p, 40) == ref[:cut]


def test_cached_and_uncached_drafts_identical(
    tiny: TargetModel, tiny_trained: dict[int, BlockDrafterModel]
) -> None:
    p = _prompt(tiny, 1)
    recs = []
    for use_cache in (True, False):
        rec = Recorder(NeuralDrafter(tiny_trained[8], use_cache=use_cache))
        generate(tiny, rec, p, 40)  # type: ignore[arg-type]
        recs.append(rec.proposals)
    assert len(recs[0]) > 3
    assert recs[0] == recs[1]


def test_fresh_dspine_equals_dflash_backbone(tiny: TargetModel) -> None:
    base = DrafterConfig.for_target(tiny, block_size=8)
    dflash = new_drafter(tiny, base, seed=5)
    dspine = new_drafter(tiny, DrafterConfig(**{**base.__dict__, "dspine": True}), seed=5)
    p = _prompt(tiny)
    feats = tiny.forward(p[:-1], tiny.new_cache()).features
    outs = []
    for m in (dflash, dspine):
        d = NeuralDrafter(m)
        d.begin(feats)
        outs.append((d.forward_block(p[-1]).logits, d.propose(p).tokens))
    assert torch.allclose(outs[0][0], outs[1][0], atol=1e-5)
    assert outs[0][1] == outs[1][1]
    # and training moves the DSpine writes away from zero
    assert dspine.injection is not None
    assert all(float(w.weight.detach().abs().sum()) == 0.0 for w in dspine.injection.writes)


def test_trained_dspine_has_nonzero_writes(tiny_trained: dict[int, BlockDrafterModel]) -> None:
    inj = tiny_trained[8].injection
    assert inj is not None
    assert all(float(w.weight.detach().abs().sum()) > 0.0 for w in inj.writes)


def test_transfer_codes_are_unit_and_whitened(tiny: TargetModel) -> None:
    m = new_drafter(tiny, DrafterConfig.for_target(tiny, dspine=True), seed=0)
    assert m.space is not None
    codes = m.token_codes(torch.arange(tiny.vocab_size))
    r = m.space.rank
    assert torch.allclose(codes.norm(dim=-1), torch.full((tiny.vocab_size,), r**0.5), atol=1e-4)


def test_save_load_roundtrip(
    tiny: TargetModel, tiny_trained: dict[int, BlockDrafterModel], tmp_path: Path
) -> None:
    m = tiny_trained[4]
    save_drafter(m, tmp_path / "d", dtype=torch.float32)
    m2 = load_drafter(tmp_path / "d", tiny)
    p = _prompt(tiny)
    a = generate(tiny, Recorder(NeuralDrafter(m)), p, 20)  # type: ignore[arg-type]
    b = generate(tiny, Recorder(NeuralDrafter(m2)), p, 20)  # type: ignore[arg-type]
    assert a.stats.accept_lengths == b.stats.accept_lengths


def test_request_checks(tiny: TargetModel) -> None:
    with pytest.raises(RequestError):
        generate(tiny, None, [], 5)
    with pytest.raises(RequestError):
        generate(tiny, None, [1] * (tiny.max_positions + 1), 5)
    with pytest.raises(RequestError):
        generate(tiny, None, [1, 2], 0)


def test_plain_path_equals_reference(tiny: TargetModel) -> None:
    p = _prompt(tiny)
    assert generate(tiny, None, p, 30).tokens == greedy_reference(tiny, p, 30)
    chunks = list(stream_tokens(tiny, OracleDrafter(p, 4), p, 30))
    assert [t for c in chunks for t in c] == greedy_reference(tiny, p, 30)


class _TokenCache:
    """The 'KV cache' of :class:`MemoTarget`: just the cached token ids."""

    def __init__(self) -> None:
        self.tokens: list[int] = []

    @property
    def length(self) -> int:
        return len(self.tokens)

    def crop(self, length: int) -> None:
        del self.tokens[length:]


class TableTarget:
    """A stand-in target for the sampling tests: next-token logits are a fixed seeded random
    function of the last two tokens (a trigram table over the byte vocabulary), so thousands of
    short generations are cheap. The speculative loop only sees the target interface
    (``new_cache``, ``forward``, ``crop``), and the rejection rule must preserve this law exactly
    as it would a transformer's; the exact law is computed from the same table."""

    def __init__(
        self, seed: int = 0, vocab: int = 260, rows: int = 257, scale: float = 3.0
    ) -> None:
        g = torch.Generator().manual_seed(seed)
        self.table = torch.randn(rows, vocab, generator=g) * scale
        self.max_positions = 4096
        self.eos_token_ids: frozenset[int] = frozenset()

    def next_logits(self, seq: Sequence[int]) -> torch.Tensor:
        prev = seq[-2] if len(seq) > 1 else 0
        return self.table[(31 * prev + seq[-1]) % self.table.shape[0]]

    def new_cache(self) -> _TokenCache:
        return _TokenCache()

    def forward(
        self, ids: Sequence[int], cache: _TokenCache, *, all_logits: bool = True
    ) -> TargetOutput:
        rows = []
        for t in ids:
            cache.tokens.append(int(t))
            rows.append(self.next_logits(cache.tokens))
        logits = torch.stack(rows) if all_logits else rows[-1][None]
        return TargetOutput(logits=logits, features=torch.zeros(len(rows), 1))


class TargetSelfDrafter:
    """Proposes by sampling the target itself at a distorted temperature (tests only).

    Distributions come from the target's table, so proposals cost no forwards.
    """

    def __init__(self, target: TableTarget, block_size: int, distort: float) -> None:
        self.target = target
        self.block_size = block_size
        self.distort = distort

    def begin(self, features: torch.Tensor) -> None:
        return None

    def extend(self, features: torch.Tensor) -> None:
        return None

    def dist(self, seq: Sequence[int], temperature: float) -> torch.Tensor:
        logits = self.target.next_logits(seq)
        return torch.softmax(logits / (temperature * self.distort), dim=-1)

    def propose(
        self,
        tokens: Sequence[int],
        temperature: float = 0.0,
        generator: torch.Generator | None = None,
    ) -> Proposal:
        seq = list(tokens)
        out, probs = [], []
        for _ in range(self.block_size - 1):
            pr = self.dist(seq, temperature)
            tok = int(torch.multinomial(pr, 1, generator=generator))
            out.append(tok)
            probs.append(pr)
            seq.append(tok)
        return Proposal(out, torch.stack(probs))


def test_speculative_sampling_preserves_distribution() -> None:
    """Chi-square of the joint law of the first three sampled tokens against the exact one."""
    target = TableTarget(seed=2)
    prompt = [256, 258, *b"upf-3 down", 259]
    temp = 1.0

    def exact(seq: list[int]) -> torch.Tensor:
        return torch.softmax(target.next_logits(seq) / temp, dim=-1)

    joint: dict[tuple[int, ...], float] = {}
    p1 = exact(prompt)
    for t1 in p1.topk(4).indices.tolist():
        p2 = exact([*prompt, t1])
        for t2 in p2.topk(4).indices.tolist():
            p3 = exact([*prompt, t1, t2])
            for t3 in p3.topk(4).indices.tolist():
                joint[(t1, t2, t3)] = float(p1[t1] * p2[t2] * p3[t3])
    n = 1500
    gen = torch.Generator().manual_seed(0)
    drafter = TargetSelfDrafter(target, 3, distort=1.6)
    counts: Counter[tuple[int, ...] | str] = Counter()
    accepted = rejected = 0
    for _ in range(n):
        res = generate(target, drafter, prompt, 3, temperature=temp, generator=gen)  # type: ignore[arg-type]
        accepted += res.stats.accepted_tokens
        rejected += res.stats.rounds * 2 - res.stats.accepted_tokens
        key = tuple(res.tokens)
        counts[key if key in joint else "other"] += 1
    assert accepted > n // 4 and rejected > n // 4  # both paths are exercised
    keys = [k for k, v in joint.items() if v * n >= 8]
    assert len(keys) >= 5
    exp = [joint[k] * n for k in keys]
    obs = [counts[k] for k in keys]
    exp.append(n - sum(exp))
    obs.append(n - sum(obs))
    stat = chisquare(obs, exp)
    assert stat.pvalue > 0.001, (stat, list(zip(obs, exp, strict=True)))


def test_sampling_with_a_bad_proposal_is_detected() -> None:
    """Control: accepting drafts without the rejection rule visibly biases the law."""
    target = TableTarget(seed=2)
    prompt = [256, 258, *b"upf-3 down", 259]
    drafter = TargetSelfDrafter(target, 2, distort=3.0)
    gen = torch.Generator().manual_seed(0)
    p1 = torch.softmax(target.next_logits(prompt), dim=-1)
    t1 = int(p1.argmax())
    p2 = torch.softmax(target.next_logits([*prompt, t1]), dim=-1)
    d2 = drafter.dist([*prompt, t1], 1.0)
    top = p2.topk(5).indices.tolist()
    n = 1500
    draws = Counter(int(torch.multinomial(d2, 1, generator=gen)) for _ in range(n))
    obs = [draws[k] for k in top] + [n - sum(draws[k] for k in top)]
    exp = [float(p2[k]) * n for k in top]
    exp.append(n - sum(exp))
    assert chisquare(obs, exp).pvalue < 0.001  # the raw proposal is not the target law


def test_neural_drafter_sampling_runs(
    tiny: TargetModel, tiny_trained: dict[int, BlockDrafterModel]
) -> None:
    gen = torch.Generator().manual_seed(1)
    p = _prompt(tiny)
    res = generate(tiny, NeuralDrafter(tiny_trained[4]), p, 20, temperature=0.8, generator=gen)
    assert len(res.tokens) == 20
    assert res.stats.rounds > 0


def _with_random_writes(m: BlockDrafterModel, seed: int) -> BlockDrafterModel:
    """Give a drafter non-zero DSpine writes and gates (so the correction matters)."""
    assert m.injection is not None
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for w in [*m.injection.writes, m.injection.predecessor_gate]:
            lin = w.weight  # type: ignore[union-attr]
            lin.copy_(torch.randn(lin.shape, generator=g) * 0.3)
    return m


def test_vectorised_transition_cache_equals_reference(
    tiny: TargetModel, tiny_trained: dict[int, BlockDrafterModel]
) -> None:
    """The batched transition table equals refine_scores on the expanded (a, b) grid, and the
    fast select picks exactly the drafts of the unoptimised per-position walk."""
    fresh = _with_random_writes(
        new_drafter(tiny, DrafterConfig.for_target(tiny, block_size=8, dspine=True), seed=3), 3
    )
    p = _prompt(tiny)
    feats = tiny.forward(p[:-1], tiny.new_cache()).features
    for m in (tiny_trained[8], fresh):
        d = NeuralDrafter(m)
        d.begin(feats)
        for anchor in (p[-1], 7, 101, 257):
            out = d.forward_block(anchor)
            cand = out.logits[0].topk(m.cfg.top_k, dim=-1).indices
            pr, k = cand.shape
            fast = m.transition_table(out.pre_injection[0], anchor, cand)
            codes = m.token_codes(m.draft_vocab[cand])
            anc = m.token_codes(torch.tensor([anchor])).expand(k, -1)
            pred = torch.cat([anc.unsqueeze(0), codes[:-1]], dim=0)
            pre = out.pre_injection[0].unsqueeze(1).expand(pr, k, -1)
            slow = m.refine_scores(pre, pred, cand.unsqueeze(1).expand(pr, k, k))
            assert torch.allclose(fast, slow, atol=1e-5, rtol=1e-5)
            assert torch.equal(m.select(out, anchor), m.select_reference(out, anchor))


def test_transition_select_matches_sequential_walk() -> None:
    from noc_assistant.serving.dspine import transition_select

    g = torch.Generator().manual_seed(0)
    for p, k in ((1, 1), (3, 4), (7, 16), (15, 16)):
        table = torch.randn(p, k, k, generator=g)
        cand = torch.randint(0, 500, (p, k), generator=g)
        a, want = 0, []
        for i in range(p):
            b = int(torch.argmax(table[i, a]))
            want.append(int(cand[i, b]))
            a = b
        assert transition_select(table, cand).tolist() == want


def test_truncated_block_is_exact_and_lossless(
    tiny: TargetModel, tiny_trained: dict[int, BlockDrafterModel], tmp_path: Path
) -> None:
    """A B=8 causal drafter run at B=4 drafts exactly the first 3 tokens of its B=8 block."""
    save_drafter(tiny_trained[8], tmp_path / "d8", dtype=torch.float32)
    m8 = load_drafter(tmp_path / "d8", tiny)
    m4 = load_drafter(tmp_path / "d8", tiny, block_size=4)
    assert m4.cfg.block_size == 4
    p = _prompt(tiny)
    feats = tiny.forward(p[:-1], tiny.new_cache()).features
    d8, d4 = NeuralDrafter(m8), NeuralDrafter(m4)
    d8.begin(feats)
    d4.begin(feats)
    o8, o4 = d8.forward_block(p[-1]), d4.forward_block(p[-1])
    assert torch.allclose(o8.logits[:, :3], o4.logits, atol=1e-5)
    assert d8.propose(p).tokens[:3] == d4.propose(p).tokens
    ref = greedy_reference(tiny, p, 30)
    assert generate(tiny, NeuralDrafter(m4), p, 30).tokens == ref
    with pytest.raises(ModelLoadError):
        load_drafter(tmp_path / "d8", tiny, block_size=16)


def test_train_drafter_cli_fixed_steps_is_reproducible(tmp_path: Path) -> None:
    """`noc llm train-drafter --steps N` trains exactly N seeded steps: identical weights."""
    from safetensors.torch import load_file
    from typer.testing import CliRunner

    from noc_assistant.cli.llm import app

    args = ["train-drafter", "--tiny", "--steps", "3", "--prompts", "3", "--max-new-tokens", "6"]
    args += ["--vocab-size", "64", "--block-size", "4", "--intermediate", "64"]
    args += ["--work-dir", str(tmp_path / "work")]
    states = []
    for run in ("a", "b"):
        res = CliRunner().invoke(app, [*args, "--out", str(tmp_path / run)])
        assert res.exit_code == 0, res.output
        info = json.loads((tmp_path / run / "train.json").read_text())
        assert info["steps"] == 3 and info["steps_done"] == 3 and info["seconds_cap"] is None
        states.append(load_file(str(tmp_path / run / "model.safetensors")))
    assert states[0].keys() == states[1].keys()
    assert all(torch.equal(states[0][k], states[1][k]) for k in states[0])
