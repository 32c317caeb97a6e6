"""The parameters :class:`~detectors.ensemble.Ensemble` and :class:`~detectors.bank.EnsembleBank`
share: one definition, one set of defaults (the bank is tested equal to one ensemble per
series, so the two must never drift apart). Both classes are keyword-only dataclasses built on
:class:`EnsembleParams`; each adds its own ``warmup`` (the bank's may be one per series) and
the bank its size and dtype. The meaning of each parameter is documented on
:class:`~detectors.ensemble.Ensemble`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from detectors import _bank_kernel_state as layout
from detectors.robust_zscore import Direction

__all__ = [
    "GRACE_CLIP_AFTER",
    "KPI_WINDOW_CAP_S",
    "PM_PERIOD_S",
    "RESOLUTION_MIN_COUNT",
    "RESOLUTION_TO_SIGMA",
    "STEP_MOVE",
    "STEP_RATE",
    "EnsembleParams",
    "kpi_window_s",
    "liveness_grace_s",
    "monitor_alpha",
    "monitor_min_duration",
    "resolution",
    "resolution_floor",
]

#: The scrape interval is a streaming median of the timestamp steps: each positive step moves
#: the estimate by the factor ``1 ± STEP_RATE`` towards it (a single short or long step, a
#: gap or a duplicate barely moves it; NAB's irregular files have one 60 s step among 5-min
#: ones). The interval the bars use follows the estimate once it is ``STEP_MOVE`` away.
STEP_RATE = 0.02
STEP_MOVE = 0.05

#: the scale of a quantised series is at least its resolution (the smallest change between two
#: consecutive values, seen at least RESOLUTION_MIN_COUNT times in the warm-up, or at any time
#: with ``EnsembleParams.resolution_always``) over √12, the standard deviation of rounding
#: noise (Sheppard): otherwise a series that is mostly one value
#: (a counter of rare errors, 0 most of the time) has a robust scale of 0, every 1 is an
#: infinite z, and the Huber clipping at CLIP scales keeps the scale at 0 for good. The count
#: keeps one incident in the warm-up (a constant gauge that dropped once: two steps) from
#: becoming the resolution; learning it in the warm-up only keeps recurring incidents (an Xid
#: code that comes back every few days, its steps seen while the alarm had already closed) from
#: teaching it later. Without ``resolution_always``, a series constant through its warm-up has
#: no resolution.
RESOLUTION_TO_SIGMA = 1.0 / math.sqrt(12.0)
RESOLUTION_MIN_COUNT = 8.0

#: Values learnt unclipped at the start of a series; from then on, up to the end of the grace,
#: the level's updates are clipped at ``EnsembleParams.grace_clip`` scales (see
#: :class:`~detectors.robust_zscore.RobustZScore`).
GRACE_CLIP_AFTER = 8

#: The spread member (``EnsembleParams.spread_share``): |z| clipped here before its short
#: EWMA, whose slow mean and variance start from a standard Gaussian's E|z| = √(2/π) and
#: Var|z| = 1 − 2/π (the spread of one |z|, so the young member is cautious).
SPREAD_Z_CLIP = 6.0
SPREAD_MEAN0 = math.sqrt(2.0 / math.pi)
SPREAD_VAR0 = 1.0 - 2.0 / math.pi


#: A scrape interval at least this long is a PM reporting period (3GPP TS 32.401/28.550: 5 or
#: 15 min), where one sample already aggregates the whole period: see :func:`kpi_window_s` and
#: :func:`monitor_min_duration`.
PM_PERIOD_S = 300.0
#: The longest default KPI window for fast scrapes (4 intervals up to this).
KPI_WINDOW_CAP_S = 300.0


def kpi_window_s(step: float, own: float | None = None) -> float:
    """Window of a KPI's ``increase``/``rate`` at scrape interval ``step``: the KPI's ``own``
    window when it has one, else four intervals (robust to a missed or late scrape at
    15-60 s), at most :data:`KPI_WINDOW_CAP_S`; never less than one interval. Four 15-min PM
    periods would spread a 15-min fault over an hour and dilute it fourfold; a window shorter
    than the interval would count two thirds of a 15-min period's events (a 10-min window)
    and make a ratio's support fractional, which hides that it is a share of events.

    >>> [kpi_window_s(s) for s in (15.0, 60.0, 120.0, 300.0, 900.0)]
    [60.0, 240.0, 300.0, 300.0, 900.0]
    >>> kpi_window_s(15.0, 600.0), kpi_window_s(900.0, 600.0)
    (600.0, 900.0)
    """
    if own:
        return max(step, own)
    return max(step, min(4.0 * step, KPI_WINDOW_CAP_S))


#: A series or a whole entity is silent (``present()`` below 1, ``up()`` 0: Prometheus'
#: ``up == 0``) once it has missed this many scrapes in a row. One late or lost scrape is
#: routine, at PM periods too (a late file); two in a row are not ...
LIVENESS_MISSED = 2
#: ... and not before this long (a scrape of a few seconds would page on a pause of a process)
LIVENESS_MIN_S = 30.0


def liveness_grace_s(step: float, *, on_clock: bool = False) -> float:
    """How long a series (or a whole entity) scraped every ``step`` seconds may send nothing
    and still count as answering, at least :data:`LIVENESS_MIN_S`. Judged at a scrape of its
    own entity (``present()``: the time since its last sample is a whole number of intervals)
    it is silent once :data:`LIVENESS_MISSED` scrapes are missing, half an interval before
    the next is due; judged ``on_clock`` (``up()``: an entity that sends nothing has no scrape
    to be judged at, and ticks fall anywhere between its scrapes), half an interval after the
    last missing one was due (jitter). A rule, not a learnt statistic: a target that stops
    answering is a fault the first time, also one that dies before any baseline is learnt,
    and an exporter that drops single scrapes pages nobody.

    >>> [liveness_grace_s(s) for s in (15.0, 60.0, 300.0, 900.0)]
    [30.0, 90.0, 450.0, 1350.0]
    >>> [liveness_grace_s(s, on_clock=True) for s in (5.0, 15.0, 300.0, 900.0)]
    [30.0, 37.5, 750.0, 2250.0]
    """
    return max(_missed(on_clock) * step, LIVENESS_MIN_S)


def _missed(on_clock: bool) -> float:
    """Intervals of silence :func:`liveness_grace_s` allows (see there)."""
    return LIVENESS_MISSED + (0.5 if on_clock else -0.5)


def liveness_graces_s(
    steps: npt.NDArray[np.float64], *, on_clock: bool = False
) -> npt.NDArray[np.float64]:
    """:func:`liveness_grace_s` of each of ``steps`` (NaN stays NaN), the same numbers.

    >>> steps = [5.0, 15.0, 300.0, 900.0]
    >>> liveness_graces_s(np.array(steps + [np.nan]), on_clock=True).tolist()[:4] == [
    ...     liveness_grace_s(s, on_clock=True) for s in steps]
    True
    """
    return np.maximum(_missed(on_clock) * steps, LIVENESS_MIN_S)


def monitor_min_duration(step: float, default: int = 2) -> int:
    """Samples over the bar before a KPI monitor pages: ``default`` (2) for scrapes, 1 for PM
    periods (:data:`PM_PERIOD_S` and longer: two 15-min periods are 30 min of confirmation,
    longer than most incidents).

    >>> monitor_min_duration(15.0), monitor_min_duration(900.0)
    (2, 1)
    """
    return 1 if step >= PM_PERIOD_S else default


#: The most time (s) a NOC monitor's grace or its warm-up may take (:func:`monitor_settle`).
SETTLE_MAX_S = 6 * 3600.0


def monitor_settle(step: float, default: int = 12, least: int = 6) -> int:
    """Values in a KPI monitor's grace, and the fewest in its warm-up, at interval ``step``:
    ``default`` (12), but no longer than :data:`SETTLE_MAX_S` and no fewer than ``least``.
    At 60-min PM periods 12 + 12 values were a day of blindness, and the faults of a
    deployment's first day went unseen; 6 + 6 hourly values (half a day) found more and paged
    no more on two tuning seeds (bench/detectors_notes.md, eighth session). Up to 30-min
    periods nothing changes.

    >>> [monitor_settle(s) for s in (15.0, 900.0, 1800.0, 2700.0, 3600.0, 86400.0)]
    [12, 12, 12, 8, 6, 6]
    """
    return max(least, min(default, round(SETTLE_MAX_S / step)))


#: Time constant (s) the NOC monitor's level keeps at long intervals (:func:`monitor_alpha`).
LEVEL_TAU_S = 7200.0


def monitor_alpha(step: float, default: float = 0.02, tau_s: float = LEVEL_TAU_S) -> float:
    """EW rate of a KPI monitor's level and scale at scrape interval ``step``: ``default`` per
    value, but at least the rate whose time constant is ``tau_s`` (:data:`LEVEL_TAU_S`). At
    0.02 per value the level's memory is 50 values: 12.5 min at 15 s, but 8 h at 10-min and
    12.5 h at 15-min periods, too slow to follow the daily swing of a busy KPI before its daily
    profile is learnt (two days), so that swing paged.

    >>> [round(monitor_alpha(s), 4) for s in (15.0, 60.0, 300.0, 600.0, 900.0)]
    [0.02, 0.02, 0.0408, 0.08, 0.1175]
    """
    return max(default, 1.0 - math.exp(-step / tau_s))


def resolution(step: float, res: float, count: float) -> tuple[float, float]:
    """The smallest non-zero ``step`` seen so far (``res``, 0 while none) and how often it was
    seen (``count``): a step within 1e-6 of it counts, a smaller one starts over, NaN (the
    first value has no step) is ignored.

    >>> res, n = 0.0, 0.0
    >>> for step in (float("nan"), 0.0, 2.0, 1.0, 1.0, 3.0, 1.0000000001):
    ...     res, n = resolution(step, res, n)
    >>> res, n
    (1.0, 3.0)
    """
    if not step > 0.0:
        return res, count
    if res > 0.0 and abs(step - res) <= 1e-6 * res:
        return res, count + 1.0
    if res == 0.0 or step < res:
        return step, 1.0
    return res, count


def resolution_floor(res: float, count: float) -> float:
    """Floor of the scale from the resolution ``res`` seen ``count`` times: its rounding noise
    ``res / √12`` once seen :data:`RESOLUTION_MIN_COUNT` times, 0 before.

    >>> resolution_floor(1.0, 7.0), round(resolution_floor(1.0, 8.0), 4)
    (0.0, 0.2887)
    """
    return RESOLUTION_TO_SIGMA * res if count >= RESOLUTION_MIN_COUNT else 0.0


@dataclass(kw_only=True, eq=False)
class EnsembleParams:
    """Shared ensemble parameters (keyword-only).

    >>> p = EnsembleParams(target_rate=0.01)
    >>> p.target_rate, p.min_duration, p.bad_direction
    (0.01, 2, 'both')
    """

    #: which side is bad: ``"up"``, ``"down"`` or ``"both"``
    bad_direction: Direction = "both"
    #: false-alarm budget per series-day, turned into a per-sample risk with the interval
    target_rate: float = 0.005
    #: scrape interval (s) assumed until timestamps show the real one (see ``STEP_RATE``)
    interval: float = 60.0
    #: EW rate of the robust level and scale, and values before the level is trusted
    alpha: float = 0.02
    grace: int = 30
    #: clip of the level's updates, in scales, in the grace (after :data:`GRACE_CLIP_AFTER`
    #: values): inf learns every grace value as it comes
    grace_clip: float = math.inf
    #: CUSUM allowance (in z) of the shift member
    shift_k: float = 0.5
    #: clip of the z fed to the CUSUM
    z_clip: float = 4.0
    #: EW rate and cap of the lag-1 autocorrelation that deflates the CUSUM
    rho_alpha: float = 0.005
    rho_max: float = 0.9
    #: daily profile: period (s), bins, EW rate per bin (also the weekly profile's)
    period: float = 86400.0
    n_bins: int = 48
    seasonal_alpha: float = 0.2
    #: weekly profile: period (s), bins (0 switches it off) and the periods a bin must have
    #: been seen in (today counted) before it is used; same EW rate per bin
    week_period: float = 7 * 86400.0
    week_bins: int = 168
    week_min: int = 3
    #: day-type profile: the daily profile's bins kept apart for working days and the
    #: ``weekend`` days (Monday 0 … Sunday 6), mature by the second weekend day where the
    #: weekly profile needs ``week_min`` weeks. A finer model fits noise too: it is the point
    #: member's reference only where its series-wide deviation is under ``day_type_margin`` ×
    #: the best other reference's.
    day_types: bool = True
    weekend: tuple[int, ...] = (5, 6)
    day_type_margin: float = 0.8
    #: the network's local time, which every profile's bins, days and weekend follow
    #: (:class:`detectors.clock.LocalClock`): the IANA zone ``tz`` (daylight saving included),
    #: or without it a fixed ``utc_offset`` in seconds east of UTC
    tz: str | None = None
    utc_offset: float = 0.0
    #: warm-up in seconds when ``warmup`` is None, and its floor in values
    warmup_s: float = 3600.0
    min_warmup: int = 30
    #: SPOT tails: start (in member score), cap of the shape, quiet time before a peak counts
    tail_start: float = 2.0
    xi_max: float = 0.5
    tail_lag_s: float = 1800.0
    #: practical effect: relative and absolute minimum deviation that may score
    min_effect: float = 0.01
    min_abs_effect: float = 0.0
    #: the ensemble score is the ``votes``-th largest member ratio
    votes: int = 1
    #: alerter: minimum duration, clear-after, release ratio, burst, refractory (in values)
    min_duration: int = 2
    clear_after: int = 4
    release: float = 0.5
    burst: float = math.inf
    refractory: int = 0
    #: the shift member counts only while the point ratio is at least ``shift_gate``
    shift_gate: float = 0.5
    #: share of the risk budget given to the shift member
    shift_share: float = 0.5
    #: share of the risk budget given to the spread member (0: off, as in the NOC): the short
    #: EWMA (``spread_alpha`` per value) of the point member's |z| (clipped at
    #: :data:`SPREAD_Z_CLIP`), standardised by its slow normal-time mean and spread (learnt at
    #: ``spread_slow`` per value from the Gaussian's, :data:`SPREAD_MEAN0` and
    #: :data:`SPREAD_VAR0`): a series whose noise grows (a pattern breaking up, a host
    #: thrashing) with no one value far enough off its reference to page
    spread_share: float = 0.0
    spread_alpha: float = 1.0 / 12.0
    spread_slow: float = 0.002
    #: warm-up peaks beyond this multiple of the iid bar are not learnt as normal
    warmup_outlier: float = math.inf
    #: ... and page: the point member's bar in the warm-up (after the grace) is
    #: ``warmup_outlier`` × its iid bar instead of none, so a gross fault in the first hour
    #: (a PFCP association lost, an error share from 0 to a half) is seen, not only kept out
    #: of the tails. Off here (NAB's probation is scored by no one); on in the NOC monitor.
    warmup_alarm: bool = False
    #: learn the resolution (:data:`RESOLUTION_TO_SIGMA`) at every step, alarms included, not
    #: only in the warm-up: for counts of events (a counter's increase or rate), where a
    #: series quiet through its warm-up that later ticks now and then is routine, not a new
    #: incident each time. Off for states and codes (peers up, an Xid number), whose every
    #: change is news however often it recurs.
    resolution_always: bool = False
    #: the daily and the weekly profile follow a steady trend
    #: (:meth:`detectors.seasonal.SeasonalProfile.trend`)
    follow_trend: bool = True
    week_follow_trend: bool = True

    def __post_init__(self) -> None:
        """Refuse settings the detectors cannot honour, naming the field.

        >>> EnsembleParams(shift_share=0.6, spread_share=0.4)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: shift_share + spread_share must be under 1 (...), got 0.6 + 0.4
        """
        for name in ("shift_share", "spread_share"):
            share = getattr(self, name)
            if not 0.0 <= share < 1.0:
                raise ValueError(f"{name} must be in [0, 1), got {share}")
        if self.shift_share + self.spread_share >= 1.0:
            raise ValueError(
                "shift_share + spread_share must be under 1 (the point member keeps the rest"
                f" of the risk), got {self.shift_share} + {self.spread_share}"
            )
        for name in ("alpha", "seasonal_alpha", "rho_alpha", "spread_alpha", "spread_slow"):
            rate = getattr(self, name)
            if not 0.0 < rate <= 1.0:
                raise ValueError(f"{name} must be in (0, 1], got {rate}")
        # a profile bin keeps its day count to ``layout.DAYS_CAP`` (``detectors.bank``): where
        # it stops, the count must no longer matter (the learning rate is alpha, the bin mature)
        cap = int(layout.DAYS_CAP)
        if self.seasonal_alpha < 1.0 / (cap + 1) or self.week_min > cap:
            raise ValueError(
                f"seasonal_alpha must be at least 1/{cap + 1} and week_min at most {cap} (a"
                f" profile bin counts days to {cap}), got {self.seasonal_alpha} and"
                f" {self.week_min}"
            )
        for name in ("target_rate", "interval", "period"):
            value = getattr(self, name)
            if not (value > 0.0 and math.isfinite(value)):
                raise ValueError(f"{name} must be positive and finite, got {value}")
        if self.bad_direction not in ("up", "down", "both"):
            raise ValueError(f"bad_direction must be up, down or both, got {self.bad_direction!r}")
        for name in ("min_duration", "votes", "n_bins"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
