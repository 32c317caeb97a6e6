"""The columnar ingest path against the one-point-at-a-time semantics it replaced.

The reorder buffer holds arrays and releases by sorting them (:mod:`noc_assistant.ingest.reorder`);
here it is checked against a plain model of what it must do (a heap ordered by time and
arrival, each series' last release in a dict: the buffer as it was written before), and the
pipeline's columns (:meth:`Pipeline.feed_columns`) against the same pipeline made to take one
point at a time, on a feed out of order, with repeats, conflicting repeats, late points and
gaps.
"""

from __future__ import annotations

import heapq
import itertools
import json
import pickle
import random
from collections import deque
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from noc_assistant.ingest import Point, Quarantine, ReorderBuffer, columnar, reader
from noc_assistant.ingest.door import SeriesDoor
from noc_assistant.ingest.reader import read_replay
from noc_assistant.ingest.replay import write_replay
from noc_assistant.inventory import topology_from_dict
from noc_assistant.simulate import ScenarioConfig, build_scenario
from noc_assistant.stream.clock import ScrapeClock
from noc_assistant.stream.pipeline import REPLAY_LATENESS_INTERVALS, Pipeline
from noc_assistant.stream.replay import run_replay


class Model:
    """What a reorder buffer does, one point at a time (the buffer as it was before arrays)."""

    def __init__(self, lateness_s: float) -> None:
        self.lateness_s = lateness_s
        self.quarantine = Quarantine()
        self.heap: list[tuple[float, int, Point]] = []
        self.seq = itertools.count()
        self.released: dict[Any, list[Any]] = {}
        self.watermark = self.max_ts = float("-inf")
        self.duplicates = self.late = 0

    def push(self, p: Point) -> None:
        if p.ts > self.max_ts:
            self.max_ts = p.ts
            self.watermark = p.ts - self.lateness_s
        heapq.heappush(self.heap, (p.ts, next(self.seq), p))

    def release(self, until: float) -> list[Point]:
        out = []
        while self.heap and self.heap[0][0] <= until:
            _, _, p = heapq.heappop(self.heap)
            last = self.released.get((p.metric, p.labels))
            if last is None or p.ts > last[0]:
                self.released[(p.metric, p.labels)] = [p.ts, p.value]
                out.append(p)
            elif p.ts == last[0] and p.value == last[1]:
                self.duplicates += 1
            else:
                self.late += 1
                reason = (
                    "conflicting repeat of an already processed sample"
                    if p.ts == last[0]
                    else f"arrived later than the allowed lateness ({self.lateness_s:g} s)"
                )
                self.quarantine.add("stream", None, reason, repr(p))
        return out

    def old_state(self, door: SeriesDoor | None) -> dict[str, Any]:
        """The state a buffer of before arrays pickled: its held items without keys, or
        with the number ``door`` gave their series, as it kept its last releases."""
        if door is None:
            held: list[Any] = list(self.heap)
            released = {key: list(last) for key, last in self.released.items()}
        else:
            held = [(*item, door.key_of(item[2].metric, item[2].labels)) for item in self.heap]
            released = {door.key_of(*key): list(last) for key, last in self.released.items()}
        return {
            "lateness_s": self.lateness_s,
            "quarantine": self.quarantine,
            "_heap": held[: len(held) // 2],
            "_run": deque(sorted(held[len(held) // 2 :])),
            "_seq": self.seq,
            "_released": released,
            "watermark": self.watermark,
            "duplicates": self.duplicates,
            "late": self.late,
            "max_ts": self.max_ts,
        }


def _arrivals(seed: int) -> list[Point]:
    """Four series (one with gaps), shuffled within two minutes, with repeats, conflicting
    repeats and a few points far behind."""
    rng = random.Random(seed)
    points = [
        Point(
            float(t),
            m,
            (("instance", f"amf-{m[-1]}"),),
            None if t % 105 == 0 and m == "m4" else float(t % 7),
            "gauge",
        )
        for t in range(0, 1800, 15)
        for m in ("m1", "m2", "m3", "m4")
    ]
    points += [
        p._replace(value=(p.value or 0.0) + (rng.random() < 0.5)) for p in rng.sample(points, 60)
    ]
    arrived = sorted(points, key=lambda p: p.ts + rng.uniform(0, 120))
    for _ in range(8):  # far behind what was released
        p = rng.choice(points)
        arrived.insert(rng.randrange(len(arrived) // 2, len(arrived)), p._replace(value=99.0))
    return arrived


def _by_buffer(
    points: list[Point], cuts: list[int], columns: bool
) -> tuple[ReorderBuffer, list[Point]]:
    buf = ReorderBuffer(lateness_s=60)
    out: list[Point] = []
    for start, end in itertools.pairwise([0, *cuts, len(points)]):
        part = points[start:end]
        if columns:
            keys = [buf.door.key_of(p.metric, p.labels, p.type) for p in part]
            buf.push_columns(
                np.array([p.ts for p in part]),
                np.array(keys, np.int64),
                np.array([np.nan if p.value is None else p.value for p in part]),
            )
        else:
            for p in part:
                buf.push(p)
        out.extend(buf.pop_ready())
    return buf, out + list(buf.drain())


def _by_model(points: list[Point], cuts: list[int]) -> tuple[Model, list[Point]]:
    model = Model(60)
    out: list[Point] = []
    for start, end in itertools.pairwise([0, *cuts, len(points)]):
        for p in points[start:end]:
            model.push(p)
        out.extend(model.release(model.watermark))
    return model, out + model.release(float("inf"))


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("columns", [False, True])
def test_the_buffer_releases_what_the_model_does(seed: int, columns: bool) -> None:
    """Released at the same moments, pushed a point or a column at a time: the same points
    in the same order, the same repeats counted and the same points quarantined."""
    points = _arrivals(seed)
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(1, len(points)), 40))
    model, want = _by_model(points, cuts)
    buf, got = _by_buffer(points, cuts, columns)
    assert got == want
    assert (buf.duplicates, buf.late) == (model.duplicates, model.late)
    assert model.duplicates and model.late
    assert buf.quarantine.records == model.quarantine.records


@pytest.mark.parametrize("numbered", [False, True])
def test_a_buffer_pickled_before_it_held_arrays_carries_on(numbered: bool) -> None:
    """A snapshot's buffer from before arrays (a heap and a queue of points, each series'
    last release keyed by metric and labels, or by the number the pipeline's door gave it,
    whose door the restored buffer is then numbered by) restores and releases what the model
    goes on to release."""
    points = _arrivals(9)
    cut = len(points) // 2
    model = Model(60)
    for p in points[:cut]:
        model.push(p)
        model.release(model.watermark)
    assert model.heap and model.released
    buf: ReorderBuffer = ReorderBuffer.__new__(ReorderBuffer)
    door = SeriesDoor() if numbered else None
    buf.__setstate__(pickle.loads(pickle.dumps(model.old_state(door))))
    if door is not None:
        buf.rekey(door)
    got: list[Point] = []
    want: list[Point] = []
    for p in points[cut:]:
        model.push(p)
        buf.push(p)
        want.extend(model.release(model.watermark))
        got.extend(buf.pop_ready())
    assert got + list(buf.drain()) == want + model.release(float("inf"))
    assert (buf.duplicates, buf.late) == (model.duplicates, model.late)


def _messy_day(seed: int) -> tuple[dict[str, Any], list[Point]]:
    """A short simulated network with every fault class, its lines out of order by up to
    two intervals, with repeats, conflicting repeats and points too late."""
    sc = build_scenario(ScenarioConfig(days=0.15, seed=seed, interval_s=60, defects=True))
    rng = random.Random(seed)
    points = [
        Point(s.ts, s.metric, tuple(sorted(s.labels.items())), s.value, s.type)
        for s in sc.iter_samples()
    ]
    points += [p._replace(value=(p.value or 0.0) + 1.0) for p in rng.sample(points, 30)]
    points += rng.sample(points, 300)
    arrived = sorted(points, key=lambda p: p.ts + rng.uniform(0, 120))
    return sc.inventory, arrived


def _fed(inventory: dict[str, Any], points: list[Point], chunks: int) -> Pipeline:
    pipe = Pipeline(
        topology=topology_from_dict(inventory), lateness_intervals=REPLAY_LATENESS_INTERVALS
    )
    rng = random.Random(chunks)
    cuts = sorted(rng.sample(range(1, len(points)), chunks))
    for start, end in itertools.pairwise([0, *cuts, len(points)]):
        pipe.feed_all(points[start:end])
    pipe.finish()
    return pipe


def _outcome(pipe: Pipeline) -> dict[str, Any]:
    return {
        "findings": [f.model_dump() for f in pipe.findings],
        "incidents": [i.model_dump() for i in pipe.correlator.incidents.values()],
        "history": {k: list(pipe.kpi_history[k]) for k in pipe.kpi_history},
        "quarantine": pipe.quarantine.records,
        "counts": (pipe.buffer.duplicates, pipe.buffer.late, pipe.samples),
        "seen": dict(pipe.store.last_seen),
        "intervals": {e: pipe.store.entity_interval(e) for e in pipe.store.entities},
        "clock": (pipe.clock.first_ts, pipe.clock.last_ts, pipe.clock.interval_s),
    }


@pytest.mark.slow
def test_the_pipeline_on_columns_finds_what_it_finds_a_point_at_a_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The columnar path (the store, liveness and ticks a tick's points at a time) gives the
    findings, incidents, KPI histories, quarantine and counts of the same pipeline taking
    one point at a time (the path it takes until its clock has settled), fed in chunks,
    whole, or a point at a time with ``feed``."""
    inventory, points = _messy_day(4)
    columns = _outcome(_fed(inventory, points, 0))
    assert _outcome(_fed(inventory, points, 25)) == columns
    fed_singly = Pipeline(
        topology=topology_from_dict(inventory), lateness_intervals=REPLAY_LATENESS_INTERVALS
    )
    for p in points:  # Pipeline.feed: one point straight to the buffer
        fed_singly.feed(p)
    fed_singly.finish()
    assert _outcome(fed_singly) == columns
    monkeypatch.setattr(ScrapeClock, "settled", property(lambda self: False))
    one_at_a_time = _outcome(_fed(inventory, points, 0))
    assert columns == one_at_a_time
    assert columns["findings"] and columns["quarantine"] and columns["counts"][0]


@pytest.mark.slow
def test_a_replay_file_read_as_columns_finds_what_its_points_find(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``run_replay`` feeds a JSONL file's chunks as columns (:meth:`Pipeline.feed_chunks`):
    the findings, incidents, counts and quarantine (the reader's bad lines and the
    pipeline's late points) of the same file fed as points, read in small chunks."""
    inventory, points = _messy_day(6)
    path = tmp_path / "t.jsonl"
    write_replay(points, path)
    with path.open("a") as fh:  # a bad line near the end
        fh.write('{"ts":"yesterday","metric":"up","labels":{},"value":1}\n')
    inv = tmp_path / "inventory.json"
    inv.write_text(json.dumps(inventory))
    want = Pipeline(
        topology=topology_from_dict(inventory),
        quarantine=Quarantine(),
        lateness_intervals=REPLAY_LATENESS_INTERVALS,
    )
    want.store.scrape_log = {}
    want.replay(read_replay(path, want.quarantine))
    chunks: list[int] = []

    def small(*args: Any, **kwargs: Any) -> Any:
        for chunk in columnar.read_jsonl_columns(*args, **kwargs, chunk_bytes=1 << 18):
            chunks.append(len(chunk))
            yield chunk

    monkeypatch.setattr(reader, "read_jsonl_columns", small)
    got = run_replay(path, inventory=inv, quarantine_path=tmp_path / "q.jsonl")
    assert len(chunks) > 20
    assert [f.model_dump() for f in got.findings] == [f.model_dump() for f in want.findings]
    assert [i.model_dump() for i in got.incidents] == [
        i.model_dump() for i in want.correlator.incidents.values()
    ]
    assert (got.samples, got.duplicates) == (want.samples, want.buffer.duplicates)
    # each source's records in their order (the reader's chunks set how they interleave)
    for source in {r.source for r in want.quarantine.records}:
        assert [r for r in got.quarantine.records if r.source == source] == [
            r for r in want.quarantine.records if r.source == source
        ]
    assert len(got.quarantine.records) == len(want.quarantine.records)
    assert got.scrapes == want.store.scrape_log
    assert got.findings and got.quarantined > 1
