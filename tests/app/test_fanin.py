"""Detector workers of slices and one network-wide correlator (noc_assistant.stream.fanin), without
NATS: the merge itself. The bus carries the same batches (tests/app/test_bus_nats.py)."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import Any

import pytest

from knowledge.pack import Pack, load_pack
from knowledge.topology import Topology
from noc_assistant.errors import BadInputError, ConfigError
from noc_assistant.ingest import Point
from noc_assistant.ingest.reader import read_replay
from noc_assistant.inventory import load_topology
from noc_assistant.models import Finding
from noc_assistant.simulate import ScenarioConfig, build_scenario, write_scenario
from noc_assistant.stream.fanin import (
    Batch,
    Clear,
    FanIn,
    Seen,
    Tick,
    TickRecorder,
    decode_batch,
    encode_batch,
)
from noc_assistant.stream.pipeline import REPLAY_LATENESS_INTERVALS, Pipeline


@pytest.fixture(scope="module")
def network(tmp_path_factory: pytest.TempPathFactory) -> tuple[Pack, Topology, list[Point]]:
    files = write_scenario(
        build_scenario(ScenarioConfig(days=1, faults="all", seed=8, interval_s=300)),
        tmp_path_factory.mktemp("fanin"),
    )
    pack = load_pack()
    return pack, load_topology(files["inventory"], pack), list(read_replay(files["telemetry"]))


def _outcome(pipe: Pipeline) -> dict[frozenset[str], tuple[Any, ...]]:
    """Each incident by its findings: its state, times, entities and top root cause."""
    out = {}
    for inc in pipe.correlator.incidents.values():
        top = pipe.diagnoses[inc.id].top
        out[frozenset(inc.finding_ids)] = (
            inc.state,
            inc.opened_at,
            inc.resolved_at,
            tuple(inc.entities),
            top.fault,
            top.entity,
        )
    return out


def _worker_batches(
    pack: Pack, topology: Topology, points: Sequence[Point], name: str
) -> list[Batch]:
    """What a worker of a slice sends: a batch after each point that ended ticks, one at the
    end of its feed."""
    recorder = TickRecorder()
    pipe = Pipeline(
        pack=pack,
        topology=topology,
        lateness_intervals=REPLAY_LATENESS_INTERVALS,
        outbox=recorder,
        rca=False,
    )
    batches = []
    for seq, p in enumerate(points, 1):
        pipe.feed(p)
        ticks = recorder.take()
        if ticks:
            batches.append(Batch(name, seq, 0, ticks))
    pipe.finish()
    batches.append(Batch(name, len(points), 1, recorder.take(), final=True))
    return batches


def test_workers_of_slices_and_one_correlator_make_the_incidents_of_one_pipeline(
    network: tuple[Pack, Topology, list[Point]],
) -> None:
    pack, topology, points = network
    reference = Pipeline(
        pack=pack, topology=topology, lateness_intervals=REPLAY_LATENESS_INTERVALS
    ).replay(points)
    # three slices that cut every relation: an SMF and its UPFs, the AMFs, the GPU servers
    entities = sorted({p.instance for p in points})
    slice_of = {e: f"w{i % 3}" for i, e in enumerate(entities)}
    batches = {
        w: _worker_batches(pack, topology, [p for p in points if slice_of[p.instance] == w], w)
        for w in ("w0", "w1", "w2")
    }
    # the bus interleaves the workers' messages as it likes, and a restarted worker sends
    # again what followed its snapshot
    rng = random.Random(4)
    queues = {w: list(bs) for w, bs in batches.items()}
    arrivals: list[Batch] = []
    while any(queues.values()):
        w = rng.choice([w for w, q in queues.items() if q])
        arrivals.append(queues[w].pop(0))
        if rng.random() < 0.1:
            arrivals.append(arrivals[rng.randrange(len(arrivals))])
    merged = Pipeline(pack=pack, topology=topology, fan_in=FanIn(expect=frozenset(batches)))
    taken = sum(merged.take(b) for b in arrivals)
    merged.finish()

    assert taken == len(reference.findings) >= 50
    assert [f.id for f in sorted(merged.findings, key=lambda f: (f.ts, f.id))] == [
        f.id for f in sorted(reference.findings, key=lambda f: (f.ts, f.id))
    ]
    by_id = {f.id: f for f in reference.findings}
    assert all(f == by_id[f.id] for f in merged.findings)  # further readings judged alike
    want = _outcome(reference)
    assert len(want) >= 10
    assert _outcome(merged) == want
    spans = [inc for inc in want.values() if len({slice_of[e] for e in inc[3]}) > 1]
    assert spans  # incidents that no worker alone could have made
    assert merged.fan_in is not None and merged.fan_in.late == 0


def _finding(entity: str, ts: float) -> Finding:
    return Finding(
        id=f"f-{entity}-{ts:g}",
        detector="ensemble",
        kpi="amf-reg-success",
        entity=entity,
        entity_type="amf",
        ts=ts,
        score=9.0,
        observed=0.5,
        expected_low=0.98,
        expected_high=1.0,
        direction="down",
    )


def _batch(worker: str, seq: int, *ats: float, final: bool = False) -> Batch:
    ticks = tuple(Tick(at, 60.0, (Seen(_finding(worker, at), False),)) for at in ats)
    return Batch(worker, seq, int(final), ticks, final=final)


def test_a_tick_waits_for_the_slowest_worker() -> None:
    fan = FanIn(expect=frozenset({"a", "b"}))
    assert fan.offer(_batch("a", 1, 60.0, 120.0))
    assert fan.ready() == []  # b has not reported: nothing moves
    assert fan.offer(_batch("b", 1, 60.0))
    assert [t.at for t in fan.ready()] == [60.0]
    assert fan.watermark() == 60.0
    assert not fan.offer(_batch("b", 1, 60.0))  # the same batch again: nothing
    assert fan.offer(_batch("b", 2, 120.0, 180.0))
    (tick,) = fan.ready()
    # one tick, both workers' events, in entity order whatever arrived first
    assert tick.at == 120.0 and [e.entity for e in tick.events] == ["a", "b"]
    assert fan.offer(_batch("a", 2, final=True))  # a's feed ended: it holds nobody back
    assert [t.at for t in fan.ready()] == [180.0]
    assert fan.offer(_batch("a", 3, 240.0))  # a runs again: the clock waits for it again
    assert fan.offer(_batch("b", 3, 240.0, 300.0))
    assert [t.at for t in fan.ready()] == [240.0] and fan.watermark() == 240.0


def test_a_worker_that_joins_late_loses_nothing() -> None:
    fan = FanIn()
    fan.offer(_batch("a", 1, 60.0, 120.0))
    assert [t.at for t in fan.ready()] == [60.0, 120.0]
    fan.offer(_batch("c", 1, 60.0))  # c was not expected and started late
    assert fan.late == 1 and fan.ready() == []  # taken with the next tick all have passed
    fan.offer(_batch("a", 2, 180.0))
    fan.offer(_batch("c", 2, 180.0))
    late, tick = fan.ready()
    assert 120.0 < late.at < 180.0 and [e.entity for e in late.events] == ["c"]
    assert tick.at == 180.0 and [e.entity for e in tick.events] == ["a", "c"]
    assert not math.isinf(fan.watermark())


def test_events_of_a_tick_keep_the_phases_of_one_pipeline() -> None:
    fan = FanIn()
    early = Seen(_finding("z", 60.0), False, phase=0)
    clear = Clear("kpi", "b", 55.0, phase=1)
    live = Seen(_finding("a", 60.0), False, phase=2)
    fan.offer(Batch("w2", 1, 0, (Tick(60.0, 60.0, (live,)),)))
    fan.offer(Batch("w1", 1, 0, (Tick(60.0, 60.0, (clear, early)),), final=True))
    (tick,) = fan.ready(everything=True)
    assert tick.events == (early, clear, live)


def test_bad_batches_name_their_source_and_field() -> None:
    good = _batch("a", 1, 60.0)
    assert decode_batch(encode_batch(good), "s") == good
    with pytest.raises(BadInputError, match=r"nats:F#9: not a findings batch: format 7"):
        decode_batch(b'{"format": 7}', "nats:F#9")
    with pytest.raises(BadInputError, match=r"ticks\[0\]\.events\[0\]: neither"):
        decode_batch(
            b'{"format": 1, "worker": "a", "seq": 1, "ticks": '
            b'[{"at": 60, "step": 60, "events": [{"what": 1}]}]}',
            "s",
        )
    with pytest.raises(BadInputError, match="step 0"):
        decode_batch(
            b'{"format": 1, "worker": "a", "seq": 1, "ticks": [{"at": 60, "step": 0, '
            b'"events": []}]}',
            "s",
        )
    with pytest.raises(BadInputError, match="not a findings batch"):
        decode_batch(b"\xff not json", "s")


def test_a_telemetry_pipeline_takes_no_batches() -> None:
    with pytest.raises(ConfigError, match="not workers' findings"):
        Pipeline().take(_batch("a", 1, 60.0))
