"""Counts of events: the chance of ``k`` events in a KPI window under the learnt rate.

A cumulative counter that is zero most minutes and now and then moves by one (GPU
preemptions on a quiet server at night, a rare protocol error) is a poor fit for a z-score:
its robust scale is a fraction of one event, and a single event reads as many scales off.
Its natural model is a count: ``K`` events per window, Poisson with the learnt rate, or
negative binomial when the counts vary more than a Poisson's (events come in clusters), so
that one event on a quiet counter is routine while a burst is not.

:class:`CountGate` learns that rate and judges the alarms of the
:class:`~detectors.monitor.SeriesMonitor` (or :class:`~detectors.monitor.MonitorBank`) of a
*sparse count series*: values that are whole, non-negative numbers of events (a counter's
``increase``, or its ``rate`` times the window) with a learnt mean of at most
:data:`SPARSE_MEAN` events per window. An alarm of such a series is shown only while the
tail probability of the observed count is below the per-sample risk of the false-alarm
budget, the same rule the ensemble's bars follow (:func:`detectors.spot.risk_per_sample`:
``target_rate`` alarms per series-day times the scrape interval over a day). The gate can
only withhold alarms, so the series keeps at most the ensemble's false-alarm rate and at most
the count test's; a series that is not a sparse count is not touched.

**The rate.** The mean count per window is an exponentially weighted mean with time
constant :data:`RATE_TAU_S` (a day), each value weighted by the share of a window that is new
since the last (consecutive windows overlap at fast scrapes: one event is in four of them).
Its uncertainty is that of a Gamma posterior with :data:`PRIOR_EVENTS` events in
:data:`PRIOR_WINDOWS` windows as prior (a counter silent for a day has not shown a rate of
zero, and its first event is not news), and the over-dispersion is the learnt
variance-to-mean ratio of the counts (at least 1). The predictive count is negative binomial
with that mean and variance (Poisson where they agree). A count beyond the bar is learnt as
the bar's count (clipped, as the ensemble's level clips its updates): a burst does not
inflate the rate it is tested against, and a sustained rise is still learnt, bar by bar.

The count test only sees one window: a ×10 rise of a counter that ticks once in three hours
(one event in 18 minutes) has no window with a burst and stays unseen; a rise of a counter
with about one event per window is found (tests/detectors/test_counts.py).
"""

from __future__ import annotations

import math
from typing import Literal

from detectors.params import STEP_MOVE, STEP_RATE
from detectors.spot import risk_per_sample

__all__ = [
    "PRIOR_EVENTS",
    "PRIOR_WINDOWS",
    "RATE_TAU_S",
    "SPARSE_MEAN",
    "WHOLE_SHARE",
    "WHOLE_TOL",
    "CountGate",
    "bar_count",
    "count_tail",
]

#: Time constant (s) of the learnt rate: a day, so a quiet night and a busier day share one
#: rate and a counter's rate over the last day is what a window is judged against.
RATE_TAU_S = 86400.0
#: Gamma prior of the rate: this many events (Jeffreys' ½) in :data:`PRIOR_WINDOWS` windows.
#: With no event seen yet the predictive is wide: after a silent day of 60-s windows one event
#: in a window has a chance of 3.5e-4, far above a 15-s scrape's per-sample risk (8.7e-7).
PRIOR_EVENTS = 0.5
PRIOR_WINDOWS = 1.0
#: A count series is sparse while its learnt mean is at most this many events per window.
#: Below it a Poisson count is skewed (skewness 1/√mean ≥ 0.5) and discrete, which a
#: Gaussian z misjudges (one event on a counter at 0 is many robust scales off); above it
#: the ensemble's tails and daily profiles are the better model and the gate stays off.
SPARSE_MEAN = 4.0
#: A value counts as a whole number of events within this many events (scrape jitter can
#: cut a window through an interval: a fraction of a step's increase) ...
WHOLE_TOL = 0.01
#: ... and a series is a count series while at least this share of its values are whole.
WHOLE_SHARE = 0.9
#: Most terms a tail sum takes (a count far in the tail converges within a few dozen).
_MAX_TERMS = 100_000


def _log_pmf(j: int, mean: float, r: float) -> float:
    """log P(K = j) of a Poisson (``r`` inf) or a negative binomial with ``r`` and mean."""
    if math.isinf(r):
        return j * math.log(mean) - mean - math.lgamma(j + 1.0)
    p = r / (r + mean)
    return (
        math.lgamma(j + r) - math.lgamma(r) - math.lgamma(j + 1.0)
        + r * math.log(p) + j * math.log1p(-p)
    )  # fmt: skip


def _ratio(j: int, mean: float, r: float) -> float:
    """P(K = j + 1) / P(K = j)."""
    if math.isinf(r):
        return mean / (j + 1.0)
    return (j + r) / (j + 1.0) * (mean / (r + mean))


def _sum_from(k: int, mean: float, r: float) -> float:
    """P(K ≥ k) summed term by term (``k`` above the mean: the terms fall)."""
    term = math.exp(_log_pmf(k, mean, r))
    total, j = 0.0, k
    for _ in range(_MAX_TERMS):
        total += term
        term *= _ratio(j, mean, r)
        j += 1
        if term <= 1e-17 * total:
            break
    return total


def _sum_to(k: int, mean: float, r: float) -> float:
    """P(K ≤ k) summed term by term from 0 (``k`` below the mean)."""
    term = math.exp(_log_pmf(0, mean, r))
    total = 0.0
    for j in range(k + 1):
        total += term
        term *= _ratio(j, mean, r)
    return total


def count_tail(k: int, mean: float, var: float, upper: bool = True) -> float:
    """P(K ≥ k) (``upper``) or P(K ≤ k) of a count with ``mean`` and variance ``var``:
    Poisson when ``var`` is not above ``mean``, else negative binomial.

    >>> f"{count_tail(1, 0.01, 0.01):.4f}", f"{count_tail(3, 0.01, 0.01):.2e}"
    ('0.0100', '1.65e-07')
    >>> count_tail(3, 0.01, 0.05) > count_tail(3, 0.01, 0.01)    # over-dispersed: heavier
    True
    >>> count_tail(0, 2.0, 2.0), round(count_tail(0, 2.0, 2.0, upper=False), 4)
    (1.0, 0.1353)
    """
    if mean <= 0.0:
        return 1.0 if (k <= 0 if upper else k >= 0) else 0.0
    r = mean * mean / (var - mean) if var > mean * (1.0 + 1e-9) else math.inf
    if upper:
        if k <= 0:
            return 1.0
        return _sum_from(k, mean, r) if k - 1 >= mean else max(0.0, 1.0 - _sum_to(k - 1, mean, r))
    if k < 0:
        return 0.0
    return _sum_to(k, mean, r) if k < mean else max(0.0, 1.0 - _sum_from(k + 1, mean, r))


def bar_count(mean: float, var: float, q: float) -> int:
    """The most events in a window above ``mean`` whose upper tail is not below ``q``: one
    less than the first ``k`` from ``floor(mean) + 1`` on with ``count_tail(k) < q`` (at most
    :data:`_MAX_TERMS`). The tail falls with ``k``, so the first such ``k`` is found by
    doubling the step, then halving the bracket: a few tails instead of one per count. A
    heavy negative-binomial tail (a bursty counter at 10-minute PM periods) has a bar of
    hundreds of events and tails of thousands of terms each, and the scan one count at a
    time took 95 % of such a replay.

    >>> bar_count(0.0059, 0.0059, 8.7e-7), bar_count(2.0, 30.0, 1e-4), bar_count(3.0, 3.0, 1.0)
    (2, 83, 3)
    """
    lo = max(1, math.floor(mean) + 1)
    if lo >= _MAX_TERMS or count_tail(lo, mean, var) < q:
        return lo - 1
    below, step = lo, 1  # the tail at ``below`` is at least q
    while True:
        above = min(below + step, _MAX_TERMS)
        if above == _MAX_TERMS or count_tail(above, mean, var) < q:
            break
        below, step = above, 2 * step
    while above - below > 1:  # the tail at ``above`` is below q (or ``above`` is the cap)
        mid = (below + above) // 2
        if count_tail(mid, mean, var) < q:
            above = mid
        else:
            below = mid
    return above - 1


class CountGate:
    """The learnt rate of one count series, and the gate on its monitor's alarms.

    :meth:`step` takes the series' count (value × its scale) and the monitor's transition
    for it, judges the transition against the rate learnt so far, then learns the count. An
    ``open`` of a sparse count series whose count is not in the tail (probability at least
    the budget's per-sample risk) is withheld; the monitor's alarm stays open underneath
    (``gated_``) and is shown once a count of it is in the tail, or forgotten when it
    closes. Everything else passes.

    A quiet counter (one event in three hours, 60-s windows every 15 s): single events are
    withheld, a burst of 10 in a window is not.

    >>> gate = CountGate(target_rate=0.005)
    >>> out = []
    >>> for i in range(4 * 3600):                          # a day of 15-s ticks
    ...     k = 1 if 360 <= i % 720 < 364 else 0            # one event every 3 h, 4 windows
    ...     out.append(gate.step(15.0 * i, k, 60.0, "open" if k else None, k > 0))
    >>> [o for o in out if o is not None], gate.gated_
    ([], False)
    >>> gate.sparse_, round(gate.mean_, 4), gate.bar_count()  # 3 events in a minute page
    (True, 0.0059, 2)
    >>> gate.step(15.0 * 14400, 10, 60.0, "open", True)
    'open'
    >>> round(gate.mean_, 4)                               # learnt as 2 events, not 10
    0.0063
    """

    #: the bar was set during the monitor's alarm that is still open, and is held until it
    #: closes (a class default, so that a gate restored from an older snapshot has it)
    clip_alarm_ = False

    def __init__(self, target_rate: float = 0.005, tau_s: float = RATE_TAU_S) -> None:
        if not (target_rate > 0.0 and math.isfinite(target_rate)):
            raise ValueError(f"target_rate must be positive and finite, got {target_rate}")
        if not tau_s > 0.0:
            raise ValueError(f"tau_s must be positive, got {tau_s}")
        self.target_rate = target_rate
        self.tau_s = tau_s
        #: values seen, and how many of them were whole non-negative counts
        self.n_ = 0
        self.whole_ = 0
        #: exponentially weighted window weight, count sum and squared-count sum
        self.s0_ = 0.0
        self.s1_ = 0.0
        self.s2_ = 0.0
        self.last_t_: float | None = None
        #: the scrape interval: a streaming median of the time steps, followed once it moved
        #: :data:`~detectors.params.STEP_MOVE` (as the ensemble's)
        self.step_est_ = math.nan
        self.step_ = math.nan
        #: the bar counts beyond it are learnt as, and when it was set (see :meth:`_clip`)
        self.clip_ = math.inf
        self.clip_t_: float | None = None
        #: the monitor's alarm is open but withheld (not shown)
        self.gated_ = False

    @property
    def mean_(self) -> float:
        """Predictive mean count per window (the Gamma posterior's)."""
        return (PRIOR_EVENTS + self.s1_) / (PRIOR_WINDOWS + self.s0_)

    @property
    def var_(self) -> float:
        """Predictive variance per window: the learnt over-dispersion (at least Poisson's)
        plus the rate's own uncertainty."""
        mean = self.mean_
        disp = 1.0
        if self.s0_ > 0.0 and self.s1_ > 0.0:
            m = self.s1_ / self.s0_
            disp = max(1.0, (self.s2_ / self.s0_ - m * m) / m)
        return mean * disp + mean / (PRIOR_WINDOWS + self.s0_)

    @property
    def sparse_(self) -> bool:
        """Whether the series is judged as a sparse count (see the module)."""
        return self.n_ > 0 and self.whole_ >= WHOLE_SHARE * self.n_ and self.mean_ <= SPARSE_MEAN

    def risk(self, window_s: float = 0.0) -> float:
        """Per-sample risk of the budget at the learnt interval (``window_s``, else 60 s,
        before two timestamps show it)."""
        step = self.step_ if math.isfinite(self.step_) else (window_s or 60.0)
        return risk_per_sample(self.target_rate, step)

    def tail(self, count: float) -> float:
        """Chance of a count as far from the mean as ``count`` on its side (upper: at
        least as many events, lower: at most as many), fractions rounded towards the mean."""
        mean = self.mean_
        if count > mean:
            return count_tail(math.floor(count + WHOLE_TOL), mean, self.var_)
        return count_tail(math.ceil(count - WHOLE_TOL), mean, self.var_, upper=False)

    def significant(self, count: float, window_s: float = 0.0) -> bool:
        """Whether ``count`` may page: the series is not a sparse count, or the count is in
        the tail at the budget's risk."""
        return not self.sparse_ or self.tail(count) < self.risk(window_s)

    def bar_count(self, window_s: float = 0.0) -> int:
        """The most events in a window that are not in the upper tail at the budget's risk
        (:func:`bar_count`)."""
        return bar_count(self.mean_, self.var_, self.risk(window_s))

    def judge(
        self,
        count: float,
        transition: Literal["open", "update", "close"] | None,
        firing: bool,
        window_s: float = 0.0,
    ) -> Literal["open", "update", "close"] | None:
        """The transition to show for the monitor's ``transition`` (``firing``: its alarm is
        open after this value), judged on the rate learnt so far."""
        if transition == "open":
            if self.significant(count, window_s):
                return "open"
            self.gated_ = True
            return None
        if self.gated_:
            if transition == "close" or not firing:
                self.gated_ = False
                return None
            if self.significant(count, window_s):
                self.gated_ = False
                return "open"
            return None
        return transition

    def learn(
        self, t: float | None, count: float, window_s: float = 0.0, firing: bool = False
    ) -> None:
        """Learn one window's ``count`` at time ``t`` (window ``window_s`` s; 0: one
        interval), clipped at the bar while the series is sparse; ``firing``: the monitor's
        alarm is open, and the bar is held where it was when the alarm's first count went
        beyond it."""
        dt = None
        if t is not None and self.last_t_ is not None and t > self.last_t_:
            dt = t - self.last_t_
            est = self.step_est_
            sign = (dt > est) - (dt < est)
            est = est * (1.0 + STEP_RATE * sign) if math.isfinite(est) else dt
            self.step_est_ = est
            if not math.isfinite(self.step_) or abs(est - self.step_) > STEP_MOVE * self.step_:
                self.step_ = est
        if t is not None:
            self.last_t_ = t
        valid = math.isfinite(count) and count >= -WHOLE_TOL
        if not firing:  # an alarm's values do not judge the kind of series (see _clip)
            self.n_ += 1
            self.whole_ += int(valid and abs(count - round(count)) <= WHOLE_TOL)
        if not valid:
            return
        k = self._clip(t, max(0.0, count), window_s, firing)
        if k is None:
            return
        window = window_s if window_s > 0.0 else (dt or 0.0)
        w = 1.0 if dt is None or window <= 0.0 else min(dt, window) / window
        decay = 1.0 if dt is None else math.exp(-dt / self.tau_s)
        self.s0_ = decay * self.s0_ + w
        self.s1_ = decay * self.s1_ + w * k
        self.s2_ = decay * self.s2_ + w * k * k

    def _clip(self, t: float | None, k: float, window_s: float, firing: bool) -> float | None:
        """``k`` clipped at the bar while the series is sparse, or None when it is not to be
        learnt. The bar is held for a window from the first count beyond it, and for as long
        as the monitor's alarm stays open; while the alarm is open, only its first count
        beyond the bar is learnt (as the bar), later ones not at all. Overlapping windows
        hold one burst several times, and a burst learnt window after window raises the
        mean and the learnt over-dispersion, and with them the next bar: a half-hour storm
        of hundreds of events a minute took the mean past :data:`SPARSE_MEAN`, and the
        series' single events then paged for the rest of the day. For the same reason the
        values seen while the alarm is open do not count towards the whole share
        (:meth:`learn`): a storm of hundreds of events, scaled to the window through a
        jittered scrape, is seldom a whole number, and the series would stop being a count
        series halfway through it. A rise that outlasts the alarm is still learnt, bar by
        bar."""
        if not firing:
            self.clip_alarm_ = False
        n = self.n_
        mean = (PRIOR_EVENTS + self.s1_) / (PRIOR_WINDOWS + self.s0_)  # mean_, sparse_
        if not (n > 0 and self.whole_ >= WHOLE_SHARE * n and mean <= SPARSE_MEAN) or k <= mean:
            return k
        if firing and self.clip_alarm_:
            return k if k <= self.clip_ else None
        held = t is not None and self.clip_t_ is not None and t - self.clip_t_ < window_s
        if not held:
            self.clip_ = float(self.bar_count(window_s))
            self.clip_t_ = t
            self.clip_alarm_ = firing
        return min(k, self.clip_)

    def step(
        self,
        t: float | None,
        count: float,
        window_s: float,
        transition: Literal["open", "update", "close"] | None,
        firing: bool,
    ) -> Literal["open", "update", "close"] | None:
        """:meth:`judge` the monitor's ``transition``, then :meth:`learn` ``count``."""
        shown: Literal["open", "update", "close"] | None = transition
        if transition == "open" or self.gated_:  # else judge shows it: nothing to test
            shown = self.judge(count, transition, firing, window_s)
        self.learn(t, count, window_s, firing)
        return shown
