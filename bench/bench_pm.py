"""The same simulated network read two ways: the exporters' samples (`telemetry.jsonl`, what
Prometheus scrapes) and the network functions' 3GPP PM files (`noc simulate --pm-out`, then
`noc pm convert --inventory`, what an OSS collects every granularity period). `noc eval run`
scores both against the same labels. Written to bench/pm_results.md.

Only the packet-core fault classes are compared: GPU servers are not network functions and
write no PM files, so their faults cannot be seen from PM data at all. The seeds (71-73) were
not used to build or tune anything.

Usage: .venv/bin/python bench/bench_pm.py [--work /tmp/noc-pm] [--seeds 71 72 73] [--days 7]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from _machine import preamble  # bench/ helper, found beside this script

from knowledge.pack import load_pack

HERE = Path(__file__).resolve().parent
NOC = str(Path(sys.executable).with_name("noc"))
INTERVAL = 300
#: the pack's packet-core fault classes (FORMATS §3), in the pack's order
CORE = tuple(f.id for f in load_pack().faults.values() if f.domain == "packet_core")


def _run(*args: str) -> None:
    subprocess.run([NOC, *args], check=True, capture_output=True)


def _gpu_entities(d: Path) -> set[str]:
    inventory = json.loads((d / "inventory.json").read_text())
    return {e["id"] for e in inventory["entities"] if e["type"] in ("gpu_server", "gpu")}


def run_seed(seed: int, days: float, work: Path) -> dict[str, dict[str, Any]]:
    d = work / f"s{seed}"
    shutil.rmtree(d, ignore_errors=True)  # PM files of another code version would stay
    _run("simulate", "--out", str(d), "--days", str(days), "--interval", str(INTERVAL),
         "--seed", str(seed), "--faults", "all", "--core", "converged",
         "--pm-out", str(d / "pm"))  # fmt: skip
    inventory, labels = str(d / "inventory.json"), str(d / "labels.json")
    _run("pm", "convert", str(d / "pm"), "--out", str(d / "pm.jsonl"), "--inventory", inventory)
    out: dict[str, dict[str, Any]] = {}
    for path, telemetry in (("scrape", d / "telemetry.jsonl"), ("pm", d / "pm.jsonl")):
        report = d / f"{path}.json"
        _run("eval", "run", "--telemetry", str(telemetry), "--labels", labels,
             "--inventory", inventory, "--out", str(report))  # fmt: skip
        out[path] = json.loads(report.read_text())
        gpu = _gpu_entities(d)
        out[path]["core_false_alerts"] = sum(
            a["entity"] not in gpu for a in out[path]["false_alert_list"]
        )
    return out


def _core(rep: dict[str, Any]) -> tuple[int, int, float]:
    """(incidents, detected, AC@1) over the packet-core classes."""
    n = sum(int(rep["recall_by_fault"].get(f, {}).get("incidents", 0)) for f in CORE)
    found = sum(int(rep["recall_by_fault"].get(f, {}).get("detected", 0)) for f in CORE)
    cases = [rep["rca_by_fault"][f] for f in CORE if f in rep["rca_by_fault"]]
    total = sum(int(c["cases"]) for c in cases)
    ac1 = sum(float(c["ac1"]) * int(c["cases"]) for c in cases) / total if total else float("nan")
    return n, found, ac1


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", type=Path, default=Path("/tmp/noc-pm"))
    ap.add_argument("--seeds", type=int, nargs="+", default=[71, 72, 73])
    ap.add_argument("--days", type=float, default=7)
    ap.add_argument("--out", type=Path, default=HERE / "pm_results.md")
    args = ap.parse_args()
    lines = [
        *preamble("Scraped samples against 3GPP PM files"),
        f"- data: `noc simulate --days {args.days:g} --interval {INTERVAL} --faults all --core"
        " converged --pm-out PM --seed N`; each seed is scored twice with `noc eval run`: on the"
        " scraped samples (`telemetry.jsonl`) and on `noc pm convert PM --inventory"
        " inventory.json` (the PM files alone, 5-min granularity periods). Recall and RCA"
        " AC@1 over the packet-core classes only, and false alerts on the network functions"
        " only (GPU servers write no PM files).",
        "",
        "| seed | read from | core incidents found | RCA AC@1 (core) | false alerts (core) |"
        " delay p50 |",
        "|---|---|---|---|---|---|",
    ]
    by_class: dict[str, dict[str, list[float]]] = {"scrape": {}, "pm": {}}
    for seed in args.seeds:
        for path, rep in run_seed(seed, args.days, args.work).items():
            n, found, ac1 = _core(rep)
            lines.append(
                f"| {seed} | {'scraped samples' if path == 'scrape' else 'PM files'} |"
                f" {found}/{n} | {ac1:.3f} | {rep['core_false_alerts']} |"
                f" {rep['detection_delay_s_p50']:.0f} s |"
            )
            for f in CORE:
                rca = rep["rca_by_fault"].get(f)
                if rca is not None:
                    acc = by_class[path].setdefault(f, [0.0, 0.0])
                    acc[0] += float(rca["ac1"]) * int(rca["cases"])
                    acc[1] += int(rca["cases"])
    lines += ["", "RCA AC@1 per packet-core class, all seeds:", ""]
    lines += ["| fault class | scraped samples | PM files |", "|---|---|---|"]
    for f in CORE:
        cells = []
        for path in ("scrape", "pm"):
            hit, cases = by_class[path].get(f, [0.0, 0.0])
            cells.append(f"{hit / cases:.2f} ({cases:.0f})" if cases else "-")
        lines.append(f"| {f} | {cells[0]} | {cells[1]} |")
    lines += [
        "",
        "From PM files the network functions' own gauges and counters come as the pack's"
        " vendor-specific measurements (`knowledge/measurements/*.yaml`: `VS.GnbNbrMean`,"
        " `VS.PfcpPeerNbrMean`, `VS.SbiClientReq.<service>.<method>.<status>` …), the AMF's"
        " registrations split per PLMN, the UPF's N3 counters as TS 28.552's `GTP.*N3UPF`;"
        " what no measurement carries is listed in `noc_assistant/simulate/pm_writer.py`.",
        "",
    ]
    args.out.write_text("\n".join(lines))


if __name__ == "__main__":
    main()
