"""Same scenarios, two revisions: are the incidents, diagnoses and findings identical?

Issue 40's check for a faster pipeline: every held-out scenario of
``bench/scenario_results.md`` is simulated once (the simulator is the current tree's), then
replayed through `noc eval run`'s path (``run_replay`` with the labels' maintenance windows)
by the current tree and by a git worktree of ``--baseline``, each in its own process. Each
run dumps its incidents, diagnoses and findings as JSON (every field); the two dumps are
compared field for field, and each difference is listed by incident id.

Usage: .venv/bin/python bench/bench_identity.py --baseline REV
       [--scenario DAYS:INTERVAL:SEED[:flags] ...] [--work DIR] [--out FILE]

With ``--recorded FILE`` instead of ``--baseline``, the current tree alone replays each
scenario, and its digest is compared with the "digest now" that an earlier results file of
this script recorded for the same scenario (the simulator being unchanged since): half the
replays, and a chain of identities back to the revision that file compared with.

The scenario syntax and default list are ``bench/bench_scenarios.py``'s.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from _machine import cpu_name  # bench/ helper, found beside this script
from bench_scenarios import DEFAULT, FLAGS, NOC, ROOT, SCALE


def dump(telemetry: Path, labels: Path, inventory: Path, out: Path) -> None:
    """Replay one scenario with the package first on ``sys.path`` and write what it found
    (run in the child process of each revision)."""
    from noc_assistant.cli.eval import _maintenance

    try:
        replay = importlib.import_module("noc_assistant.stream.replay")
        run_replay = replay.run_replay
    except (ImportError, AttributeError):  # before 76d9e3c it lived in the pipeline module
        run_replay = importlib.import_module("noc_assistant.stream.pipeline").run_replay
    label_doc = json.loads(labels.read_text())
    start = time.perf_counter()
    result = run_replay(telemetry, inventory=inventory, maintenance=_maintenance(label_doc, labels))
    doc = {
        "wall_s": time.perf_counter() - start,
        "samples": result.samples,
        "incidents": [i.model_dump(mode="json") for i in result.incidents],
        "diagnoses": {k: d.model_dump(mode="json") for k, d in sorted(result.diagnoses.items())},
        "findings": [f.model_dump(mode="json") for f in result.findings],
    }
    out.write_text(json.dumps(doc, sort_keys=True))


def simulate(spec: str, work: Path) -> Path:
    """``noc simulate`` for one scenario spec (``bench_scenarios`` syntax); its folder."""
    days, interval, seed, *flags = spec.split(":")
    if any(f not in FLAGS and not SCALE.match(f) for f in flags):
        raise SystemExit(f"--scenario {spec}: unknown flag")
    out = work / spec.replace(":", "-")
    sim = [NOC, "simulate", "--days", days, "--interval", interval, "--seed", seed]
    sim += ["--scrape-phases"] if "phases" in flags else []
    sim += [x for f in flags if f in ("sglang", "mixed") for x in ("--serving-engine", f)]
    sim += [x for f in flags if (m := SCALE.match(f)) for x in ("--scale", m.group(1))]
    sim += ["--core", "converged"] if "converged" in flags else []
    sim += ["--no-sbi-metrics"] if "nosbi" in flags else []
    subprocess.run([*sim, "--faults", "all", "--out", str(out)], check=True, cwd=ROOT,
                   capture_output=True)  # fmt: skip
    return out


def run_dump(folder: Path, tree: Path, name: str) -> dict[str, Any]:
    """Replay ``folder``'s scenario with the package of ``tree``; the dump."""
    out = folder / f"dump-{name}.json"
    env = {**os.environ, "PYTHONPATH": f"{tree}{os.pathsep}{Path(__file__).parent}"}
    files = [folder / "telemetry.jsonl", folder / "labels.json", folder / "inventory.json"]
    cmd = [sys.executable, __file__, "--dump", *map(str, files), str(out)]
    subprocess.run(cmd, env=env, check=True, cwd=tree)
    doc: dict[str, Any] = json.loads(out.read_text())
    return doc


def _top(diag: dict[str, Any] | None) -> str:
    if not diag:
        return "no diagnosis"
    h = diag["hypotheses"][0]
    return f"{h.get('fault_class', h.get('cause', '?'))} on {h.get('entity', '?')}"


def differences(base: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Each difference between two dumps, one line per incident (or per kind of record)."""
    out: list[str] = []
    old_i = {i["id"]: i for i in base["incidents"]}
    new_i = {i["id"]: i for i in new["incidents"]}
    for iid in sorted(old_i.keys() | new_i.keys()):
        a, b = old_i.get(iid), new_i.get(iid)
        if a is None or b is None:
            have = b if a is None else a
            side = "only now" if a is None else "only before"
            out.append(f"{iid}: {side} (opened {have['opened_at']}, {have['entities']})")
            continue
        fields = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
        da, db = base["diagnoses"].get(iid), new["diagnoses"].get(iid)
        if da != db:
            fields.append(f"diagnosis ({_top(da)} → {_top(db)})")
        if fields:
            out.append(f"{iid}: differs in {', '.join(fields)}")
    if base["findings"] != new["findings"]:
        out.append(f"findings: {len(base['findings'])} before, {len(new['findings'])} now, "
                   "not identical")  # fmt: skip
    return out


def _digest(doc: dict[str, Any]) -> str:
    keep = {k: doc[k] for k in ("incidents", "diagnoses", "findings")}
    return hashlib.sha256(json.dumps(keep, sort_keys=True).encode()).hexdigest()[:10]


def _header(title: str, options: str, compared: str, identical: str) -> list[str]:
    """The first lines of a results file: what ran, what was compared, where and when."""
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return [
        f"# Same scenarios, {title} (issue 40)",
        "",
        f"- command: `.venv/bin/python bench/bench_identity.py {options}`",
        f"- compared: {compared}",
        f"- machine: {cpu_name()}, Python {platform.python_version()}; written {now}",
        f"- identical means {identical}",
        "",
    ]


def recorded_digests(path: Path) -> dict[str, str]:
    """Scenario → the "digest now" of a results file of this script."""
    found: dict[str, str] = {}
    column = -1
    for line in path.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if "digest now" in cells:
            column = cells.index("digest now")
        elif column >= 0 and len(cells) > column and ":" in cells[0]:
            found[cells[0]] = cells[column]
    return found


def compare_recorded(args: argparse.Namespace, head: str) -> None:
    """The current tree's digest of each scenario against the one ``--recorded`` holds."""
    want = recorded_digests(args.recorded)
    rows: list[str] = []
    for spec in args.scenario:
        if spec not in want:
            raise SystemExit(f"{args.recorded}: no digest recorded for {spec}")
        folder = simulate(spec, args.work)
        new = run_dump(folder, ROOT, "now")
        same = "yes" if _digest(new) == want[spec] else "no"
        rows.append(
            f"| {spec} | {new['samples']:,} | {len(new['incidents'])} | {len(new['findings'])} "
            f"| {want[spec]} | {_digest(new)} | {same} | {new['wall_s']:.1f} |"
        )
        print(rows[-1], flush=True)
        shutil.rmtree(folder, ignore_errors=True)
    lines = _header(
        "the digests recorded before",
        f"--recorded {args.recorded.name} --scenario {' '.join(args.scenario)}",
        f"{head} (now), replaying each scenario through `noc eval run`'s path, "
        f'with the "digest now" recorded in `bench/{args.recorded.name}`',
        "the sha256 of every field of every incident, diagnosis and finding is the recorded one",
    )
    lines += [
        "| scenario | samples | incidents | findings | digest recorded | digest now "
        "| identical | replay s |",
        "|---|---|---|---|---|---|---|---|",
        *rows,
    ]
    args.out.write_text("\n".join(lines) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--baseline", help="git revision to compare with")
    ap.add_argument("--recorded", type=Path, help="results file whose digests to compare with")
    ap.add_argument("--scenario", nargs="+", default=list(DEFAULT))
    ap.add_argument("--work", type=Path, default=Path("/tmp/noc-identity"))
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "identity_results.md")
    ap.add_argument("--dump", nargs=4, type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.dump:
        dump(*args.dump)
        return
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    if args.recorded:
        compare_recorded(args, head)
        return
    if not args.baseline:
        ap.error("--baseline REV or --recorded FILE is required")
    rows: list[str] = []
    notes: list[str] = []
    tmp = Path(tempfile.mkdtemp(prefix="noc-identity-tree-"))
    tree = tmp / "baseline"
    git = ["git", "-C", str(ROOT)]
    subprocess.run([*git, "worktree", "add", "--detach", str(tree), args.baseline], check=True,
                   capture_output=True)  # fmt: skip
    try:
        for spec in args.scenario:
            folder = simulate(spec, args.work)
            base = run_dump(folder, tree, "baseline")
            new = run_dump(folder, ROOT, "now")
            diff = differences(base, new)
            same = "yes" if not diff else f"no ({len(diff)})"
            rows.append(
                f"| {spec} | {new['samples']:,} | {len(base['incidents'])} | "
                f"{len(new['incidents'])} | {len(new['findings'])} | {_digest(base)} | "
                f"{_digest(new)} | {same} | {base['wall_s']:.1f} | {new['wall_s']:.1f} |"
            )
            notes += [f"- {spec}: {d}" for d in diff]
            print(rows[-1], flush=True)
            shutil.rmtree(folder, ignore_errors=True)
    finally:
        subprocess.run([*git, "worktree", "remove", "--force", str(tree)], check=True)
        shutil.rmtree(tmp, ignore_errors=True)
    lines = _header(
        "two revisions",
        f"--baseline {args.baseline} --scenario {' '.join(args.scenario)}",
        f"{args.baseline} (before) and {head} (now), each replaying the same "
        "simulated files through `noc eval run`'s path in its own process",
        "every field of every incident, diagnosis and finding is equal; "
        "the digests are sha256 of those records",
    )
    lines += [
        "| scenario | samples | incidents before | incidents now | findings | digest before "
        "| digest now | identical | replay s before | replay s now |",
        "|---|---|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        "Differences:" if notes else "No differences.",
        *(["", *notes] if notes else []),
    ]
    args.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
