"""Each entity's KPIs at its latest scrape, as observations for the monitors.

A :class:`~noc_assistant.stream.pipeline.Pipeline` owns one :class:`KpiEvaluator`: it knows
which KPIs and label groups apply to each entity (by the roles it plays and the metrics it
exports), evaluates them over the entity's own latest scrape, keeps each series' recent values,
and at PM periods notices a scrape missed (:class:`Missed`).

A tick's entities are evaluated together: their programs joined into one
(:class:`~noc_assistant.stream.tick_plan.TickPlan`, kept while the same entities come due with
the same series), one compiled call for every row, and the values handed to the monitors as
columns (:class:`~detectors.monitor.Columns`): no Python object per value.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Iterable, Iterator, Mapping
from functools import lru_cache
from typing import NamedTuple

import numpy as np
from numpy.typing import NDArray

from detectors import MonitorEvent
from detectors.monitor import Columns
from detectors.params import liveness_graces_s
from knowledge.formula import Formula
from knowledge.kpis import KpiDef
from noc_assistant.ingest import SeriesStore
from noc_assistant.ingest.series import EntityView
from noc_assistant.stream.correlate import series_id
from noc_assistant.stream.history import KpiHistory
from noc_assistant.stream.kpi_program import compile_rows
from noc_assistant.stream.liveness import silence
from noc_assistant.stream.tick_plan import EntityPlan, Group, Kpi, TickPlan
from noc_assistant.stream.topology_guess import TopologyGuess, stored_names

__all__ = ["Group", "KpiEvaluator", "Missed", "Tick", "count_unit"]


@lru_cache(maxsize=1024)
def count_unit(formula: str) -> str | None:
    """``"rate"`` or ``"increase"`` when a formula is a number of a counter's events: that
    selector alone, summed (``+``) or chosen (``first``), so its value is a whole count (or one
    over the window); None otherwise (a ratio, a scaled value, a gauge, rates mixed with
    increases). Its series' alarms pass a count gate (:class:`detectors.counts.CountGate`).

    >>> count_unit('first(rate("a"), rate("b"))'), count_unit('increase("a") + increase("b")')
    ('rate', 'increase')
    >>> count_unit('increase("a") / 1000'), count_unit('rate("a") + increase("b")')
    (None, None)
    """
    fns: set[str] = set()

    def walk(node: ast.expr) -> bool:
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            return walk(node.left) and walk(node.right)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id == "first":
                return all(walk(a) for a in node.args)
            if node.func.id in ("rate", "increase"):
                fns.add(node.func.id)
                return True
        return False

    if not walk(ast.parse(formula, mode="eval").body) or len(fns) != 1:
        return None
    return fns.pop()


F64 = NDArray[np.float64]
I64 = NDArray[np.int64]


class Missed(NamedTuple):
    """At PM periods, a series of ``kpi`` on ``entity`` that missed one scrape: evidence
    (``event``)."""

    kpi: KpiDef
    entity: str
    group: Group
    event: MonitorEvent


class Tick(NamedTuple):
    """A tick's values of the entities due (:meth:`KpiEvaluator.evaluate`): ``columns`` for
    the monitors, a row per KPI series of :attr:`plan`; each due entity's scrape time
    (``now``) and liveness grace."""

    plan: TickPlan
    columns: Columns
    now: list[float]
    grace: list[float]


#: what a snapshot of a :class:`KpiEvaluator` leaves out: its caches, and the evaluation
#: times as an array (kept by entity name instead, :attr:`KpiEvaluator._evaluated`)
_NOT_KEPT = ("_plans", "_ticks", "_due", "_sorted", "_last_at")


class KpiEvaluator:
    """The KPIs of ``kpis`` over the series of ``store``, each entity by the roles ``guess``
    says it plays; ``history`` recent values are kept per series."""

    def __init__(
        self,
        kpis: Mapping[str, KpiDef],
        store: SeriesStore,
        guess: TopologyGuess,
        history: int = 480,
    ) -> None:
        self.kpis = kpis
        self.store = store
        self.guess = guess
        self.kpi_history = KpiHistory(history)
        """(series id, entity) → recent (time, value) of every evaluated KPI series."""
        self._history = history
        self._applicable: dict[str, tuple[int, list[KpiDef]]] = {}
        self._evaluated: dict[str, float] = {}
        """entity → the time its KPIs were last evaluated at (its latest scrape then), as a
        snapshot keeps it; read into :attr:`_last_at` (and emptied) on the first tick"""
        self._groups: dict[tuple[str, str], tuple[int, list[Group]]] = {}
        self._plans: dict[str, tuple[int, EntityPlan]] = {}
        self._ticks: dict[tuple[float, ...], TickPlan] = {}
        self._due: dict[tuple[float, int, bytes], TickPlan] = {}
        self._sorted: tuple[int, I64] | None = None
        #: the evaluation times by the store's entity numbers, while running
        self._last_at: F64 | None = None

    def __getstate__(self) -> dict[str, object]:
        """The state without the plans (caches, made again on use), the evaluation times
        by entity name."""
        state = {k: v for k, v in self.__dict__.items() if k not in _NOT_KEPT}
        if self._last_at is not None:
            names = self.store.entity_clock()[0]
            at = self._last_at.tolist()
            state["_evaluated"] = {n: at[e] for e, n in enumerate(names) if at[e] > -math.inf}
        return state

    def __setstate__(self, state: dict[str, object]) -> None:
        """:meth:`restored` from ``state``."""
        self.__dict__.update(state)
        self.restored()

    def restored(self) -> None:
        """Ready to go on after a restore: no plan made yet (they are caches, not state), the
        evaluation times read from :attr:`_evaluated` on the first tick, a snapshot's history
        from before :class:`KpiHistory` (a dict of deques) moved into one."""
        self.forget_plans()
        self._last_at = None
        if not isinstance(self.kpi_history, KpiHistory):
            self.kpi_history = KpiHistory.of(self.kpi_history, self._history)

    def forget_plans(self) -> None:
        """No plan made yet."""
        self._plans = {}
        self._ticks = {}
        self._due = {}
        self._sorted = None

    def kpis_for(self, entity: str) -> list[KpiDef]:
        """The KPIs of the roles ``entity`` plays that read a metric it exports."""
        count = self.store.metric_count(entity)
        cached = self._applicable.get(entity)
        if cached is not None and cached[0] == count:
            return cached[1]
        metrics = self.store.metrics_of(entity)
        played = self.guess.roles(entity, metrics)
        chosen = [
            k
            for k in self.kpis.values()
            if any(k.applies_to(t) for t in played)
            and not stored_names(k.parsed).isdisjoint(metrics)
        ]
        self._applicable[entity] = (len(metrics), chosen)
        return chosen

    def groups_for(self, entity: str, kpi: KpiDef) -> list[Group]:
        """Label groups a grouped KPI (``group_by``) is evaluated for on ``entity``."""
        if not kpi.group_by:
            return [()]
        size = self.store.series_count(entity)
        cached = self._groups.get((entity, kpi.id))
        if cached is not None and cached[0] == size:
            return cached[1]
        groups = sorted(self.store.label_groups(entity, stored_names(kpi.parsed), kpi.group_by))
        self._groups[(entity, kpi.id)] = (size, groups)
        return groups

    def evaluate(self, at: float, step: float, busy: Iterable[str]) -> Tick | None:
        """The KPIs of every entity with a scrape since its last evaluation, each at its
        latest scrape up to ``at`` (None: no entity due), each value kept in
        :attr:`kpi_history`; ``busy``: entities with a series alarming (their values are
        held out of the tails). Missed scrapes are found after, by :meth:`missed`."""
        store = self.store
        names, seen, interval = store.entity_clock()
        order = self._order(names)
        last = self._evaluated_at(names)
        # the entity's own time: its latest scrape (targets are scraped at their own phases;
        # a window ending on the tick would cut its last interval, and its newest sample
        # would wait a tick); nothing new since the last evaluation, nothing to learn
        t = np.minimum(at, seen[order])
        due_mask = t > last[order]  # never seen: -inf
        due = order[due_mask]
        if not len(due):
            return None
        now_e = t[due_mask]
        since_e = last[due]
        last[due] = now_e
        step_e = interval[due]
        grace_e = liveness_graces_s(np.where(np.isnan(step_e), step, step_e))
        held = np.zeros(len(names), np.bool_)
        for e in busy:
            number = store.entity_number(e)
            if number is not None:
                held[number] = True
        tick = self._due_plan(names, due, step)
        at_row = now_e[tick.series_entity]
        rows = tick.row_entity  # two program rows a series
        out, ok = tick.program.run(
            store.rings, tick.windows, now_e[rows], since_e[rows], grace_e[rows]
        )
        valued = ok[::2]
        value = np.where(valued, out[::2], np.nan)
        self.kpi_history.append(tick.history, at_row, value, valued)
        has_support = ok[1::2]
        columns = Columns(
            keys=tick.keys,
            value=value,
            support=out[1::2],
            has_support=has_support,
            direction=tick.direction,
            min_support=tick.min_support,
            counts=tick.counts,
            hold=held[due][tick.series_entity],
            proportion=tick.proportion,
            ts=at_row,
            tz=tick.tz,
            # a number of events (value × scale): its alarms pass a count gate
            count_scale=np.where(has_support, 0.0, tick.scale),
            window_s=tick.window,
        )
        return Tick(tick, columns, now_e.tolist(), grace_e.tolist())

    def missed(self, tick: Tick) -> Iterator[Missed]:
        """The series of ``tick`` that missed one scrape at PM periods, each yielded as it is
        found (the caller acts on it before the next); subscribers per PLMN are counted on
        the way (:meth:`TopologyGuess.count_subscribers`), in the same order."""
        value = tick.columns.value
        counting = self.guess.counts_subscribers
        for row, e, presence in tick.plan.special:
            if not (presence or counting):
                continue
            v = float(value[row])
            if math.isnan(v):
                continue
            kpi, entity, group = tick.plan.where[row]
            if not presence:
                self.guess.count_subscribers(kpi, entity, group, v)
                continue
            window = float(tick.columns.window_s[row])
            if window < tick.grace[e]:
                event = self._missed_scrape(kpi, entity, group, tick.now[e], window, v)
                if event is not None:
                    yield Missed(kpi, entity, group, event)

    def _order(self, names: list[str]) -> I64:
        """The numbers of the entities ``names`` (the store's, by number) sorted by name,
        the nameless left out; made again when an entity is added."""
        if self._sorted is None or self._sorted[0] != len(names):
            order = sorted((n, e) for e, n in enumerate(names) if n)
            self._sorted = (len(names), np.array([e for _, e in order], np.int64))
        return self._sorted[1]

    def _evaluated_at(self, names: list[str]) -> F64:
        """When each entity (by number) was last evaluated (-inf: never), with room for
        ``names``: :attr:`_evaluated` as an array, kept from one tick to the next."""
        at = self._last_at
        if at is None:  # new, or restored: the snapshot keeps the times by entity name
            at = np.array([self._evaluated.get(n, -math.inf) for n in names], np.float64)
            self._evaluated = {}  # the array holds them from now on
        elif len(at) < len(names):
            at = np.concatenate([at, np.full(len(names) - len(at), -math.inf)])
        self._last_at = at
        return at

    def _due_plan(self, names: list[str], due: I64, step: float) -> TickPlan:
        """The tick plan of the entities ``due`` (numbers, sorted by name), kept while the
        same entities come due and no series is added (then no entity's plan changed)."""
        key = (step, self.store.series_total, due.tobytes())
        found = self._due.get(key)
        if found is None:
            if len(self._due) >= 32:
                self._due.clear()
            plans = [self._plan(names[e]) for e in due.tolist()]
            found = self._due[key] = self._tick_plan(plans, step)
        return found

    def _tick_plan(self, plans: list[EntityPlan], step: float) -> TickPlan:
        """The joined plan of ``plans`` at scrape interval ``step``, made once while the same
        plans come due together (a few sets alternate where entities scrape at different
        intervals)."""
        key = (step, *map(id, plans))  # the tick plan holds its plans: no id is reused
        found = self._ticks.get(key)
        if found is None:
            if len(self._ticks) >= 32:
                self._ticks.clear()
            found = self._ticks[key] = TickPlan.join(plans, step)
        return found

    def _plan(self, entity: str) -> EntityPlan:
        """What :meth:`evaluate` evaluates on ``entity``, worked out once while its series
        stay the same: each KPI, its count unit (:func:`count_unit`), whether it counts
        subscribers per PLMN, and its label groups with their series keys; and the program
        of their formulas over the series they read
        (:mod:`~noc_assistant.stream.kpi_program`)."""
        count = self.store.series_count(entity)
        cached = self._plans.get(entity)
        if cached is not None and cached[0] == count:
            return cached[1]
        kpis: list[Kpi] = []
        views: list[EntityView] = []
        formulas: list[tuple[Formula, Formula | None]] = []
        for kpi in self.kpis_for(entity):
            groups = self.groups_for(entity, kpi)
            for g in groups:
                views.append(EntityView(self.store, entity, 0.0, 0.0, dict(g)))
                formulas.append((kpi.parsed, kpi.parsed_support))
            subscribers = kpi.unit == "count" and "plmnid" in kpi.group_by
            keyed = [(g, (series_id(kpi.id, g), entity)) for g in groups]
            kpis.append((kpi, count_unit(kpi.formula), subscribers, keyed))
        rows = [self.kpi_history.row(key) for *_, groups in kpis for _, key in groups]
        topology = self.guess.topology
        plan = EntityPlan(
            entity,
            kpis,
            compile_rows(views, formulas),
            np.array(rows, np.int64),
            None if topology is None else topology.zone_of(entity),
        )
        self._plans[entity] = (count, plan)
        return plan

    def _missed_scrape(
        self, kpi: KpiDef, entity: str, group: Group, now: float, window: float, value: float
    ) -> MonitorEvent | None:
        """At PM periods (a KPI window shorter than the liveness grace) a series that missed
        one scrape still counts as ``present`` (routine for a flaky exporter, so no page), but
        may be the only trace of an engine that hung for a few minutes: evidence for an
        incident it joins (``Finding.evidence_only``). None: no scrape missed, or the value
        without the gap is not worse."""
        bare = kpi.parsed.evaluate(self.store.view(entity, now, window, dict(group)))
        if bare is None or bare == value:
            return None
        if kpi.bad_direction != "both" and (bare < value) != (kpi.bad_direction == "down"):
            return None
        return silence(now, bare, value, 1.0)
