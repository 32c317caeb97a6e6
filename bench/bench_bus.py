"""The JetStream bus against the in-process path, on the real nats-server (127.0.0.1:4222).

Simulates a scenario, then in one run: the in-process replay (parse → pipeline, the baseline),
``publish_replay`` onto a fresh stream, and a ``BusWorker`` consuming it with a snapshot every
``--checkpoint-every`` messages. Reports lines/s of each, the worker's rate as a ratio of the
in-process one, and the snapshots' size and time. Then the network split in two: two
``noc bus worker --findings --part k/2`` processes at once (their wall time, start-up and pack
loading included) and ``noc bus correlate`` over their findings stream (in process), with
whether its incidents equal the in-process run's; and the same with the server splitting it, on
a nats-server of this run configured with the subject mapping of two partitions
(``--partition k``). Writes bench/bus_results.md.

Usage: .venv/bin/python bench/bench_bus.py [--days 1] [--interval 60] [--seed 23]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from _machine import preamble  # bench/ helper, found beside this script

from knowledge.pack import Pack, load_pack
from knowledge.topology import Topology
from noc_assistant.ingest.reader import read_replay
from noc_assistant.integrations.bus import (
    BusWorker,
    CorrelatorWorker,
    PublishStats,
    WorkerStats,
    partition_config,
    publish_replay,
    remove,
)
from noc_assistant.inventory import load_topology
from noc_assistant.simulate import ScenarioConfig, build_scenario, write_scenario
from noc_assistant.stream.checkpoint import snapshot
from noc_assistant.stream.fanin import FanIn
from noc_assistant.stream.pipeline import REPLAY_LATENESS_INTERVALS, Pipeline

ROOT = Path(__file__).resolve().parent.parent
URL = "nats://127.0.0.1:4222"
KEY = b"bench-key-0123456789abcdef"


@dataclass
class Split:
    wall_s: float
    read: list[tuple[int, int]]
    """(messages, lines) each worker took."""
    batches: int
    findings: int
    correlate_s: float
    same: bool

    def describe(self, lines: int) -> str:
        shares = " and ".join(
            f"{m:,} messages / {n:,} lines ({100 * n / lines:.0f} %)" for m, n in self.read
        )
        return f"the workers took {shares}"


@contextlib.contextmanager
def mapped_server(tmp: Path, prefix: str, n: int) -> Iterator[str]:
    """A nats-server (JetStream under ``tmp``) whose configuration maps ``prefix`` into ``n``
    partitions (:func:`partition_config`); its URL."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = tmp / "nats.conf"
    config.write_text(
        f'listen: 127.0.0.1:{port}\njetstream {{ store_dir: "{tmp / "js"}" }}\n'
        f"{partition_config(n, prefix)}\n"
    )
    proc = subprocess.Popen(["nats-server", "-c", str(config)], stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if time.monotonic() > deadline or proc.poll() is not None:
                raise SystemExit(f"nats-server with {config} did not start")
            time.sleep(0.05)
        yield f"nats://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    ap.add_argument("--days", type=float, default=1.0)
    ap.add_argument("--interval", type=float, default=60.0)
    ap.add_argument("--seed", type=int, default=23)
    ap.add_argument("--checkpoint-every", type=int, default=500)
    return ap.parse_args()


@dataclass
class Setup:
    """One run's scenario files, pack and topology, and the names of its stream and durables."""

    args: argparse.Namespace
    tmp: str
    paths: dict[str, Path]
    pack: Pack
    topology: Topology
    tag: str
    stream: str
    prefix: str
    durable: str

    def make(self) -> Pipeline:
        return Pipeline(
            pack=self.pack, topology=self.topology, lateness_intervals=REPLAY_LATENESS_INTERVALS
        )


@dataclass
class Measured:
    """What one run measured."""

    reference: Pipeline
    lines: int
    base_s: float
    published: PublishStats
    pub_s: float
    stats: WorkerStats
    work_s: float
    same: bool
    final: int
    parts: Split
    partitions: Split


def outcome(pipe: Pipeline) -> dict[str, tuple[object, ...]]:
    return {
        i.id: (i.state, i.opened_at, i.resolved_at, i.entities, i.title)
        for i in pipe.correlator.incidents.values()
    }


def run_worker(s: Setup, reference: Pipeline) -> tuple[BusWorker, WorkerStats, float, bool, int]:
    """A ``BusWorker`` over the published stream: the worker, its statistics, seconds, whether
    its findings equal the in-process run's, and the size of its last snapshot."""
    worker = BusWorker(
        url=URL,
        stream=s.stream,
        durable=s.durable,
        key=KEY,
        pack=s.pack,
        make_pipeline=s.make,
        prefix=s.prefix,
        checkpoint_every=s.args.checkpoint_every,
        idle_s=1.0,
        finish_on_idle=True,
    )
    t = time.perf_counter()
    stats = worker.run()
    work_s = time.perf_counter() - t - 1.0  # less the idle second that ends the run
    assert worker.pipeline is not None
    same = [f.id for f in worker.pipeline.findings] == [f.id for f in reference.findings]
    final = len(snapshot(worker.pipeline, KEY))
    return worker, stats, work_s, same, final


def run_halves(
    s: Setup, url: str, option: str, label: str, findings: str, fprefix: str
) -> tuple[float, list[tuple[int, int]], list[str]]:
    """Two ``noc bus worker --findings`` processes at once (``option`` k): their wall time, the
    (messages, lines) each took, and their durables."""
    halves = [f"{s.durable}-{label}{k}" for k in range(2)]
    env = {
        **os.environ,
        "NOC_NATS_URL": url,
        "NOC_NATS_STREAM": s.stream,
        "NOC_NATS_SUBJECT_PREFIX": s.prefix,
        "NOC_NATS_FINDINGS_STREAM": findings,
        "NOC_NATS_FINDINGS_PREFIX": fprefix,
        "NOC_DB_URL": f"sqlite:///{s.tmp}/noc-{label}.db",
        "NOC_DATA_DIR": s.tmp,
        "NOC_STATE_KEY": KEY.decode(),
    }
    cmd = [sys.executable, "-m", "noc_assistant", "bus", "worker", "--findings"]
    cmd += ["--inventory", str(s.paths["inventory"]), "--idle", "1", "--finish"]
    cmd += ["--checkpoint-every", str(s.args.checkpoint_every)]
    t = time.perf_counter()
    procs = [
        subprocess.Popen(
            [*cmd, "--durable", d, option, f"{k}/2" if option == "--part" else str(k)],
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        for k, d in enumerate(halves)
    ]
    said = [p.communicate()[0] for p in procs]
    wall = time.perf_counter() - t - 1.0
    assert [p.returncode for p in procs] == [0, 0], said
    read = [re.search(r"([\d,]+) messages \(([\d,]+) lines\)", o) for o in said]
    counts = [(int(m[1].replace(",", "")), int(m[2].replace(",", ""))) for m in read if m]
    return wall, counts, halves


def split(s: Setup, reference: Pipeline, url: str, option: str, label: str) -> Split:
    """The network in two halves, a worker process each (``option`` k), then one
    correlator over their findings."""
    findings, fprefix = f"{s.stream}_F{label}", f"nocbenchf{label}.{s.tag}"
    wall, counts, halves = run_halves(s, url, option, label, findings, fprefix)
    correlator = CorrelatorWorker(
        url=url,
        stream=findings,
        durable=f"{s.durable}-{label}c",
        key=KEY,
        pack=s.pack,
        make_pipeline=lambda: Pipeline(
            pack=s.pack, topology=s.topology, fan_in=FanIn(expect=frozenset(halves))
        ),
        prefix=fprefix,
        checkpoint_every=s.args.checkpoint_every,
        idle_s=1.0,
        finish_on_idle=True,
    )
    t = time.perf_counter()
    cstats = correlator.run()
    corr_s = time.perf_counter() - t - 1.0
    assert correlator.pipeline is not None
    same = outcome(correlator.pipeline) == outcome(reference)
    for d in (*halves, f"{s.durable}-{label}c"):
        remove(url, s.stream, d)
        remove(url, findings, d)
    return Split(wall, counts, cstats.messages, cstats.lines, corr_s, same)


def measure(args: argparse.Namespace) -> Measured:
    """Simulate the scenario, then time each path over it (the order of the module docstring)."""
    config = ScenarioConfig(days=args.days, faults="all", seed=args.seed, interval_s=args.interval)
    pack = load_pack()
    tag = uuid.uuid4().hex[:8]
    stream, prefix, durable = f"NOCBENCH_{tag}", f"nocbench.{tag}", f"bench-{tag}"
    with tempfile.TemporaryDirectory() as tmp:
        paths = write_scenario(build_scenario(config), Path(tmp))
        topology = load_topology(paths["inventory"], pack)
        s = Setup(args, tmp, paths, pack, topology, tag, stream, prefix, durable)

        t = time.perf_counter()
        reference = s.make().replay(read_replay(paths["telemetry"]))
        base_s = time.perf_counter() - t
        lines = reference.samples

        t = time.perf_counter()
        published = publish_replay(paths["telemetry"], url=URL, stream=stream, prefix=prefix)
        pub_s = time.perf_counter() - t

        # the worker stays referenced until the end, as when this was one function
        _worker, stats, work_s, same, final = run_worker(s, reference)

        parts = split(s, reference, URL, "--part", "p")
        # the server splits: a nats-server of this run with the subject mapping of two partitions
        with mapped_server(Path(tmp), prefix, 2) as mapped_url:
            publish_replay(paths["telemetry"], url=mapped_url, stream=stream, prefix=prefix)
            partitions = split(s, reference, mapped_url, "--partition", "s")
    remove(URL, stream, durable)
    return Measured(
        reference, lines, base_s, published, pub_s, stats, work_s, same, final, parts, partitions
    )


def report(args: argparse.Namespace, m: Measured) -> list[str]:
    """bench/bus_results.md's lines."""
    lines, base_s, pub_s, work_s = m.lines, m.base_s, m.pub_s, m.work_s
    stats, parts, partitions = m.stats, m.parts, m.partitions
    out = preamble("JetStream bus against the in-process pipeline")
    ck = stats.checkpoint_s
    out += [
        "",
        f"Scenario: {args.days:g} day(s) at {args.interval:g} s, seed {args.seed}, every fault "
        f"class; {lines:,} lines in {m.published.messages:,} messages (one per entity and "
        f"scrape). Real nats-server on loopback, file storage.",
        "",
        "| path | seconds | lines/s | ratio to in-process |",
        "|---|---|---|---|",
        f"| in-process replay (parse → pipeline; baseline) | {base_s:.1f} | "
        f"{lines / base_s:,.0f} | 1.00 |",
        f"| `publish_replay` (parse, batch, publish, acks) | {pub_s:.1f} | "
        f"{lines / pub_s:,.0f} | – |",
        f"| `BusWorker` (fetch, parse, pipeline, {stats.checkpoints} snapshots) | {work_s:.1f} | "
        f"{stats.lines / work_s:,.0f} | {base_s / work_s:.2f} |",
        f"| two `noc bus worker --findings --part k/2` processes at once (wall, start-up "
        f"included) | {parts.wall_s:.1f} | {lines / parts.wall_s:,.0f} | "
        f"{base_s / parts.wall_s:.2f} |",
        f"| `noc bus correlate` over their {parts.batches:,} batches ({parts.findings:,} "
        f"findings) | {parts.correlate_s:.1f} | – | – |",
        f"| two `noc bus worker --findings --partition k` processes at once, nats-server "
        f"mapping two partitions (wall, start-up included) | {partitions.wall_s:.1f} | "
        f"{lines / partitions.wall_s:,.0f} | {base_s / partitions.wall_s:.2f} |",
        f"| `noc bus correlate` over their {partitions.batches:,} batches "
        f"({partitions.findings:,} findings) | {partitions.correlate_s:.1f} | – | – |",
        "",
        f"- snapshots: every {args.checkpoint_every} messages, {stats.checkpoints} taken, "
        f"median {statistics.median(ck) * 1000:.0f} ms, max {max(ck) * 1000:.0f} ms "
        f"(snapshot, object-store put, manifest, ack); the last one {m.final / 1e6:.2f} MB",
        f"- the worker's findings equal the in-process run's: {m.same}",
        f"- `--part k/2` (the worker's SHA-1 of entity names): {parts.describe(lines)}; "
        "each worker fetches every message and skips the other half's",
        f"- `--partition k` (the server's hash, the subject mapping of `noc bus partitions 2`): "
        f"{partitions.describe(lines)}; the server sends each worker its own messages only",
        "- the wall time is the larger part's; a hash of a dozen entity names splits them "
        "unevenly (a network of thousands evens out)",
        f"- the correlator's incidents (ids, states, times, entities, titles) equal the "
        f"in-process run's: {parts.same} with `--part`, {partitions.same} with `--partition` "
        f"({len(outcome(m.reference))} incidents)",
    ]
    return out


def main() -> None:
    args = parse_args()
    measured = measure(args)
    out = report(args, measured)
    (ROOT / "bench" / "bus_results.md").write_text("\n".join(out) + "\n")
    print("\n".join(out))


if __name__ == "__main__":
    main()
