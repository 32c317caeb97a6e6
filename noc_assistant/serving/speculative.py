"""Speculative decoding loops (research/dspine.md §3.4).

Greedy (``temperature == 0``) is lossless: every round the target verifies
``[anchor, d_1..d_{B-1}]`` in one forward, the longest prefix of drafts equal to the target's
own argmax is committed plus the target's next token (the bonus), and the KV cache is
cropped back, so the output equals target-only greedy decoding token for token.

Sampling (``temperature > 0``) uses the distribution-preserving rule: draft ``x_i`` with proposal
``p_i`` is accepted with probability ``min(1, q_i(x_i)/p_i(x_i))``; on the first rejection the
token is drawn from ``normalize(max(0, q_i − p_i))``; after a fully accepted block the bonus is
drawn from ``q_B``.

With a grammar (``constraint=``, :mod:`noc_assistant.serving.grammar`) every position's logits
are masked to the tokens the grammar allows there, in verification as in the first token, so
greedy constrained decoding stays lossless: the output equals
:func:`constrained_greedy_reference` (one token per forward, argmax over the allowed tokens).
Drafts are checked against the grammar before verification and cut at the first disallowed
one; where the grammar allows a single token that token is drafted (and always accepted), and
where the drafter has nothing left the grammar's fast-forward tokens are drafted. Without a
drafter this is jump-forward decoding: a forced run is committed through one multi-token
forward together with the model's next choice.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from noc_assistant.serving.draft_heads import Drafter
from noc_assistant.serving.errors import RequestError
from noc_assistant.serving.loading import TargetModel, TargetOutput

if TYPE_CHECKING:  # llguidance is only needed when a grammar is used
    from noc_assistant.serving.cache import KVCache
    from noc_assistant.serving.grammar import Constraint

__all__ = [
    "GenerationResult",
    "GenerationStats",
    "PrefixCache",
    "constrained_greedy_reference",
    "generate",
    "greedy_reference",
    "stream_tokens",
]


@dataclass
class GenerationStats:
    """Counters and stage times of one generation (times in seconds).

    ``forced_tokens`` counts output tokens committed at positions where the grammar allowed
    only one token (jump-forward: no model decision was needed); ``constrained`` says a grammar
    was applied.
    """

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
    cached_tokens: int = 0
    """Prompt tokens whose keys and values came from the previous request (no forward)."""
    finish_reason: str = "length"
    forced_tokens: int = 0
    constrained: bool = False

    @property
    def mean_accept_length(self) -> float:
        """τ: mean tokens committed per verify round (accepted drafts + bonus)."""
        return (self.accepted_tokens + self.rounds) / self.rounds if self.rounds else 0.0


@dataclass
class PrefixCache:
    """The KV cache (and the drafter's context) of the last generation, kept for the next.

    A triage chat's next turn, or its next look-up round, sends the whole conversation again:
    everything up to the new message is the same tokens, and only what differs needs a
    forward. The next prompt reuses the longest common prefix (at least one prompt token is
    always run, for the first output's logits); the cache is cropped to it. Not thread-safe:
    one per engine, used under the engine's lock.

    Greedy output with a reused prefix equals a fresh prefill's up to floating-point
    accumulation order (the prefix's keys and values were computed in other forwards);
    ``tests/serving/test_constrained.py`` checks token equality on its prompts.
    """

    tokens: list[int] = field(default_factory=list)
    """The tokens whose keys and values ``cache`` holds."""
    cache: KVCache | None = None
    drafter: Drafter | None = None
    """The drafter whose context matches ``tokens`` (its context is cropped with the cache)."""

    def reusable(self, prompt: Sequence[int], drafter: Drafter | None) -> int:
        """How many leading tokens of ``prompt`` need no forward."""
        if self.cache is None or (drafter is not None and drafter is not self.drafter):
            return 0
        if drafter is not None and not hasattr(drafter, "crop"):
            return 0
        n = 0
        for a, b in zip(self.tokens, prompt[:-1], strict=False):
            if a != b:
                break
            n += 1
        return n


def _prefill(
    target: TargetModel,
    drafter: Drafter | None,
    prompt: Sequence[int],
    session: PrefixCache | None,
    st: GenerationStats,
) -> tuple[KVCache, TargetOutput]:
    """Run the prompt (what ``session`` does not already hold) and start the drafter."""
    reuse = session.reusable(prompt, drafter) if session is not None else 0
    if session is not None and reuse > 0 and session.cache is not None:
        cache = session.cache
        cache.crop(reuse)
        out = target.forward(list(prompt[reuse:]), cache)
        if drafter is not None:
            t0 = time.perf_counter()
            drafter.crop(reuse)  # type: ignore[attr-defined]
            drafter.extend(out.features)
            st.time_draft += time.perf_counter() - t0
    else:
        cache = target.new_cache()
        out = target.forward(list(prompt), cache)
        if drafter is not None:
            t0 = time.perf_counter()
            drafter.begin(out.features)
            st.time_draft += time.perf_counter() - t0
    st.cached_tokens = reuse
    if session is not None:  # what the cache holds is known again only when generation ends
        session.cache, session.drafter, session.tokens = None, None, []
    return cache, out


def _keep(
    session: PrefixCache | None, cache: KVCache, tokens: Sequence[int], drafter: Drafter | None
) -> None:
    """Leave the cache of a finished (or abandoned) generation for the next request: the
    tokens it holds that the drafter's context holds too."""
    if session is not None:
        held = cache.length
        if drafter is not None:
            held = min(held, int(getattr(drafter, "length", 0)))
        session.cache, session.drafter = cache, drafter
        session.tokens = list(tokens[:held])


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


@torch.no_grad()
def constrained_greedy_reference(
    target: TargetModel,
    prompt: Sequence[int],
    constraint_factory: Callable[[], Constraint],
    max_tokens: int,
) -> list[int]:
    """Target-only constrained greedy decoding: one token per forward, the argmax over the
    tokens the grammar allows; stops before EOS and when the grammar is complete.

    The definition that constrained :func:`stream_tokens` at temperature 0 must reproduce,
    with or without a drafter.
    """
    c = constraint_factory()
    eos = target.eos_token_ids
    cache = target.new_cache()
    logits = target.forward(list(prompt), cache).logits[-1]
    out: list[int] = []
    while len(out) < max_tokens:
        allowed = c.mask().to(logits.device)
        tok = int(torch.argmax(logits.masked_fill(~allowed, float("-inf"))))
        if tok in eos:
            break
        c.consume([tok])
        out.append(tok)
        if len(out) == max_tokens or c.is_stopped():
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
    constraint: Constraint | None = None,
    session: PrefixCache | None = None,
) -> Iterator[list[int]]:
    """Yield committed output tokens, a round at a time (EOS is not yielded).

    ``drafter=None`` gives plain target-only decoding through the same code path.
    ``constraint`` (fresh, nothing consumed) restricts the output to its grammar; generation
    then also stops, with ``finish_reason == "stop"``, when the grammar is complete.
    ``session`` reuses the previous generation's cache for the prompt's common prefix
    (:class:`PrefixCache`) and keeps this one's for the next.
    """
    _check(target, prompt, max_tokens)
    if constraint is not None:
        yield from _stream_constrained(
            target, drafter, prompt, max_tokens, temperature, generator, stats, constraint, session
        )
        return
    st = stats if stats is not None else GenerationStats()
    st.prompt_tokens = len(prompt)
    t_start = time.perf_counter()
    cache, out = _prefill(target, drafter, prompt, session, st)
    x = _pick(out.logits[-1], temperature, generator)
    st.time_prefill = time.perf_counter() - t_start
    tokens = [*prompt, x]
    eos = target.eos_token_ids
    emitted = 0
    block = 1
    if drafter is not None:
        block = drafter.block_size
        st.accepted_per_pos = [0] * (block - 1)

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

    failed = False
    try:
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
    except Exception:  # a failed forward may leave the cache half-written: start afresh
        failed = True
        raise
    finally:
        if not failed:
            _keep(session, cache, tokens, drafter)
    st.time_total = time.perf_counter() - t_start


#: Longest run of grammar drafts (forced / fast-forward tokens) verified in one forward.
MAX_GRAMMAR_DRAFTS = 64


def _masked(logits: Tensor, masks: list[Tensor]) -> Tensor:
    allowed = torch.stack(masks).to(logits.device)
    return logits.masked_fill(~allowed, float("-inf"))


def _grammar_drafts(
    c: Constraint,
    proposed: Sequence[int],
    cap: int,
    eos: frozenset[int],
) -> tuple[list[int], list[Tensor], list[bool], list[int]]:
    """Advance ``c`` through the drafts of one round; return them with every position's mask.

    Position ``j`` (the state after the anchor and ``drafts[:j]``) drafts the grammar's single
    allowed token when there is one, else the drafter's ``proposed[j]`` when allowed (the
    drafter's tokens are dropped from the first disagreement on: they were conditioned on a
    different prefix), else the next fast-forward token. Returns ``(drafts, masks, forced,
    source)``: ``len(masks) == len(drafts) + 1`` (the last is the bonus position's),
    ``forced[j]`` whether position ``j`` allowed one token only, and ``source[j]`` the index
    into ``proposed`` a draft came from (-1 for a grammar draft).
    """
    drafts: list[int] = []
    masks: list[Tensor] = []
    forced: list[bool] = []
    source: list[int] = []
    use_prop = True
    ff: list[int] = []  # fast-forward tokens from the current state on
    while True:
        allowed = c.allowed()
        masks.append(torch.from_numpy(allowed))
        single = c.single(allowed)
        forced.append(single is not None)
        j = len(drafts)
        if j >= cap or c.is_stopped():
            break
        prop = proposed[j] if use_prop and j < len(proposed) else None
        if prop is not None and (prop in eos or not allowed[prop]):
            prop = None
        if single is not None:
            if single in eos:
                break
            tok, src = single, (j if prop == single else -1)
        elif prop is not None:
            tok, src = prop, j
        else:
            if not ff:
                ff = c.forced_tokens()
            if not ff or not allowed[ff[0]]:
                break
            tok, src = ff[0], -1
        if src < 0:
            use_prop = False
        ff = ff[1:] if ff and ff[0] == tok else []
        c.consume([tok])
        drafts.append(tok)
        source.append(src)
    return drafts, masks, forced, source


@torch.no_grad()
def _stream_constrained(
    target: TargetModel,
    drafter: Drafter | None,
    prompt: Sequence[int],
    max_tokens: int,
    temperature: float,
    generator: torch.Generator | None,
    stats: GenerationStats | None,
    c: Constraint,
    session: PrefixCache | None = None,
) -> Iterator[list[int]]:
    """:func:`stream_tokens` under a grammar (see the module doc)."""
    st = stats if stats is not None else GenerationStats()
    st.prompt_tokens = len(prompt)
    st.constrained = True
    t_start = time.perf_counter()
    eos = target.eos_token_ids
    cache, out = _prefill(target, drafter, prompt, session, st)
    allowed = c.allowed()
    x = _pick(_masked(out.logits[-1:], [torch.from_numpy(allowed)])[0], temperature, generator)
    first_forced = c.single(allowed) is not None
    st.time_prefill = time.perf_counter() - t_start
    tokens = [*prompt, x]
    emitted = 0
    block = 1
    if drafter is not None:
        block = drafter.block_size
        st.accepted_per_pos = [0] * (block - 1)

    def commit(new: list[int], forced: list[bool]) -> tuple[list[int], bool]:
        """Take ``new`` up to EOS; the grammar has consumed all of it but a final EOS."""
        nonlocal emitted
        take: list[int] = []
        for tok, f in zip(new, forced, strict=True):
            if tok in eos:
                st.finish_reason = "stop"
                return take, True
            take.append(tok)
            st.forced_tokens += int(f)
            emitted += 1
        if c.is_stopped():
            st.finish_reason = "stop"
            return take, True
        if emitted >= max_tokens:
            st.finish_reason = "length"
            return take, True
        return take, False

    failed = False
    try:
        if x not in eos:
            c.consume([x])
        first, done = commit([x], [first_forced])
        st.ttft = time.perf_counter() - t_start
        if first:
            st.output_tokens += len(first)
            yield first
        while not done:
            room = target.max_positions - (len(tokens) - 1)
            if room < 1:
                st.finish_reason = "length"
                break
            cap = min(max_tokens - emitted - 1, room - 1, MAX_GRAMMAR_DRAFTS)
            prop_tokens: list[int] = []
            prop_probs: Tensor | None = None
            if drafter is not None:
                t0 = time.perf_counter()
                prop = drafter.propose(tokens, temperature, generator)
                st.time_draft += time.perf_counter() - t0
                prop_tokens, prop_probs = list(prop.tokens[: block - 1]), prop.probs
            drafts, masks, forced, source = _grammar_drafts(c, prop_tokens, cap, eos)
            t0 = time.perf_counter()
            ver = target.forward([x, *drafts], cache)
            st.time_verify += time.perf_counter() - t0
            logits = _masked(ver.logits, masks)
            if temperature <= 0.0:
                post = logits.argmax(-1).tolist()
                a = 0
                while a < len(drafts) and drafts[a] == post[a]:
                    a += 1
                new = [*drafts[:a], int(post[a])]
            else:
                probs = torch.zeros(len(drafts), logits.shape[-1])
                for j, (tok, src) in enumerate(zip(drafts, source, strict=True)):
                    if src >= 0 and prop_probs is not None:
                        probs[j] = prop_probs[src, : logits.shape[-1]].float().cpu()
                    else:  # a deterministic grammar draft: a one-point proposal
                        probs[j, tok] = 1.0
                new, a = _accept_sampled(logits, drafts, probs, temperature, generator)
            c.rollback(len(drafts) - a)
            if new[-1] not in eos:
                c.consume([new[-1]])
            cache.crop(len(tokens) + a)
            if drafter is not None:
                st.rounds += 1
                st.draft_tokens += len(drafts)
                st.accepted_tokens += a
                st.accept_lengths.append(a + 1)
                for j in range(min(a, block - 1)):
                    st.accepted_per_pos[j] += 1
                t0 = time.perf_counter()
                drafter.extend(ver.features[: a + 1])
                st.time_draft += time.perf_counter() - t0
            tokens += new
            x = new[-1]
            take, done = commit(new, forced[: a + 1])
            if take:
                st.output_tokens += len(take)
                yield take
    except Exception:  # a failed forward may leave the cache half-written: start afresh
        failed = True
        raise
    finally:
        if not failed:
            _keep(session, cache, tokens, drafter)
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
    constraint: Constraint | None = None,
) -> GenerationResult:
    """Run :func:`stream_tokens` to the end."""
    st = GenerationStats()
    toks: list[int] = []
    for part in stream_tokens(
        target,
        drafter,
        prompt,
        max_tokens,
        temperature=temperature,
        generator=generator,
        stats=st,
        constraint=constraint,
    ):
        toks += part
    return GenerationResult(toks, st)
