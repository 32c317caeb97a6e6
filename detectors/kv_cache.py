"""GPU serving: KV-cache saturation that hurts (preemptions / a growing queue)."""

from __future__ import annotations

import math
from collections.abc import Mapping

from detectors.robust_zscore import RobustZScore

__all__ = ["KvCacheSaturation"]


class KvCacheSaturation:
    """Score KV-cache pressure: usage near full *and* preemptions or waiting requests up.

    Feed ``{"kv_usage": fraction 0–1, "preemptions": preemptions in the interval,
    "waiting": requests waiting}`` (vLLM ``kv_cache_usage_perc``, ``num_preemptions_total``
    increase, ``num_requests_waiting``; SGLang ``token_usage``, retractions, queue). A full
    cache alone is normal (engines pre-allocate); the signature of saturation is that the
    engine starts to preempt and the queue grows. The score is
    ``g · max(z_preemptions, z_waiting)`` with robust up-only z-scores of the two and
    ``g = clip((usage − low) / (high − low), 0, 1)`` the saturation gate (usage is a fraction
    of capacity, so the gate needs no per-deployment tuning).

    Examples
    --------
    >>> det = KvCacheSaturation()
    >>> for t in range(200):
    ...     det.learn_one({"kv_usage": 0.6 + 0.01 * (t % 5), "preemptions": t % 2,
    ...                    "waiting": t % 3})
    >>> det.score_one({"kv_usage": 0.62, "preemptions": 0, "waiting": 1})
    0.0
    >>> det.score_one({"kv_usage": 0.99, "preemptions": 40, "waiting": 60}) > 10
    True
    >>> det.score_one({"kv_usage": 0.70, "preemptions": 40, "waiting": 60})   # not saturated
    0.0
    """

    def __init__(self, low: float = 0.8, high: float = 0.95, alpha: float = 0.02) -> None:
        self.low = low
        self.high = high
        self.alpha = alpha
        self.preempt_ = RobustZScore(alpha=alpha, bad_direction="up", rel_floor=0.05)
        self.waiting_ = RobustZScore(alpha=alpha, bad_direction="up", rel_floor=0.05)

    def _gate(self, usage: float) -> float:
        return min(1.0, max(0.0, (usage - self.low) / (self.high - self.low)))

    def learn_one(self, x: Mapping[str, float]) -> None:
        self.preempt_.learn_one(float(x.get("preemptions", math.nan)))
        self.waiting_.learn_one(float(x.get("waiting", math.nan)))

    def score_one(self, x: Mapping[str, float]) -> float:
        usage = float(x.get("kv_usage", math.nan))
        if math.isnan(usage):
            return 0.0
        gate = self._gate(usage)
        if gate == 0.0:
            return 0.0
        z = max(
            self.preempt_.score_one(float(x.get("preemptions", math.nan))),
            self.waiting_.score_one(float(x.get("waiting", math.nan))),
        )
        return gate * z
