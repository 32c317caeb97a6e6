"""Each entity's KPIs at its latest scrape, as observations for the monitors.

A :class:`~noc_assistant.stream.pipeline.Pipeline` owns one :class:`KpiEvaluator`: it knows
which KPIs and label groups apply to each entity (by the roles it plays and the metrics it
exports), evaluates them over the entity's own latest scrape, keeps each series' recent values,
and at PM periods notices a scrape missed (:class:`Missed`).
"""

from __future__ import annotations

import ast
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from detectors import MonitorEvent, Observation
from detectors.params import kpi_window_s, liveness_grace_s
from knowledge.formula import Formula
from knowledge.kpis import KpiDef
from noc_assistant.ingest import SeriesStore
from noc_assistant.ingest.series import EntityView
from noc_assistant.stream.correlate import series_id
from noc_assistant.stream.history import KpiHistory
from noc_assistant.stream.kpi_program import Program, compile_rows
from noc_assistant.stream.liveness import silence
from noc_assistant.stream.topology_guess import TopologyGuess, stored_names

__all__ = ["Group", "KpiEvaluator", "Missed", "Observed", "count_unit"]

Group = tuple[tuple[str, str], ...]
"""A label group of a grouped KPI (``group_by``): sorted (label, value) pairs; () for none."""


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


class Observed(NamedTuple):
    """A value of ``kpi`` (for label group ``group``) for the monitors."""

    kpi: KpiDef
    group: Group
    observation: Observation


class Missed(NamedTuple):
    """At PM periods, a series of ``kpi`` that missed one scrape: evidence (``event``)."""

    kpi: KpiDef
    group: Group
    event: MonitorEvent


_Kpi = tuple[KpiDef, str | None, bool, list[tuple[Group, tuple[str, str]]]]
"""A KPI of an entity as :meth:`KpiEvaluator.observe` evaluates it (:meth:`KpiEvaluator._plan`):
the KPI, its count unit, whether it counts subscribers, its label groups with their keys."""


@dataclass
class _Plan:
    """An entity's KPIs and the program evaluating them (two rows per label group: the
    value, then the support), with its rows' windows for the latest scrape interval."""

    kpis: list[_Kpi]
    program: Program
    history: npt.NDArray[np.int64]
    """The :class:`KpiHistory` row of each label group, in the program's order."""
    step: float = math.nan
    windows: tuple[npt.NDArray[np.float64], list[tuple[float, float]]] | None = None

    def windows_for(self, step: float) -> tuple[npt.NDArray[np.float64], list[tuple[float, float]]]:
        """Each row's KPI window for the scrape interval ``step``, and each KPI's window and
        count scale (:func:`count_unit`), worked out once per interval."""
        if self.windows is None or step != self.step:
            per_kpi: list[tuple[float, float]] = []
            per_row: list[float] = []
            for kpi, unit, _, groups in self.kpis:
                window = kpi_window_s(step, kpi.window_s)
                scale = 0.0 if unit is None else window if unit == "rate" else 1.0
                per_kpi.append((window, scale))
                per_row += [window] * (2 * len(groups))
            self.windows, self.step = (np.array(per_row, np.float64), per_kpi), step
        return self.windows


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
        """entity → the time its KPIs were last evaluated at (its latest scrape then)"""
        self._groups: dict[tuple[str, str], tuple[int, list[Group]]] = {}
        self._plans: dict[str, tuple[int, _Plan]] = {}

    def __getstate__(self) -> dict[str, object]:
        """The state without the plans (a cache, made again on use)."""
        return {k: v for k, v in self.__dict__.items() if k != "_plans"}

    def __setstate__(self, state: dict[str, object]) -> None:
        """Restored with no plan made yet; a snapshot's history from before
        :class:`KpiHistory` (a dict of deques) moved into one."""
        self.__dict__.update(state)
        self._plans = {}
        self.adopt_history()

    def adopt_history(self) -> None:
        """The history in a :class:`KpiHistory` if a snapshot held it as a dict of deques."""
        if not isinstance(self.kpi_history, KpiHistory):
            self.kpi_history = KpiHistory.of(self.kpi_history, self._history)

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

    def observe(
        self, entity: str, at: float, step: float, busy: bool
    ) -> Iterator[Observed | Missed]:
        """The observations of ``entity``'s KPIs at its latest scrape up to ``at`` (none if
        nothing new came since its last evaluation), each value kept in :attr:`kpi_history`;
        ``busy``: another series of the entity is alarming. A missed scrape is yielded as it
        is found (the caller acts on it before the next is evaluated)."""
        seen = self.store.last_seen.get(entity)
        if not entity or seen is None:
            return
        # the entity's own time: its latest scrape (targets are scraped at their own
        # phases; a window ending on the tick would cut its last interval, and its newest
        # sample would wait a tick); nothing new since the last evaluation, nothing to learn
        now = min(at, seen)
        since = self._evaluated.get(entity, -math.inf)
        if now <= since:
            return
        self._evaluated[entity] = now
        store = self.store
        grace = liveness_grace_s(store.entity_interval(entity) or step)
        topology = self.guess.topology
        zone = None if topology is None else topology.zone_of(entity)
        plan = self._plan(entity)
        windows, per_kpi = plan.windows_for(step)
        out, ok = plan.program.run(store.rings, windows, now, since, grace)
        valued = ok[::2]
        self.kpi_history.append(plan.history[valued], now, out[::2][valued])
        values, has = out.tolist(), ok.tolist()
        row = 0
        for (kpi, _, subscribers, groups), (window, scale) in zip(plan.kpis, per_kpi, strict=True):
            for group, key in groups:
                if not has[row]:
                    row += 2
                    continue
                value = values[row]
                support = values[row + 1] if has[row + 1] else None
                row += 2
                if kpi.reads_presence and window < grace:
                    missed = self._missed_scrape(kpi, entity, group, now, window, value)
                    if missed is not None:
                        yield Missed(kpi, group, missed)
                if subscribers:
                    self.guess.count_subscribers(kpi, entity, group, value)
                # a number of events (value × scale): its alarms pass a count gate
                ob = Observation(
                    key=key,
                    value=value,
                    support=support,
                    bad_direction=kpi.bad_direction,
                    min_support=kpi.min_support,
                    counts=kpi.counts_events,
                    hold=busy,
                    proportion=kpi.proportion,
                    ts=now,
                    tz=zone,
                    count_scale=0.0 if support is not None else scale,
                    window_s=window,
                )
                yield Observed(kpi, group, ob)

    def _plan(self, entity: str) -> _Plan:
        """What :meth:`observe` evaluates on ``entity``, worked out once while its series
        stay the same: each KPI, its count unit (:func:`count_unit`), whether it counts
        subscribers per PLMN, and its label groups with their series keys; and the program
        of their formulas over the series they read
        (:mod:`~noc_assistant.stream.kpi_program`)."""
        count = self.store.series_count(entity)
        cached = self._plans.get(entity)
        if cached is not None and cached[0] == count:
            return cached[1]
        kpis: list[_Kpi] = []
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
        plan = _Plan(kpis, compile_rows(views, formulas), np.array(rows, np.int64))
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
