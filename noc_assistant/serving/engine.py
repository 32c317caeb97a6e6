"""The serving engine: one target, an optional drafter, concurrent requests batched.

:class:`Engine` runs each request's decoding loop in the caller's thread; the target's
forwards of concurrent requests go through one :class:`~.batching.ForwardBatcher`, which runs
them together (one weight read for every request's decoding step on the native engine; one
after another on a target without ``forward_many`` sharing). The KV caches of recent requests
(:class:`~.prefix_store.PrefixStore`) serve the prompts that begin as theirs did (a chat's
next turn, a shared system prompt), one request per cache at a time. The engine records metrics
and estimates each request's energy with the SIMPLE law: θ implied by the paper (uncalibrated)
until this machine's energy meter, where one is readable, has measured enough requests that
ran alone to fit them (:mod:`noc_assistant.serving.power`); a request that overlapped another
has no measured joules of its own (the meter counts the machine).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, cast

import torch

from noc_assistant.serving.batching import BatchedTarget, ForwardBatcher
from noc_assistant.serving.draft_heads import BlockDrafterModel, NeuralDrafter
from noc_assistant.serving.errors import RequestError
from noc_assistant.serving.loading import TargetModel
from noc_assistant.serving.metrics import ServingMetrics
from noc_assistant.serving.penalties import Penalties
from noc_assistant.serving.power import Calibration, RaplMeter
from noc_assistant.serving.prefix_store import PrefixStore
from noc_assistant.serving.simple import (
    LLAMA31_8B_IMPLIED,
    EnergyBreakdown,
    ModelShape,
    SimpleTheta,
    predict,
)
from noc_assistant.serving.speculative import GenerationStats, stream_tokens

if TYPE_CHECKING:  # llguidance is only needed when a grammar is used
    from noc_assistant.serving.grammar import Constraint

__all__ = ["DEFAULT_MAX_RUNNING", "Engine", "Request"]

#: Requests run at once by default on a target that batches forwards (4 share a decoding step).
DEFAULT_MAX_RUNNING = 4

#: Recent requests' KV caches kept for the prompts that follow (at least ``max_running``).
PREFIX_CACHES = 4


@dataclass
class Request:
    """A tokenised generation request; ``constraint`` (fresh, used once) restricts the output
    to a grammar (``response_format`` / tools)."""

    prompt: list[int]
    max_tokens: int
    temperature: float = 0.0
    seed: int | None = None
    constraint: Constraint | None = None
    penalties: Penalties = field(default_factory=Penalties)


class Engine:
    """Generates for concurrent requests; ``context`` caps prompt + output tokens."""

    def __init__(
        self,
        target: TargetModel,
        drafter: BlockDrafterModel | None = None,
        *,
        name: str | None = None,
        context: int | None = None,
        theta: SimpleTheta = LLAMA31_8B_IMPLIED,
        prefix_cache: bool = True,
        meter: RaplMeter | None = None,
        max_running: int | None = None,
    ) -> None:
        """``meter``: the energy meter (default: this machine's RAPL counters, when
        readable). ``max_running``: how many requests a server runs at once (default 4 when
        the target shares forwards across sequences, else 1: one after another)."""
        self.target = target
        self.drafter = drafter
        self.name = name or target.name
        self.context = min(context or target.max_positions, target.max_positions)
        self.shape = ModelShape(
            target.hidden_size, target.num_layers, target.num_kv_heads / target.num_heads
        )
        self.meter = meter if meter is not None else RaplMeter.open()
        self.calibration = Calibration(self.shape, theta)
        self.metrics = ServingMetrics(self.name)
        if max_running is None:
            max_running = DEFAULT_MAX_RUNNING if target.shares_forwards else 1
        if max_running < 1:
            raise ValueError("max_running must be at least 1")
        self.max_running = max_running
        self.batcher = ForwardBatcher(target)
        self._shared = cast(TargetModel, BatchedTarget(self.batcher))
        self.prefixes = PrefixStore(max(PREFIX_CACHES, max_running)) if prefix_cache else None
        """Recent requests' caches, reused for the next prompts' common prefixes (a chat's
        next turn or look-up round resends the conversation so far)."""

    def check(self, req: Request) -> Request:
        """Refuse prompts that do not fit; clamp ``max_tokens`` to the context left."""
        if not req.prompt:
            raise RequestError("prompt is empty", param="prompt")
        if len(req.prompt) >= self.context:
            raise RequestError(
                f"This model's maximum context length is {self.context} tokens; "
                f"the prompt has {len(req.prompt)} tokens.",
                param="messages",
                code="context_length_exceeded",
            )
        if req.max_tokens < 1:
            raise RequestError("max_tokens must be at least 1", param="max_tokens")
        if req.temperature < 0:
            raise RequestError("temperature must be >= 0", param="temperature")
        left = self.context - len(req.prompt)
        return replace(req, max_tokens=min(req.max_tokens, left))

    def energy(self, st: GenerationStats) -> EnergyBreakdown:
        """SIMPLE estimate for a finished request (autoregressive counterfactual), with the
        θ of :attr:`calibration`."""
        return predict(self.calibration.theta, self.shape, st.prompt_tokens, st.output_tokens)

    def stream(self, req: Request, stats: GenerationStats) -> Iterator[list[int]]:
        """Yield output tokens of ``req``; other requests' streams may run meanwhile (their
        forwards are batched with this one's)."""
        req = self.check(req)
        with self.batcher.generation() as slot:
            session = self.prefixes.checkout(req.prompt) if self.prefixes is not None else None
            drafter = session.drafter if session is not None else None
            if drafter is None and self.drafter is not None:
                drafter = NeuralDrafter(self.drafter)
            self.metrics.running.labels(self.name).inc()
            try:
                gen = None
                if req.seed is not None:
                    gen = torch.Generator().manual_seed(req.seed)
                start = self.meter.read() if self.meter is not None else None
                yield from stream_tokens(
                    self._shared,
                    drafter,
                    req.prompt,
                    req.max_tokens,
                    temperature=req.temperature,
                    generator=gen,
                    stats=stats,
                    constraint=req.constraint,
                    session=session,
                    penalties=req.penalties,
                )
                if self.meter is not None and start is not None and not slot.overlapped:
                    stats.measured_j = self.meter.joules_since(start)
                    self.calibration.add(
                        stats.prompt_tokens,
                        stats.output_tokens,
                        stats.measured_j,
                        cached=stats.cached_tokens,
                    )
                self.metrics.record(stats, self.energy(stats), self.calibration)
            finally:
                self.metrics.running.labels(self.name).dec()
                if self.prefixes is not None and session is not None:
                    self.prefixes.checkin(session)

    def generate(self, req: Request) -> tuple[list[int], GenerationStats]:
        st = GenerationStats()
        out: list[int] = []
        for part in self.stream(req, st):
            out += part
        return out, st

    def encode_chat(self, messages: Sequence[dict[str, str]]) -> list[int]:
        return self.target.tokenizer.chat_prompt(messages)
