"""Held-out simulator scenarios at several scrape intervals: `noc simulate` + `noc eval run`,
one row per scenario, written to bench/scenario_results.md.

Every scenario uses a seed never inspected while building the detectors or the RCA pack (the
tuning seeds were 11, 12 and 41 at 15 s, 8 at 30 s, 5 at 60 s, 53 at 300 s and 900 s; see the
issue notes). The 14-day run at 15 s is the headline of issues 3 and 4; the 30 s and 60 s runs
check that nothing depends on the scrape interval, the 300 s and 900 s ones PM reporting periods
(3GPP PM files come every 5 or 15 min); the ``:phases`` rows scrape each entity at its own
offset after the tick (``noc simulate --scrape-phases``), as a Prometheus server spreads its
targets, so that KPI windows cut scrape intervals as they do on real data; the ``:sglang`` and
``:mixed`` rows run the GPU servers on SGLang (all, or every other one: ``noc simulate
--serving-engine``), on the seed of a vLLM row so that the two compare figure for figure; a
``:xN`` row runs a network N times larger (``noc simulate --scale N``: 2N AMFs, SMFs and GPU
servers, 2N + 1 UPFs); a ``:converged`` row adds an EPC beside the 5G core (``noc simulate
--core converged``: MMEs, an HSS, an SGW, the gateway-selection DNS), where S1, attach-storm,
DNS and S6a faults happen in half the incidents of those classes; a ``:nosbi`` row exports no
SBI client metrics (``noc simulate --no-sbi-metrics``: a plain Open5GS deployment).

Usage: .venv/bin/python bench/bench_scenarios.py [--work /tmp/noc-bench] [--keep]
       [--scenario DAYS:INTERVAL:SEED[:phases][:sglang|:mixed][:xN][:converged][:nosbi] ...]

``--keep`` leaves the telemetry on disk (a 14-day run is 4.7 GB) and reuses a finished
scenario's report.json; the table names the git commit each report was measured at.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from _machine import cpu_name  # bench/ helper, found beside this script

ROOT = Path(__file__).resolve().parent.parent
NOC = str(Path(sys.executable).with_name("noc"))
DEFAULT = (
    "14:15:97",
    "3:30:19",
    "4:60:31",
    "10:300:71",
    "20:900:83",
    "3:15:61:phases",
    "10:300:71:phases",
    "10:600:37",  # 10-min PM periods (added in the sixth session; seed never inspected)
    # 30- and 60-min PM granularity periods (added in the eighth session; seeds never inspected)
    "30:1800:43",
    "40:3600:29",
    # GPU servers on SGLang (added in the ninth session): the seeds of the 60 s and 300 s rows
    "4:60:31:mixed",
    "10:300:71:sglang",
    # a network three times larger (added in the ninth session), on a seed never inspected
    "3:60:67:phases:mixed:x3",
    # a converged core, EPC beside the 5G core (added in the tenth session): the seeds of the
    # 60 s, 300 s and 900 s rows, and a phased 15 s run on a seed never inspected
    "4:60:31:converged",
    "10:300:71:converged",
    "20:900:83:converged",
    "3:15:59:phases:converged",
    # a plain Open5GS deployment, no SBI client metrics (added in the tenth session): the
    # seeds of the 60 s and 300 s rows
    "4:60:31:nosbi",
    "10:300:71:nosbi",
)
FLAGS = {
    "phases": ", phased scrapes",
    "sglang": ", SGLang engines",
    "mixed": ", mixed engines",
    "converged": ", converged EPC + 5GC",
    "nosbi": ", no SBI metrics",
}
SCALE = re.compile(r"^x([1-8])$")
KEYS = (
    "incident_recall",
    "false_alerts_per_entity_day",
    "false_positives",
    "detection_delay_s_p50",
    "detection_delay_s_p95",
    "detection_delay_after_signal_s_p50",
    "detection_delay_intervals_p50",
    "rca_ac1",
    "rca_ac3",
    "rca_noop_accuracy",
    "rca_ece",
    "rca_evidence_resolution_rate",
    "samples",
    "samples_per_s",
)


def _commit() -> str:
    out = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    )
    return out.stdout.strip() or "unknown"


def run_one(spec: str, work: Path, keep: bool) -> dict[str, Any]:
    days, interval, seed, *flags = spec.split(":")
    engines = [f for f in flags if f in ("sglang", "mixed")]
    scales = [m.group(1) for f in flags if (m := SCALE.match(f))]
    if any(f not in FLAGS and not SCALE.match(f) for f in flags) or len(engines) > 1:
        raise SystemExit(
            f"--scenario {spec}: expected "
            "DAYS:INTERVAL:SEED[:phases][:sglang|:mixed][:xN][:converged][:nosbi]"
        )
    phases = "phases" in flags
    out = work / "-".join([f"d{days}", f"i{interval}", f"s{seed}", *flags])
    report, stamp = out / "report.json", out / "commit.txt"
    if keep and report.is_file() and stamp.is_file():
        result: dict[str, Any] = json.loads(report.read_text())
        result["_wall_s"] = float((out / "wall_s.txt").read_text())
        result["_commit"] = stamp.read_text().strip()
    else:
        out.mkdir(parents=True, exist_ok=True)
        sim = [NOC, "simulate", "--days", days, "--interval", interval, "--seed", seed]
        sim += ["--scrape-phases"] if phases else []
        sim += ["--serving-engine", engines[0]] if engines else []
        sim += ["--scale", scales[0]] if scales else []
        sim += ["--core", "converged"] if "converged" in flags else []
        sim += ["--no-sbi-metrics"] if "nosbi" in flags else []
        subprocess.run([*sim, "--faults", "all", "--out", str(out)], check=True, cwd=ROOT)
        t = time.perf_counter()
        subprocess.run(
            [
                NOC, "eval", "run",
                "--telemetry", str(out / "telemetry.jsonl"),
                "--labels", str(out / "labels.json"),
                "--inventory", str(out / "inventory.json"),
                "--out", str(report),
            ],
            check=True,
            cwd=ROOT,
        )  # fmt: skip
        wall = time.perf_counter() - t
        (out / "wall_s.txt").write_text(f"{wall:.1f}")
        stamp.write_text(_commit())
        result = json.loads(report.read_text())
        result["_wall_s"] = wall
        result["_commit"] = _commit()
    if not keep:
        (out / "telemetry.jsonl").unlink(missing_ok=True)
    result["_spec"] = (float(days), float(interval), int(seed))
    result["_flags"] = [f for f in FLAGS if f in flags] + [f"x{n}" for n in scales]
    return result


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3f}" if abs(value) < 100 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def _name(r: dict[str, Any]) -> str:
    d, i, s = r["_spec"]
    extra = [FLAGS.get(f) or f", network ×{f[1:]}" for f in r["_flags"]]
    return f"{d:g} d at {i:g} s, seed {s}" + "".join(extra)


def _arg(r: dict[str, Any]) -> str:
    return ":".join([*(f"{x:g}" for x in r["_spec"]), *r["_flags"]])


def write(results: list[dict[str, Any]], path: Path) -> None:
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    head = "| key | " + " | ".join(_name(r) for r in results)
    lines = [
        "# Held-out simulator scenarios (issues 3 and 4)",
        "",
        f"- command: `.venv/bin/python bench/bench_scenarios.py --scenario "
        f"{' '.join(_arg(r) for r in results)}` "
        "(each: `noc simulate --days D --interval I --seed S --faults all` (`:phases`: with "
        "`--scrape-phases`, each entity scraped at its own offset after the tick; `:sglang` / "
        "`:mixed`: with `--serving-engine`; `:xN`: with `--scale N`; `:converged`: with "
        "`--core converged`; `:nosbi`: with `--no-sbi-metrics`) then "
        "`noc eval run --telemetry … --labels … --inventory …`)",
        f"- machine: {cpu_name()}, 2 cores shared with other jobs, Python "
        f"{platform.python_version()}; written {now}",
        "- thresholds label-free; seeds never inspected while tuning (tuning seeds: 11, 12, 41 at "
        "15 s, 8 at 30 s, 5 at 60 s, 12 at 120 s, 53 at 300 s, 600 s and 900 s, 41 at 600 s, "
        "54 at 900 s, 6 at 1800 s, 9 at 3600 s); "
        "every fault class several times, ≥ 20 % no-fault windows, benign peaks, clean "
        "restarts and maintenance windows in each scenario",
        "",
        head + " |",
        "|---|" + "---|" * len(results),
    ]
    for key in KEYS:
        lines.append(f"| `{key}` | " + " | ".join(_fmt(r.get(key)) for r in results) + " |")
    lines.append(
        "| eval wall time | " + " | ".join(f"{r['_wall_s'] / 60:.1f} min" for r in results) + " |"
    )
    lines.append("| code (git commit) | " + " | ".join(r["_commit"] for r in results) + " |")
    lines += ["", "RCA classes below 1.0 (AC@1 / AC@3 over cases), and every rank-1 miss:", ""]
    for r in results:
        weak = {
            k: v for k, v in (r.get("rca_by_fault") or {}).items() if min(v["ac1"], v["ac3"]) < 1
        }
        classes = (
            ", ".join(
                f"{k} {v['ac1']:.2f} / {v['ac3']:.2f} ({v['cases']:g})" for k, v in weak.items()
            )
            or "none"
        )
        lines.append(f"- {_name(r)}: {classes}")
        for miss in r.get("rca_failures") or []:
            lines.append(f"  - {miss}")
    path.write_text("\n".join(lines) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", type=Path, default=Path("/tmp/noc-bench"))
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--scenario", nargs="+", default=list(DEFAULT))
    ap.add_argument(
        "--out", type=Path, default=ROOT / "bench" / "scenario_results.md", help="results file"
    )
    args = ap.parse_args()
    results = [run_one(spec, args.work, args.keep) for spec in args.scenario]
    write(results, args.out)
    if not args.keep:
        shutil.rmtree(args.work, ignore_errors=True)


if __name__ == "__main__":
    main()
