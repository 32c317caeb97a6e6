"""Each detector of the library alone on NAB → bench/single_results.md.

Run: ``.venv/bin/python bench/bench_single.py [--nab ../shared/datasets/nab]``

The ensemble bank is what ``noc eval nab`` scores; this table shows what each of the
library's univariate detectors does alone under the same rules, so that the ensemble's gain
over its parts (and over river's HalfSpaceTrees, the issue's reference point) is measured in
one run on one machine. Every detector gets:

- a label-free bar: SPOT as Siffer et al. calibrate it (:class:`detectors.spot.
  PeaksOverThreshold`): the tail starts at the 98th percentile of the scores of NAB's
  probation rows (score units differ from detector to detector, so no fixed start or floor),
  and the bar is the GPD quantile for the per-sample risk ``budget × interval / 86,400`` of
  the ensemble's budget (0.1 false alarms per series-day, the a-priori target), refitted
  online from every later score under it;
- the ensemble's NAB alarm policy (:func:`evals.nab.governed_alarms` with its defaults:
  refractory 12 h, governor 1.25 past one budget, crossings on), opened at each upward
  crossing of the bar;
- the detector's own defaults: nothing here is tuned on NAB.

HalfSpaceTrees needs its input in [0, 1]: each file is scaled by its probation's minimum and
maximum (label-free; NAB's own detectors do the same with the file's range).
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from _machine import cpu_name  # bench/ helper, found beside this script

import detectors as d
from detectors import spot
from evals import nab

HERE = Path(__file__).resolve().parent

#: SPOT's tail starts at this quantile of the warm-up's scores (Siffer et al.'s calibration)
START_QUANTILE = 0.98

#: the detector's score per value, before it learns the value (prequential)
Scorer = Callable[[nab.NabSeries, int], np.ndarray]


def _stream(factory: Callable[[], Any], with_t: bool = False) -> Scorer:
    def run(s: nab.NabSeries, _probation: int) -> np.ndarray:
        det = factory()
        out = np.zeros(len(s.values))
        for j, (x, t) in enumerate(zip(s.values.tolist(), s.timestamps.tolist(), strict=True)):
            kw = {"t": t} if with_t else {}
            out[j] = det.score_one(x, **kw)
            det.learn_one(x, **kw)
        return out

    return run


def _window_outlier(s: nab.NabSeries, _probation: int) -> np.ndarray:
    return d.WindowOutlier().score_learn_many(s.values)


def _half_space_trees(s: nab.NabSeries, probation: int) -> np.ndarray:
    from river.anomaly import HalfSpaceTrees

    head = s.values[:probation]
    lo, hi = float(np.min(head)), float(np.max(head))
    span = hi - lo if hi > lo else 1.0
    det = HalfSpaceTrees(seed=0)
    out = np.zeros(len(s.values))
    for j, x in enumerate(((s.values - lo) / span).tolist()):
        out[j] = det.score_one({"x": x})
        det.learn_one({"x": x})
    return out


def _snarimax() -> d.ForecastResidual:
    from river.time_series import SNARIMAX

    return d.ForecastResidual(SNARIMAX(p=2, d=1, q=1))


DETECTORS: dict[str, Scorer] = {
    "robust z-score (EWMA median / MAD)": _stream(d.RobustZScore),
    "daily profile (SeasonalProfile, 48 bins)": _stream(d.SeasonalProfile, with_t=True),
    "CUSUM (two-sided, robust scale)": _stream(d.Cusum),
    "forecast residual, Holt (river HoltWinters)": _stream(d.ForecastResidual),
    "forecast residual, SNARIMAX(2, 1, 1) (river)": _stream(_snarimax),
    "IsolationForest on windows (WindowOutlier)": _window_outlier,
    "river HalfSpaceTrees (reference)": _half_space_trees,
}


def alarms_of(
    s: nab.NabSeries, scores: np.ndarray, budget: float = nab.NAB_TARGET_RATE
) -> tuple[np.ndarray, np.ndarray]:
    """NAB ``(score in [0, 1], alarm)`` of one detector's raw scores under a label-free bar."""
    k = len(scores)
    probation = min(nab.probation_length(k), k)
    interval = float(np.median(np.diff(s.timestamps))) if k > 1 else 300.0
    risk = spot.risk_per_sample(budget, max(interval, 1.0))
    head = scores[:probation]
    start = float(np.quantile(head, START_QUANTILE)) if probation else 0.0
    if start <= 0.0:  # mostly zeros in the warm-up: the smallest positive score starts the tail
        pos = head[head > 0]
        start = float(pos.min()) if len(pos) else 1e-12
    bar = spot.PeaksOverThreshold(risk=risk, start=start, floor=0.0, warmup=probation)
    ratio = np.zeros(k)
    for j, sc in enumerate(scores.tolist()):
        th = bar.threshold_
        ratio[j] = sc / th if j >= probation and math.isfinite(th) else 0.0
        bar.learn_one(sc, th)
    opened = (ratio >= 1.0) & ~np.concatenate([[False], ratio[:-1] >= 1.0])
    alarm = nab.governed_alarms(
        ratio,
        opened,
        nab.days_scored(s),
        nab.NAB_REFRACTORY_S,
        nab.NAB_GOVERNOR,
        nab.NAB_CROSS,
        budget,
        t=s.timestamps,
    )
    return ratio / (1.0 + ratio), alarm


def bench(root: Path) -> list[tuple[str, dict[str, Any], float, dict[str, float]]]:
    corpus = nab.load_corpus(root)
    samples = sum(len(s.values) for s in corpus)
    rows = []
    t0 = time.perf_counter()
    ours = nab.detect(corpus)
    rows.append(("ensemble bank (`noc eval nab`)", *_summary(corpus, ours, samples, t0)))
    for name, scorer in DETECTORS.items():
        t0 = time.perf_counter()
        results = []
        for s in corpus:
            results.append(alarms_of(s, scorer(s, nab.probation_length(len(s.values)))))
        rows.append((name, *_summary(corpus, results, samples, t0)))
    return rows


def _summary(
    corpus: list[nab.NabSeries], results: Any, samples: int, t0: float
) -> tuple[dict[str, Any], float, dict[str, float]]:
    rate = samples / (time.perf_counter() - t0)
    per_cat = {}
    for cat in sorted({s.category for s in corpus}):
        mine = [i for i, s in enumerate(corpus) if s.category == cat]
        per_cat[cat] = nab.report([corpus[i] for i in mine], [results[i] for i in mine])[
            "nab_score_standard"
        ]
    return nab.report(corpus, results), rate, per_cat


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--nab",
        type=Path,
        default=Path(__file__).resolve().parents[2] / "shared" / "datasets" / "nab",
    )
    ap.add_argument("--out", type=Path, default=HERE / "single_results.md")
    args = ap.parse_args()
    rows = bench(args.nab)
    cats = list(rows[0][3])
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# Each detector alone on NAB",
        "",
        "- command: `.venv/bin/python bench/bench_single.py --nab ../shared/datasets/nab`",
        f"- machine: {cpu_name()}, Python {platform.python_version()}",
        f"- date: {now}",
        "- rules: every detector with its own defaults, a label-free SPOT bar (tail from the",
        "  98th percentile of its scores in NAB's probation, GPD quantile at the per-sample risk",
        f"  of {nab.NAB_TARGET_RATE:g} false alarms per series-day) and the ensemble's NAB alarm",
        "  policy (refractory, governor, crossings); the ensemble bank row is `noc eval nab`.",
        "  Rate: NAB samples scored per second, bar and policy included, one process.",
        "",
        "| detector | standard | low_FP | low_FN | windows | false alarms / series-day"
        " | samples/s |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, rep, rate, _ in rows:
        lines.append(
            f"| {name} | {rep['nab_score_standard']:.1f} | {rep['nab_score_low_fp']:.1f} |"
            f" {rep['nab_score_low_fn']:.1f} | {rep['windows_detected']}/{rep['windows_total']}"
            f" | {rep['false_alarms_per_series_day']:.3f} | {rate:,.0f} |"
        )
    best = max(rows[1:], key=lambda r: r[1]["nab_score_standard"])
    ens = rows[0][1]["nab_score_standard"]
    lines += [
        "",
        f"Ensemble / best single detector ({best[0]}), standard profile, same run:"
        f" {ens / best[1]['nab_score_standard']:.2f}."
        if best[1]["nab_score_standard"] > 0
        else "",
        "",
        "Standard score per category:",
        "",
        "| detector | " + " | ".join(cats) + " |",
        "|---|" + "---|" * len(cats),
    ]
    for name, _, _, per_cat in rows:
        lines.append(f"| {name} | " + " | ".join(f"{per_cat[c]:.1f}" for c in cats) + " |")
    args.out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    sys.stdout.write(f"wrote {args.out}\n")


if __name__ == "__main__":
    main()
