"""Robust exponentially-weighted z-score of one KPI series."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

__all__ = ["RobustZScore", "directional", "update_clip"]

Direction = Literal["up", "down", "both"]

#: E|X − μ| = σ·√(2/π) for Gaussian noise, so σ ≈ 1.2533 · mean absolute deviation.
MAD_TO_SIGMA = 1.2533141373155003


def update_clip(
    n: float, grace: float, clip: float, grace_clip: float, grace_after: float
) -> float:
    """Huber clip, in scales, of the ``n``-th learnt value: ``clip`` after the grace,
    ``grace_clip`` in it once ``grace_after`` values were learnt, none before (shared by
    :class:`RobustZScore` and the compiled bank).

    >>> [update_clip(n, 30, 3.0, 8.0, 8) for n in (5, 9, 31)]
    [inf, 8.0, 3.0]
    """
    if n > grace:
        return clip
    return grace_clip if n > grace_after else math.inf


def directional(z: float, bad_direction: Direction) -> float:
    """Keep the part of a signed score that points in the bad direction (0 otherwise)."""
    if bad_direction == "up":
        return max(0.0, z)
    if bad_direction == "down":
        return max(0.0, -z)
    return abs(z)


@dataclass(eq=False)
class RobustZScore:
    """EW location and EW mean absolute deviation; score = deviation in the bad direction / scale.

    The score grows linearly with the deviation (it does not saturate), so a threshold keeps its
    meaning across series. Updates are Huber-clipped at ``clip`` scales, so one outlier moves
    the baseline by at most ``alpha · clip`` scales, while a lasting level shift is absorbed
    in about ``1 / alpha`` samples. The scale is the larger of a fast and half a slow
    (``alpha / 10``) deviation, so it cannot collapse after a quiet stretch; a nearly constant
    series keeps a tiny floor ``rel_floor · |mean|``. During the first ``grace`` observations
    the score is 0, and the updates are clipped at ``grace_clip`` scales once
    ``grace_after`` values were learnt (unclipped before: the scale of the first few values is
    no scale yet). With ``grace_clip = inf`` (the default) the grace learns every value as it
    comes, and an incident in it inflates the scale for hundreds of values.

    Parameters
    ----------
    alpha
        Weight of a new observation in the running location and scale.
    bad_direction
        ``"up"``, ``"down"`` or ``"both"``: deviations the other way score 0.
    grace
        Observations learnt before scores are given.
    clip
        Huber clipping of the updates, in scales.
    rel_floor
        Smallest scale relative to the level (guards constant series).
    grace_clip, grace_after
        Clipping of the updates in the grace, in scales, and the values learnt unclipped
        before it applies.

    Examples
    --------
    >>> import random
    >>> rng = random.Random(7)
    >>> det = RobustZScore(bad_direction="down")
    >>> for _ in range(200):
    ...     det.learn_one(0.99 + rng.gauss(0, 0.002))
    >>> round(det.score_one(0.99), 1)
    0.0
    >>> det.score_one(0.80) > 10
    True
    >>> det.score_one(1.00)
    0.0
    """

    alpha: float = 0.02
    bad_direction: Direction = "both"
    grace: int = 30
    clip: float = 3.0
    rel_floor: float = 1e-6
    grace_clip: float = math.inf
    grace_after: int = 8

    def __post_init__(self) -> None:
        self.n_ = 0
        self.mean_ = 0.0
        self.mad_ = 0.0
        self.slow_mad_ = 0.0

    @property
    def scale_(self) -> float:
        """Current robust scale (≈ standard deviation for Gaussian noise), floored."""
        return max(
            MAD_TO_SIGMA * self.mad_,
            0.5 * MAD_TO_SIGMA * self.slow_mad_,
            self.rel_floor * abs(self.mean_),
            1e-12,
        )

    def learn_one(self, x: float, floor: float = 0.0) -> None:
        """Learn ``x``; ``floor`` is a lower bound of the scale known from outside (the
        sampling noise of a ratio of counts), so the clipping cannot freeze the location."""
        if math.isnan(x):
            return
        self.n_ += 1
        if self.n_ == 1:
            self.mean_ = x
            return
        a = max(self.alpha, 1.0 / self.n_)
        a_slow = max(0.1 * self.alpha, 1.0 / self.n_)
        limit = max(self.scale_, floor) * update_clip(
            self.n_, self.grace, self.clip, self.grace_clip, self.grace_after
        )
        r = x - self.mean_
        dev = min(abs(r), limit)
        self.mean_ += a * max(-limit, min(limit, r))
        self.mad_ += a * (dev - self.mad_)
        self.slow_mad_ += a_slow * (dev - self.slow_mad_)

    def signed_score(self, x: float) -> float:
        """Signed deviation in scales (positive above the baseline); 0 during the grace."""
        if self.n_ < self.grace or math.isnan(x):
            return 0.0
        return (x - self.mean_) / self.scale_

    def score_one(self, x: float) -> float:
        return directional(self.signed_score(x), self.bad_direction)

    def expected_range(self, k: float) -> tuple[float, float]:
        """The band ``mean ± k·scale`` inside which a value scores below ``k``."""
        return self.mean_ - k * self.scale_, self.mean_ + k * self.scale_
