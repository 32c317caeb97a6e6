"""The liveness watch: which entities stopped answering, judged on the data's clock.

An entity that sends nothing has no scrape to evaluate: the pack's liveness KPIs (``up()``) are
judged on the clock instead, for every entity that has answered a few scrapes. Once it has
sent nothing for its grace (:func:`detectors.params.liveness_grace_s` of its own interval)
while the feed runs, a finding of detector ``liveness`` opens; its next sample clears it. A
silence of the whole feed (the collector, not the targets) is no finding: the grace counts
from the end of any such gap.

A :class:`~noc_assistant.stream.pipeline.Pipeline` owns one :class:`LivenessWatch` and turns
what it judges (:class:`Silent`, :class:`Answered`) into findings and clears.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from detectors import MonitorEvent
from detectors.params import liveness_grace_s, liveness_graces_s
from knowledge.kpis import KpiDef
from noc_assistant.ingest import SeriesStore
from noc_assistant.ingest.rings import kernel
from noc_assistant.models import LIVENESS_DETECTOR
from noc_assistant.stream.correlate import Correlator
from noc_assistant.stream.topology_guess import TopologyGuess

__all__ = ["Answered", "LivenessWatch", "Silent", "silence"]

F64 = NDArray[np.float64]


def silence(ts: float, observed: float, expected: float, score: float) -> MonitorEvent:
    """The opening of a liveness finding: ``observed`` where ``expected`` was due."""
    return MonitorEvent(
        kind="open",
        ts=ts,
        score=score,
        observed=observed,
        expected_low=expected,
        expected_high=expected,
        direction="down" if observed < expected else "up",
        detector=LIVENESS_DETECTOR,
    )


@dataclass(frozen=True)
class Silent:
    """``entity`` stopped answering: a finding of ``kpi`` opens (``event``)."""

    kpi: KpiDef
    entity: str
    event: MonitorEvent


@dataclass(frozen=True)
class Answered:
    """``entity``, found silent, answered again at ``ts``: its ``kpi`` finding clears."""

    kpi: str
    entity: str
    ts: float


@kernel
def _last_start(ts: F64, last: float, feed_gap: float) -> float:
    """The last of ``ts`` (sorted) more than ``feed_gap`` after the newest time before it
    (``last`` before the first; NaN: none, the feed starts), else NaN."""
    found = math.nan
    for p in range(len(ts)):
        t = ts[p]
        if last != last or t - last > feed_gap:
            found = t
        if last != last or t > last:
            last = t
    return found


class LivenessWatch:
    """The liveness KPIs of ``kpis``, and the entities found down and not answering yet."""

    def __init__(self, kpis: Iterable[KpiDef]) -> None:
        self.kpis = [k for k in kpis if k.parsed.liveness]
        self.down: dict[tuple[str, str], bool] = {}
        """(liveness KPI id, entity) of the entities found down and not answering yet →
        whether that finding fell in a maintenance window (it pages when the window ends)"""
        self.alive_since: float | None = None
        """Start of the feed's current run without a silence of its own (grace counts from
        it)"""

    def heard(self, ts: float, last_ts: float | None, feed_gap: float) -> None:
        """The feed released a point at ``ts``; its previous one was at ``last_ts``: more than
        ``feed_gap`` before, the feed itself was silent (or it starts)."""
        if last_ts is None or ts - last_ts > feed_gap:
            self.alive_since = ts

    def heard_all(self, ts: F64, last_ts: float | None, feed_gap: float) -> None:
        """:meth:`heard` of each point released at ``ts`` (sorted), ``last_ts`` the newest
        time released before them."""
        since = _last_start(ts, math.nan if last_ts is None else last_ts, feed_gap)
        if since == since:
            self.alive_since = since

    def judge(
        self, at: float, store: SeriesStore, correlator: Correlator, guess: TopologyGuess
    ) -> Iterator[Silent | Answered]:
        """Judge the liveness KPIs of every entity at ``at``, by entity name: each change as
        it is judged (the caller acts on it before the next is judged)."""
        if not self.kpis or self.alive_since is None:
            return
        for entity in self._to_judge(at, store):
            seen = store.last_seen[entity]
            interval = store.entity_interval(entity)
            if not entity or interval is None:  # too few scrapes to know when one is missed
                continue
            grace = liveness_grace_s(interval, on_clock=True)
            silent_for = at - max(seen, self.alive_since)
            for kpi in self.kpis:
                key = (kpi.id, entity)
                down = self.down.get(key)
                if down is None and silent_for < grace:  # answering: nothing to judge
                    continue
                up = kpi.parsed.evaluate(store.view(entity, at, grace))
                if down is not None:
                    if up == 1.0:  # it answered again
                        del self.down[key]
                        yield Answered(kpi.id, entity, seen)
                        continue
                    if not down or correlator.in_maintenance(entity, at):
                        continue
                    # still silent when its maintenance window ended: that is a page now
                if silent_for < grace or up != 0.0:
                    continue
                played = guess.roles(entity, store.metrics_of(entity))
                if not any(kpi.applies_to(t) for t in played):
                    continue
                self.down[key] = correlator.in_maintenance(entity, at)
                yield Silent(kpi, entity, silence(at, 0.0, 1.0, silent_for / grace))

    def _to_judge(self, at: float, store: SeriesStore) -> list[str]:
        """The entities :meth:`judge` has something to judge on at ``at``, sorted: those found
        down, and those silent for their grace (worked out for all entities at once)."""
        assert self.alive_since is not None
        names, seen, interval = store.entity_clock()
        silent_for = at - np.maximum(seen, self.alive_since)
        late = (seen > -math.inf) & (silent_for >= liveness_graces_s(interval, on_clock=True))
        found = {names[e] for e in np.flatnonzero(late).tolist()}
        found.update(entity for _, entity in self.down if entity in store.last_seen)
        return sorted(found)
