"""The JetStream bus against the in-process path, on the real nats-server (127.0.0.1:4222).

Simulates a scenario, then in one run: the in-process replay (parse → pipeline, the baseline),
``publish_replay`` onto a fresh stream, and a ``BusWorker`` consuming it with a snapshot every
``--checkpoint-every`` messages. Reports lines/s of each, the worker's rate as a ratio of the
in-process one, and the snapshots' size and time; writes bench/bus_results.md.

Usage: .venv/bin/python bench/bench_bus.py [--days 1] [--interval 60] [--seed 23]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from _machine import preamble  # bench/ helper, found beside this script

from knowledge.pack import load_pack
from noc_assistant.bus import BusWorker, publish_replay, remove
from noc_assistant.checkpoint import snapshot
from noc_assistant.ingest.replay import read_replay
from noc_assistant.inventory import load_topology
from noc_assistant.pipeline import REPLAY_LATENESS_INTERVALS, Pipeline
from noc_assistant.simulate import ScenarioConfig, build_scenario, write_scenario

ROOT = Path(__file__).resolve().parent.parent
URL = "nats://127.0.0.1:4222"
KEY = b"bench-key-0123456789abcdef"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--days", type=float, default=1.0)
    ap.add_argument("--interval", type=float, default=60.0)
    ap.add_argument("--seed", type=int, default=23)
    ap.add_argument("--checkpoint-every", type=int, default=500)
    args = ap.parse_args()

    config = ScenarioConfig(days=args.days, faults="all", seed=args.seed, interval_s=args.interval)
    pack = load_pack()
    tag = uuid.uuid4().hex[:8]
    stream, prefix, durable = f"NOCBENCH_{tag}", f"nocbench.{tag}", f"bench-{tag}"
    with tempfile.TemporaryDirectory() as tmp:
        paths = write_scenario(build_scenario(config), Path(tmp))
        topology = load_topology(paths["inventory"], pack)

        def make() -> Pipeline:
            return Pipeline(
                pack=pack, topology=topology, lateness_intervals=REPLAY_LATENESS_INTERVALS
            )

        t = time.perf_counter()
        reference = make().replay(read_replay(paths["telemetry"]))
        base_s = time.perf_counter() - t
        lines = reference.samples

        t = time.perf_counter()
        published = publish_replay(paths["telemetry"], url=URL, stream=stream, prefix=prefix)
        pub_s = time.perf_counter() - t

        worker = BusWorker(
            url=URL,
            stream=stream,
            durable=durable,
            key=KEY,
            pack=pack,
            make_pipeline=make,
            prefix=prefix,
            checkpoint_every=args.checkpoint_every,
            idle_s=1.0,
            finish_on_idle=True,
        )
        t = time.perf_counter()
        stats = worker.run()
        work_s = time.perf_counter() - t - 1.0  # less the idle second that ends the run
        assert worker.pipeline is not None
        same = [f.id for f in worker.pipeline.findings] == [f.id for f in reference.findings]
        final = len(snapshot(worker.pipeline, KEY))
    remove(URL, stream, durable)

    out = preamble("JetStream bus against the in-process pipeline")
    ck = stats.checkpoint_s
    out += [
        "",
        f"Scenario: {args.days:g} day(s) at {args.interval:g} s, seed {args.seed}, every fault "
        f"class; {lines:,} lines in {published.messages:,} messages (one per entity and "
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
        "",
        f"- snapshots: every {args.checkpoint_every} messages, {stats.checkpoints} taken, "
        f"median {statistics.median(ck) * 1000:.0f} ms, max {max(ck) * 1000:.0f} ms "
        f"(snapshot, object-store put, manifest, ack); the last one {final / 1e6:.2f} MB",
        f"- the worker's findings equal the in-process run's: {same}",
    ]
    (ROOT / "bench" / "bus_results.md").write_text("\n".join(out) + "\n")
    print("\n".join(out))


if __name__ == "__main__":
    main()
