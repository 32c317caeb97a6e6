"""Batched decoding: the forwards of concurrent generations share one model call.

Each generation runs its own loop (:func:`~noc_assistant.serving.speculative.stream_tokens`:
drafts, grammar, penalties, sampling) in its own thread; only the target's forward is shared.
A generation's forward is queued in a :class:`ForwardBatcher`; the first caller that finds no
forward running becomes the leader: it waits a moment (at most ``gather_s``) until every
registered generation has queued its next forward, then runs all queued short forwards
(decoding steps, verify rounds) as one ``forward_many`` call and hands each caller its rows.
Prompts (calls for the last row's logits, and any of 64 tokens or more) run on their own
afterwards, so a new request's prefill does not hold up the tokens of the others already
decoding.

Batch invariance of the native kernels (a row's result does not depend on the other rows)
makes a batched generation token-identical to the same generation served alone.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from torch import Tensor

from noc_assistant.serving.cache import KVCache
from noc_assistant.serving.loading import TargetModel, TargetOutput

__all__ = ["BatchedTarget", "ForwardBatcher", "GenerationSlot"]

#: Forwards of at least this many tokens run alone (a prompt's prefill: compute-bound already).
LONG_FORWARD = 64


@dataclass
class _Call:
    ids: Sequence[int] | Tensor
    cache: KVCache
    all_logits: bool
    out: TargetOutput | None = None
    error: BaseException | None = None
    done: bool = False

    @property
    def alone(self) -> bool:
        """Run on its own: a long prompt, or a prompt's rest that wants its last row's logits
        only (in a shared call the LM head would run for each of its rows)."""
        return len(self.ids) >= LONG_FORWARD or not self.all_logits


@dataclass
class GenerationSlot:
    """A registered generation: whether another one ran beside it at any time."""

    overlapped: bool = False


@dataclass
class BatchStats:
    """What the batcher did: model calls by the number of forwards each served."""

    sizes: dict[int, int] = field(default_factory=dict)

    @property
    def calls(self) -> int:
        return sum(self.sizes.values())

    @property
    def forwards(self) -> int:
        return sum(n * k for n, k in self.sizes.items())

    @property
    def largest(self) -> int:
        return max(self.sizes, default=0)


class ForwardBatcher:
    """Coalesces the forwards of concurrent generations on one target (thread-safe)."""

    def __init__(self, target: TargetModel, *, gather_s: float = 0.005) -> None:
        self.target = target
        self.gather_s = gather_s
        self.stats = BatchStats()
        self._cv = threading.Condition()
        self._queue: list[_Call] = []
        self._leading = False
        self._slots: list[GenerationSlot] = []

    @property
    def active(self) -> int:
        """Generations registered now."""
        with self._cv:
            return len(self._slots)

    @contextmanager
    def generation(self) -> Iterator[GenerationSlot]:
        """Register a generation for the time of the block (the leader waits for the forwards
        of registered generations only)."""
        slot = GenerationSlot()
        with self._cv:
            self._slots.append(slot)
            if len(self._slots) > 1:
                for s in self._slots:
                    s.overlapped = True
            self._cv.notify_all()
        try:
            yield slot
        finally:
            with self._cv:
                self._slots.remove(slot)
                self._cv.notify_all()

    def forward(
        self, ids: Sequence[int] | Tensor, cache: KVCache, *, all_logits: bool = True
    ) -> TargetOutput:
        """The target's ``forward(ids, cache)``, run together with the other generations'."""
        call = _Call(ids, cache, all_logits)
        with self._cv:
            self._queue.append(call)
            self._cv.notify_all()
            while not call.done and self._leading:
                self._cv.wait()
            if call.done:
                return self._result(call)
            self._leading = True
            batch = self._gather()
        try:
            self._run(batch)
        finally:
            with self._cv:
                self._leading = False
                self._cv.notify_all()
        return self._result(call)

    def _gather(self) -> list[_Call]:
        """(Under the lock, as the leader) wait until every registered generation has queued a
        forward, or ``gather_s`` has passed; take the queue."""
        deadline = time.monotonic() + self.gather_s
        while len(self._queue) < len(self._slots):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            self._cv.wait(left)
        batch, self._queue = self._queue, []
        return batch

    def _run(self, batch: list[_Call]) -> None:
        """The shared forwards in one model call, then the others one by one; each caller is
        woken as soon as its own result is there."""
        if not self.target.shares_forwards:  # one after another, as the target's own calls
            for c in batch:
                self._one(c)
            return
        short = [c for c in batch if not c.alone]
        if short:
            try:
                outs = self.target.forward_many([(c.ids, c.cache) for c in short])
                for c, o in zip(short, outs, strict=True):
                    c.out = o
            except BaseException as exc:  # each caller re-raises it in its own thread
                for c in short:
                    c.error = exc
            self._finish(short)
        for c in batch:
            if c.alone:
                self._one(c)

    def _one(self, c: _Call) -> None:
        try:
            if c.all_logits:  # the plain call, as the decoding loops make it
                c.out = self.target.forward(c.ids, c.cache)
            else:
                c.out = self.target.forward(c.ids, c.cache, all_logits=False)
        except BaseException as exc:  # re-raised in the caller's thread
            c.error = exc
        self._finish([c])

    def _finish(self, calls: list[_Call]) -> None:
        with self._cv:
            sizes = self.stats.sizes
            sizes[len(calls)] = sizes.get(len(calls), 0) + 1
            for c in calls:
                c.done = True
            self._cv.notify_all()

    @staticmethod
    def _result(call: _Call) -> TargetOutput:
        if call.error is not None:
            raise call.error
        if call.out is None:  # pragma: no cover - done implies one of the two
            raise RuntimeError("forward finished without a result")
        return call.out


class BatchedTarget:
    """A target whose ``forward`` goes through a :class:`ForwardBatcher`; every other
    attribute is the wrapped target's (the decoding loops take it for a :class:`TargetModel`)."""

    def __init__(self, batcher: ForwardBatcher) -> None:
        self._batcher = batcher

    def forward(
        self, ids: Sequence[int] | Tensor, cache: KVCache, *, all_logits: bool = True
    ) -> TargetOutput:
        return self._batcher.forward(ids, cache, all_logits=all_logits)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self._batcher.target, name)
