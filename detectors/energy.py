"""GPU serving: energy per request against an expected baseline."""

from __future__ import annotations

import math
from collections.abc import Mapping

from detectors.robust_zscore import RobustZScore

__all__ = ["EnergyPerRequest"]


class EnergyPerRequest:
    """Score energy spent above what the served work should cost.

    Feed per-interval ``{"energy_j": joules used, "requests": finished requests,
    "expected_j": expected joules}``. ``expected_j`` is optional: give the SIMPLE model's
    prediction for the requests served (it accounts for prompt and output lengths, so a shift
    to long prompts is not an anomaly); without it the baseline is energy per request. The
    score is an up-only robust z of ``log(energy / expected)`` (unit-free), learnt only from
    intervals with at least ``min_requests`` requests (support).

    Examples
    --------
    >>> import random
    >>> rng = random.Random(9)
    >>> det = EnergyPerRequest()
    >>> for _ in range(300):
    ...     e = 500 * rng.lognormvariate(0, 0.03)
    ...     det.learn_one({"energy_j": e, "requests": 10, "expected_j": 500})
    >>> det.score_one({"energy_j": 1000, "requests": 20, "expected_j": 1000}) < 3
    True
    >>> det.score_one({"energy_j": 800, "requests": 10, "expected_j": 500}) > 10
    True
    """

    def __init__(self, alpha: float = 0.02, min_requests: float = 1.0) -> None:
        self.alpha = alpha
        self.min_requests = min_requests
        self.log_ratio_ = RobustZScore(alpha=alpha, bad_direction="up", rel_floor=0.0)

    def _log_ratio(self, x: Mapping[str, float]) -> float:
        energy = float(x.get("energy_j", math.nan))
        requests = float(x.get("requests", math.nan))
        if not (requests >= self.min_requests and energy > 0):
            return math.nan
        expected = float(x.get("expected_j", math.nan))
        base = expected if expected > 0 else requests
        return math.log(energy / base)

    def learn_one(self, x: Mapping[str, float]) -> None:
        self.log_ratio_.learn_one(self._log_ratio(x))

    def score_one(self, x: Mapping[str, float]) -> float:
        return self.log_ratio_.score_one(self._log_ratio(x))
