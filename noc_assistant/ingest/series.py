"""Recent history of every series, grouped by entity, with reset-aware counter increases.

The store answers the selector functions of KPI formulas (``knowledge/formula.py``) for one
entity at one evaluation time. Every series keeps reset-aware increments, so ``increase`` works
whether or not the exporter declared the type; a counter that goes down restarted from zero
(a process restart), so its increment is its new value — never a negative spike.

The labels of each series and the index by entity and metric are Python; the numbers are in
arrays, one row per series (:mod:`~noc_assistant.ingest.rings`), which the pipeline's compiled
KPI programs read (:mod:`~noc_assistant.stream.kpi_program`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping
from typing import TypeVar

import numpy as np
from numpy.typing import NDArray

from knowledge.formula import LIVENESS
from noc_assistant.ingest.point import Point, canonical_metric
from noc_assistant.ingest.rings import Rings, kernel

__all__ = ["EntityView", "SeriesState", "SeriesStore"]

_T = TypeVar("_T", bound=np.generic)

#: steps kept per entity for its scrape interval, and the fewest that give one
_INTERVAL_STEPS = 16
_INTERVAL_MIN_STEPS = 4

_PART = {"histogram_sum": "sum", "histogram_count": "count", "histogram_bucket": "bucket"}


class SeriesState:
    """One series: its labels and entity, and its row ``sid`` in the store's
    :class:`~noc_assistant.ingest.rings.Rings`, which hold its numbers."""

    def __init__(self, labels: dict[str, str], entity: str = "", sid: int = -1) -> None:
        self.labels = labels
        self.entity = entity
        """The ``instance`` label (the entity the series belongs to)."""
        self.sid = sid


def _legacy(rings: Rings, state: SeriesState) -> None:
    """Move the numbers of a series of a snapshot from before the rings (each series held
    its own deque of increments) into ``rings``: the same samples, stored as they were."""
    old = vars(state)
    sid = rings.new_series()
    increments = list(old.pop("increments", ()))
    while len(increments) > rings.capacity:
        rings._grow_rings()
    for k, (prev, ts, inc, reset) in enumerate(increments):
        rings.r_prev[sid, k], rings.r_ts[sid, k] = prev, ts
        rings.r_inc[sid, k], rings.r_reset[sid, k] = inc, reset
    rings.size[sid] = len(increments)
    rings.resets[sid] = old.pop("resets", 0)
    rings.last_ts[sid] = old.pop("last_ts", -math.inf)
    value = old.pop("last_value", None)
    old.pop("prev_counter", None)
    rings.has_value[sid] = value is not None
    rings.last_value[sid] = 0.0 if value is None else value
    state.sid = sid


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
        self.rings = Rings(horizon_s)
        """The numbers of every series (a row each)."""
        self._series: dict[tuple[str, tuple[tuple[str, str], ...]], SeriesState] = {}
        self._rows: list[SeriesState] = []
        """Each series' state by its row."""
        #: each series' latest sample time with a value, by row (the time since it is what
        #: :meth:`add` returns, without waiting for the rings; rows allocated ahead)
        self._last = np.full(0, -np.inf)
        #: each series' entity, by row, as a number of :attr:`_entity_names`
        self._row_entity = np.zeros(0, np.int64)
        self._entity_names: list[str] = []
        self._entity_number: dict[str, int] = {}
        #: :attr:`last_seen` by entity number (-inf: none yet), for :func:`_store_rows`
        self._entity_seen = np.full(0, -np.inf)
        #: the numbers of the entities whose scrape interval is still being learned (fewer
        #: steps than it keeps): :meth:`add_columns` follows their points one by one
        self._learning: set[int] = set()
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
        #: each entity's scrape interval by its number (NaN: not known yet)
        self._entity_step = np.full(0, np.nan)

    @property
    def entities(self) -> list[str]:
        return sorted(self._by_entity)

    def entity_hint(self, entity: str) -> str:
        """The ``nf`` label seen on the entity's series, else its ``job`` label, if any."""
        return self._entity_nf.get(entity, "")

    def __setstate__(self, state: dict[str, object]) -> None:
        """A snapshot of a version without :attr:`_metrics` restores with it rebuilt, and one
        from before the rings with its series' numbers moved into them."""
        self.__dict__.update(state)
        if "rings" not in state:
            self.rings = Rings(self.horizon_s)
            for st in self._series.values():
                _legacy(self.rings, st)
        if "_last" not in state:
            self._last = self.rings.last_ts[: self.rings.n].copy()
        elif isinstance(self._last, list):
            self._last = np.array(self._last, np.float64)
        if "_rows" not in state:
            self._rows = sorted(self._series.values(), key=lambda st: st.sid)
        if "_row_entity" not in state:
            self._entity_names, self._entity_number, self._learning = [], {}, set()
            self._row_entity = np.zeros(0, np.int64)
            for st in sorted(self._series.values(), key=lambda st: st.sid):
                self._file_row(st.sid, st.entity)
        if "_entity_seen" not in state:
            self._entity_seen = np.full(len(self._entity_names), -np.inf)
            for name, t in self.last_seen.items():
                if name in self._entity_number:
                    self._entity_seen[self._entity_number[name]] = t
        interval: dict[str, float] = state.get("_interval", {})  # type: ignore[assignment]
        if "_entity_step" not in state:  # a snapshot that kept the intervals by name
            self._entity_step = np.full(len(self._entity_names), np.nan)
            for name, step in interval.items():
                if name in self._entity_number:
                    self._entity_step[self._entity_number[name]] = step
        self.__dict__.pop("_interval", None)
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
        return self.add_to(self.state_of(point), point)

    def state_of(self, point: Point) -> SeriesState:
        """The state of ``point``'s series, made if it is the first point of it."""
        state = self._series.get((point.metric, point.labels))
        if state is None:
            state = self._new_series(point.metric, point.labels, point.type)
        return state

    def row(self, sid: int) -> SeriesState:
        """The state of the series of row ``sid``."""
        return self._rows[sid]

    def add_to(self, state: SeriesState, point: Point) -> float | None:
        """:meth:`add` of ``point`` to its series' ``state`` (:meth:`state_of`), found
        before: the pipeline keeps each series' state by its number
        (:class:`~noc_assistant.ingest.door.SeriesDoor`)."""
        return self.add_value(state, point.ts, point.value)

    def add_value(self, state: SeriesState, ts: float, value: float | None) -> float | None:
        """:meth:`add_to` of a sample at ``ts`` of ``value`` (None: a gap)."""
        sid = state.sid
        previous = float(self._last[sid])
        entity = state.entity
        if value is not None:
            self._last[sid] = ts
            self.rings.note(sid, ts, value)
            if ts > self.last_seen.get(entity, -math.inf):
                self.last_seen[entity] = ts
                self._entity_seen_at(entity, ts)
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
                self._step(entity, steps, delta)
        return delta

    def _step(self, entity: str, steps: list[float], delta: float) -> None:
        """One more step between samples of a series of ``entity`` (its interval)."""
        steps.append(delta)
        if len(steps) >= _INTERVAL_MIN_STEPS:
            number = self._entity_number[entity]
            if number >= len(self._entity_step):
                self._entity_step = _grown(self._entity_step, number, math.nan)
            self._entity_step[number] = statistics.median(steps)
        if len(steps) == _INTERVAL_STEPS:
            self._learning.discard(self._entity_number[entity])

    def add_columns(
        self, sids: NDArray[np.int64], ts: NDArray[np.float64], values: NDArray[np.float64]
    ) -> None:
        """:meth:`add_value` of each sample of three columns (rows of series already met,
        ``values`` NaN where a gap), sorted by time; what it returns is not kept. Entities
        whose interval is still learned take their points one by one; for the rest, each
        series' latest time, the rings and each entity's latest scrape are array work."""
        if not len(sids):
            return
        entities = self._row_entity[sids]
        if self._learning:
            slow = np.isin(entities, np.fromiter(self._learning, np.int64))
            if slow.any():
                self._learn_steps(sids[slow], ts[slow], values[slow])
        rows = len(self._entity_names)
        if len(self._entity_seen) < rows:
            self._entity_seen = _grown(self._entity_seen, rows - 1, -math.inf)
        log_e = np.empty(len(sids), np.int64)
        log_t = np.empty(len(sids))
        kept, logged = _store_rows(
            sids, ts, values, self._row_entity, self._last, self._entity_seen, log_e, log_t
        )
        if kept == len(sids):
            self.rings.note_many(sids, ts, values)
        elif kept:
            has = ~np.isnan(values)
            self.rings.note_many(sids[has], ts[has], values[has])
        self._seen(log_e[:logged], log_t[:logged])

    def _learn_steps(
        self, sids: NDArray[np.int64], ts: NDArray[np.float64], values: NDArray[np.float64]
    ) -> None:
        """The steps :meth:`add_value` would note for these samples (in time order)."""
        last: dict[int, float] = {}
        for sid, t, v in zip(sids.tolist(), ts.tolist(), values.tolist(), strict=True):
            previous = last.get(sid)
            if previous is None:
                previous = float(self._last[sid])
            if v == v:
                last[sid] = t
            if previous == -math.inf or not t - previous > 0:
                continue
            entity = self._entity_names[int(self._row_entity[sid])]
            steps = self._steps.get(entity)
            if steps is None:
                steps = self._steps[entity] = []
            if len(steps) < _INTERVAL_STEPS:
                self._step(entity, steps, t - previous)

    def _seen(self, entities: NDArray[np.int64], ts: NDArray[np.float64]) -> None:
        """Each entity's new latest scrapes, in order (:func:`_store_rows`), into
        :attr:`last_seen` and :attr:`scrape_log`."""
        names, seen, log = self._entity_names, self.last_seen, self.scrape_log
        for e, t in zip(entities.tolist(), ts.tolist(), strict=True):
            name = names[e]
            seen[name] = t
            if log is not None:
                log.setdefault(name, []).append(t)

    def _entity_seen_at(self, entity: str, ts: float) -> None:
        number = self._entity_number[entity]
        if number >= len(self._entity_seen):
            self._entity_seen = _grown(self._entity_seen, number, -math.inf)
        self._entity_seen[number] = ts

    def _file_row(self, sid: int, entity: str) -> None:
        """Row ``sid`` belongs to ``entity`` (a new entity learns its interval)."""
        number = self._entity_number.get(entity)
        if number is None:
            number = self._entity_number[entity] = len(self._entity_names)
            self._entity_names.append(entity)
            if len(self._steps.get(entity, ())) < _INTERVAL_STEPS:
                self._learning.add(number)
        if sid >= len(self._row_entity):
            self._row_entity = _grown(self._row_entity, sid, 0)
        if sid >= len(self._last):
            self._last = _grown(self._last, sid, -math.inf)
        self._row_entity[sid] = number

    def _new_series(
        self, metric: str, labels: tuple[tuple[str, str], ...], type_: str
    ) -> SeriesState:
        """The state of a series seen for the first time, filed under its entity."""
        named = dict(labels)
        entity = named.get("instance", "")
        state = SeriesState(named, entity, self.rings.new_series())
        self._rows.append(state)
        self._file_row(state.sid, entity)
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

    def entity_clock(self) -> tuple[list[str], NDArray[np.float64], NDArray[np.float64]]:
        """Each entity's name, latest scrape (-inf: none yet) and scrape interval (NaN: not
        known yet), by its number: what the liveness watch looks over every tick."""
        n = len(self._entity_names)
        if len(self._entity_seen) < n:
            self._entity_seen = _grown(self._entity_seen, n - 1, -math.inf)
        if len(self._entity_step) < n:
            self._entity_step = _grown(self._entity_step, n - 1, math.nan)
        return self._entity_names, self._entity_seen[:n], self._entity_step[:n]

    def entity_number(self, entity: str) -> int | None:
        """``entity``'s number (:meth:`entity_clock`); None: no series of it yet."""
        return self._entity_number.get(entity)

    @property
    def series_total(self) -> int:
        """How many series are stored (it only grows)."""
        return len(self._rows)

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
        number = self._entity_number.get(entity)
        if number is None or number >= len(self._entity_step):
            return None
        step = float(self._entity_step[number])
        return None if step != step else step

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


def _grown(rows: NDArray[_T], row: int, fill: float) -> NDArray[_T]:
    """``rows`` with room for ``row`` (doubled at least), new rows ``fill``."""
    extra = max(64, row + 1 - len(rows), len(rows))
    return np.concatenate([rows, np.full(extra, fill, rows.dtype)])


@kernel
def _store_rows(
    sids: NDArray[np.int64], ts: NDArray[np.float64], values: NDArray[np.float64],
    row_entity: NDArray[np.int64], last: NDArray[np.float64], seen: NDArray[np.float64],
    log_e: NDArray[np.int64], log_t: NDArray[np.float64],
) -> tuple[int, int]:  # fmt: skip
    """Samples sorted by time into each series' latest time with a value (``last``) and each
    entity's latest scrape (``seen``); every scrape newer than its entity's latest is logged
    (``log_e``, ``log_t``, in order). Returns how many had a value, and how many logged."""
    kept = 0
    n_log = 0
    for p in range(len(sids)):
        v = values[p]
        if v != v:
            continue
        kept += 1
        s = sids[p]
        t = ts[p]
        last[s] = t
        e = row_entity[s]
        if t > seen[e]:
            seen[e] = t
            log_e[n_log] = e
            log_t[n_log] = t
            n_log += 1
    return kept, n_log


class EntityView:
    """A :class:`knowledge.formula.SelectorSource` for one entity at one time, read from the
    store's rings one selector at a time. The pipeline's KPIs are evaluated by compiled
    programs instead (:mod:`noc_assistant.stream.kpi_program`), which read the same rings
    with the same functions and are tested against this view."""

    __slots__ = ("at", "entity", "extra", "grace_s", "rings", "since", "store", "window_s")

    def __init__(
        self,
        store: SeriesStore,
        entity: str,
        at: float,
        window_s: float,
        extra: Mapping[str, str],
        grace_s: float = 0.0,
        since: float = -math.inf,
    ) -> None:
        self.store = store
        self.rings = store.rings
        self.entity = entity
        self.at = at
        self.window_s = window_s
        self.extra = extra
        self.grace_s = grace_s
        """How long a series may be silent and still count as answering (``present``)."""
        self.since = since
        """The entity's previous evaluation: a counter with nothing newer is late."""

    def _increase(self, states: list[SeriesState]) -> float | None:
        total: float | None = None
        start = self.at - self.window_s
        rings = self.rings
        for st in states:
            if rings.late(st.sid, self.at, self.since, self.grace_s):
                return None  # its last interval is not in yet: a gap, not a low value
            inc = rings.increase(st.sid, start, self.at)
            if inc is not None and math.isnan(inc):
                return None  # a reset the window holds part of: a gap, not a low value
            if inc is not None:
                total = inc if total is None else total + inc
        return total

    def resolve(
        self, fn: str, metric: str, matchers: Mapping[str, str]
    ) -> tuple[list[SeriesState], ...]:
        """The series selector ``fn`` of ``metric`` reads (a histogram mean: its sum and count
        parts, then its ``_sum`` and ``_count`` series); none for ``up()``."""
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

    def select(self, fn: str, metric: str, matchers: Mapping[str, str]) -> float | None:
        found = self.resolve(fn, metric, matchers)
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
        latest = [self.rings.latest(st.sid) for st in found[0]]
        if fn == "present":
            # series silent for longer than the store's horizon (and four windows) are gone
            # (a model swapped under a new label), not a target that stopped answering now
            gone = self.at - max(self.store.horizon_s, 4 * self.window_s)
            times = [ts for ts, _ in latest if ts > gone]
            if not times:
                return None
            # a series answers while it has missed fewer scrapes than the grace allows: at PM
            # periods a window is one interval, and one late or lost file is routine
            since = self.at - max(self.window_s, self.grace_s)
            return sum(1 for ts in times if ts > since) / len(times)
        # gauges: latest value of each matching series that is not stale
        stale_before = self.at - 2 * self.window_s
        values = [v for ts, v in latest if v is not None and ts > stale_before]
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
