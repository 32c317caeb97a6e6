"""Forecast-residual detector: a river time-series forecaster predicts, a robust scale judges."""

from __future__ import annotations

import copy
import math
from typing import Any

from detectors.robust_zscore import MAD_TO_SIGMA, Direction, directional

__all__ = ["ForecastResidual"]


class ForecastResidual:
    """Score the one-step-ahead forecast error of a river forecaster in robust scales.

    Any ``river.time_series`` forecaster fits (``learn_one(y)`` / ``forecast(horizon)``);
    the default is Holt's linear trend (``HoltWinters(alpha=0.3, beta=0.1)``), pass
    ``SNARIMAX`` or a seasonal ``HoltWinters`` for daily patterns. The residual scale is an
    EW mean absolute deviation of past residuals, Huber-clipped so one bad forecast does not
    blow it up. The forecaster given is copied (sklearn-style: parameters are not mutated).

    Examples
    --------
    >>> import random
    >>> rng = random.Random(2)
    >>> det = ForecastResidual()
    >>> for t in range(300):
    ...     det.learn_one(0.5 * t + rng.gauss(0, 1))     # a steady trend is not anomalous
    >>> det.score_one(150.0) < 3
    True
    >>> det.score_one(170.0) > 10
    True
    """

    def __init__(
        self,
        forecaster: Any = None,
        alpha: float = 0.02,
        grace: int = 30,
        clip: float = 3.0,
        bad_direction: Direction = "both",
    ) -> None:
        self.forecaster = forecaster
        self.alpha = alpha
        self.grace = grace
        self.clip = clip
        self.bad_direction = bad_direction
        if forecaster is None:
            from river import time_series

            self.model_: Any = time_series.HoltWinters(  # type: ignore[no-untyped-call]
                alpha=0.3, beta=0.1
            )
        else:
            self.model_ = copy.deepcopy(forecaster)
        self.n_ = 0
        self.mad_ = 0.0
        self.last_ = 0.0

    def _forecast(self) -> float | None:
        try:
            yhat = float(self.model_.forecast(horizon=1)[0])
        except (IndexError, ValueError, ZeroDivisionError):
            return None
        return yhat if math.isfinite(yhat) else None

    def _scale(self) -> float:
        return max(MAD_TO_SIGMA * self.mad_, 1e-6 * abs(self.last_), 1e-12)

    def learn_one(self, x: float) -> None:
        if math.isnan(x):
            return
        yhat = self._forecast()
        if yhat is not None:
            self.n_ += 1
            limit = self.clip * self._scale() if self.n_ > self.grace else math.inf
            dev = min(abs(x - yhat), limit)
            self.mad_ += max(self.alpha, 1.0 / self.n_) * (dev - self.mad_)
        self.last_ = x
        self.model_.learn_one(x)

    def score_one(self, x: float) -> float:
        if math.isnan(x) or self.n_ < self.grace:
            return 0.0
        yhat = self._forecast()
        if yhat is None:
            return 0.0
        return directional((x - yhat) / self._scale(), self.bad_direction)
