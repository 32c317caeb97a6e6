"""Each detector of the library alone on NAB → bench/single_results.md.

Run: ``.venv/bin/python bench/bench_single.py [--nab ../shared/datasets/nab]``

The ensemble bank is what ``noc eval nab`` scores; this table shows what each of the
library's univariate detectors does alone under the same rules (``noc eval nab --detector
NAME``, :mod:`evals.single`: each detector's defaults, a label-free SPOT bar from its
probation scores at the budget's per-sample risk, the ensemble's NAB alarm policy), so that
the ensemble's gain over its parts and over river's HalfSpaceTrees, the issue's reference
point, is measured in one run on one machine.
"""

from __future__ import annotations

import argparse
import datetime as dt
import platform
import sys
import time
from pathlib import Path
from typing import Any

from _machine import NAB_ROOT, cpu_name  # bench/ helper, found beside this script

from evals import nab
from evals.single import DETECTORS, START_QUANTILE, detect_single

HERE = Path(__file__).resolve().parent


def bench(root: Path) -> list[tuple[str, dict[str, Any], float, dict[str, float]]]:
    corpus = nab.load_corpus(root)
    samples = sum(len(s.values) for s in corpus)
    rows = []
    t0 = time.perf_counter()
    ours = nab.detect(corpus)
    rows.append(("ensemble bank (`noc eval nab`)", *_summary(corpus, ours, samples, t0)))
    for name, (label, _) in DETECTORS.items():
        t0 = time.perf_counter()
        results = detect_single(corpus, name)
        rows.append((f"{label} (`--detector {name}`)", *_summary(corpus, results, samples, t0)))
    return rows


def _summary(
    corpus: list[nab.NabSeries], results: Any, samples: int, t0: float
) -> tuple[dict[str, Any], float, dict[str, float]]:
    rate = samples / (time.perf_counter() - t0)
    rep = nab.report(corpus, results)
    per_cat = {cat: v["nab_score_standard"] for cat, v in sorted(rep["per_category"].items())}
    return rep, rate, per_cat


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nab", type=Path, default=NAB_ROOT)
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
        f"  {START_QUANTILE:.0%} quantile of its scores in NAB's probation, GPD quantile at the"
        " per-sample risk",
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
