"""Drafter training (research/dspine.md §2.6, small_llm.md §4).

Pipeline:

1. :func:`build_corpus`: the target answers NOC-style prompts greedily (target-regenerated data),
   or :func:`traffic_samples`: the prompts a server answered and its answers, from a traffic
   log (:mod:`noc_assistant.serving.traffic`; the product's own requests).
2. :func:`build_draft_vocab`: the most frequent target tokens form a reduced draft vocabulary.
3. :func:`extract_features`: one target forward per sequence (after the prefix it shares with
   the previous one) caches the tap features and a sparse top-k teacher distribution over the
   draft vocabulary (the costly part, done once).
4. :func:`train_drafter`: the DSpine objective. Per block of B tokens with anchor at t:
   ``L = Σ_j w_j (L_backbone + L_refine + β·CĒ·L_align) / Σ_j w_j`` with
   ``L_backbone = 0.1·CE + 0.9·‖P − q‖₁``, the refinement loss on the top-K candidates scored with
   the true predecessor, the cosine alignment of every layer's feature to the label's code,
   ``w_j = s_j·exp(−(j−1)/γ)``, β warm-up and scheduled replacement of predecessor features by
   teacher-forced codes. The DFlash baseline uses the same backbone loss without the DSpine
   parts.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

from noc_assistant.serving.cache import shared_prefix
from noc_assistant.serving.draft_heads import (
    BlockDrafterModel,
    DrafterConfig,
    DraftOutput,
    new_drafter,
)
from noc_assistant.serving.loading import TargetModel

__all__ = [
    "FeatureSeq",
    "Sample",
    "TrainConfig",
    "answer_prompts",
    "build_corpus",
    "build_draft_vocab",
    "extract_features",
    "prepare_data",
    "replacement_probability",
    "traffic_samples",
    "train_drafter",
]


@dataclass
class Sample:
    """A prompt (``tokens[:prompt_len]``) and the target's greedy answer."""

    tokens: list[int]
    prompt_len: int


@dataclass
class FeatureSeq:
    """Cached target outputs for one sample.

    ``features`` [S, F] (fp16); ``q_idx``/``q_val`` [S, k]: sparse teacher distribution for the
    token at position t (from the target's logits at t-1; row 0 unused); ids are draft-vocab
    indices, -1 where empty.
    """

    tokens: Tensor
    prompt_len: int
    features: Tensor
    q_idx: Tensor
    q_val: Tensor


@torch.no_grad()
def build_corpus(
    target: TargetModel,
    prompts: Sequence[str],
    *,
    max_new_tokens: int = 80,
    batch_size: int = 16,
    progress: Callable[[int, int], None] | None = None,
) -> list[Sample]:
    """Answer each prompt with the target (greedy, batched with left padding)."""
    enc = [target.tokenizer.chat_prompt([{"role": "user", "content": p}]) for p in prompts]
    return answer_prompts(
        target, enc, max_new_tokens=max_new_tokens, batch_size=batch_size, progress=progress
    )


@torch.no_grad()
def answer_prompts(
    target: TargetModel,
    enc: Sequence[Sequence[int]],
    *,
    max_new_tokens: int = 80,
    batch_size: int = 16,
    progress: Callable[[int, int], None] | None = None,
) -> list[Sample]:
    """:func:`build_corpus` on prompts already encoded as token ids."""
    eos = target.eos_token_ids
    pad = min(eos) if eos else 0
    out: list[Sample] = []
    for i in range(0, len(enc), batch_size):
        batch = enc[i : i + batch_size]
        width = max(len(b) for b in batch)
        ids = torch.full((len(batch), width), pad, dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for r, b in enumerate(batch):
            ids[r, width - len(b) :] = torch.tensor(b)
            mask[r, width - len(b) :] = 1
        gen = target.model.generate(
            input_ids=ids.to(target.device),
            attention_mask=mask.to(target.device),
            max_new_tokens=max_new_tokens,
            do_sample=False,
            pad_token_id=pad,
            eos_token_id=sorted(eos) if eos else None,
        )
        for r, b in enumerate(batch):
            resp: list[int] = []
            for t in gen[r, width:].tolist():
                resp.append(int(t))
                if t in eos:
                    break
            out.append(Sample(tokens=[*b, *resp], prompt_len=len(b)))
        if progress is not None:
            progress(min(i + batch_size, len(enc)), len(enc))
    return out


def build_draft_vocab(
    samples: Sequence[Sample], size: int, always: Sequence[int] = ()
) -> list[int]:
    """The ``size`` most frequent tokens (responses weighted double) plus ``always``.

    >>> build_draft_vocab([Sample([5, 6, 7, 7], 1)], 2, always=[9])
    [7, 9]
    """
    cnt: Counter[int] = Counter()
    for s in samples:
        cnt.update(s.tokens[: s.prompt_len])
        cnt.update(s.tokens[s.prompt_len :])
        cnt.update(s.tokens[s.prompt_len :])
    keep = {t for t in always}
    for tok, _ in cnt.most_common():
        if len(keep) >= size:
            break
        keep.add(tok)
    return sorted(keep)


@torch.no_grad()
def extract_features(
    target: TargetModel,
    samples: Sequence[Sample],
    draft_vocab: Sequence[int],
    *,
    top_q: int = 32,
    progress: Callable[[int, int], None] | None = None,
) -> list[FeatureSeq]:
    """Tap features and sparse teacher distributions of every sample.

    The target runs each sample after the part it shares with the previous one, which stays
    in the KV cache (a traffic log's requests share long prefixes: the system prompt, a chat's
    conversation so far); a causal model's rows there are those already computed."""
    vocab = torch.tensor(list(draft_vocab))
    out: list[FeatureSeq] = []
    cache = target.new_cache()
    prev: list[int] = []
    feats = val = idx = torch.zeros(0)
    for n, s in enumerate(samples):
        keep = shared_prefix(prev, s.tokens[:-1])  # the last token always runs
        cache.crop(keep)
        res = target.forward(s.tokens[keep:], cache)
        probs = torch.softmax(res.logits.float(), dim=-1)[:, vocab]  # [S - keep, Vd]
        k = min(top_q, probs.shape[-1])
        v, i = probs.topk(k, dim=-1)
        feats = torch.cat([feats[:keep], res.features.half()]) if keep else res.features.half()
        val = torch.cat([val[:keep], v]) if keep else v
        idx = torch.cat([idx[:keep], i]) if keep else i
        prev = list(s.tokens)
        q_idx = torch.full((len(s.tokens), k), -1, dtype=torch.long)
        q_val = torch.zeros((len(s.tokens), k))
        q_idx[1:] = idx[:-1]
        q_val[1:] = val[:-1]
        out.append(
            FeatureSeq(
                tokens=torch.tensor(s.tokens),
                prompt_len=s.prompt_len,
                features=feats,  # a new tensor each sample (cat or half), never written
                q_idx=q_idx,
                q_val=q_val.half(),
            )
        )
        if progress is not None:
            progress(n + 1, len(samples))
    return out


@dataclass
class TrainConfig:
    steps: int = 300
    seqs_per_step: int = 4
    anchors_per_seq: int = 16
    lr: float = 6e-4
    warmup_ratio: float = 0.04
    max_grad_norm: float = 1.0
    gamma: float = 7.0
    ce_weight: float = 0.1
    alignment_weight: float = 0.5
    alignment_warmup_steps: int = 146
    replacement_layers: int = 3
    replacement_probability: float = 0.5
    replacement_hold_ratio: float = 1 / 6
    replacement_end_ratio: float = 1 / 3
    candidate_mass_threshold: float = 1e-4
    seed: int = 0
    max_seconds: float | None = None


def replacement_probability(progress: float, cfg: TrainConfig) -> float:
    """ρ: ``p·clip((end − progress)/(end − hold), 0, 1)``.

    >>> c = TrainConfig()
    >>> [replacement_probability(x, c) for x in (0.1, 0.25, 0.5)]
    [0.5, 0.25, 0.0]
    """
    end, hold = cfg.replacement_end_ratio, cfg.replacement_hold_ratio
    x = (end - progress) / (end - hold)
    return round(cfg.replacement_probability * min(max(x, 0.0), 1.0), 12)


def _lr_factor(progress: float, cfg: TrainConfig) -> float:
    """Linear warm-up then cosine decay over training progress in [0, 1]."""
    warm = cfg.warmup_ratio
    if progress < warm:
        return max(progress / warm, 0.01)
    x = (progress - warm) / max(1e-9, 1.0 - warm)
    return 0.5 * (1.0 + math.cos(math.pi * min(x, 1.0)))


def _batch(
    data: Sequence[FeatureSeq], block: int, cfg: TrainConfig, rng: random.Random
) -> dict[str, Tensor]:
    seqs = [d for d in (rng.choice(data) for _ in range(cfg.seqs_per_step))]
    s_max = max(len(d.tokens) for d in seqs)
    fdim = seqs[0].features.shape[1]
    feats = torch.zeros(len(seqs), s_max, fdim)
    seq_index, anchors = [], []
    for g, d in enumerate(seqs):
        n = len(d.tokens)
        feats[g, :n] = d.features.float()
        cands = list(range(d.prompt_len, n - 1))
        if not cands:
            cands = [max(1, n - 2)]
        for a in sorted(rng.choice(cands) for _ in range(cfg.anchors_per_seq)):
            seq_index.append(g)
            anchors.append(a)
    n_blk = len(anchors)
    tokens = torch.zeros(n_blk, block, dtype=torch.long)
    valid = torch.zeros(n_blk, block, dtype=torch.bool)
    k = seqs[0].q_idx.shape[1]
    q_idx = torch.full((n_blk, block, k), -1, dtype=torch.long)
    q_val = torch.zeros(n_blk, block, k)
    for i, (g, a) in enumerate(zip(seq_index, anchors, strict=True)):
        d = seqs[g]
        end = min(a + block, len(d.tokens))
        m = end - a
        tokens[i, :m] = d.tokens[a:end]
        valid[i, :m] = True
        q_idx[i, :m] = d.q_idx[a:end]
        q_val[i, :m] = d.q_val[a:end].float()
    return {
        "features": feats,
        "seq_index": torch.tensor(seq_index),
        "anchors": torch.tensor(anchors),
        "tokens": tokens,
        "valid": valid,
        "q_idx": q_idx,
        "q_val": q_val,
    }


def _f(x: Tensor) -> float:
    return float(x.detach())


def _sparse_l1(probs: Tensor, q_idx: Tensor, q_val: Tensor) -> Tensor:
    """‖P − q‖₁ with q given sparsely (idx −1 = empty): Σ_supp|P−q| + (1 − Σ_supp P)."""
    ok = q_idx >= 0
    p_s = probs.gather(-1, q_idx.clamp_min(0)) * ok
    return (p_s - q_val * ok).abs().sum(-1) + (1.0 - p_s.sum(-1)).clamp_min(0.0)


def _refine_terms(
    model: BlockDrafterModel,
    out: DraftOutput,
    tokens: Tensor,
    y: Tensor,
    q_idx: Tensor,
    q_val: Tensor,
    cfg: TrainConfig,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The refine stage's losses per position over the drafter's top-K candidates: cross-entropy
    to the label ``y`` and L1 to the target's distribution restricted to the candidates (where
    they hold enough of its mass); then whether each candidate is the label, and the refined
    choice."""
    z = out.logits
    k = min(model.cfg.top_k, z.shape[-1])
    cand = z.detach().topk(k, dim=-1).indices  # [N, P, K]
    pred_codes = model.token_codes(tokens[:, :-1])
    s = model.refine_scores(out.pre_injection, pred_codes, cand)
    log_s = torch.log_softmax(s, dim=-1)
    hit = cand == y.unsqueeze(-1)
    ce_r = -(log_s * hit).sum(-1)
    match = cand.unsqueeze(-1) == q_idx.unsqueeze(-2)  # [N,P,K,k]
    q_c = (match * q_val.unsqueeze(-2)).sum(-1)
    mass = q_c.sum(-1, keepdim=True)
    q_cn = q_c / mass.clamp_min(1e-9)
    l1_r = (log_s.exp() - q_cn).abs().sum(-1) * (mass.squeeze(-1) > cfg.candidate_mass_threshold)
    refined = cand.gather(-1, s.argmax(-1, keepdim=True)).squeeze(-1)
    return ce_r, l1_r, hit, refined


def loss_terms(
    model: BlockDrafterModel,
    batch: dict[str, Tensor],
    cfg: TrainConfig,
    step: int,
    rho: float,
    gen: torch.Generator,
) -> tuple[Tensor, dict[str, float]]:
    """The training loss of one batch and logged metrics."""
    mcfg = model.cfg
    b = mcfg.block_size
    vocab = model.draft_vocab
    # target id -> draft id
    dev = vocab.device
    lookup = torch.full(
        (int(vocab.max()) + 1 if vocab.numel() else 1,), -1, dtype=torch.long, device=dev
    )
    lookup[vocab] = torch.arange(vocab.numel(), device=dev)
    tokens = batch["tokens"]
    n = tokens.shape[0]
    labels = tokens[:, 1:]  # [N, P] target ids
    in_vocab = labels <= lookup.shape[0] - 1
    y = torch.where(in_vocab, lookup[labels.clamp(max=lookup.shape[0] - 1)], -1)
    sup = batch["valid"][:, 1:].long().cumprod(dim=1).bool()
    j = torch.arange(1, b, device=dev).float()
    w = sup.float() * torch.exp(-(j - 1) / cfg.gamma)
    kv = model.context_kv(batch["features"])
    replace_codes = replace_mask = None
    dsp = model.injection is not None
    if dsp and mcfg.inject_layers and rho > 0.0:
        replace_codes = model.token_codes(tokens[:, :-1])
        replace_mask = (torch.rand(n, generator=gen) < rho).to(dev)  # CPU generator
    out = model.blocks(
        kv,
        batch["seq_index"],
        batch["anchors"],
        tokens[:, 0],
        replace_codes=replace_codes,
        replace_mask=replace_mask,
        replacement_layers=cfg.replacement_layers,
    )
    z = out.logits  # [N, P, Vd]
    logp = torch.log_softmax(z, dim=-1)
    probs = logp.exp()
    q_idx, q_val = batch["q_idx"][:, 1:], batch["q_val"][:, 1:]
    ce = -logp.gather(-1, y.clamp_min(0).unsqueeze(-1)).squeeze(-1) * (y >= 0)
    l1 = _sparse_l1(probs, q_idx, q_val)
    per = cfg.ce_weight * ce + (1 - cfg.ce_weight) * l1
    wsum = w.sum().clamp_min(1e-6)
    metrics: dict[str, float] = {
        "ce": float((ce * w).sum().detach() / wsum),
        "l1": float((l1 * w).sum().detach() / wsum),
        "acc": _f(((z.argmax(-1) == y).float() * sup).sum() / sup.sum().clamp_min(1)),
    }
    if dsp and mcfg.refine:
        ce_r, l1_r, hit, refined = _refine_terms(model, out, tokens, y, q_idx, q_val, cfg)
        per = per + cfg.ce_weight * ce_r + (1 - cfg.ce_weight) * l1_r
        metrics["refine"] = _f(((cfg.ce_weight * ce_r + 0.9 * l1_r) * w).sum() / wsum)
        metrics["coverage"] = _f((hit.any(-1).float() * sup).sum() / sup.sum().clamp_min(1))
        metrics["acc_refined"] = _f(((refined == y).float() * sup).sum() / sup.sum().clamp_min(1))
    if out.layer_features:
        beta = cfg.alignment_weight * min(step / max(1, cfg.alignment_warmup_steps), 1.0)
        codes = model.token_codes(labels).detach()
        align = sum((1 - F.cosine_similarity(f[:, 1:], codes, dim=-1)) for f in out.layer_features)
        assert isinstance(align, Tensor)
        ce_bar = _f((ce * w).sum() / wsum)
        per = per + beta * ce_bar * align
        metrics["align"] = _f((align * w).sum() / wsum)
    loss = (per * w).sum() / wsum
    metrics["loss"] = _f(loss)
    return loss, metrics


def train_drafter(
    target: TargetModel,
    mcfg: DrafterConfig,
    data: Sequence[FeatureSeq],
    cfg: TrainConfig,
    *,
    log: Callable[[int, dict[str, float]], None] | None = None,
) -> BlockDrafterModel:
    """Train a drafter on cached features (seeded).

    Progress (for the learning-rate and replacement schedules) is ``step/steps`` or, with
    ``max_seconds``, the larger of that and the elapsed fraction: a wall-clock budget.
    """
    torch.manual_seed(cfg.seed)
    model = new_drafter(target, mcfg, seed=cfg.seed).train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=0.0)
    rng = random.Random(cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed)
    t0 = time.perf_counter()
    for step in range(cfg.steps):
        elapsed = time.perf_counter() - t0
        prog = step / cfg.steps
        if cfg.max_seconds is not None:
            prog = max(prog, elapsed / cfg.max_seconds)
        if prog >= 1.0:
            break
        for grp in opt.param_groups:
            grp["lr"] = cfg.lr * _lr_factor(prog, cfg)
        batch = {k: v.to(target.device) for k, v in _batch(data, mcfg.block_size, cfg, rng).items()}
        rho = replacement_probability(prog, cfg)
        loss, metrics = loss_terms(model, batch, cfg, step, rho, gen)
        opt.zero_grad()
        loss.backward()  # type: ignore[no-untyped-call]
        torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm)
        opt.step()
        metrics["seconds"] = time.perf_counter() - t0
        metrics["lr"] = opt.param_groups[0]["lr"]
        if log is not None:
            log(step, metrics)
    return model.eval()


def traffic_samples(paths: Sequence[str | Path]) -> list[Sample]:
    """One sample per answered choice of the traffic logs ``paths`` (prompt ids + answer ids).

    The answers are what the server sent: under the request's grammar and penalties, so a
    drafter trained on them learns the text the product is served, not a free-running answer.
    """
    from noc_assistant.serving.traffic import read_traffic

    return [
        Sample(tokens=[*r.prompt, *c], prompt_len=len(r.prompt))
        for p in paths
        for r in read_traffic(p)
        for c in r.completions
        if c
    ]


def _traffic_key(paths: Sequence[str | Path]) -> str:
    h = hashlib.sha256()
    for p in paths:
        h.update(Path(p).read_bytes())
    return h.hexdigest()[:12]


def prepare_data(
    target: TargetModel,
    work_dir: str | Path,
    *,
    n_prompts: int,
    seed: int = 0,
    max_new_tokens: int = 80,
    vocab_size: int = 4096,
    progress: Callable[[str, int, int], None] | None = None,
    traffic: Sequence[str | Path] = (),
) -> tuple[list[int], list[FeatureSeq]]:
    """Corpus, draft vocabulary and cached features, stored in ``work_dir`` and reused.

    With ``traffic`` (traffic logs) the corpus is their requests and answers; ``n_prompts``,
    ``seed`` and ``max_new_tokens`` then play no part."""
    from noc_assistant.serving.corpus import noc_prompts

    wd = Path(work_dir)
    wd.mkdir(parents=True, exist_ok=True)
    cpath = wd / f"corpus-{target.name}-n{n_prompts}-s{seed}-m{max_new_tokens}.json"
    if traffic:
        cpath = wd / f"corpus-{target.name}-traffic-{_traffic_key(traffic)}.json"
    if cpath.is_file():
        raw = json.loads(cpath.read_text())
        samples = [Sample(tokens=r["tokens"], prompt_len=r["prompt_len"]) for r in raw]
    elif traffic:
        samples = traffic_samples(traffic)
        cpath.write_text(json.dumps([asdict(s) for s in samples]))
    else:
        prompts = noc_prompts(n_prompts, seed=seed)
        samples = build_corpus(
            target,
            prompts,
            max_new_tokens=max_new_tokens,
            progress=(lambda i, n: progress("corpus", i, n)) if progress else None,
        )
        cpath.write_text(json.dumps([asdict(s) for s in samples]))
    vocab = build_draft_vocab(samples, vocab_size, always=sorted(target.eos_token_ids))
    fpath = cpath.with_suffix(f".v{vocab_size}.features.pt")
    if fpath.is_file():
        blob = torch.load(fpath, weights_only=False)
        return blob["vocab"], blob["data"]
    data = extract_features(
        target,
        samples,
        vocab,
        progress=(lambda i, n: progress("features", i, n)) if progress else None,
    )
    torch.save({"vocab": vocab, "data": data}, fpath)
    return vocab, data
