"""The network-wide correlator's side of a pipeline: findings from the workers of slices.

A :class:`~noc_assistant.stream.pipeline.Pipeline` made with a ``fan_in`` reads no telemetry of
its own: its findings come from the ticks of detector workers, each watching a slice of the
network (:mod:`noc_assistant.stream.fanin`), merged into one order. It owns a
:class:`NetworkCorrelator`, which replays each tick that every worker has passed into the
pipeline's correlator in the order a single pipeline would have produced it.
"""

from __future__ import annotations

from collections.abc import Iterator

from noc_assistant.models import Finding
from noc_assistant.stream.clock import ScrapeClock
from noc_assistant.stream.correlate import Correlator, IncidentEvent, series_id
from noc_assistant.stream.fanin import Batch, Clear, FanIn, Seen
from noc_assistant.stream.topology_guess import TopologyGuess

__all__ = ["NetworkCorrelator"]


class NetworkCorrelator:
    """The merge of the workers' ticks (``fan_in``) for a pipeline's correlator."""

    def __init__(self, fan_in: FanIn) -> None:
        self.fan_in = fan_in

    def offer(self, batch: Batch) -> int | None:
        """A worker's batch into the merge: the number of findings it carried, or None for a
        batch taken before."""
        if not self.fan_in.offer(batch):
            return None
        return sum(isinstance(e, Seen) for t in batch.ticks for e in t.events)

    def merged(
        self,
        correlator: Correlator,
        clock: ScrapeClock,
        guess: TopologyGuess,
        *,
        everything: bool,
    ) -> Iterator[Finding | IncidentEvent]:
        """Every tick all workers have passed (with ``everything``, every tick held): its
        clears go into ``correlator`` here, and each finding (a further reading only if the
        correlator holds its series alarming that way) and each incident event of the tick is
        yielded for the caller to add or emit before the next is read."""
        for tick in self.fan_in.ready(everything=everything):
            clock.interval_s = tick.step
            correlator.notice_s = 0.9 * tick.step
            for ev in tick.events:
                if isinstance(ev, Clear):
                    correlator.clear(ev.series, ev.entity, ev.ts)
                    continue
                f = ev.finding
                if f.entity_type:  # the worker's knowledge (the inventory's is kept)
                    guess.learn_type(f.entity, f.entity_type)
                reading = ev.reading and correlator.alarming(
                    series_id(f.kpi, f.labels), f.entity, f.direction
                )
                yield f if f.update == reading else f.model_copy(update={"update": reading})
            clock.passed(tick.at)
            yield from correlator.tick(tick.at)
