"""Speculative decoding loops (research/dspine.md §3.4).

Greedy (``temperature == 0``) is lossless: every round the target verifies
``[anchor, d_1..d_{B-1}]`` in one forward, the longest prefix of drafts equal to the target's
own argmax is committed plus the target's next token (the bonus), and the KV cache is
cropped back, so the output equals target-only greedy decoding token for token.

Sampling (``temperature > 0``) uses the distribution-preserving rule: draft ``x_i`` with proposal
``p_i`` is accepted with probability ``min(1, q_i(x_i)/p_i(x_i))``; on the first rejection the
token is drawn from ``normalize(max(0, q_i − p_i))``; after a fully accepted block the bonus is
drawn from ``q_B``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

from noc_assistant.serving.drafters import Drafter
from noc_assistant.serving.errors import RequestError
from noc_assistant.serving.models import TargetModel

__all__ = [
    "GenerationResult",
    "GenerationStats",
    "generate",
    "greedy_reference",
    "stream_tokens",
]


@dataclass
class GenerationStats:
    """Counters and stage times of one generation (times in seconds)."""

    prompt_tokens: int = 0
    output_tokens: int = 0
    rounds: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0
    accepted_per_pos: list[int] = field(default_factory=list)
    accept_lengths: list[int] = field(default_factory=list)
    time_prefill: float = 0.0
    time_draft: float = 0.0
    time_verify: float = 0.0
    time_total: float = 0.0
    ttft: float = 0.0
    finish_reason: str = "length"

    @property
    def mean_accept_length(self) -> float:
        """τ: mean tokens committed per verify round (accepted drafts + bonus)."""
        return (self.accepted_tokens + self.rounds) / self.rounds if self.rounds else 0.0


@dataclass
class GenerationResult:
    tokens: list[int]
    stats: GenerationStats


def _pick(logits: Tensor, temperature: float, generator: torch.Generator | None) -> int:
    if temperature <= 0.0:
        return int(torch.argmax(logits))
    probs = torch.softmax(logits.float().cpu() / temperature, dim=-1)  # the generator is a CPU one
    return int(torch.multinomial(probs, 1, generator=generator))


@torch.no_grad()
def greedy_reference(target: TargetModel, prompt: Sequence[int], max_tokens: int) -> list[int]:
    """Target-only greedy decoding, one token per forward; stops before EOS."""
    cache = target.new_cache()
    logits = target.forward(list(prompt), cache).logits[-1]
    out: list[int] = []
    while len(out) < max_tokens:
        tok = int(torch.argmax(logits))
        if tok in target.eos_token_ids:
            break
        out.append(tok)
        if len(out) == max_tokens:
            break
        logits = target.forward([tok], cache).logits[-1]
    return out


def _check(target: TargetModel, prompt: Sequence[int], max_tokens: int) -> None:
    if not prompt:
        raise RequestError("prompt is empty", param="prompt")
    if max_tokens < 1:
        raise RequestError("max_tokens must be at least 1", param="max_tokens")
    if len(prompt) >= target.max_positions:
        raise RequestError(
            f"prompt has {len(prompt)} tokens; the context is {target.max_positions}",
            param="messages",
            code="context_length_exceeded",
        )


@torch.no_grad()
def stream_tokens(
    target: TargetModel,
    drafter: Drafter | None,
    prompt: Sequence[int],
    max_tokens: int,
    *,
    temperature: float = 0.0,
    generator: torch.Generator | None = None,
    stats: GenerationStats | None = None,
) -> Iterator[list[int]]:
    """Yield committed output tokens, a round at a time (EOS is not yielded).

    ``drafter=None`` gives plain target-only decoding through the same code path.
    """
    _check(target, prompt, max_tokens)
    st = stats if stats is not None else GenerationStats()
    st.prompt_tokens = len(prompt)
    t_start = time.perf_counter()
    cache = target.new_cache()
    out = target.forward(list(prompt), cache)
    x = _pick(out.logits[-1], temperature, generator)
    st.time_prefill = time.perf_counter() - t_start
    tokens = [*prompt, x]
    eos = target.eos_token_ids
    emitted = 0
    block = 1
    if drafter is not None:
        block = drafter.block_size
        st.accepted_per_pos = [0] * (block - 1)
        t0 = time.perf_counter()
        drafter.begin(out.features)
        st.time_draft += time.perf_counter() - t0

    def commit(new: list[int]) -> tuple[list[int], bool]:
        nonlocal emitted
        take: list[int] = []
        for tok in new:
            if tok in eos:
                st.finish_reason = "stop"
                return take, True
            take.append(tok)
            emitted += 1
            if emitted >= max_tokens:
                st.finish_reason = "length"
                return take, True
        return take, False

    first, done = commit([x])
    st.ttft = time.perf_counter() - t_start
    if first:
        st.output_tokens += len(first)
        yield first
    while not done:
        room = target.max_positions - (len(tokens) - 1)
        if room < 1:
            st.finish_reason = "length"
            break
        if drafter is None:
            t0 = time.perf_counter()
            ver = target.forward([x], cache)
            st.time_verify += time.perf_counter() - t0
            new = [_pick(ver.logits[-1], temperature, generator)]
        else:
            t0 = time.perf_counter()
            prop = drafter.propose(tokens, temperature, generator)
            st.time_draft += time.perf_counter() - t0
            drafts = prop.tokens[: max(0, min(block - 1, room - 1))]
            t0 = time.perf_counter()
            ver = target.forward([x, *drafts], cache)
            st.time_verify += time.perf_counter() - t0
            if temperature <= 0.0:
                post = ver.logits.argmax(-1).tolist()
                a = 0
                while a < len(drafts) and drafts[a] == post[a]:
                    a += 1
                new = [*drafts[:a], int(post[a])]
            else:
                new, a = _accept_sampled(ver.logits, drafts, prop.probs, temperature, generator)
            st.rounds += 1
            st.draft_tokens += len(drafts)
            st.accepted_tokens += a
            st.accept_lengths.append(a + 1)
            for j in range(a):
                st.accepted_per_pos[j] += 1
            cache.crop(len(tokens) + a)
            t0 = time.perf_counter()
            drafter.extend(ver.features[: a + 1])
            st.time_draft += time.perf_counter() - t0
        tokens += new
        x = new[-1]
        take, done = commit(new)
        if take:
            st.output_tokens += len(take)
            yield take
    st.time_total = time.perf_counter() - t_start


def _accept_sampled(
    logits: Tensor,
    drafts: list[int],
    probs: Tensor | None,
    temperature: float,
    generator: torch.Generator | None,
) -> tuple[list[int], int]:
    if probs is None:
        raise ValueError("sampling needs proposal distributions from the drafter")
    q = torch.softmax(logits.float().cpu() / temperature, dim=-1)  # probs and generator: CPU
    new: list[int] = []
    for i, tok in enumerate(drafts):
        p_tok = float(probs[i, tok])
        q_tok = float(q[i, tok])
        u = float(torch.rand(1, generator=generator))
        if p_tok > 0.0 and u < min(1.0, q_tok / p_tok):
            new.append(tok)
            continue
        resid = (q[i] - probs[i]).clamp_min(0.0)
        total = float(resid.sum())
        dist = resid / total if total > 0.0 else q[i]
        new.append(int(torch.multinomial(dist, 1, generator=generator)))
        return new, i
    new.append(int(torch.multinomial(q[len(drafts)], 1, generator=generator)))
    return new, len(drafts)


def generate(
    target: TargetModel,
    drafter: Drafter | None,
    prompt: Sequence[int],
    max_tokens: int,
    *,
    temperature: float = 0.0,
    generator: torch.Generator | None = None,
) -> GenerationResult:
    """Run :func:`stream_tokens` to the end."""
    st = GenerationStats()
    toks: list[int] = []
    for part in stream_tokens(
        target, drafter, prompt, max_tokens, temperature=temperature, generator=generator, stats=st
    ):
        toks += part
    return GenerationResult(toks, st)
