"""Varied simulator networks (issue 36 item 4): `noc simulate --vary SEED` + `noc eval run`,
one row per seed and an overall row, written to bench/varied_results.md.

Seeds: 1000-1009 are reserved for tuning (inspect them freely); 2000-2009 are held out for
evaluation and never used for tuning; 3000-3009 are a second held-out set, run once the
changes of a round are final (2000-2009 were scored after each round, so a stop chosen on them
would be a choice made on held-out data). Each network is drawn by ``--vary SEED --seed SEED``
(noise family and tails, daily / weekly / holiday shapes, sparse counters, benign flash crowds,
counter resets, scrape jitter and gaps, size, core, serving engine, SBI metrics, zone) with
every fault class each day.

Usage: .venv/bin/python bench/bench_varied.py [--seeds 10] [--days 3] [--interval 60]
       [--first-seed 2000] [--work /tmp/noc-varied] [--out bench/varied_results.md]
Quick check: --seeds 2 --days 1.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from _machine import cpu_name  # bench/ helper, found beside this script

ROOT = Path(__file__).resolve().parent.parent
NOC = str(Path(sys.executable).with_name("noc"))
TUNING = range(1000, 1010)
HELD_OUT = range(2000, 2010)
FRESH = range(3000, 3010)
TARGETS = {
    "recall": ">= 0.95",
    "false pages / entity-day": "<= 0.1",
    "AC@1": ">= 0.90",
    "AC@3": ">= 0.98",
    "median delay (intervals)": "<= 3",
}


def run_one(
    seed: int, days: float, interval: float, work: Path, keep: bool = False
) -> dict[str, Any]:
    out = work / f"vary{seed}-d{days:g}-i{interval:g}"
    out.mkdir(parents=True, exist_ok=True)
    sim = [NOC, "simulate", "--vary", str(seed), "--seed", str(seed), "--days", f"{days:g}"]
    sim += ["--interval", f"{interval:g}", "--faults", "all", "--out", str(out)]
    done = subprocess.run(sim, check=True, cwd=ROOT, capture_output=True, text=True)
    t = time.perf_counter()
    subprocess.run(
        [
            NOC, "eval", "run",
            "--telemetry", str(out / "telemetry.jsonl"),
            "--labels", str(out / "labels.json"),
            "--inventory", str(out / "inventory.json"),
            "--out", str(out / "report.json"),
        ],
        check=True,
        cwd=ROOT,
        capture_output=True,
    )  # fmt: skip
    wall = time.perf_counter() - t
    report: dict[str, Any] = json.loads((out / "report.json").read_text())
    labels = json.loads((out / "labels.json").read_text())
    if not keep:
        (out / "telemetry.jsonl").unlink(missing_ok=True)
    draw = " ".join(done.stdout.split("vary=", 1)[1].split("telemetry")[0].split())
    draw = draw.split(": ", 1)[1]  # after "SEED: "
    return {
        "seed": seed,
        "draw": draw,
        "incidents": len(labels["incidents"]),
        "report": report,
        "wall_s": wall,
    }


def _fmt(v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:.3f}"
    return str(v)


def _delays(report: dict[str, Any]) -> list[float]:
    return [
        float(d["delay_after_signal_intervals"])
        for d in report.get("detected_incidents", [])
        if d.get("delay_after_signal_intervals") is not None
    ]


def _row(r: dict[str, Any], dup_keys: list[str]) -> list[Any]:
    rep = r["report"]
    return [
        r["seed"],
        r["incidents"],
        rep.get("incident_recall"),
        rep.get("false_alerts_per_entity_day"),
        *(rep.get(k) for k in dup_keys),
        rep.get("rca_ac1"),
        rep.get("rca_ac3"),
        rep.get("detection_delay_intervals_p50"),
    ]


def _weighted(results: list[dict[str, Any]], key: str) -> float | None:
    pairs = [(r["report"].get(key), r["incidents"]) for r in results]
    pairs = [(v, n) for v, n in pairs if v is not None]
    total = sum(n for _, n in pairs)
    return sum(v * n for v, n in pairs) / total if total else None


def _overall(results: list[dict[str, Any]], dup_keys: list[str]) -> list[Any]:
    fp = [
        (r["report"].get("false_alerts_per_entity_day"), r["report"].get("normal_entity_days"))
        for r in results
    ]
    fp = [(v, n) for v, n in fp if v is not None and n]
    delays = [d for r in results for d in _delays(r["report"])]
    return [
        "**all**",
        sum(r["incidents"] for r in results),
        _weighted(results, "incident_recall"),
        sum(v * n for v, n in fp) / sum(n for _, n in fp) if fp else None,
        *(
            statistics.fmean([r["report"][k] for r in results if r["report"].get(k) is not None])
            for k in dup_keys
        ),
        _weighted(results, "rca_ac1"),
        _weighted(results, "rca_ac3"),
        statistics.median(delays) if delays else None,
    ]


def write(results: list[dict[str, Any]], args: argparse.Namespace, path: Path) -> None:
    dup_keys = sorted(
        {
            k
            for r in results
            for k, v in r["report"].items()
            if "duplicate" in k and isinstance(v, int | float)
        }
    )
    head = ["seed", "incidents", "recall", "false pages / entity-day", *dup_keys]
    head += ["AC@1", "AC@3", "median delay (intervals)"]
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    seeds = [r["seed"] for r in results]
    full = args.seeds >= 10 and args.days >= 3 and args.interval == 60
    lines = [
        "# Varied simulator networks (issue 36 item 4)",
        "",
        f"- command: `.venv/bin/python bench/bench_varied.py --seeds {args.seeds} "
        f"--days {args.days:g} --interval {args.interval:g} --first-seed {args.first_seed}` "
        "(each seed S: `noc simulate --vary S --seed S --days D --interval I --faults all`, "
        "then `noc eval run --telemetry … --labels … --inventory …`)",
        f"- machine: {cpu_name()}, 2 cores shared with other jobs, Python "
        f"{platform.python_version()}; written {now}",
        f"- seeds {seeds[0]}–{seeds[-1]} evaluated; seeds {TUNING.start}–{TUNING.stop - 1} are "
        f"reserved for tuning, {HELD_OUT.start}–{HELD_OUT.stop - 1} and "
        f"{FRESH.start}–{FRESH.stop - 1} are held out (never used for tuning)",
        "- "
        + (
            "full run"
            if full
            else "**reduced run** (the full run is 10 seeds × 3 days at 60 s; this one is "
            f"{args.seeds} seed(s) × {args.days:g} day(s) at {args.interval:g} s)"
        ),
        "- recall, AC@1 and AC@3 overall are incident-weighted; false pages per entity-day "
        "overall pools the seeds' normal entity-days (`false_alerts_per_entity_day`"
        + (", duplicates included where the key exists" if dup_keys else "")
        + "); the median delay overall is over every detected incident "
        "(`delay_after_signal_intervals`)",
        "- targets: " + ", ".join(f"{k} {v}" for k, v in TARGETS.items()),
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for r in results:
        lines.append("| " + " | ".join(_fmt(v) for v in _row(r, dup_keys)) + " |")
    lines.append("| " + " | ".join(_fmt(v) for v in _overall(results, dup_keys)) + " |")
    lines += ["", "## The draws", ""]
    for r in results:
        lines.append(f"- {r['seed']}: {r['draw']} (eval {r['wall_s'] / 60:.1f} min)")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=10, help="how many seeds from --first-seed")
    ap.add_argument("--days", type=float, default=3.0)
    ap.add_argument("--interval", type=float, default=60.0)
    ap.add_argument("--first-seed", type=int, default=HELD_OUT.start)
    ap.add_argument("--work", type=Path, default=Path("/tmp/noc-varied"))
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "varied_results.md")
    ap.add_argument("--keep", action="store_true", help="keep each draw's telemetry.jsonl")
    args = ap.parse_args()
    results = []
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        results.append(run_one(seed, args.days, args.interval, args.work, args.keep))
        print(f"seed {seed} done", file=sys.stderr)
        write(results, args, args.out)  # after each seed: an interrupted run leaves its rows
    print(args.out.read_text())


if __name__ == "__main__":
    main()
