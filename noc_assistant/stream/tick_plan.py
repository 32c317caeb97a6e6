"""What the KPI evaluator evaluates: each entity's plan, and a tick's plans joined into one.

An :class:`EntityPlan` holds an entity's KPI series (a KPI and a label group each) and the
program of their formulas (:mod:`~noc_assistant.stream.kpi_program`), made once while the
entity's series stay the same. A :class:`TickPlan` joins the plans of the entities due at a
tick: one program for all their rows, and each series' fixed facts (its key, bad direction,
minimum support, whether it counts events…) as the columns the monitors read
(:class:`~detectors.monitor.Columns`). The evaluator keeps a tick plan while the same
entities come due together, so a tick costs one compiled call and a few array operations,
not a Python object per value.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import numpy.typing as npt

from detectors.monitor import MonitorBank, Slots
from detectors.params import kpi_window_s
from detectors.robust_zscore import Direction
from knowledge.kpis import KpiDef
from noc_assistant.stream.kpi_program import Program

__all__ = ["EntityPlan", "Group", "Key", "Kpi", "TickPlan"]

Group = tuple[tuple[str, str], ...]
"""A label group of a grouped KPI (``group_by``): sorted (label, value) pairs; () for none."""

Key = tuple[str, str]
"""(series id, entity): a KPI series' key in the monitors and the KPI history."""

Kpi = tuple[KpiDef, str | None, bool, list[tuple[Group, Key]]]
"""A KPI of an entity: the KPI, its count unit (``"rate"``, ``"increase"`` or None), whether
it counts subscribers per PLMN, its label groups with their keys."""

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]


@dataclass(eq=False)
class EntityPlan:
    """An entity's KPIs and the program evaluating them (two rows per label group: the value,
    then the support); ``history``: the :class:`~noc_assistant.stream.history.KpiHistory` row
    of each label group, in the program's order; ``zone``: the time zone of its site."""

    entity: str
    kpis: list[Kpi]
    program: Program
    history: I64
    zone: str | None
    _step: float = field(default=np.nan, repr=False)
    _windows: tuple[F64, F64] | None = field(default=None, repr=False)

    def windows_for(self, step: float) -> tuple[F64, F64]:
        """At scrape interval ``step``: each series' KPI window and count scale (its value
        times that is a number of events; 0: not a count), worked out once per interval."""
        if self._windows is None or step != self._step:
            windows: list[float] = []
            scales: list[float] = []
            for kpi, unit, _, groups in self.kpis:
                window = kpi_window_s(step, kpi.window_s)
                scale = 0.0 if unit is None else window if unit == "rate" else 1.0
                windows += [window] * len(groups)
                scales += [scale] * len(groups)
            self._windows = (np.array(windows), np.array(scales))
            self._step = step
        return self._windows


@dataclass(eq=False)
class TickPlan:
    """The plans of a tick's entities joined (:meth:`join`): a row per KPI series, entity
    after entity, each plan's series in its order."""

    plans: list[EntityPlan]
    program: Program
    #: each program row's KPI window (two rows a series: the value, the support)
    windows: F64
    #: the series of each plan
    entity_series: I64
    #: each series' KPI history row, monitor key, and (KPI, entity, label group)
    history: I64
    keys: list[Key]
    where: list[tuple[KpiDef, str, Group]]
    direction: list[Direction]
    min_support: F64
    counts: npt.NDArray[np.bool_]
    proportion: npt.NDArray[np.bool_]
    tz: list[str | None]
    window: F64
    scale: F64
    #: the series checked after the monitors' values are known, in order: (series, the
    #: plan's position, True: a PM-period KPI reading presence (a missed scrape); False: a
    #: count of subscribers per PLMN)
    special: list[tuple[int, int, bool]]
    #: where each series sits in the monitors (kept from tick to tick)
    slots: Slots | None = None

    @classmethod
    def join(cls, plans: Sequence[EntityPlan], step: float) -> TickPlan:
        """The tick plan of ``plans`` at scrape interval ``step``."""
        series_windows: list[F64] = []
        scales: list[F64] = []
        where: list[tuple[KpiDef, str, Group]] = []
        keys: list[Key] = []
        special: list[tuple[int, int, bool]] = []
        for e, plan in enumerate(plans):
            window, scale = plan.windows_for(step)
            series_windows.append(window)
            scales.append(scale)
            for kpi, _, subscribers, groups in plan.kpis:
                for group, key in groups:
                    if kpi.reads_presence:
                        special.append((len(keys), e, True))
                    if subscribers:
                        special.append((len(keys), e, False))
                    where.append((kpi, plan.entity, group))
                    keys.append(key)
        kpis = [kpi for kpi, *_ in where]
        window = _joined(series_windows)
        return cls(
            plans=list(plans),
            program=Program.concat([p.program for p in plans]),
            windows=np.repeat(window, 2),
            entity_series=np.array([len(p.history) for p in plans], np.int64),
            history=np.concatenate([p.history for p in plans]).astype(np.int64),
            keys=keys,
            where=where,
            direction=[k.bad_direction for k in kpis],
            min_support=np.array([k.min_support for k in kpis], np.float64),
            counts=np.array([k.counts_events for k in kpis], np.bool_),
            proportion=np.array([k.proportion for k in kpis], np.bool_),
            tz=[plan.zone for plan in plans for _ in range(len(plan.history))],
            window=window,
            scale=_joined(scales),
            special=special,
        )

    @cached_property
    def series_entity(self) -> I64:
        """Each series' plan (its entity's position)."""
        return np.repeat(np.arange(len(self.plans)), self.entity_series)

    @cached_property
    def row_entity(self) -> I64:
        """Each program row's plan (two rows a series)."""
        return np.repeat(self.series_entity, 2)

    def slots_in(self, monitors: MonitorBank) -> Slots:
        """Where this plan's series sit in ``monitors``, kept while they are the same."""
        if self.slots is None or self.slots.owner is not monitors:
            self.slots = monitors.slots(len(self.keys))
        return self.slots


def _joined(parts: list[F64]) -> F64:
    return np.concatenate([np.zeros(0), *parts]).astype(np.float64)
