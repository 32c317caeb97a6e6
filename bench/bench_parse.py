"""JSONL replay parse: the line-by-line reader against the columnar one (polars), same run.

Times ``read_replay(path, columnar=False)`` and ``read_replay(path)`` (the columnar reader,
:mod:`noc_assistant.ingest.columnar`) over the same file, each to its last point, and
``read_jsonl_columns`` alone (the columns, no :class:`Point` made), with ``POLARS_MAX_THREADS``
1 and 2: each setting in a subprocess of its own, since polars sizes its thread pool when it
is first imported (the import is timed apart, before the reads). Checks that both readers give
as many points and quarantine records. Writes bench/parse_results.md.

The file: ``--file`` (default /tmp/s23/telemetry.jsonl, what ``noc simulate --out /tmp/s23
--seed 23 --days 1`` writes), or, with ``--days`` or when that file is missing, a scenario of
that many days (seed 23) simulated into a temporary folder.

Usage: .venv/bin/python bench/bench_parse.py [--file PATH | --days 1] [--threads 1,2]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _machine import preamble  # bench/ helper, found beside this script

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_FILE = Path("/tmp/s23/telemetry.jsonl")


def _measure(path: Path) -> dict[str, float | int | str]:
    """In this process (its POLARS_MAX_THREADS set by the parent): the polars import, then the
    line reader, the columnar reader and the columns alone, each timed once."""
    started = time.perf_counter()
    import polars as pl

    import_s = time.perf_counter() - started
    from noc_assistant.ingest import Quarantine
    from noc_assistant.ingest.columnar import read_jsonl_columns
    from noc_assistant.ingest.reader import read_replay

    result: dict[str, float | int | str] = {
        "threads": pl.thread_pool_size(),
        "polars": pl.__version__,
        "import_s": import_s,
    }
    for name in ("line", "columnar"):
        q = Quarantine()
        started = time.perf_counter()
        n = 0
        for _ in read_replay(path, q, columnar=name == "columnar"):
            n += 1
        result[f"{name}_s"] = time.perf_counter() - started
        result[f"{name}_points"] = n
        result[f"{name}_quarantined"] = q.count
    started = time.perf_counter()
    n = sum(len(chunk) for chunk in read_jsonl_columns(path, Quarantine()))
    result["columns_s"] = time.perf_counter() - started
    result["columns_points"] = n
    return result


def _run(path: Path, threads: int) -> dict[str, float | int | str]:
    env = {**os.environ, "POLARS_MAX_THREADS": str(threads)}
    out = subprocess.run(
        [sys.executable, __file__, "--measure", str(path)],
        env=env,
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    result: dict[str, float | int | str] = json.loads(out.strip().splitlines()[-1])
    return result


def _file(args: argparse.Namespace, tmp: Path) -> tuple[Path, str]:
    if args.days is None and args.file.exists():
        return args.file, f"`{args.file}`"
    from noc_assistant.simulate import ScenarioConfig, build_scenario, write_scenario

    days = args.days if args.days is not None else 1.0
    config = ScenarioConfig(days=days, seed=23)
    path = write_scenario(build_scenario(config), tmp)["telemetry"]
    return path, f"a scenario simulated for this run ({days:g} day(s), seed 23)"


def _report(rows: list[dict[str, float | int | str]], path: Path, what: str, load: str) -> str:
    lines = sum(1 for _ in path.open("rb"))
    versions = f", polars {rows[0]['polars']}"
    out = preamble("JSONL replay parse: line by line against columnar (polars)", versions)
    out += [
        f"- load: {load}",
        "",
        f"File: {what}, {lines:,} lines, {path.stat().st_size / 1e6:.0f} MB (in the page "
        "cache: read once before). Each setting of `POLARS_MAX_THREADS` in a subprocess of "
        "its own; in each, the line reader, then the columnar one (`read_replay`, every "
        "point taken), then `read_jsonl_columns` alone (numpy columns, no `Point` made), "
        "each once. lines/s counts the file's lines.",
        "",
        "| POLARS_MAX_THREADS | reader | seconds | lines/s | ratio to line by line |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        base = float(row["line_s"])
        for name, label in (
            ("line", "`read_replay(columnar=False)`: line by line (orjson)"),
            ("columnar", "`read_replay`: columnar, `Point` s"),
            ("columns", "`read_jsonl_columns`: columns only"),
        ):
            seconds = float(row[f"{name}_s"])
            out.append(
                f"| {row['threads']} | {label} | {seconds:.2f} | {lines / seconds:,.0f} "
                f"| {base / seconds:.2f} |"
            )
    out.append("")
    for row in rows:
        same = row["line_points"] == row["columnar_points"] == row["columns_points"]
        same = same and row["line_quarantined"] == row["columnar_quarantined"]
        out.append(
            f"- {row['threads']} thread(s): `import polars` {float(row['import_s']):.2f} s "
            f"(not in the times above); {row['line_points']:,} points and "
            f"{row['line_quarantined']} quarantined by each reader: {same}"
        )
    out.append(
        "- the line reader does not use polars: its two rows measure the same code twice "
        "(their difference is this machine's noise)"
    )
    return "\n".join(out) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--file", type=Path, default=DEFAULT_FILE)
    parser.add_argument("--days", type=float, default=None)
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "parse_results.md")
    parser.add_argument("--measure", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure is not None:
        print(json.dumps(_measure(args.measure)))
        return
    with tempfile.TemporaryDirectory() as tmp:
        path, what = _file(args, Path(tmp))
        with path.open("rb") as fh:  # into the page cache, for every run alike
            while fh.read(16 << 20):
                pass
        before = os.getloadavg()
        rows = [_run(path, int(n)) for n in args.threads.split(",")]
        after = os.getloadavg()
        load = (
            f"1-min load average {before[0]:.2f} before, {after[0]:.2f} after "
            f"({os.cpu_count()} CPUs; a shared machine: other work may have run beside)"
        )
        text = _report(rows, path, what, load)
    args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
