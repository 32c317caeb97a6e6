"""Two-sided CUSUM on a robustly standardised series: level shifts that no single point shows."""

from __future__ import annotations

import math

from detectors.robust_zscore import Direction, RobustZScore

__all__ = ["Cusum"]


class Cusum:
    """Page's CUSUM of robust z-scores against a slowly adapting baseline.

    ``g⁺ ← max(0, g⁺ + z − k)`` and ``g⁻ ← max(0, g⁻ − z − k)`` where ``z`` is the deviation
    from a slow :class:`RobustZScore` baseline, clipped at ``±z_clip`` so one spike does not
    look like a shift. The score is ``g`` in the bad direction: it grows linearly while a
    shift lasts (no saturation) and drains at ``k`` per sample once the baseline absorbs the
    new level or the series returns.

    Parameters
    ----------
    k
        Allowance (half the shift, in scales, the detector is tuned for).
    z_clip
        Clipping of each z before accumulation.
    alpha
        Baseline adaptation rate (slow: a shift must outlive the baseline to be seen).

    Examples
    --------
    >>> import random
    >>> rng = random.Random(3)
    >>> det = Cusum()
    >>> for _ in range(300):
    ...     det.learn_one(10 + rng.gauss(0, 1))
    >>> det.score_one(10.0) < 5
    True
    >>> for _ in range(20):
    ...     det.learn_one(11.5 + rng.gauss(0, 1))   # a 1.5σ shift: no point stands out
    >>> det.score_one(11.5) > 10
    True
    """

    def __init__(
        self,
        k: float = 0.5,
        z_clip: float = 4.0,
        alpha: float = 0.005,
        bad_direction: Direction = "both",
        grace: int = 30,
    ) -> None:
        self.k = k
        self.z_clip = z_clip
        self.alpha = alpha
        self.bad_direction = bad_direction
        self.grace = grace
        self.baseline_ = RobustZScore(alpha=alpha, grace=grace)
        self.up_ = 0.0
        self.down_ = 0.0

    def _next(self, x: float) -> tuple[float, float]:
        z = max(-self.z_clip, min(self.z_clip, self.baseline_.signed_score(x)))
        return max(0.0, self.up_ + z - self.k), max(0.0, self.down_ - z - self.k)

    def learn_one(self, x: float) -> None:
        if math.isnan(x):
            return
        self.up_, self.down_ = self._next(x)
        self.baseline_.learn_one(x)

    def score_one(self, x: float) -> float:
        if math.isnan(x):
            return 0.0
        up, down = self._next(x)
        if self.bad_direction == "up":
            return up
        if self.bad_direction == "down":
            return down
        return max(up, down)
