"""Robust daily (or any period) profile of one KPI series: what is normal at this time of day."""

from __future__ import annotations

import math

from detectors.robust_zscore import MAD_TO_SIGMA, Direction, directional

__all__ = ["SeasonalProfile"]


class SeasonalProfile:
    """Per time-of-day bin, an EW location and EW absolute deviation; score in scales.

    Traffic KPIs follow the day: a registration rate that is normal at 18:00 is a storm at
    04:00. The period is cut into ``n_bins`` bins by timestamp (any scrape interval works);
    each bin learns its own level and spread with Huber-clipped updates of weight
    ``max(alpha, 1/count)``. The bin scale is floored at half the series-wide deviation, so a
    bin seen a few times cannot claim a spread of zero. A bin scores 0 until it has seen
    ``min_count`` values. The score is linear in the deviation (no saturation).

    Parameters
    ----------
    period
        Length of the season in seconds (a day by default).
    n_bins
        Bins per period.
    alpha
        Weight of a new value in its bin (per visit of the bin).
    min_count
        Visits of a bin before it scores.
    bad_direction
        ``"up"``, ``"down"`` or ``"both"``.

    Examples
    --------
    >>> import math, random
    >>> rng = random.Random(1)
    >>> det = SeasonalProfile(n_bins=24)
    >>> day = lambda t: 100 + 50 * math.sin(2 * math.pi * t / 86400)
    >>> for t in range(0, 5 * 86400, 600):
    ...     det.learn_one(day(t) + rng.gauss(0, 2), t=t)
    >>> t = 5 * 86400 + 6 * 3600          # the daily peak is normal ...
    >>> det.score_one(day(t), t=t) < 3
    True
    >>> t = 5 * 86400 + 18 * 3600         # ... but the peak's value at the trough is not
    >>> det.score_one(150.0, t=t) > 10
    True
    """

    def __init__(
        self,
        period: float = 86400.0,
        n_bins: int = 48,
        alpha: float = 0.2,
        min_count: int = 2,
        clip: float = 3.0,
        bad_direction: Direction = "both",
        rel_floor: float = 1e-6,
    ) -> None:
        self.period = period
        self.n_bins = n_bins
        self.alpha = alpha
        self.min_count = min_count
        self.clip = clip
        self.bad_direction = bad_direction
        self.rel_floor = rel_floor
        self.level_ = [0.0] * n_bins
        self.mad_ = [0.0] * n_bins
        self.count_ = [0] * n_bins
        self.global_mad_ = 0.0
        self.n_ = 0

    def _bin(self, t: float) -> int:
        return int((t % self.period) / self.period * self.n_bins) % self.n_bins

    def _scale(self, b: int) -> float:
        return max(
            MAD_TO_SIGMA * self.mad_[b],
            0.5 * MAD_TO_SIGMA * self.global_mad_,
            self.rel_floor * abs(self.level_[b]),
            1e-12,
        )

    def learn_one(self, x: float, t: float | None = None) -> None:
        if t is None or math.isnan(x):
            return
        b = self._bin(t)
        c = self.count_[b]
        self.count_[b] = c + 1
        self.n_ += 1
        if c == 0:
            self.level_[b] = x
            return
        a = max(self.alpha, 1.0 / (c + 1))
        limit = self.clip * self._scale(b) if c >= self.min_count else math.inf
        r = x - self.level_[b]
        dev = min(abs(r), limit)
        self.level_[b] += a * max(-limit, min(limit, r))
        self.mad_[b] += a * (dev - self.mad_[b])
        self.global_mad_ += max(0.01, 1.0 / self.n_) * (dev - self.global_mad_)

    def signed_score(self, x: float, t: float | None = None) -> float:
        """Signed deviation from the bin's level in scales; 0 for an immature bin."""
        if t is None or math.isnan(x):
            return 0.0
        b = self._bin(t)
        if self.count_[b] < self.min_count:
            return 0.0
        return (x - self.level_[b]) / self._scale(b)

    def score_one(self, x: float, t: float | None = None) -> float:
        return directional(self.signed_score(x, t), self.bad_direction)

    def mature(self, t: float) -> bool:
        """Whether the bin of ``t`` has seen enough values to score."""
        return self.count_[self._bin(t)] >= self.min_count
