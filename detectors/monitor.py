"""One KPI series watched end to end: ensemble score → calibrated alarm transitions.

The pipeline owns one :class:`SeriesMonitor` per (KPI, entity) and feeds it every derived
value. Values backed by too few events (``support < min_support``) and gaps are neither learnt
nor scored: a ratio of tiny counts is noise, and a missing sample is not a zero.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from detectors.ensemble import MEMBERS, Ensemble

__all__ = ["MonitorEvent", "SeriesMonitor"]


@dataclass(frozen=True)
class MonitorEvent:
    """An alarm transition of one series."""

    kind: Literal["open", "close"]
    ts: float
    score: float
    observed: float
    expected_low: float
    expected_high: float
    direction: Literal["up", "down", "both"]
    detector: str


class SeriesMonitor:
    """Score one KPI series with the label-free :class:`~detectors.ensemble.Ensemble` and raise /
    clear alarms within a false-alarm budget.

    ``target_rate`` is the budget of false alarms per series-day on stationary data; the bars
    follow from it and the scrape interval, which is inferred from ``ts`` (see
    :class:`~detectors.ensemble.Ensemble`). The warm-up is ``warmup`` scored values, or
    ``warmup_s`` seconds of them when ``warmup`` is None; nothing alarms before it ends.
    ``min_effect`` (relative to the expected value) and ``min_abs_effect`` (in KPI units, e.g.
    ``0.02`` for a success ratio) set the smallest deviation worth a page. A peak beyond
    ``warmup_outlier`` × the iid bar during the warm-up is taken for an incident, not for a
    normal peak (a PFCP association lost or an NRF failing in the first hour must not blind the
    series for good). ``score`` in events is the ensemble ratio (1 = at the bar).

    >>> mon = SeriesMonitor(bad_direction="down", warmup=100)
    >>> events = [mon.observe(60.0 * t, 0.99 + 0.001 * (t % 3)) for t in range(300)]
    >>> [e for e in events if e is not None]
    []
    >>> events = [mon.observe(60.0 * (300 + t), 0.5) for t in range(3)]
    >>> [(e.kind, e.direction) for e in events if e is not None]
    [('open', 'down')]
    >>> mon.firing
    True
    """

    detector_id = "ensemble"

    def __init__(
        self,
        bad_direction: Literal["up", "down", "both"] = "both",
        min_support: float = 0.0,
        *,
        target_rate: float = 0.005,
        min_effect: float = 0.01,
        min_abs_effect: float = 0.0,
        min_duration: int = 2,
        clear_after: int = 4,
        refractory: int = 0,
        warmup: int | None = None,
        warmup_s: float = 3600.0,
        period: float = 86400.0,
        shift_gate: float = 0.5,
        shift_share: float = 0.5,
        warmup_outlier: float = 4.0,
    ) -> None:
        self.bad_direction = bad_direction
        self.min_support = min_support
        self.target_rate = target_rate
        self.min_effect = min_effect
        self.min_abs_effect = min_abs_effect
        self.min_duration = min_duration
        self.clear_after = clear_after
        self.refractory = refractory
        self.warmup = warmup
        self.warmup_s = warmup_s
        self.period = period
        self.shift_gate = shift_gate
        self.shift_share = shift_share
        self.warmup_outlier = warmup_outlier
        self.ensemble_ = Ensemble(
            bad_direction=bad_direction,
            target_rate=target_rate,
            min_effect=min_effect,
            min_abs_effect=min_abs_effect,
            warmup=warmup,
            warmup_s=warmup_s,
            min_duration=min_duration,
            clear_after=clear_after,
            refractory=refractory,
            period=period,
            shift_gate=shift_gate,
            shift_share=shift_share,
            warmup_outlier=warmup_outlier,
        )

    @property
    def firing(self) -> bool:
        return self.ensemble_.firing

    def observe(
        self, ts: float, value: float | None, support: float | None = None
    ) -> MonitorEvent | None:
        """Feed one derived value; return an event when the alarm opens or closes."""
        if value is None or math.isnan(value):
            return None
        if support is not None and support < self.min_support:
            return None
        ens = self.ensemble_
        transition = ens.update(value, ts, support)
        if transition is None:
            return None
        k = ens.bars_[0] if math.isfinite(ens.bars_[0]) else 0.0
        mid = ens.expected_
        low, high = mid - k * ens.scale_, mid + k * ens.scale_
        direction: Literal["up", "down", "both"] = "up" if value > mid else "down"
        member = max(range(len(ens.ratios_)), key=lambda i: ens.ratios_[i])
        return MonitorEvent(
            kind=transition,
            ts=ts,
            score=ens.score_,
            observed=value,
            expected_low=low,
            expected_high=high,
            direction=direction,
            detector=f"{self.detector_id}:{MEMBERS[member]}",
        )
