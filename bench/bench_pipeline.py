"""End-to-end pipeline benchmark: simulate N days, replay them through `noc eval run`'s path
(parse → reorder → KPIs → detectors → correlator → RCA) and the in-memory demo path, and write
the rates and the scenario scores to bench/pipeline_results.md.

Usage: .venv/bin/python bench/bench_pipeline.py [--days 1] [--seed 23] [--runs 3] [--baseline REV]

``--baseline REV`` measures the same stages on a git worktree of REV in the same run (the
machines are noisy: compare ratios, not figures from different days). The in-memory stage and
`noc eval run` are timed ``--runs`` times (3), the best kept, for both revisions.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from _machine import cpu_name  # bench/ helper, found beside this script

from noc_assistant.ingest import Point, read_replay
from noc_assistant.ingest.quarantine import Quarantine
from noc_assistant.inventory import topology_from_dict
from noc_assistant.simulate import Scenario, ScenarioConfig, build_scenario, write_scenario

try:
    from noc_assistant.stream.pipeline import Pipeline
except ImportError:  # a baseline from before the package was grouped by role
    from noc_assistant.pipeline import Pipeline  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parent.parent


def _fault_row(fault: str, v: dict[str, Any]) -> str:
    delay = v["detection_delay_s_p50"]
    shown = "–" if delay is None else f"{delay:.0f}"
    return f"| {fault} | {v['incidents']} | {v['detected']} | {v['recall']:.3f} | {shown} |"


SCORE_KEYS = [
    "incident_recall",
    "false_alerts_per_entity_day",
    "false_positives",
    "alerts_total",
    "fpr",
    "fpr_ci95",
    "detection_delay_s_p50",
    "detection_delay_s_p95",
    "rca_ac1",
    "rca_ac3",
    "rca_noop_accuracy",
    "rca_ece",
]


@dataclass
class Timings:
    """Seconds of each stage, the samples they went through, and `noc eval run`'s scores."""

    sim_s: float
    mem_s: float
    alone_s: float
    parse_s: float
    columns_s: float
    eval_s: float
    samples: int
    scores: dict[str, Any]


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    ap.add_argument("--days", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=23)
    ap.add_argument("--baseline", help="git revision to measure in the same run")
    ap.add_argument(
        "--runs", type=int, default=3, help="best of how many runs, in memory and noc eval run"
    )
    ap.add_argument("--emit-json", action="store_true", help=argparse.SUPPRESS)
    return ap.parse_args()


def measure_baseline(args: argparse.Namespace) -> Timings:
    """This script's stages on a worktree of ``args.baseline`` (its package first on the path,
    `noc eval run` included), in a child process."""
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "baseline"
        git = ["git", "-C", str(ROOT)]
        subprocess.run([*git, "worktree", "add", "--detach", str(tree), args.baseline], check=True)
        try:
            env = {**os.environ, "PYTHONPATH": str(tree)}
            cmd = [sys.executable, __file__, "--days", str(args.days), "--seed", str(args.seed)]
            cmd += ["--runs", str(args.runs)]
            out = subprocess.run([*cmd, "--emit-json"], env=env, check=True, capture_output=True)
        finally:
            subprocess.run([*git, "worktree", "remove", "--force", str(tree)], check=True)
    return Timings(**json.loads(out.stdout))


def _columnar(scenario: Scenario, pipe: Pipeline) -> bool:
    """Whether this tree feeds the simulator's columns (`noc demo` since issue 40's columnar
    ingest); an older baseline feeds points."""
    return hasattr(scenario, "iter_columns") and hasattr(pipe, "feed_columns")


def _series_keys(scenario: Scenario, pipe: Pipeline) -> Any:
    import numpy as np

    return np.array(
        [pipe.number(s.metric, s.point_labels, s.type) for s in scenario.series],
        np.int64,
    )


def _points(scenario: Scenario) -> Iterator[Point]:
    for s in scenario.iter_samples():
        yield Point(s.ts, s.metric, tuple(sorted(s.labels.items())), s.value, s.type)


def _new_pipeline(scenario: Scenario) -> Pipeline:
    return Pipeline(topology=topology_from_dict(scenario.inventory), rca=True)


def time_in_memory(scenario: Scenario) -> tuple[float, Pipeline]:
    """The in-memory path (what `noc demo` does, the simulator rendering as it goes): its
    seconds and the pipeline."""
    pipe = _new_pipeline(scenario)
    t = time.perf_counter()
    if _columnar(scenario, pipe):
        keys = _series_keys(scenario, pipe)
        for cols in scenario.iter_columns():
            pipe.feed_columns(cols.ts, keys[cols.series], cols.value)
    else:
        pipe.feed_all(_points(scenario))
    pipe.finish()
    mem_s = time.perf_counter() - t
    return mem_s, pipe


def time_alone(scenario: Scenario, runs: int = 3) -> float:
    """The pipeline alone: the simulator's output made before (columns, or points for a
    baseline without them), the pipeline's CPU seconds, best of ``runs``."""
    columnar = _columnar(scenario, _new_pipeline(scenario))
    made: list[Any] = list(scenario.iter_columns() if columnar else _points(scenario))
    best = math.inf
    for _ in range(runs):
        pipe = _new_pipeline(scenario)
        t = time.process_time()
        if columnar:
            keys = _series_keys(scenario, pipe)
            for cols in made:
                pipe.feed_columns(cols.ts, keys[cols.series], cols.value)
        else:
            pipe.feed_all(made)
        pipe.finish()
        best = min(best, time.process_time() - t)
    return best


def time_parse(telemetry: Path, samples: int) -> float:
    """The parser alone (the ceiling for the file path)."""
    t = time.perf_counter()
    parsed = sum(1 for _ in read_replay(telemetry, Quarantine()))
    parse_s = time.perf_counter() - t
    assert parsed == samples, (parsed, samples)
    return parse_s


def time_parse_columns(telemetry: Path, samples: int) -> float:
    """The parser alone, to columns (what `noc eval run` reads a plain JSONL file with since
    the columnar ingest: no point made)."""
    try:
        from noc_assistant.ingest.columnar import read_jsonl_columns
    except ImportError:  # a baseline from before the columnar reader
        return math.nan
    t = time.perf_counter()
    parsed = sum(len(chunk) for chunk in read_jsonl_columns(telemetry, Quarantine()))
    parse_s = time.perf_counter() - t
    assert parsed == samples, (parsed, samples)
    return parse_s


def time_eval(paths: dict[str, Path], report: Path) -> float:
    """The file path, parsing included: the `noc eval run` command itself."""
    t = time.perf_counter()
    subprocess.run(
        [
            str(Path(sys.executable).parent / "noc"),
            "eval",
            "run",
            "--telemetry",
            str(paths["telemetry"]),
            "--labels",
            str(paths["labels"]),
            "--inventory",
            str(paths["inventory"]),
            "--out",
            str(report),
        ],
        check=True,
        capture_output=True,
    )
    return time.perf_counter() - t


def measure(args: argparse.Namespace) -> Timings:
    scenario = build_scenario(ScenarioConfig(days=args.days, faults="all", seed=args.seed))
    # once untimed: the detectors' numba kernels compile on first use of each signature (a
    # fresh worktree has no on-disk cache), and the timed run would time the compiler
    time_in_memory(scenario)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        t = time.perf_counter()
        paths = write_scenario(scenario, out)
        sim_s = time.perf_counter() - t
        # best of ``runs``: this machine's seconds move by up to 1.5x from one run to the next
        mem_s, pipe = min((time_in_memory(scenario) for _ in range(args.runs)), key=_first)
        samples = pipe.samples
        alone_s = time_alone(scenario)
        parse_s = time_parse(paths["telemetry"], samples)
        columns_s = time_parse_columns(paths["telemetry"], samples)
        report = out / "report.json"
        eval_s = min(time_eval(paths, report) for _ in range(args.runs))
        scores = json.loads(report.read_text())
    return Timings(sim_s, mem_s, alone_s, parse_s, columns_s, eval_s, samples, scores)


def _first(pair: tuple[float, Any]) -> float:
    return pair[0]


def report_lines(args: argparse.Namespace, m: Timings) -> list[str]:
    """bench/pipeline_results.md's lines."""
    samples, scores = m.samples, m.scores
    return [
        "# Pipeline benchmark (end to end)",
        "",
        f"- command: `.venv/bin/python bench/bench_pipeline.py --days {args.days:g} "
        f"--seed {args.seed}"
        + (f" --runs {args.runs}" if args.runs != 3 else "")
        + (f" --baseline {args.baseline}`" if args.baseline else "`"),
        f"- machine: {cpu_name()}, 2 cores, Python {platform.python_version()}",
        f"- date: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC",
        f"- scenario: {args.days:g} simulated day(s), every fault class, seed {args.seed} "
        f"(held out: no threshold or rule was tuned on it), {samples:,} samples",
        "",
        "| stage | wall s | samples/s |",
        "|---|---|---|",
        f"| simulate + write JSONL | {m.sim_s:.1f} | {samples / m.sim_s:,.0f} |",
        f"| pipeline in memory (noc demo path, RCA included; best of {args.runs}) | "
        f"{m.mem_s:.1f} | "
        f"{samples / m.mem_s:,.0f} |",
        f"| the pipeline alone (what the simulator renders made before; CPU s, best of 3) | "
        f"{m.alone_s:.1f} | {samples / m.alone_s:,.0f} |",
        f"| parse the JSONL replay only (`read_replay`) | {m.parse_s:.1f} | "
        f"{samples / m.parse_s:,.0f} |",
        f"| parse the JSONL replay to columns only (`read_jsonl_columns`) | {m.columns_s:.1f} | "
        f"{samples / m.columns_s:,.0f} |",
        f"| `noc eval run` (parse + pipeline + scoring, process start included; best of "
        f"{args.runs}) | "
        f"{m.eval_s:.1f} | {samples / m.eval_s:,.0f} |",
        "",
        "Scenario scores (`noc eval run`, label-free thresholds):",
        "",
        "| key | value |",
        "|---|---|",
        *[f"| `{k}` | {json.dumps(scores.get(k))} |" for k in SCORE_KEYS],
        "",
        "Per detector:",
        "",
        "```json",
        json.dumps(scores.get("per_detector"), indent=2),
        "```",
        "",
        "Per fault class (`recall_by_fault`):",
        "",
        "| fault class | incidents | detected | recall | median delay s |",
        "|---|---|---|---|---|",
        *[_fault_row(fault, v) for fault, v in (scores.get("recall_by_fault") or {}).items()],
    ]


def baseline_lines(args: argparse.Namespace, now: Timings, base: Timings) -> list[str]:
    """The same stages at ``args.baseline``, measured in the same run, and the speed-ups."""
    rows = [
        ("pipeline in memory", base.mem_s, now.mem_s),
        ("the pipeline alone (CPU s)", base.alone_s, now.alone_s),
        ("parse the JSONL replay only", base.parse_s, now.parse_s),
        ("parse to columns only", base.columns_s, now.columns_s),
        ("`noc eval run`", base.eval_s, now.eval_s),
    ]
    same = {k: base.scores.get(k) == now.scores.get(k) for k in SCORE_KEYS}
    return [
        "",
        f"Against `{args.baseline}` (a worktree of it, measured in the same run):",
        "",
        "| stage | baseline wall s | now wall s | speed-up |",
        "|---|---|---|---|",
        *[
            f"| {name} | {b:.1f} | {n:.1f} | {b / n:.2f}× |"
            if math.isfinite(b)
            else f"| {name} | n/a (not in that revision) | {n:.1f} | |"
            for name, b, n in rows
        ],
        "",
        "Scenario scores equal to the baseline's: "
        + (
            "all keys above."
            if all(same.values())
            else "not " + ", ".join(f"`{k}`" for k, v in same.items() if not v) + "."
        ),
    ]


def _tune_collector() -> None:
    """The collector as `noc` sets it (`noc_assistant.stream.collector`); a baseline from
    before that module runs with CPython's default, as its `noc` did."""
    try:
        from noc_assistant.stream.collector import tune_collector
    except ImportError:
        return
    tune_collector()


def main() -> None:
    args = parse_args()
    _tune_collector()
    timings = measure(args)
    if args.emit_json:
        print(json.dumps(dataclasses.asdict(timings)))
        return
    lines = report_lines(args, timings)
    if args.baseline:
        lines[15:15] = baseline_lines(args, timings, measure_baseline(args))
    (ROOT / "bench" / "pipeline_results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
