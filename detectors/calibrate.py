"""Label-free thresholds: from the score distribution of a warm-up period, then tracked online."""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["AdaptiveThreshold"]


@dataclass(eq=False)
class AdaptiveThreshold:
    """A per-series threshold for one score stream, set without labels.

    Warm-up: the first ``warmup`` scores are only watched; the threshold then becomes
    ``max(floor, margin · peak)`` — "more extreme than anything the warm-up showed", the
    score-distribution rule of a probation period. Afterwards the threshold tracks the
    ``tau`` quantile of the scores it is fed with a multiplicative stochastic-approximation
    step (up by ``exp(eta·tau)`` on an exceedance, down by ``exp(−eta·(1 − tau))`` otherwise),
    never below ``floor``. Feed it only normal-time scores (the ensemble stops feeding it
    while an alarm is open), so a fault does not raise the bar it is measured against.
    Before the warm-up ends the threshold is infinite: nothing alarms.

    Examples
    --------
    >>> import random
    >>> rng = random.Random(0)
    >>> th = AdaptiveThreshold(warmup=200, margin=1.2, floor=3.0)
    >>> th.threshold_
    inf
    >>> for _ in range(200):
    ...     th.learn_one(abs(rng.gauss(0, 1)))
    >>> 3.0 <= th.threshold_ < 5.0
    True
    >>> for _ in range(5000):                     # the series gets noisier: the bar follows
    ...     th.learn_one(abs(rng.gauss(0, 3)))
    >>> th.threshold_ > 6.0
    True
    """

    warmup: int = 500
    margin: float = 1.2
    floor: float = 4.0
    tau: float = 0.999
    eta: float = 0.01

    def __post_init__(self) -> None:
        self.n_ = 0
        self.peak_ = 0.0
        self.quantile_ = math.inf

    @property
    def threshold_(self) -> float:
        return max(self.floor, self.quantile_)

    def learn_one(self, score: float) -> None:
        if math.isnan(score):
            return
        self.n_ += 1
        if self.n_ <= self.warmup:
            self.peak_ = max(self.peak_, score)
            if self.n_ == self.warmup:
                self.quantile_ = max(self.floor, self.margin * self.peak_)
            return
        step = self.eta * self.tau if score > self.quantile_ else -self.eta * (1.0 - self.tau)
        self.quantile_ = max(self.floor, self.quantile_ * math.exp(step))
