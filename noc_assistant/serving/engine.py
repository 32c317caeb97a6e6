"""The serving engine: one target, an optional drafter, one request at a time.

:class:`Engine` serialises generations with a thread lock (the model and its caches are not
re-entrant), records metrics, and estimates each request's energy with the SIMPLE law: θ
implied by the paper (uncalibrated) until this machine's energy meter, where one is readable,
has measured enough requests to fit them (:mod:`noc_assistant.serving.power`).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import torch

from noc_assistant.serving.draft_heads import BlockDrafterModel, NeuralDrafter
from noc_assistant.serving.errors import RequestError
from noc_assistant.serving.loading import TargetModel
from noc_assistant.serving.metrics import ServingMetrics
from noc_assistant.serving.penalties import Penalties
from noc_assistant.serving.power import Calibration, RaplMeter
from noc_assistant.serving.simple import (
    LLAMA31_8B_IMPLIED,
    EnergyBreakdown,
    ModelShape,
    SimpleTheta,
    predict,
)
from noc_assistant.serving.speculative import GenerationStats, PrefixCache, stream_tokens

if TYPE_CHECKING:  # llguidance is only needed when a grammar is used
    from noc_assistant.serving.grammar import Constraint

__all__ = ["Engine", "Request"]


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
    """Generates for one request at a time; ``context`` caps prompt + output tokens."""

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
    ) -> None:
        """``meter``: the energy meter (default: this machine's RAPL counters, when
        readable)."""
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
        self._lock = threading.Lock()
        self._neural = NeuralDrafter(drafter) if drafter is not None else None
        self._prefix: PrefixCache | None = PrefixCache() if prefix_cache else None
        """The last request's cache, reused for the next prompt's common prefix (a chat's
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
        """Yield output tokens of ``req`` (holding the engine lock throughout)."""
        req = self.check(req)
        with self._lock:
            self.metrics.running.labels(self.name).inc()
            try:
                gen = None
                if req.seed is not None:
                    gen = torch.Generator().manual_seed(req.seed)
                drafter = self._neural
                start = self.meter.read() if self.meter is not None else None
                yield from stream_tokens(
                    self.target,
                    drafter,
                    req.prompt,
                    req.max_tokens,
                    temperature=req.temperature,
                    generator=gen,
                    stats=stats,
                    constraint=req.constraint,
                    session=self._prefix,
                    penalties=req.penalties,
                )
                if self.meter is not None and start is not None:
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

    def generate(self, req: Request) -> tuple[list[int], GenerationStats]:
        st = GenerationStats()
        out: list[int] = []
        for part in self.stream(req, st):
            out += part
        return out, st

    def encode_chat(self, messages: Sequence[dict[str, str]]) -> list[int]:
        return self.target.tokenizer.chat_prompt(messages)
