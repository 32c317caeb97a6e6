"""Success-rate KPIs scored from their counts: a ratio of tiny counts is noise."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from detectors.robust_zscore import Direction, directional

__all__ = ["BinomialRatio"]


@dataclass(eq=False)
class BinomialRatio:
    """Binomial score test of ``num / den`` against an EW baseline rate, overdispersion-aware.

    Feed counts per interval, ``{"num": successes, "den": attempts}``. The baseline rate is
    ``(Σ num + ½) / (Σ den + 1)`` over exponentially decayed sums; the score is the score-test
    statistic ``(k − n·p₀) / √(n·p₀(1 − p₀))`` (with the ½ continuity correction) — the test
    the Wilson interval inverts — so 3
    failures out of 4 attempts weigh what 4 attempts can say, while 300 out of 400 page.
    Real KPIs are overdispersed (attempts are not independent), so the statistic is divided
    by ``√φ``, ``φ ≥ 1`` an EW mean of the squared normal-time statistic (clipped): a series
    that is naturally bumpier than binomial calibrates itself.

    Examples
    --------
    >>> det = BinomialRatio(bad_direction="down")
    >>> for _ in range(200):
    ...     det.learn_one({"num": 990, "den": 1000})
    >>> det.score_one({"num": 3, "den": 4}) < 3          # 75 % of 4 attempts: noise
    True
    >>> det.score_one({"num": 750, "den": 1000}) > 20    # 75 % of 1000: an outage
    True
    >>> det.score_one({"num": 0, "den": 0})
    0.0
    """

    alpha: float = 0.02
    bad_direction: Direction = "down"
    grace: int = 10
    clip: float = 5.0

    def __post_init__(self) -> None:
        self.num_ = 0.0
        self.den_ = 0.0
        self.phi_ = 1.0
        self.n_ = 0

    @property
    def rate_(self) -> float:
        """Baseline rate p₀."""
        return (self.num_ + 0.5) / (self.den_ + 1.0)

    def _z(self, num: float, den: float) -> float:
        if den <= 0 or math.isnan(num) or math.isnan(den):
            return 0.0
        p0 = min(max(self.rate_, 1e-9), 1 - 1e-9)
        k = min(max(num, 0.0), den)
        d = k - den * p0
        return math.copysign(max(0.0, abs(d) - 0.5), d) / math.sqrt(den * p0 * (1.0 - p0))

    def learn_one(self, x: Mapping[str, float]) -> None:
        num, den = float(x["num"]), float(x["den"])
        if den <= 0 or math.isnan(num) or math.isnan(den):
            return
        self.n_ += 1
        if self.n_ > self.grace:
            z2 = min(self._z(num, den) ** 2, self.clip**2)
            self.phi_ = max(1.0, self.phi_ + self.alpha * (z2 - self.phi_))
        keep = 1.0 - max(self.alpha, 1.0 / self.n_) if self.n_ > 1 else 0.0
        self.num_ = keep * self.num_ + num
        self.den_ = keep * self.den_ + den

    def score_one(self, x: Mapping[str, float]) -> float:
        if self.n_ < self.grace:
            return 0.0
        z = self._z(float(x["num"]), float(x["den"])) / math.sqrt(self.phi_)
        return directional(z, self.bad_direction)
