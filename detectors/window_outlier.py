"""Adapter: a scikit-learn outlier model on sliding windows, sign flipped to "higher = worse"."""

from __future__ import annotations

import copy
import math
from collections import deque
from collections.abc import Sequence
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
        recent = np.append(self._tail(), x)
        feats = self._features(recent)
        return max(0.0, self.offset_ - float(self.model_.score_samples(feats)[-1]))

    def _tail(self) -> np.ndarray:
        """The last ``window − 1`` learnt values (none for a window of one)."""
        values = np.asarray(self.values_, np.float64)
        return values[len(values) - (self.window - 1) :]

    def score_learn_many(self, xs: Sequence[float] | np.ndarray) -> np.ndarray:
        """Score each value of ``xs`` before learning it (prequential), as ``score_one`` then
        ``learn_one`` value by value would, but with one ``score_samples`` call per stretch
        the model stays fitted for (up to ``refit_every`` values), not one per value.

        >>> import math
        >>> xs = [math.sin(t / 5) for t in range(600)] + [5.0]
        >>> one, many = WindowOutlier(window=8, fit_size=128, refit_every=128), None
        >>> by_one = []
        >>> for x in xs:
        ...     by_one.append(one.score_one(x))
        ...     one.learn_one(x)
        >>> many = WindowOutlier(window=8, fit_size=128, refit_every=128)
        >>> bool(np.allclose(many.score_learn_many(xs), by_one))
        True
        """
        values = np.asarray(xs, np.float64)
        out = np.zeros(len(values))
        i = 0
        while i < len(values):
            if self.model_ is None or math.isnan(values[i]):
                out[i] = self.score_one(float(values[i]))
                self.learn_one(float(values[i]))
                i += 1
                continue
            # the model is refitted on the learn_one that brings since_fit_ to refit_every
            stop = min(len(values), i + max(self.refit_every - self.since_fit_, 1))
            gaps = np.flatnonzero(np.isnan(values[i:stop]))
            if len(gaps):
                stop = i + int(gaps[0])
            block = values[i:stop]
            recent = np.concatenate([self._tail(), block])
            feats = self._features(recent)[-len(block) :]
            out[i:stop] = np.maximum(0.0, self.offset_ - self.model_.score_samples(feats))
            for x in block.tolist():
                self.learn_one(x)
            i = stop
        return out
