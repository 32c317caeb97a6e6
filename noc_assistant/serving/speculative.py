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

from noc_assistant.serving.cache import shared_prefix
from noc_assistant.serving.draft_heads import Drafter, Proposal
from noc_assistant.serving.errors import RequestError
from noc_assistant.serving.grammar_drafts import (
    MAX_GRAMMAR_DRAFTS,
    grammar_drafts,
    grammar_proposals,
    mask_logits,
)
from noc_assistant.serving.loading import TargetModel, TargetOutput
from noc_assistant.serving.penalties import NO_PENALTIES, Penalties

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
    measured_j: float | None = None
    """Joules the machine's energy meter counted over the generation (None: no meter)."""

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
        return shared_prefix(self.tokens, prompt[:-1])


def _prefill(
    target: TargetModel,
    drafter: Drafter | None,
    prompt: Sequence[int],
    session: PrefixCache | None,
    st: GenerationStats,
) -> tuple[KVCache, TargetOutput]:
    """Run the prompt (what ``session`` does not already hold) and start the drafter.

    Only the last row's logits are asked for: the first output token needs no more, and the
    LM head over every prompt row was a fifth of a prefill's work (the drafter still gets
    every row's features). The references below ask the same, so they run the same code."""
    reuse = session.reusable(prompt, drafter) if session is not None else 0
    if session is not None and reuse > 0 and session.cache is not None:
        cache = session.cache
        cache.crop(reuse)
        out = target.forward(list(prompt[reuse:]), cache, all_logits=False)
        if drafter is not None:
            t0 = time.perf_counter()
            drafter.crop(reuse)  # type: ignore[attr-defined]
            drafter.extend(out.features)
            st.time_draft += time.perf_counter() - t0
    else:
        cache = target.new_cache()
        out = target.forward(list(prompt), cache, all_logits=False)
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
    logits = target.forward(list(prompt), cache, all_logits=False).logits[-1]
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
    penalties: Penalties | None = None,
) -> list[int]:
    """Target-only constrained greedy decoding: one token per forward, the argmax over the
    tokens the grammar allows; stops before EOS and when the grammar is complete.

    The definition that constrained :func:`stream_tokens` at temperature 0 must reproduce,
    with or without a drafter (and with ``penalties``, the same penalties).
    """
    c = constraint_factory()
    eos = target.eos_token_ids
    cache = target.new_cache()
    logits = target.forward(list(prompt), cache, all_logits=False).logits[-1]
    out: list[int] = []
    while len(out) < max_tokens:
        allowed = c.mask().to(logits.device)
        if penalties is not None:
            logits = penalties.apply(logits[None], out)[0]
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


@dataclass
class _Rounds:
    """The state of one generation's draft-and-verify rounds.

    ``tokens`` holds the prompt and every token committed so far (its last one is the next
    forward's anchor), ``emitted`` the output tokens taken so far.
    """

    target: TargetModel
    drafter: Drafter | None
    st: GenerationStats
    cache: KVCache
    tokens: list[int]
    max_tokens: int
    temperature: float
    generator: torch.Generator | None
    block: int = 1
    emitted: int = 0
    eos: frozenset[int] = frozenset()
    penalties: Penalties = NO_PENALTIES
    start: int = 0
    """Where the output begins in ``tokens`` (the prompt's length)."""

    def __post_init__(self) -> None:
        self.eos = self.target.eos_token_ids
        if self.drafter is not None:
            self.block = self.drafter.block_size
            self.st.accepted_per_pos = [0] * (self.block - 1)

    @property
    def room(self) -> int:
        """Positions of the target's context left after the anchor."""
        return self.target.max_positions - (len(self.tokens) - 1)

    def propose(self, drafter: Drafter) -> Proposal:
        t0 = time.perf_counter()
        prop = drafter.propose(self.tokens, self.temperature, self.generator)
        self.st.time_draft += time.perf_counter() - t0
        return prop

    def verify(self, drafts: Sequence[int]) -> TargetOutput:
        """The target's forward over the anchor and ``drafts`` (the cache grows)."""
        t0 = time.perf_counter()
        ver = self.target.forward([self.tokens[-1], *drafts], self.cache)
        self.st.time_verify += time.perf_counter() - t0
        return ver

    def accept(
        self, logits: Tensor, drafts: list[int], probs: Tensor | None
    ) -> tuple[list[int], int]:
        """The tokens a round commits (the accepted drafts, then the target's own choice) and
        the number of accepted drafts."""
        logits = self.penalties.apply(logits, self.tokens[self.start :], drafts)
        if self.temperature > 0.0:
            return _accept_sampled(logits, drafts, probs, self.temperature, self.generator)
        post = logits.argmax(-1).tolist()
        a = 0
        while a < len(drafts) and drafts[a] == post[a]:
            a += 1
        return [*drafts[:a], int(post[a])], a

    def advance(self, ver: TargetOutput, a: int, n_drafts: int) -> None:
        """Crop the cache after ``a`` accepted drafts; count the round and give the drafter the
        target features of the committed positions."""
        self.cache.crop(len(self.tokens) + a)
        if self.drafter is None:
            return
        st = self.st
        st.rounds += 1
        st.draft_tokens += n_drafts
        st.accepted_tokens += a
        st.accept_lengths.append(a + 1)
        for j in range(min(a, self.block - 1)):
            st.accepted_per_pos[j] += 1
        t0 = time.perf_counter()
        self.drafter.extend(ver.features[: a + 1])
        st.time_draft += time.perf_counter() - t0

    def commit(self, new: list[int]) -> tuple[list[int], bool]:
        """The output tokens of ``new`` (up to EOS or ``max_tokens``) and whether that ends
        the generation."""
        take: list[int] = []
        for tok in new:
            if tok in self.eos:
                self.st.finish_reason = "stop"
                return take, True
            take.append(tok)
            self.emitted += 1
            if self.emitted >= self.max_tokens:
                self.st.finish_reason = "length"
                return take, True
        return take, False

    def commit_constrained(
        self, c: Constraint, new: list[int], forced: list[bool]
    ) -> tuple[list[int], bool]:
        """:meth:`commit` under a grammar, which has consumed all of ``new`` but a final EOS;
        generation also ends where the grammar is complete."""
        take: list[int] = []
        for tok, f in zip(new, forced, strict=True):
            if tok in self.eos:
                self.st.finish_reason = "stop"
                return take, True
            take.append(tok)
            self.st.forced_tokens += int(f)
            self.emitted += 1
        if c.is_stopped():
            self.st.finish_reason = "stop"
            return take, True
        if self.emitted >= self.max_tokens:
            self.st.finish_reason = "length"
            return take, True
        return take, False


def _guarded(
    run: _Rounds, session: PrefixCache | None, rounds: Iterator[list[int]]
) -> Iterator[list[int]]:
    """Yield from ``rounds``; then leave the cache to ``session``, unless a forward failed (it
    may have left the cache half-written: the next request starts afresh)."""
    failed = False
    try:
        yield from rounds
    except Exception:
        failed = True
        raise
    finally:
        if not failed:
            _keep(session, run.cache, run.tokens, run.drafter)


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
    penalties: Penalties = NO_PENALTIES,
) -> Iterator[list[int]]:
    """Yield committed output tokens, a round at a time (EOS is not yielded).

    ``drafter=None`` gives plain target-only decoding through the same code path.
    ``constraint`` (fresh, nothing consumed) restricts the output to its grammar; generation
    then also stops, with ``finish_reason == "stop"``, when the grammar is complete.
    ``session`` reuses the previous generation's cache for the prompt's common prefix
    (:class:`PrefixCache`) and keeps this one's for the next. ``penalties`` lower the logits of
    tokens already in the output (:class:`Penalties`).
    """
    _check(target, prompt, max_tokens)
    if constraint is not None:
        yield from _stream_constrained(
            target,
            drafter,
            prompt,
            max_tokens,
            temperature,
            generator,
            stats,
            constraint,
            session,
            penalties,
        )
        return
    st = stats if stats is not None else GenerationStats()
    st.prompt_tokens = len(prompt)
    t_start = time.perf_counter()
    cache, out = _prefill(target, drafter, prompt, session, st)
    x = _pick(out.logits[-1], temperature, generator)
    st.time_prefill = time.perf_counter() - t_start
    run = _Rounds(target, drafter, st, cache, [*prompt, x], max_tokens, temperature, generator)
    run.penalties, run.start = penalties, len(prompt)
    yield from _guarded(run, session, _plain_rounds(run, t_start))
    st.time_total = time.perf_counter() - t_start


def _plain_rounds(run: _Rounds, t_start: float) -> Iterator[list[int]]:
    """The output of :func:`stream_tokens` without a grammar, from the prefill's token on."""
    st = run.st
    first, done = run.commit([run.tokens[-1]])
    st.ttft = time.perf_counter() - t_start
    if first:
        st.output_tokens += len(first)
        yield first
    while not done:
        room = run.room
        if room < 1:
            st.finish_reason = "length"
            break
        if run.drafter is None:
            logits = run.penalties.apply(run.verify([]).logits[-1:], run.tokens[run.start :])
            new = [_pick(logits[0], run.temperature, run.generator)]
        else:
            prop = run.propose(run.drafter)
            drafts = prop.tokens[: max(0, min(run.block - 1, room - 1))]
            ver = run.verify(drafts)
            new, a = run.accept(ver.logits, drafts, prop.probs)
            run.advance(ver, a, len(drafts))
        run.tokens += new
        take, done = run.commit(new)
        if take:
            st.output_tokens += len(take)
            yield take


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
    penalties: Penalties = NO_PENALTIES,
) -> Iterator[list[int]]:
    """:func:`stream_tokens` under a grammar (see the module doc)."""
    st = stats if stats is not None else GenerationStats()
    st.prompt_tokens = len(prompt)
    st.constrained = True
    t_start = time.perf_counter()
    cache, out = _prefill(target, drafter, prompt, session, st)
    allowed = c.allowed()
    x = _pick(mask_logits(out.logits[-1:], [torch.from_numpy(allowed)])[0], temperature, generator)
    first_forced = c.single(allowed) is not None
    st.time_prefill = time.perf_counter() - t_start
    run = _Rounds(target, drafter, st, cache, [*prompt, x], max_tokens, temperature, generator)
    run.penalties, run.start = penalties, len(prompt)
    yield from _guarded(run, session, _constrained_rounds(run, c, first_forced, t_start))
    st.time_total = time.perf_counter() - t_start


def _constrained_rounds(
    run: _Rounds, c: Constraint, first_forced: bool, t_start: float
) -> Iterator[list[int]]:
    """The output of :func:`_stream_constrained`, from the prefill's token on."""
    st = run.st
    x = run.tokens[-1]
    if x not in run.eos:
        c.consume([x])
    first, done = run.commit_constrained(c, [x], [first_forced])
    st.ttft = time.perf_counter() - t_start
    if first:
        st.output_tokens += len(first)
        yield first
    while not done:
        if run.room < 1:
            st.finish_reason = "length"
            break
        new, forced = _constrained_round(run, c)
        run.tokens += new
        take, done = run.commit_constrained(c, new, forced)
        if take:
            st.output_tokens += len(take)
            yield take


def _constrained_round(run: _Rounds, c: Constraint) -> tuple[list[int], list[bool]]:
    """One round under the grammar: draft (:func:`grammar_drafts`), verify, accept. Returns
    the committed tokens and, for each, whether the grammar allowed it alone."""
    cap = min(run.max_tokens - run.emitted - 1, run.room - 1, MAX_GRAMMAR_DRAFTS)
    prop_tokens: list[int] = []
    prop_probs: Tensor | None = None
    if run.drafter is not None:
        prop = run.propose(run.drafter)
        prop_tokens, prop_probs = list(prop.tokens[: run.block - 1]), prop.probs
    drafts, masks, forced, source = grammar_drafts(c, prop_tokens, cap, run.eos)
    ver = run.verify(drafts)
    logits = mask_logits(ver.logits, masks)
    probs = None
    if run.temperature > 0.0:
        probs = grammar_proposals(drafts, source, prop_probs, logits.shape[-1])
    new, a = run.accept(logits, drafts, probs)
    c.rollback(len(drafts) - a)
    if new[-1] not in run.eos:
        c.consume([new[-1]])
    run.advance(ver, a, len(drafts))
    return new, forced[: a + 1]


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
    penalties: Penalties = NO_PENALTIES,
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
        penalties=penalties,
    ):
        toks += part
    return GenerationResult(toks, st)
