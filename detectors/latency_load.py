"""GPU serving: TTFT / TPOT regression against load (slower than the load explains)."""

from __future__ import annotations

import math
from collections.abc import Mapping

from detectors.robust_zscore import MAD_TO_SIGMA

__all__ = ["LatencyLoadRegression"]


class LatencyLoadRegression:
    """Online robust regression of log latency on load; score = positive residual in scales.

    Feed ``{"latency": TTFT or TPOT (any unit), "load": running requests / concurrency}``.
    Latency rises with load — that is not an incident. The detector keeps EW sufficient
    statistics of ``log(latency) ~ a + b·load`` (Huber-clipped residuals, so faults do not pull
    the fit) and scores how much slower than the load explains this interval is. Log scale
    makes the score independent of the unit and of the model's latency level.

    Examples
    --------
    >>> import math, random
    >>> rng = random.Random(4)
    >>> det = LatencyLoadRegression()
    >>> for _ in range(500):
    ...     load = rng.uniform(1, 64)
    ...     det.learn_one({"latency": 0.05 * math.exp(load / 40) * rng.lognormvariate(0, 0.05),
    ...                    "load": load})
    >>> det.score_one({"latency": 0.05 * math.exp(60 / 40), "load": 60}) < 3   # busy, as expected
    True
    >>> det.score_one({"latency": 0.05 * math.exp(8 / 40) * 2.5, "load": 8}) > 10  # slow, idle
    True
    """

    def __init__(self, alpha: float = 0.01, grace: int = 50, clip: float = 3.0) -> None:
        self.alpha = alpha
        self.grace = grace
        self.clip = clip
        self.n_ = 0
        self.sx_ = self.sy_ = self.sxx_ = self.sxy_ = 0.0
        self.mad_ = 0.0

    def _coef(self) -> tuple[float, float]:
        var = self.sxx_ - self.sx_**2
        b = (self.sxy_ - self.sx_ * self.sy_) / var if var > 1e-12 else 0.0
        return self.sy_ - b * self.sx_, b

    def _resid(self, x: Mapping[str, float]) -> float | None:
        lat, load = float(x.get("latency", math.nan)), float(x.get("load", math.nan))
        if not (lat > 0 and math.isfinite(load)):
            return None
        a, b = self._coef()
        return math.log(lat) - (a + b * load)

    def _scale(self) -> float:
        return max(MAD_TO_SIGMA * self.mad_, 1e-3)

    def learn_one(self, x: Mapping[str, float]) -> None:
        r = self._resid(x)
        if r is None:
            return
        self.n_ += 1
        w = max(self.alpha, 1.0 / self.n_)
        load = float(x["load"])
        if self.n_ > self.grace:
            limit = self.clip * self._scale()
            y = (self._coef()[0] + self._coef()[1] * load) + max(-limit, min(limit, r))
            dev = min(abs(r), limit)
        else:
            y, dev = math.log(float(x["latency"])), abs(r)
        self.sx_ += w * (load - self.sx_)
        self.sy_ += w * (y - self.sy_)
        self.sxx_ += w * (load * load - self.sxx_)
        self.sxy_ += w * (load * y - self.sxy_)
        self.mad_ += w * (dev - self.mad_)

    def score_one(self, x: Mapping[str, float]) -> float:
        if self.n_ < self.grace:
            return 0.0
        r = self._resid(x)
        return 0.0 if r is None else max(0.0, r / self._scale())
