"""Thresholds from a target false-alarm rate: peaks over threshold with an exponential tail.

A NOC budgets false pages per series and day, not a quantile. With ``λ`` alarm clusters per
sample above a start level ``u`` and cluster-maximum excesses ``Exp(σ)``, the chance that a
sample starts a cluster whose maximum passes ``z`` is ``λ · exp(−(z − u) / σ)``; setting it to
the per-sample risk ``q`` gives the bar ``z_q = u + σ · ln(λ / q)`` (SPOT, Siffer et al.,
KDD 2017, with runs declustering: a run of exceedances is one cluster, so autocorrelated scores
do not count one excursion many times). Heavy tails (bursty traffic) get the generalised
Pareto quantile ``u + σ/ξ · ((λ/q)^ξ − 1)`` with a moments estimate of ``ξ ≥ 0``.

``q = alarms per day × scrape interval / 86,400``: the same budget gives a higher bar at 10 s
than at 5 min. The bar is floored by what iid Gaussian noise would need at the same risk
(:func:`gaussian_bar` for a z-score, :func:`cusum_bar` for a CUSUM via Siegmund's ARL0
approximation), so a short warm-up with few peaks cannot pull it below the textbook value.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from statistics import NormalDist

__all__ = [
    "PeaksOverThreshold",
    "cusum_bar",
    "gaussian_bar",
    "risk_per_sample",
    "tail_bar",
    "tail_shape",
]

_Q_MIN = 1e-15


def risk_per_sample(alarms_per_day: float, interval_s: float) -> float:
    """Per-sample risk for a budget of ``alarms_per_day`` at one sample per ``interval_s``.

    >>> f"{risk_per_sample(0.005, 15.0):.3g}"
    '8.68e-07'
    """
    return alarms_per_day * interval_s / 86400.0


@lru_cache(maxsize=256)
def gaussian_bar(q: float, two_sided: bool = False) -> float:
    """The z a standard Gaussian passes with probability ``q`` (per side: ``q / 2``).

    >>> round(gaussian_bar(1e-6), 2), round(gaussian_bar(1e-6, two_sided=True), 2)
    (4.75, 4.89)
    """
    q = min(max(q / 2.0 if two_sided else q, _Q_MIN), 0.5)
    return NormalDist().inv_cdf(1.0 - q)


def _siegmund_arl(h: float, k: float) -> float:
    b = 2.0 * k * (h + 1.166)
    return (math.expm1(b) - b) / (2.0 * k * k) if k > 0 else (h + 1.166) ** 2


@lru_cache(maxsize=256)
def cusum_bar(q: float, k: float = 0.5, two_sided: bool = False) -> float:
    """Decision interval ``h`` of a one-sided CUSUM of iid N(0, 1) increments with allowance
    ``k`` whose in-control average run length is ``1 / q`` samples (Siegmund's approximation);
    ``two_sided`` splits the risk over the two sides.

    >>> round(cusum_bar(1 / 336, 0.5), 1)     # tables: k = 0.5, h = 4 → ARL0 ≈ 336
    4.0
    """
    arl = 1.0 / min(max(q / 2.0 if two_sided else q, _Q_MIN), 0.5)
    lo, hi = 0.0, 1.0
    while _siegmund_arl(hi, k) < arl and hi < 1e6:
        hi *= 2.0
    for _ in range(80):
        mid = 0.5 * (lo + hi)
        if _siegmund_arl(mid, k) < arl:
            lo = mid
        else:
            hi = mid
    return hi


def tail_shape(clusters: float, excess: float, excess_sq: float, xi_max: float) -> float:
    """Method-of-moments GPD shape ``ξ = (1 − m² / v) / 2`` of the cluster excesses, clipped to
    ``[0, xi_max]``: a light tail is treated as exponential (conservative for Gaussian noise)."""
    if clusters < 2:
        return 0.0
    m = excess / clusters
    v = excess_sq / clusters - m * m
    if v <= 0.0:
        return 0.0
    return min(max(0.5 * (1.0 - m * m / v), 0.0), xi_max)


def tail_bar(
    n: float,
    clusters: float,
    excess: float,
    excess_sq: float,
    start: float,
    q: float,
    xi_max: float = 0.5,
) -> float:
    """The GPD quantile ``start + σ/ξ · ((λ/q)^ξ − 1)`` (``start + σ · ln(λ/q)`` at ``ξ = 0``),
    with ``λ = clusters / n``, ``ξ`` from :func:`tail_shape` and ``σ = m · (1 − ξ)`` from the
    mean excess ``m``; ``start`` when no cluster was seen or ``λ ≤ q``."""
    if clusters <= 0 or n <= 0:
        return start
    xi = tail_shape(clusters, excess, excess_sq, xi_max)
    sigma = excess / clusters * (1.0 - xi)
    log_ratio = max(math.log(clusters / n) - math.log(q), 0.0)
    if xi > 1e-9:
        return start + sigma * math.expm1(xi * log_ratio) / xi
    return start + sigma * log_ratio


@dataclass(eq=False)
class PeaksOverThreshold:
    """Online SPOT bar of one non-negative score stream for a per-sample risk.

    Feed every normal-time score with :meth:`learn_one`. Scores above ``start`` form clusters
    (runs); when a run ends, its maximum's excess over ``start`` is learnt if the maximum stayed
    below the current bar (a normal peak; SPOT leaves alarms out of the tail fit). A peak waits
    ``lag`` further scores in quarantine before it joins the tail, and :meth:`drop_run` (an
    alarm opened) discards the quarantine: the first, still sub-bar samples of an incident do
    not raise the bar that should catch it. The bar is
    :func:`tail_bar` for ``risk`` (a GPD fitted by moments, ``ξ ≤ xi_max``), at least
    ``floor``, infinite before ``warmup`` scores.

    Examples
    --------
    >>> import random
    >>> rng = random.Random(0)
    >>> pot = PeaksOverThreshold(risk=1e-5, start=2.0, floor=0.0, warmup=2000)
    >>> pot.threshold_
    inf
    >>> for _ in range(20000):
    ...     pot.learn_one(abs(rng.gauss(0, 1)))
    >>> 4.0 < pot.threshold_ < 5.5            # Gaussian |z|: exact bar 4.42
    True
    """

    risk: float = 1e-6
    start: float = 2.0
    floor: float = 0.0
    warmup: int = 200
    xi_max: float = 0.5

    def __post_init__(self) -> None:
        self.n_ = 0
        self.clusters_ = 0
        self.excess_ = 0.0
        self.excess_sq_ = 0.0
        self.peak_ = 0.0
        self.pending_ = (0, 0.0, 0.0)
        self.pending_age_ = 0

    def bar(self, risk: float, floor: float, warmup: int) -> float:
        """The bar for ``risk`` with ``floor`` after ``warmup`` scores (inf before)."""
        if self.n_ < warmup:
            return math.inf
        return max(
            floor,
            tail_bar(
                self.n_,
                self.clusters_,
                self.excess_,
                self.excess_sq_,
                self.start,
                risk,
                self.xi_max,
            ),
        )

    @property
    def threshold_(self) -> float:
        return self.bar(self.risk, self.floor, self.warmup)

    def learn_one(self, score: float, bar: float | None = None, lag: int = 0) -> None:
        """Learn one normal-time score; ``bar`` is the bar it was judged against, ``lag`` the
        quarantine of a new peak, in scores."""
        if math.isnan(score):
            return
        if bar is None:
            bar = self.threshold_
        self.n_ += 1
        if self.pending_[0] > 0:
            self.pending_age_ += 1
        if score > self.start:
            self.peak_ = max(self.peak_, score)
        else:
            if self.peak_ > self.start and self.peak_ < bar:
                c, e, e2 = self.pending_
                ex = self.peak_ - self.start
                self.pending_ = (c + 1, e + ex, e2 + ex * ex)
            self.peak_ = 0.0
        if self.pending_[0] > 0 and self.pending_age_ >= lag:
            c, e, e2 = self.pending_
            self.clusters_ += c
            self.excess_ += e
            self.excess_sq_ += e2
            self.pending_, self.pending_age_ = (0, 0.0, 0.0), 0

    def drop_run(self) -> None:
        """Forget a run in progress and the quarantined peaks (an alarm opened: they are not
        normal)."""
        self.peak_ = 0.0
        self.pending_, self.pending_age_ = (0, 0.0, 0.0), 0
