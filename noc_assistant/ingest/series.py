"""Recent history of every series, grouped by entity, with reset-aware counter increases.

The store answers the selector functions of KPI formulas (``knowledge/formula.py``) for one
entity at one evaluation time. Every series keeps reset-aware increments, so ``increase`` works
whether or not the exporter declared the type; a counter that goes down restarted from zero
(a process restart), so its increment is its new value — never a negative spike.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from knowledge.formula import LIVENESS
from noc_assistant.ingest.point import Point, canonical_metric

__all__ = ["EntityView", "Leaves", "SeriesState", "SeriesStore"]

#: steps kept per entity for its scrape interval, and the fewest that give one
_INTERVAL_STEPS = 16
_INTERVAL_MIN_STEPS = 4

_PART = {"histogram_sum": "sum", "histogram_count": "count", "histogram_bucket": "bucket"}


@dataclass
class SeriesState:
    """State of one series."""

    labels: dict[str, str]
    entity: str = ""
    """The ``instance`` label (the entity the series belongs to)."""
    last_ts: float = float("-inf")
    last_value: float | None = None
    """Latest non-gap value."""
    prev_counter: float | None = None
    increments: deque[tuple[float, float, float, bool]] = field(default_factory=deque)
    """(previous sample time, sample time, increase between them, whether it is a reset)."""
    resets: int = 0

    def add(self, ts: float, value: float | None, horizon: float) -> None:
        if value is None:
            return
        if self.prev_counter is not None:
            if value >= self.prev_counter:
                self.increments.append((self.last_ts, ts, value - self.prev_counter, False))
            else:
                # counter reset: it restarted from zero, so all of `value` is new
                self.resets += 1
                self.increments.append((self.last_ts, ts, value, True))
        self.prev_counter = value
        self.last_ts = ts
        self.last_value = value
        cutoff = ts - horizon
        inc = self.increments
        while inc and inc[0][1] <= cutoff:
            inc.popleft()

    def late(self, at: float, since: float, grace: float) -> bool:
        """Whether the series missed its entity's latest scrape: nothing new since ``since``
        (the entity's previous evaluation), though the entity answered at ``at``, and it is
        not silent for longer than ``grace`` either. Its increase over a window ending at
        ``at`` then lacks the last interval, which a ratio against a series that was scraped
        reads as a drop (one lost line of a success counter paged). The next sample spreads
        the increment over the gap, so the window is whole again one scrape later. A series
        an exporter stamps at another phase than the entity's other series is not late: it
        has a newer sample than the previous evaluation.

        >>> st = SeriesState({})
        >>> for t in (0.0, 60.0, 120.0):
        ...     st.add(t, t, 900.0)
        >>> st.late(180.0, 120.0, 300.0), st.late(180.0, 110.0, 300.0)
        (True, False)
        >>> st.late(600.0, 540.0, 300.0)  # silent for longer than the grace: not just late
        False
        """
        return bool(self.increments) and self.last_ts <= since and at - self.last_ts <= grace

    def increase(self, start: float, end: float) -> float | None:
        """Increase over ``(start, end]``; None if the series has no sample there, NaN if it
        is unknown.

        An increment between two samples far apart (after a gap) is spread evenly over the
        time between them, so the first sample after a gap is not read as a burst. A reset's
        cannot be: the counter restarted at some unknown time between the two samples (a
        node down for half an hour and up for five minutes), so a window that holds only part
        of it has an unknown increase, not a third of the new value.
        """
        total = 0.0
        seen = False
        for prev, ts, inc, reset in reversed(self.increments):
            if ts <= start:
                break
            if ts <= end:
                if prev < start < ts:  # only the part of the step inside the window
                    if reset:
                        return math.nan
                    inc *= (ts - start) / (ts - prev)
                total += inc
                seen = True
        return total if seen else None


def _matches(labels: Mapping[str, str], matchers: Mapping[str, str]) -> bool:
    for name, want in matchers.items():
        have = labels.get(name)
        if have is None:
            return False
        if "|" in want:
            if have not in want.split("|"):
                return False
        elif have != want:
            return False
    return True


class SeriesStore:
    """All series, grouped by entity (``instance`` label) and canonical metric name."""

    def __init__(self, horizon_s: float = 900.0) -> None:
        self.horizon_s = horizon_s
        self._series: dict[tuple[str, tuple[tuple[str, str], ...]], SeriesState] = {}
        self._by_entity: dict[str, dict[tuple[str, str], list[SeriesState]]] = {}
        self._entity_nf: dict[str, str] = {}
        #: entity → the canonical names of its metrics
        self._metrics: dict[str, set[str]] = {}
        #: entity → how many series it has
        self._counts: dict[str, int] = {}
        self._canon: dict[tuple[str, str], tuple[str, str]] = {}
        #: selector → matching series, valid while no series is added (checked by count)
        self._matching: dict[tuple[object, ...], list[SeriesState]] = {}
        self._matching_at = 0
        #: entity → time of its latest sample with a value (its latest scrape)
        self.last_seen: dict[str, float] = {}
        #: entity → the times of its scrapes, in order, when set to a dict (an evaluation
        #: measures detection delay from the first scrape that can show a fault); None live
        self.scrape_log: dict[str, list[float]] | None = None
        #: entity → the first steps between samples of its series (its scrape interval)
        self._steps: dict[str, list[float]] = {}
        self._interval: dict[str, float] = {}

    @property
    def entities(self) -> list[str]:
        return sorted(self._by_entity)

    def entity_hint(self, entity: str) -> str:
        """The ``nf`` label seen on the entity's series, else its ``job`` label, if any."""
        return self._entity_nf.get(entity, "")

    def __setstate__(self, state: dict[str, object]) -> None:
        """A snapshot of a version without :attr:`_metrics` restores with it rebuilt."""
        self.__dict__.update(state)
        if "_metrics" not in state:
            self._metrics = {e: {n for n, _ in by} for e, by in self._by_entity.items()}
        if "_counts" not in state:
            self._counts = {e: sum(map(len, by.values())) for e, by in self._by_entity.items()}

    def metrics_of(self, entity: str) -> set[str]:
        """The canonical names of the entity's metrics (a new set)."""
        return set(self._metrics.get(entity, ()))

    def metric_count(self, entity: str) -> int:
        """How many metrics the entity has (``len(metrics_of(entity))``, without the set)."""
        return len(self._metrics.get(entity, ()))

    def series_count(self, entity: str) -> int:
        """How many series the entity has (a new label value of a known metric counts)."""
        return self._counts.get(entity, 0)

    def add(self, point: Point) -> float | None:
        """Store ``point``; return the time since the series' previous sample (None if first)."""
        ts, metric, labels, value, type_ = point
        state = self._series.get((metric, labels))
        if state is None:
            state = self._new_series(metric, labels, type_)
        previous = state.last_ts
        state.add(ts, value, self.horizon_s)
        entity = state.entity
        if value is not None and ts > self.last_seen.get(entity, -math.inf):
            self.last_seen[entity] = ts
            if self.scrape_log is not None:
                self.scrape_log.setdefault(entity, []).append(ts)
        if previous == -math.inf:
            return None
        delta = ts - previous
        if delta > 0:
            steps = self._steps.get(entity)
            if steps is None:
                steps = self._steps[entity] = []
            if len(steps) < _INTERVAL_STEPS:
                steps.append(delta)
                if len(steps) >= _INTERVAL_MIN_STEPS:
                    self._interval[entity] = statistics.median(steps)
        return delta

    def _new_series(
        self, metric: str, labels: tuple[tuple[str, str], ...], type_: str
    ) -> SeriesState:
        """The state of a series seen for the first time, filed under its entity."""
        named = dict(labels)
        entity = named.get("instance", "")
        state = SeriesState(named, entity)
        self._series[(metric, labels)] = state
        canon = self._canon.get((metric, type_))
        if canon is None:
            canon = (canonical_metric(metric, type_), _PART.get(type_, ""))
            self._canon[(metric, type_)] = canon
        self._by_entity.setdefault(entity, {}).setdefault(canon, []).append(state)
        self._metrics.setdefault(entity, set()).add(canon[0])
        self._counts[entity] = self._counts.get(entity, 0) + 1
        nf = named.get("nf")
        if nf:  # the nf label wins over a job label seen first
            self._entity_nf[entity] = nf.lower()  # "AMF" is the pack's "amf"
        elif named.get("job"):
            self._entity_nf.setdefault(entity, named["job"].lower())
        return state

    def entity_interval(self, entity: str) -> float | None:
        """The entity's scrape interval: the median step between samples of its series (each
        series on its own, as exporters of one host answer at their own phases); None until
        a few steps were seen.

        >>> store = SeriesStore()
        >>> for t in range(0, 300, 30):
        ...     _ = store.add(Point(float(t), "m", (("instance", "a"),), 1.0))
        ...     _ = store.add(Point(float(t) + 7.0, "n", (("instance", "a"),), 1.0))
        >>> store.entity_interval("a"), store.entity_interval("b")
        (30.0, None)
        """
        return self._interval.get(entity)

    def add_all(self, points: Iterable[Point]) -> None:
        for p in points:
            self.add(p)

    def view(
        self,
        entity: str,
        at: float,
        window_s: float,
        extra: Mapping[str, str] | None = None,
        grace_s: float = 0.0,
        since: float = -math.inf,
    ) -> EntityView:
        """Selector source for ``entity`` at ``at``; ``extra`` label matchers apply to every
        selector (the group of a grouped KPI); ``grace_s``: how long a series may be silent
        and still be ``present`` (the liveness grace of the entity's interval); ``since``: the
        entity's previous evaluation (a counter with no sample after it is late)."""
        return EntityView(self, entity, at, window_s, extra or {}, grace_s, since)

    def label_groups(
        self, entity: str, metrics: Iterable[str], names: Iterable[str]
    ) -> set[tuple[tuple[str, str], ...]]:
        """Distinct values of the labels ``names`` on the entity's series of ``metrics``
        (canonical names); series lacking one of the labels are left out."""
        wanted = tuple(names)
        out: set[tuple[tuple[str, str], ...]] = set()
        for (metric, _part), states in self._by_entity.get(entity, {}).items():
            if metric not in metrics:
                continue
            for st in states:
                if all(n in st.labels for n in wanted):
                    out.add(tuple((n, st.labels[n]) for n in wanted))
        return out

    def _states(self, entity: str, metric: str, part: str) -> list[SeriesState]:
        return self._by_entity.get(entity, {}).get((metric, part), [])

    def matching(
        self, entity: str, metric: str, part: str, matchers: Mapping[str, str]
    ) -> list[SeriesState]:
        """The entity's series of ``metric`` (and histogram ``part``) whose labels match
        ``matchers``; remembered until a new series arrives (KPIs ask the same every tick)."""
        if self._matching_at != len(self._series):
            self._matching.clear()
            self._matching_at = len(self._series)
        key = (entity, metric, part, *matchers.items())
        found = self._matching.get(key)
        if found is None:
            states = self._states(entity, metric, part)
            found = [st for st in states if _matches(st.labels, matchers)] if matchers else states
            self._matching[key] = found
        return found


class Leaves:
    """What the selectors of one KPI series read, resolved once: (selector, metric, matchers
    object) → the series it sums. Valid while the store holds the same series (checked on
    each use): a KPI evaluated every tick asks the same questions every tick."""

    __slots__ = ("found", "series")

    def __init__(self) -> None:
        self.series = -1
        self.found: dict[tuple[str, str, int], tuple[list[SeriesState], ...]] = {}


class EntityView:
    """A :class:`knowledge.formula.SelectorSource` for one entity at one time."""

    __slots__ = ("at", "entity", "extra", "grace_s", "leaves", "since", "store", "window_s")

    def __init__(
        self,
        store: SeriesStore,
        entity: str,
        at: float,
        window_s: float,
        extra: Mapping[str, str],
        grace_s: float = 0.0,
        since: float = -math.inf,
        leaves: Leaves | None = None,
    ) -> None:
        self.store = store
        self.entity = entity
        self.at = at
        self.window_s = window_s
        self.extra = extra
        self.grace_s = grace_s
        """How long a series may be silent and still count as answering (``present``)."""
        self.since = since
        """The entity's previous evaluation: a counter with nothing newer is late."""
        self.leaves = leaves
        """Where the selectors' series are remembered across evaluations (None: looked up)."""

    def _increase(self, states: list[SeriesState]) -> float | None:
        total: float | None = None
        start = self.at - self.window_s
        for st in states:
            if st.late(self.at, self.since, self.grace_s):
                return None  # its last interval is not in yet: a gap, not a low value
            inc = st.increase(start, self.at)
            if inc is not None and math.isnan(inc):
                return None  # a reset the window holds part of: a gap, not a low value
            if inc is not None:
                total = inc if total is None else total + inc
        return total

    def _resolve(
        self, fn: str, metric: str, matchers: Mapping[str, str]
    ) -> tuple[list[SeriesState], ...]:
        """The series selector ``fn`` of ``metric`` reads (a histogram mean: its sum and count
        parts, then its ``_sum`` and ``_count`` series)."""
        if self.extra:
            matchers = {**matchers, **self.extra}
        match, entity = self.store.matching, self.entity
        if fn == "hist_mean":
            base = canonical_metric(metric, "counter")
            return (
                match(entity, base, "sum", matchers),
                match(entity, base, "count", matchers),
                match(entity, canonical_metric(metric + "_sum"), "", matchers),
                match(entity, canonical_metric(metric + "_count"), "", matchers),
            )
        if fn == LIVENESS:
            return ()
        return (match(entity, canonical_metric(metric, "counter"), "", matchers),)

    def _found(
        self, fn: str, metric: str, matchers: Mapping[str, str]
    ) -> tuple[list[SeriesState], ...]:
        leaves = self.leaves
        if leaves is None:
            return self._resolve(fn, metric, matchers)
        series = len(self.store._series)
        if leaves.series != series:
            leaves.found.clear()
            leaves.series = series
        key = (fn, metric, id(matchers))
        found = leaves.found.get(key)
        if found is None:
            found = leaves.found[key] = self._resolve(fn, metric, matchers)
        return found

    def select(self, fn: str, metric: str, matchers: Mapping[str, str]) -> float | None:
        found = self._found(fn, metric, matchers)
        if fn == "hist_mean":
            num = self._increase(found[0])
            den = self._increase(found[1])
            if num is None or den is None:
                num = self._increase(found[2])
                den = self._increase(found[3])
            if num is None or den is None or den == 0:
                return None
            return num / den
        if fn == LIVENESS:
            # the whole entity: any sample with a value within the window (the grace)
            seen = self.store.last_seen.get(self.entity)
            if seen is None:
                return None
            return 1.0 if seen > self.at - self.window_s else 0.0
        if fn in ("increase", "rate"):
            inc = self._increase(found[0])
            if inc is None:
                return None
            return inc if fn == "increase" else inc / self.window_s
        if fn == "present":
            # series silent for longer than the store's horizon (and four windows) are gone
            # (a model swapped under a new label), not a target that stopped answering now
            gone = self.at - max(self.store.horizon_s, 4 * self.window_s)
            states = [st for st in found[0] if st.last_ts > gone]
            if not states:
                return None
            # a series answers while it has missed fewer scrapes than the grace allows: at PM
            # periods a window is one interval, and one late or lost file is routine
            since = self.at - max(self.window_s, self.grace_s)
            return sum(1 for st in states if st.last_ts > since) / len(states)
        # gauges: latest value of each matching series that is not stale
        stale_before = self.at - 2 * self.window_s
        values = [
            st.last_value
            for st in found[0]
            if st.last_value is not None and st.last_ts > stale_before
        ]
        if not values:
            return None
        if fn == "gauge":
            return sum(values)
        if fn == "gauge_mean":
            return sum(values) / len(values)
        if fn == "gauge_max":
            return max(values)
        if fn == "gauge_min":
            return min(values)
        raise ValueError(f"unknown selector {fn!r}")
