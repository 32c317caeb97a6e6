"""One library detector alone on a NAB corpus, under the ensemble's label-free rules.

``noc eval nab`` scores the ensemble bank; ``noc eval nab --detector NAME`` scores one of the
library's univariate detectors instead, so that an engineer can see what each part does on
the same data with the same false-alarm budget. Every detector gets:

- its own defaults (nothing is tuned on the corpus);
- a label-free bar: SPOT as Siffer et al. calibrate it
  (:class:`detectors.spot.PeaksOverThreshold`): the tail starts at the
  :data:`START_QUANTILE` of the detector's scores over NAB's probation rows (score units
  differ from detector to detector, so there is no fixed start or floor), and the bar is the
  GPD quantile for the per-sample risk of the budget (``budget × interval / 86,400``),
  refitted online from every later score under it;
- the ensemble's NAB alarm policy (:func:`evals.nab.governed_alarms`: refractory period,
  alarm-rate governor, crossings), an alarm opening at each upward crossing of the bar.

River's HalfSpaceTrees needs its input in [0, 1]: each file is scaled by its probation's
minimum and maximum (label-free; NAB's own detectors use the file's range).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

import detectors as d
from detectors import spot
from evals import nab

__all__ = ["DETECTORS", "START_QUANTILE", "detect_single", "prequential_scores", "spot_ratio"]

F64 = nab.F64
Bool = nab.Bool

#: SPOT's tail starts at this quantile of the probation's scores (Siffer et al.'s calibration)
START_QUANTILE = 0.98

#: a detector's score of each value before it learns it, given the series, its probation
#: rows and the IANA zone of its wall clock (None: the timestamps are the wall clock)
Scorer = Callable[[nab.NabSeries, int, "str | None"], F64]


def _stream(factory: Callable[[str | None], Any], with_t: bool = False) -> Scorer:
    def run(s: nab.NabSeries, _probation: int, tz: str | None) -> F64:
        det = factory(tz)
        out = np.zeros(len(s.values))
        for j, (x, t) in enumerate(zip(s.values.tolist(), s.timestamps.tolist(), strict=True)):
            kw = {"t": t} if with_t else {}
            out[j] = det.score_one(x, **kw)
            det.learn_one(x, **kw)
        return out

    return run


def _window_outlier(s: nab.NabSeries, _probation: int, _tz: str | None) -> F64:
    return d.WindowOutlier().score_learn_many(s.values)


def _half_space_trees(s: nab.NabSeries, probation: int, _tz: str | None) -> F64:
    from river.anomaly import HalfSpaceTrees

    head = s.values[: max(probation, 1)]
    lo, hi = float(np.min(head)), float(np.max(head))
    span = hi - lo if hi > lo else 1.0
    det: Any = HalfSpaceTrees(seed=0)  # river leaves it untyped
    out = np.zeros(len(s.values))
    for j, x in enumerate(((s.values - lo) / span).tolist()):
        out[j] = det.score_one({"x": x})
        det.learn_one({"x": x})
    return out


def _snarimax(_tz: str | None) -> d.ForecastResidual:
    from river.time_series import SNARIMAX

    return d.ForecastResidual(SNARIMAX(p=2, d=1, q=1))


#: name → (description, scorer): the detectors ``noc eval nab --detector`` accepts
DETECTORS: dict[str, tuple[str, Scorer]] = {
    "robust_zscore": ("robust z-score (EWMA median / MAD)", _stream(lambda _: d.RobustZScore())),
    "seasonal": (
        "daily profile (SeasonalProfile, 48 bins)",
        _stream(lambda tz: d.SeasonalProfile(tz=tz), with_t=True),
    ),
    "cusum": ("CUSUM (two-sided, robust scale)", _stream(lambda _: d.Cusum())),
    "forecast_residual": (
        "forecast residual, Holt (river HoltWinters)",
        _stream(lambda _: d.ForecastResidual()),
    ),
    "snarimax": ("forecast residual, SNARIMAX(2, 1, 1) (river)", _stream(_snarimax)),
    "window_outlier": ("IsolationForest on windows (WindowOutlier)", _window_outlier),
    "half_space_trees": ("river HalfSpaceTrees (reference)", _half_space_trees),
}


def prequential_scores(name: str, s: nab.NabSeries, tz: str | None = None) -> F64:
    """The scores of detector ``name`` on ``s``, each value scored before it is learnt."""
    return DETECTORS[name][1](s, nab.probation_length(len(s.values)), tz)


def spot_ratio(s: nab.NabSeries, scores: F64, budget: float = nab.NAB_TARGET_RATE) -> F64:
    """Each score over its label-free SPOT bar (0 in the probation, where nothing is scored).

    >>> rng = np.random.default_rng(0)
    >>> t = np.arange(3000) * 300.0
    >>> s = nab.NabSeries("x.csv", t, np.zeros(3000), [])
    >>> scores = np.abs(rng.normal(size=3000))
    >>> scores[2500] = 12.0                        # 12 σ after the probation's 450 rows
    >>> r = spot_ratio(s, scores)
    >>> float(r[:450].max()), bool(r[2500] > 1.0), int((r >= 1.0).sum())
    (0.0, True, 1)
    """
    k = len(scores)
    probation = min(nab.probation_length(k), k)
    interval = float(np.median(np.diff(s.timestamps))) if k > 1 else 300.0
    risk = spot.risk_per_sample(budget, max(interval, 1.0))
    head = scores[:probation]
    start = float(np.quantile(head, START_QUANTILE)) if probation else 0.0
    if start <= 0.0:  # mostly zeros in the warm-up: the smallest positive score starts the tail
        positive = head[head > 0]
        start = float(positive.min()) if len(positive) else 1e-12
    bar = spot.PeaksOverThreshold(risk=risk, start=start, floor=0.0, warmup=probation)
    ratio = np.zeros(k)
    for j, sc in enumerate(scores.tolist()):
        th = bar.threshold_
        ratio[j] = sc / th if j >= probation and math.isfinite(th) else 0.0
        bar.learn_one(sc, th)
    return ratio


def detect_single(
    corpus: Sequence[nab.NabSeries],
    name: str,
    target_rate: float = nab.NAB_TARGET_RATE,
    tz: str | None = None,
) -> list[tuple[F64, Bool]]:
    """Per series ``(score in [0, 1], alarm)`` of detector ``name`` (see the module docstring).

    Raises :class:`KeyError` for a name not in :data:`DETECTORS`.
    """
    if name not in DETECTORS:
        raise KeyError(f"unknown detector {name!r}; known: {', '.join(sorted(DETECTORS))}")
    out = []
    for s in corpus:
        ratio = spot_ratio(s, prequential_scores(name, s, tz), target_rate)
        opened = (ratio >= 1.0) & ~np.concatenate([[False], ratio[:-1] >= 1.0])
        alarm = nab.governed_alarms(
            ratio,
            opened,
            nab.days_scored(s),
            nab.NAB_REFRACTORY_S,
            nab.NAB_GOVERNOR,
            nab.NAB_CROSS,
            target_rate,
            t=s.timestamps,
        )
        out.append((ratio / (1.0 + ratio), alarm))
    return out
