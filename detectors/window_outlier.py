"""Adapter: a scikit-learn outlier model on sliding windows, sign flipped to "higher = worse"."""

from __future__ import annotations

import copy
import math
from collections import deque
from typing import Any

import numpy as np

__all__ = ["WindowOutlier"]


class WindowOutlier:
    """Fit a scikit-learn outlier estimator on sliding windows of ``window`` values.

    Each window is taken minus its median and divided by the history's robust spread (level
    does not matter, shape does) and summarised as (last deviation, largest deviation, mean
    absolute deviation, first-to-last change), so a tree model isolates spikes, bursts and
    ramps without guessing which of ``window`` positions to split on. Every ``refit_every``
    learnt values the estimator (default ``IsolationForest``) is refitted on the latest ``fit_size``
    windows. sklearn's ``score_samples`` runs "lower = more abnormal"; the adapter returns
    ``max(0, median_train − score_samples)``, i.e. higher = more anomalous and ≈ 0 for typical
    windows. The estimator given is copied, never fitted in place.

    Examples
    --------
    >>> import math
    >>> det = WindowOutlier(window=8, fit_size=128, refit_every=128)
    >>> for t in range(400):
    ...     det.learn_one(math.sin(t / 5))
    >>> normal = det.score_one(math.sin(400 / 5))
    >>> spike = det.score_one(5.0)
    >>> spike > normal
    True
    """

    def __init__(
        self,
        estimator: Any = None,
        window: int = 16,
        fit_size: int = 256,
        refit_every: int = 256,
    ) -> None:
        self.estimator = estimator
        self.window = window
        self.fit_size = fit_size
        self.refit_every = refit_every
        self.values_: deque[float] = deque(maxlen=fit_size + window)
        self.model_: Any = None
        self.offset_ = 0.0
        self.scale_ = 1.0
        self.since_fit_ = 0

    def _features(self, values: np.ndarray) -> np.ndarray:
        windows = np.lib.stride_tricks.sliding_window_view(values, self.window)
        dev = (windows - np.median(windows, axis=1, keepdims=True)) / self.scale_
        return np.stack(
            [
                dev[:, -1],
                np.max(np.abs(dev), axis=1),
                np.mean(np.abs(dev), axis=1),
                dev[:, -1] - dev[:, 0],
            ],
            axis=1,
        )

    def learn_one(self, x: float) -> None:
        if math.isnan(x):
            return
        self.values_.append(x)
        self.since_fit_ += 1
        if len(self.values_) >= self.window + 32 and (
            self.model_ is None or self.since_fit_ >= self.refit_every
        ):
            self._fit()

    def _fit(self) -> None:
        from sklearn.ensemble import IsolationForest

        values = np.asarray(self.values_, np.float64)
        mad = float(np.median(np.abs(values - np.median(values))))
        self.scale_ = max(1.4826 * mad, 1e-6 * float(np.max(np.abs(values))), 1e-12)
        est = (
            IsolationForest(n_estimators=50, random_state=0)
            if self.estimator is None
            else copy.deepcopy(self.estimator)
        )
        feats = self._features(values)
        est.fit(feats)
        self.offset_ = float(np.median(est.score_samples(feats)))
        self.model_ = est
        self.since_fit_ = 0

    def score_one(self, x: float) -> float:
        if self.model_ is None or math.isnan(x):
            return 0.0
        recent = [*list(self.values_)[-(self.window - 1) :], x]
        feats = self._features(np.asarray(recent, np.float64))
        return max(0.0, self.offset_ - float(self.model_.score_samples(feats)[0]))
