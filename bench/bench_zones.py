"""A network on Berlin's wall clock through the spring change of clocks: `noc simulate --tz
Europe/Berlin --start 2026-03-16` (21 days at 900 s; the clocks go forward on 29 March), then
`noc eval run` twice on the same telemetry: with the inventory as written (every entity's
``tz``: the detectors' profiles on Berlin time) and with the ``tz`` keys removed (the profiles
on UTC, as before the zones existed). Written to bench/zones_results.md.

The seeds are the 900 s tuning seeds (53-55): this scenario was built after the detectors,
and nothing was tuned on it.

Usage: .venv/bin/python bench/bench_zones.py [--work /tmp/noc-zones] [--seeds 53 54 55]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from _machine import preamble  # bench/ helper, found beside this script

HERE = Path(__file__).resolve().parent
NOC = str(Path(sys.executable).with_name("noc"))
ZONE, START, DAYS, INTERVAL = "Europe/Berlin", "2026-03-16", 21, 900
CHANGE = ("2026-03-29", "2026-03-30")  # the change of clocks and the day after
KEYS = ("incident_recall", "false_positives", "false_alerts_per_entity_day", "rca_ac1")


def _eval(d: Path, inventory: Path, out: Path) -> dict[str, Any]:
    subprocess.run(
        [NOC, "eval", "run", "--telemetry", str(d / "telemetry.jsonl"), "--labels",
         str(d / "labels.json"), "--inventory", str(inventory), "--out", str(out)],
        check=True, capture_output=True,
    )  # fmt: skip
    report: dict[str, Any] = json.loads(out.read_text())
    return report


def run_seed(seed: int, work: Path) -> dict[str, dict[str, Any]]:
    d = work / f"s{seed}"
    if not (d / "telemetry.jsonl").is_file():
        subprocess.run(
            [NOC, "simulate", "--out", str(d), "--days", str(DAYS), "--interval", str(INTERVAL),
             "--seed", str(seed), "--faults", "all", "--tz", ZONE, "--start", START],
            check=True, capture_output=True,
        )  # fmt: skip
    inventory = json.loads((d / "inventory.json").read_text())
    for entity in inventory["entities"]:
        entity.pop("tz", None)
    (d / "inventory_utc.json").write_text(json.dumps(inventory))
    return {
        "zoned": _eval(d, d / "inventory.json", d / "zoned.json"),
        "utc": _eval(d, d / "inventory_utc.json", d / "utc.json"),
    }


def _near_change(report: dict[str, Any]) -> int:
    return sum(a["opened_at"][:10] in CHANGE for a in report["false_alert_list"])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", type=Path, default=Path("/tmp/noc-zones"))
    ap.add_argument("--seeds", type=int, nargs="+", default=[53, 54, 55])
    ap.add_argument("--out", type=Path, default=HERE / "zones_results.md")
    args = ap.parse_args()
    lines = [
        *preamble("A network on Berlin time through a change of clocks"),
        f"- data: `noc simulate --days {DAYS} --interval {INTERVAL} --faults all --tz {ZONE}"
        f" --start {START} --seed N` (clocks forward on 29 March); each row evaluates the same"
        " telemetry with the inventory's zones (profiles on Berlin time) and without them (UTC).",
        "",
        "| seed | profiles on | incident recall | false alerts | per entity-day |"
        " on 29-30 March | RCA AC@1 |",
        "|---|---|---|---|---|---|---|",
    ]
    totals = {"zoned": 0, "utc": 0}
    for seed in args.seeds:
        for clock, rep in run_seed(seed, args.work).items():
            totals[clock] += int(rep["false_positives"])
            lines.append(
                f"| {seed} | {'Berlin time' if clock == 'zoned' else 'UTC'} |"
                f" {rep['incident_recall']:.3f} | {rep['false_positives']} |"
                f" {rep['false_alerts_per_entity_day']:.3f} | {_near_change(rep)} |"
                f" {rep['rca_ac1']:.3f} |"
            )
    ratio = totals["zoned"] / totals["utc"] if totals["utc"] else float("nan")
    lines += [
        "",
        f"False alerts, all seeds: {totals['zoned']} on Berlin time, {totals['utc']} on UTC"
        f" (ratio {ratio:.2f}, same run).",
        "",
    ]
    args.out.write_text("\n".join(lines))


if __name__ == "__main__":
    main()
