"""A large network through the in-memory pipeline: series count, samples/s and peak memory.

Issue 40 asks for 10⁵ series × 1 day at 60 s end to end in ≤ 3 minutes. The simulator's
largest network (``--scale 8``) has about 2,400 series, so this bench joins ``--sites`` such
networks, each drawn from its own seed (seed, seed + 1, ...) with every fault class, and
renames each site's entities (``amf-3`` of site 2 is ``amf-3-s2``, in the ``instance`` label
and in the inventory). Each entity lists its own site's entities of the types it depends on as
peers, as a regional network's inventory would, and names its site (``"site": "s2"``). The
sites' samples are merged in time order and fed to one
:class:`~noc_assistant.stream.pipeline.Pipeline` (RCA on) ``--chunk-s`` seconds of telemetry
at a time; only the feeding is timed (CPU and wall), the simulation is not. The garbage
collector is set as the ``noc`` command sets it (:mod:`noc_assistant.stream.collector`), or
left at CPython's default with ``--default-collector``; its time is reported.

Usage: .venv/bin/python bench/bench_scale.py [--sites 4] [--days 1] [--interval 60]
       [--seed 23] [--default-collector] [--columns] [--out bench/scale_results.md]
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import heapq
import json
import platform
import resource
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from _machine import cpu_name  # bench/ helper, found beside this script

from knowledge.pack import load_pack
from noc_assistant.ingest import Point
from noc_assistant.inventory import topology_from_dict
from noc_assistant.simulate import Scenario, ScenarioConfig, build_scenario
from noc_assistant.stream.collector import tune_collector
from noc_assistant.stream.pipeline import Pipeline

ROOT = Path(__file__).resolve().parent.parent


def _site_inventory(entities: list[dict[str, Any]], suffix: str) -> list[dict[str, Any]]:
    """A site's entities renamed, each with its site's entities of every type it depends on
    as peers (besides the peers it had): a regional site's NFs talk to their own NRF, UDM,
    SEPP. Without them the pack's type-level dependencies would make every AMF depend on
    every NRF of every site, and one incident would gather the faults of all sites."""
    pack = load_pack()
    by_type: dict[str, list[str]] = {}
    for e in entities:
        by_type.setdefault(e["type"], []).append(e["id"] + suffix)
    out = []
    for e in entities:
        nf = pack.nf_types.get(e["type"])
        own = [p + suffix for p in e.get("peers", [])]
        typed = {pack_type for p in e.get("peers", []) for pack_type in _types_of(p, entities)}
        local = [
            x
            for t in (nf.depends_on if nf else ())
            if t not in typed
            for x in by_type.get(t, [])
            if x != e["id"] + suffix
        ]
        out.append({**e, "id": e["id"] + suffix, "peers": own + local, "site": suffix[1:]})
    return out


def _types_of(entity: str, entities: list[dict[str, Any]]) -> list[str]:
    return [e["type"] for e in entities if e["id"] == entity]


def _site(
    k: int, args: argparse.Namespace
) -> tuple[list[dict[str, Any]], Scenario, Iterator[Point]]:
    """Site ``k``: its inventory entities, its scenario and its samples as points, renamed
    (made as they are taken)."""
    cfg = ScenarioConfig(
        days=args.days, faults="all", seed=args.seed + k, interval_s=args.interval, scale=8
    )
    scenario = build_scenario(cfg)
    suffix = f"-s{k}"
    entities = _site_inventory(scenario.inventory["entities"], suffix)

    def points() -> Iterator[Point]:
        for s in scenario.iter_samples():
            metric, labels, type_ = _renamed(s, suffix)
            yield Point(s.ts, metric, labels, s.value, type_)

    return entities, scenario, points()


def _renamed(series: Any, suffix: str) -> tuple[str, tuple[tuple[str, str], ...], str]:
    """A site's simulated series (or sample) as a point carries it: metric, labels renamed,
    type."""
    labels = dict(series.labels)
    labels["instance"] += suffix
    return series.metric, tuple(sorted(labels.items())), series.type


def _merged_columns(scenarios: list[Scenario], keys: list[Any]) -> Iterator[tuple[Any, Any, Any]]:
    """The sites' columns merged in time order (each site's in its order, sites in turn at
    one time: what ``heapq.merge`` of their points gives), a simulator chunk at a time; the
    series as the pipeline numbered them (``keys`` by site)."""
    for parts in zip(*(sc.iter_columns() for sc in scenarios), strict=True):
        ts = np.concatenate([c.ts for c in parts])
        key = np.concatenate([k[c.series] for k, c in zip(keys, parts, strict=True)])
        value = np.concatenate([c.value for c in parts])
        order = np.argsort(ts, kind="stable")
        yield ts[order], key[order], value[order]


class _CollectorClock:
    """A ``gc.callbacks`` entry that adds up the collector's time and its full collections
    while :attr:`on` (the timed feeding; not the simulation that makes the points)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.full = 0
        self.on = False
        self._start = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if not self.on:
            return
        if phase == "start":
            self._start = time.perf_counter()
            return
        self.seconds += time.perf_counter() - self._start
        self.full += info["generation"] == 2


def _chunks(points: Iterator[Point], chunk_s: float) -> Iterator[list[Point]]:
    """The merged points, ``chunk_s`` seconds of telemetry at a time."""
    chunk: list[Point] = []
    end = None
    for p in points:
        if end is None:
            end = p.ts + chunk_s
        if p.ts >= end:
            yield chunk
            chunk = []
            end = p.ts + chunk_s
        chunk.append(p)
    if chunk:
        yield chunk


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sites", type=int, default=4)
    ap.add_argument("--days", type=float, default=1.0)
    ap.add_argument("--interval", type=float, default=60.0)
    ap.add_argument("--seed", type=int, default=23)
    ap.add_argument("--chunk-s", type=float, default=600.0)
    ap.add_argument(
        "--columns",
        action="store_true",
        help="feed the simulator's columns (what `noc demo` and a replay file feed) instead "
        "of points",
    )
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "scale_results.md")
    ap.add_argument(
        "--default-collector",
        action="store_true",
        help="keep CPython's collector thresholds instead of the ones `noc` sets",
    )
    args = ap.parse_args()
    if not args.default_collector:
        tune_collector()
    collector = _CollectorClock()
    gc.callbacks.append(collector)
    sites = [_site(k, args) for k in range(args.sites)]
    inventory = {"entities": [e for ents, _, _ in sites for e in ents]}
    pipe = Pipeline(topology=topology_from_dict(inventory), rca=True)
    cpu = wall = 0.0
    samples = 0

    def timed(feed: Callable[[], None]) -> None:
        nonlocal cpu, wall
        c, w = time.process_time(), time.perf_counter()
        collector.on = True
        feed()
        collector.on = False
        cpu += time.process_time() - c
        wall += time.perf_counter() - w

    if args.columns:
        keys: list[Any] = []
        timed(lambda: keys.extend(
            np.array([pipe.number(*_renamed(s, f"-s{k}")) for s in sc.series], np.int64)
            for k, (_, sc, _) in enumerate(sites)
        ))  # fmt: skip
        for ts, key, value in _merged_columns([sc for _, sc, _ in sites], keys):
            timed(lambda: pipe.feed_columns(ts, key, value))  # noqa: B023 (called at once)
            samples += len(ts)
    else:
        merged = heapq.merge(*(pts for _, _, pts in sites), key=lambda p: p.ts)
        for chunk in _chunks(merged, args.chunk_s):
            timed(lambda: pipe.feed_all(chunk))  # noqa: B023 (called at once)
            samples += len(chunk)
    timed(pipe.finish)
    gc.callbacks.remove(collector)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    series = len(pipe.store._series)
    banks = pipe.monitors._banks.values()
    kpi_series = sum(b.n_series for b in banks)
    bank_bytes = sum(b.nbytes for b in banks)
    rings = pipe.store.rings
    history = pipe.kpi_history
    digest = hashlib.sha256()
    for record in [*pipe.findings, *pipe.correlator.incidents.values()]:
        digest.update(json.dumps(record.model_dump(mode="json"), sort_keys=True).encode())
    topology = pipe.guess.current()
    spans = [
        (len(inc.finding_ids), len({topology.site_of(e) for e in inc.entities} - {None}))
        for inc in pipe.correlator.incidents.values()
    ]
    biggest = max(spans, default=(0, 0))
    rows = [
        f"| sites × scale-8 networks | {args.sites} |",
        f"| series (stored) | {series:,} |",
        f"| monitor bank slots (room for the KPI series watched) | {kpi_series:,} |",
        f"| samples | {samples:,} |",
        f"| pipeline CPU s (feed only) | {cpu:.1f} |",
        f"| pipeline wall s (feed only) | {wall:.1f} |",
        f"| samples per CPU second | {samples / cpu:,.0f} |",
        f"| garbage collector while feeding: thresholds, full collections, seconds | "
        f"{gc.get_threshold()}, {collector.full:,}, {collector.seconds:.1f} |",
        f"| findings / incidents | {len(pipe.findings):,} / {len(pipe.correlator.incidents):,} |",
        f"| incidents spanning more than one site | {sum(n > 1 for _, n in spans)} |",
        f"| largest incident: findings, sites | {biggest[0]:,}, {biggest[1]} |",
        f"| sha256 of the findings and incidents (compare revisions) | {digest.hexdigest()[:10]} |",
        f"| detector state per KPI slot | {bank_bytes / max(kpi_series, 1):,.0f} B |",
        f"| series store numbers per series (rings of {rings.capacity} increments, rows "
        f"allocated ahead included) | "
        f"{rings.nbytes / max(rings.n, 1):,.0f} B |",
        f"| KPI history per KPI series with a value (the last {history.length} values, rows "
        f"allocated ahead included) | {history.nbytes / max(len(history), 1):,.0f} B |",
        f"| peak RSS of the process (simulation buffers included) | {peak_mb:,.0f} MB |",
    ]
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# A large network through the pipeline (issue 40)",
        "",
        f"- command: `.venv/bin/python bench/bench_scale.py --sites {args.sites} --days "
        f"{args.days:g} --interval {args.interval:g} --seed {args.seed}"
        f"{' --default-collector' if args.default_collector else ''}"
        f"{' --columns' if args.columns else ''}`",
        f"- machine: {cpu_name()}, Python {platform.python_version()}; written {now}",
        "- each site is the simulator's scale-8 network on its own seed, every fault class; "
        "entities renamed per site; RCA on; only the feeding (`feed_all`, or the numbering of "
        "the series and `feed_columns` with `--columns`) and `finish` timed",
        "",
        "| figure | value |",
        "|---|---|",
        *rows,
    ]
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
