"""Synthetic telecom KPI series in the NAB layout, untrended, growing, trending and on a local
wall clock whose clocks change, scored
as `noc eval nab` scores NAB: a check on data unlike NAB's (the issue's unseen data includes
"other public KPI series": traffic counts with a daily and weekly pattern, summed over 1 min,
5 min and 1 h, some of them growing).

Each corpus: 12 series of 60 days, Poisson counts (20–5,000 a minute) whose rate swings
20–70 % over the day, drops to 60–100 % at weekends, drifts slowly (a random walk of 0.05 %
an hour in the log) and — in the growing and trending corpora — grows linearly to 1.3 and 2
times its first level over the 60 days; 3–6 anomalies each (from day 12 on, at least 2.5 days
apart): spikes ×1.6–3 for 3–15 min, dips ×0.2–0.6 for 10–60 min, drops to 2 % for 5–30 min,
shifts ×1.3–1.6 for 4–12 h. Each series is written as 1-min values, 5-min sums and hourly sums
(one category each), windows centred on each anomaly's start by NAB's rule (10 % of the
file's rows over the anomaly count). The seeds are fixed; the corpus is made afresh in a
temporary directory. A fourth corpus is the untrended one on Berlin's wall clock: the daily
swing and the weekend follow local time, the timestamps stay UTC (as telemetry's are), and on
30 March (day 27) the clocks go forward, so the whole pattern moves an hour earlier in UTC.

Scored: the ensemble bank as `noc eval nab` runs it (label-free bars, NAB alarm policy), the
same bank without the day-type profile (``day_types`` off), without the profiles' trend term
(``follow_trend`` and ``week_follow_trend`` off), and the rolling Gaussian baseline of
bench_detectors.py, all in the same run; on the Berlin corpus the bank on Berlin time
(``--tz Europe/Berlin``), on UTC (the default) and on a fixed UTC+1 (what a fixed offset
gives), beside the same baseline.

Usage: .venv/bin/python bench/bench_kpi.py [--out bench/kpi_results.md]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from _machine import preamble  # bench/ helpers, found beside this script
from bench_detectors import PREVIOUS_DEFAULTS, rolling_gaussian

from detectors.clock import LocalClock
from evals import nab

HERE = Path(__file__).resolve().parent
SEEDS = tuple(range(1, 13))
AGGREGATES_MIN = (1, 5, 60)
DAYS = 60
T0 = dt.datetime(2025, 3, 3, tzinfo=dt.UTC)  # a Monday


def _stamp(minutes: int) -> str:
    return (T0 + dt.timedelta(minutes=minutes)).strftime("%Y-%m-%d %H:%M:%S")


def _offsets_min(n: int, tz: str | None) -> np.ndarray:
    """Minutes east of UTC at each of ``n`` minutes from :data:`T0` on ``tz``'s wall clock."""
    t = T0.timestamp() + 60.0 * np.arange(n)
    return (LocalClock(tz).local_array(t) - t) / 60.0


def make_corpus(root: Path, growth: float, tz: str | None = None) -> None:
    """Write the corpus (``growth``: the level's relative rise over the 60 days; ``tz``: the
    zone whose wall clock the traffic follows, UTC by default) at ``root``."""
    n = DAYS * 1440
    labels: dict[str, list[list[str]]] = {}
    off = _offsets_min(n, tz)
    for seed in SEEDS:
        rng = np.random.default_rng(seed)
        base = math.exp(rng.uniform(math.log(20), math.log(5000)))
        swing, weekend, phase = rng.uniform(0.2, 0.7), rng.uniform(0.6, 1.0), rng.uniform(0, 6.3)
        m = np.arange(n)
        wall = m + off  # minutes on the local wall clock
        rate = base * (1 + swing * np.sin(2 * math.pi * (wall % 1440) / 1440 + phase))
        rate *= np.where((wall // 1440) % 7 >= 5, weekend, 1.0)
        walk = np.cumsum(rng.normal(0, 0.0005, n // 60 + 1)).repeat(60)[:n]
        rate *= np.exp(walk - walk.mean()) * (1 + growth * m / n)
        mult = np.ones(n)
        starts = []
        grid = np.arange(int(0.2 * n), n - 1440, 3 * 1440)  # windows never overlap
        for c in np.sort(rng.choice(grid, size=int(rng.integers(3, 7)), replace=False)):
            s = int(c + rng.integers(0, 600))
            kind = int(rng.integers(0, 4))
            if kind == 0:
                mult[s : s + rng.integers(3, 16)] = rng.uniform(1.6, 3)
            elif kind == 1:
                mult[s : s + rng.integers(10, 61)] = rng.uniform(0.2, 0.6)
            elif kind == 2:
                mult[s : s + rng.integers(5, 31)] = 0.02
            else:
                mult[s : s + rng.integers(240, 721)] = rng.uniform(1.3, 1.6)
            starts.append(s)
        x = rng.poisson(rate * mult)
        for agg in AGGREGATES_MIN:
            cat = f"kpi_{agg}min"
            v = x[: n // agg * agg].reshape(-1, agg).sum(1)
            (root / "data" / cat).mkdir(parents=True, exist_ok=True)
            rows = ["timestamp,value", *(f"{_stamp(i * agg)},{int(y)}" for i, y in enumerate(v))]
            (root / "data" / cat / f"s{seed}.csv").write_text("\n".join(rows) + "\n")
            half = int(0.1 * len(v) / len(starts)) // 2
            labels[f"{cat}/s{seed}.csv"] = [
                [
                    _stamp(max(0, s // agg - half) * agg) + ".000000",
                    _stamp(min(len(v) - 1, s // agg + half) * agg) + ".000000",
                ]
                for s in starts
            ]
    (root / "labels").mkdir(parents=True, exist_ok=True)
    (root / "labels" / "combined_windows.json").write_text(json.dumps(labels, indent=1))


Detector = Callable[[list[nab.NabSeries]], list[tuple[Any, Any]]]
OURS = "ensemble bank (`noc eval nab`)"
NO_TYPES = "same bank, no day-type profile"
NO_TREND = "same bank, no trend term"
PREVIOUS = "same bank, evals.nab's previous defaults"
BASELINE = "rolling Gaussian, |z| ≥ 4 (baseline)"
DETECTORS: dict[str, Detector] = {
    OURS: lambda c: nab.detect(c),
    NO_TYPES: lambda c: nab.detect(c, day_types=False),
    NO_TREND: lambda c: nab.detect(c, follow_trend=False, week_follow_trend=False),
    PREVIOUS: lambda c: nab.detect(c, **PREVIOUS_DEFAULTS),
    BASELINE: rolling_gaussian,
}
BERLIN = "Europe/Berlin"
ZONED = "ensemble bank on Berlin time (`noc eval nab --tz Europe/Berlin`)"
ON_UTC = "same bank on UTC (no zone)"
FIXED = "same bank on a fixed UTC+1"
ZONE_DETECTORS: dict[str, Detector] = {
    ZONED: lambda c: nab.detect(c, tz=BERLIN),
    ON_UTC: lambda c: nab.detect(c),
    FIXED: lambda c: nab.detect(c, utc_offset=3600.0),
    BASELINE: rolling_gaussian,
}


def _row(name: str, rep: dict[str, Any]) -> str:
    return (
        f"| {name} | {rep['nab_score_standard']:.1f} | {rep['nab_score_low_fp']:.1f} |"
        f" {rep['nab_score_low_fn']:.1f} | {rep['windows_detected']}/{rep['windows_total']} |"
        f" {rep['false_alarms']} |"
    )


def _ratios(
    score: dict[str, float], ours: str, label: str, others: tuple[tuple[str, str], ...]
) -> str:
    """The standard-score ratios of ``ours`` to each of ``others`` and to the baseline."""
    pairs = (*others, (BASELINE, "rolling Gaussian"))
    if min(score[k] for k, _ in pairs) <= 0:
        return "Standard scores: " + " / ".join(f"{score[k]:.1f}" for k in (ours, *dict(pairs)))
    parts = [f"{label} / {name}: {score[ours] / score[k]:.2f}" for k, name in pairs]
    return f"Standard score, {'; '.join(parts)} (same run)."


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=HERE / "kpi_results.md")
    args = ap.parse_args()
    lines = [
        *preamble(
            "Synthetic KPI series (untrended, growing, trending, on a wall clock that changes)",
            f", numpy {np.__version__}",
        ),
        "- data: made by the script (fixed seeds; see its docstring): 12 series × 60 days per"
        " corpus, each as 1-min values, 5-min sums and hourly sums; scored with NAB v1.1's"
        " scorer (`evals.nab`), thresholds label-free as in `noc eval nab`.",
        "",
    ]
    corpora: tuple[tuple[str, float, str | None], ...] = (
        ("untrended", 0.0, None),
        ("growing (level × 1.3 over 60 days, 0.5 % a day)", 0.3, None),
        ("trending (level × 2 over 60 days)", 1.0, None),
        ("untrended on Berlin's wall clock (clocks forward on day 27)", 0.0, BERLIN),
    )
    for title, growth, tz in corpora:
        with tempfile.TemporaryDirectory(prefix="noc-kpi-") as tmp:
            root = Path(tmp)
            make_corpus(root, growth, tz)
            corpus = nab.load_corpus(root)
            dets = DETECTORS if tz is None else ZONE_DETECTORS
            reports = {name: nab.report(corpus, det(corpus)) for name, det in dets.items()}
        lines += [
            f"## {title}",
            "",
            "| detector / category | standard | reward_low_FP | reward_low_FN | windows |"
            " false alarms |",
            "|---|---|---|---|---|---|",
        ]
        for name, rep in reports.items():
            lines.append(_row(f"**{name}**, all", rep))
            for cat, entry in sorted(rep["per_category"].items()):
                lines.append(_row(f"{name}, {cat}", entry))
        score = {name: r["nab_score_standard"] for name, r in reports.items()}
        if tz is None:
            others = (
                (NO_TYPES, "no day-type profile"),
                (NO_TREND, "no trend term"),
                (PREVIOUS, "previous defaults"),
            )
            lines += ["", _ratios(score, OURS, "ours", others), ""]
        else:
            others = ((ON_UTC, "on UTC"), (FIXED, "fixed UTC+1"))
            lines += ["", _ratios(score, ZONED, "on Berlin time", others), ""]
    args.out.write_text("\n".join(lines))


if __name__ == "__main__":
    main()
