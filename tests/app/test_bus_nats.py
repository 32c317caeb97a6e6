"""The JetStream bus against the real nats-server on loopback (started by scripts/system-deps.sh).

A worker that crashes between snapshots and restarts must end with the alerts of a worker that
never stopped; bad lines are quarantined with where they came from; publishing twice adds
nothing. No stand-in: without a server the tests fail, as docs/ARCHITECTURE.md asks.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import httpx
import nats
import pytest
from conftest import _free_port, _launch

from knowledge.pack import load_pack
from noc_assistant.cli import run
from noc_assistant.errors import ConfigError, UnreachableError
from noc_assistant.ingest import Quarantine
from noc_assistant.ingest.reader import read_replay
from noc_assistant.integrations.bus import (
    STATE_BUCKET,
    BusError,
    BusWorker,
    WorkerConfig,
    entity_subject,
    in_part,
    partition_config,
    publish_replay,
    remove,
    status,
)
from noc_assistant.inventory import load_topology
from noc_assistant.settings import get_settings
from noc_assistant.simulate import ScenarioConfig, build_scenario, write_scenario
from noc_assistant.store import open_store
from noc_assistant.stream.pipeline import REPLAY_LATENESS_INTERVALS, Pipeline

URL = "nats://127.0.0.1:4222"
KEY = b"bus-test-key-0123456789"


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("bus")
    return write_scenario(
        build_scenario(ScenarioConfig(days=1, faults="all", seed=8, interval_s=300)), out
    )


@pytest.fixture()
def stream() -> Iterator[tuple[str, str, str]]:
    """A stream, subject prefix and durable of this test only (removed afterwards)."""
    tag = uuid.uuid4().hex[:10]
    name, prefix, durable = f"NOCTEST_{tag}", f"noctest.{tag}", f"w-{tag}"
    yield name, prefix, durable
    remove(URL, name, durable)


def test_worker_restarted_after_a_crash_ends_as_one_that_never_stopped(
    scenario: dict[str, Path], stream: tuple[str, str, str]
) -> None:
    name, prefix, durable = stream
    published = publish_replay(scenario["telemetry"], url=URL, stream=name, prefix=prefix)
    assert published.messages > 1000 and published.duplicates == 0
    again = publish_replay(scenario["telemetry"], url=URL, stream=name, prefix=prefix)
    assert again.duplicates == again.messages == published.messages  # Nats-Msg-Id dedupe

    pack = load_pack()
    topology = load_topology(scenario["inventory"], pack)
    reference = Pipeline(
        pack=pack, topology=topology, lateness_intervals=REPLAY_LATENESS_INTERVALS
    ).replay(read_replay(scenario["telemetry"]))

    def worker(**kw: object) -> BusWorker:
        return BusWorker(
            url=URL,
            stream=name,
            durable=durable,
            key=KEY,
            pack=load_pack(),
            make_pipeline=lambda: Pipeline(
                pack=pack, topology=topology, lateness_intervals=REPLAY_LATENESS_INTERVALS
            ),
            prefix=prefix,
            checkpoint_every=250,
            idle_s=1.0,
            finish_on_idle=True,
            **kw,  # type: ignore[arg-type]
        )

    crashed = worker(stop_after=1111)
    first = crashed.run()
    assert first.checkpoints == 4 and first.last_seq == 1111
    restarted = worker()
    second = restarted.run()
    assert second.restored_seq == 1000  # the last snapshot before the crash
    assert second.last_seq == published.messages
    assert second.messages == published.messages - 1000  # 1001…1111 are read again
    pipe = restarted.pipeline
    assert pipe is not None
    assert [f.id for f in pipe.findings] == [f.id for f in reference.findings]
    got = {
        i.id: (i.state, i.opened_at, i.resolved_at, i.entities)
        for i in pipe.correlator.incidents.values()
    }
    want = {
        i.id: (i.state, i.opened_at, i.resolved_at, i.entities)
        for i in reference.correlator.incidents.values()
    }
    assert got == want and len(want) >= 5

    # a third start resumes at the end: nothing is read twice
    third = worker().run()
    assert third.restored_seq == published.messages and third.messages == 0

    # a feed whose length is a multiple of checkpoint_every: its last checkpoint acknowledged
    # everything, and finishing on idle must not acknowledge again (it exited 2); idle stops
    # it about idle_s after the last message
    exact = BusWorker(
        url=URL,
        stream=name,
        durable=durable + "-exact",
        key=KEY,
        pack=load_pack(),
        make_pipeline=lambda: Pipeline(
            pack=pack, topology=topology, lateness_intervals=REPLAY_LATENESS_INTERVALS
        ),
        prefix=prefix,
        checkpoint_every=published.messages,
        idle_s=1.0,
        finish_on_idle=True,
    ).run()
    assert exact.messages == published.messages and exact.last_seq == published.messages


def test_bad_lines_are_quarantined_with_their_origin(
    tmp_path: Path, stream: tuple[str, str, str]
) -> None:
    name, prefix, durable = stream
    good = '{"ts": %d, "metric": "up", "labels": {"instance": "amf-1"}, "value": 1}\n'
    t0 = 1_764_000_000  # a real time: files outside the sane window are quarantined
    path = tmp_path / "t.jsonl"
    path.write_text(good % t0 + "not json\n" + good % (t0 + 15))
    q = Quarantine()
    stats = publish_replay(path, url=URL, stream=name, prefix=prefix, quarantine=q)
    assert stats.lines == 2 and stats.quarantined == 1
    assert (q.records[0].source, q.records[0].line) == (str(path), 2)

    async def send() -> int:
        nc = await nats.connect(URL)
        ack = await nc.jetstream().publish(
            entity_subject("amf-1", prefix),
            (good % (t0 + 30) + f'{{"ts": {t0 + 45}, "metric": "up", "value": "high"}}\n').encode(),
            stream=name,
        )
        await nc.close()
        return int(ack.seq)

    seq = asyncio.run(send())
    bad = Quarantine()
    w = BusWorker(
        url=URL,
        stream=name,
        durable=durable,
        key=KEY,
        pack=load_pack(),
        make_pipeline=Pipeline,
        quarantine=bad,
        prefix=prefix,
        idle_s=0.5,
    )
    stats_w = w.run()
    assert stats_w.lines == 4 and stats_w.quarantined == 1
    record = bad.records[0]
    assert record.source == f"nats:{name}#{seq} ({prefix}.amf-1)" and record.line == 2
    assert "value 'high' is not a number" in record.reason and '"high"' in record.raw
    assert w.pipeline is not None and w.pipeline.samples == 3


def test_unreachable_server_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """No server at the address: an UnreachableError (not a setting the bus refused) that
    names the address, without its password, and what to check; the CLI exits 2."""
    url = f"nats://noc:secret@127.0.0.1:{_free_port()}"
    with pytest.raises(UnreachableError, match="cannot connect to NATS") as caught:
        publish_replay(Path("x.jsonl"), url=url, stream="S")
    said = str(caught.value)
    assert not isinstance(caught.value, BusError)
    assert "nats://noc@127.0.0.1:" in said and "secret" not in said
    assert "nats-server" in said and "NOC_NATS_URL" in said  # what to check
    with pytest.raises(UnreachableError, match="cannot connect to NATS"):
        status(url, "S")
    monkeypatch.setenv("NOC_NATS_URL", url)
    get_settings.cache_clear()
    try:
        assert run(["bus", "status"]) == 2
        assert "cannot connect to NATS" in capsys.readouterr().err
    finally:
        get_settings.cache_clear()


def test_a_worker_set_up_wrong_is_a_bus_error() -> None:
    with pytest.raises(BusError, match="exclude each other"):
        WorkerConfig(url=URL, stream="S", durable="d", partition=1, filter_subject="x.>")
    with pytest.raises(ConfigError, match="durable name"):
        WorkerConfig(url=URL, stream="S", durable="a.b")


def test_cli_publish_then_worker_stores_incidents(
    scenario: dict[str, Path],
    stream: tuple[str, str, str],
    tmp_path: Path,
    alertmanager: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    name, prefix, durable = stream
    db = f"sqlite:///{tmp_path / 'noc.db'}"
    for k, v in {
        "NOC_NATS_STREAM": name,
        "NOC_NATS_SUBJECT_PREFIX": prefix,
        "NOC_DB_URL": db,
        "NOC_DATA_DIR": str(tmp_path),
        "NOC_ALERTMANAGER_URL": alertmanager,
    }.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("NOC_STATE_KEY", raising=False)
    get_settings.cache_clear()
    try:
        assert run(["bus", "publish", "--telemetry", str(scenario["telemetry"])]) == 0
        args = ["bus", "worker", "--durable", durable, "--idle", "1", "--finish"]
        args += ["--inventory", str(scenario["inventory"])]
        assert run(args) == 2  # snapshots are signed: no key, no worker
        assert "NOC_STATE_KEY is not set" in capsys.readouterr().err
        monkeypatch.setenv("NOC_STATE_KEY", KEY.decode())
        get_settings.cache_clear()
        assert run(args) == 0
        out = capsys.readouterr().out
        assert "started afresh" in out and "ALERT" in out
        incidents = open_store(db).count("incidents")
        assert incidents >= 5
        sent = re.search(r"alertmanager \S+: (\d+) alerts sent, 0 waiting", out)
        assert sent is not None and int(sent.group(1)) >= 2 * incidents  # opened … resolved
        assert run(args) == 0
        assert "resumed after" in capsys.readouterr().out
    finally:
        get_settings.cache_clear()


def test_a_killed_worker_process_loses_nothing(
    scenario: dict[str, Path], stream: tuple[str, str, str], tmp_path: Path, pg_url: str
) -> None:
    """``noc bus worker`` on NATS and PostgreSQL, killed with SIGKILL after its first snapshot,
    then started again: the database ends with the incidents of an uninterrupted replay."""
    name, prefix, durable = stream
    publish_replay(scenario["telemetry"], url=URL, stream=name, prefix=prefix)
    env = {
        **os.environ,
        "NOC_NATS_STREAM": name,
        "NOC_NATS_SUBJECT_PREFIX": prefix,
        "NOC_DB_URL": pg_url,
        "NOC_DATA_DIR": str(tmp_path),
        "NOC_STATE_KEY": KEY.decode(),
    }
    args = [sys.executable, "-m", "noc_assistant", "bus", "worker", "--durable", durable]
    args += ["--inventory", str(scenario["inventory"]), "--checkpoint-every", "300"]

    async def snapshotted() -> bool:
        nc = await nats.connect(URL)
        try:
            kv = await nc.jetstream().key_value(STATE_BUCKET)
            await kv.get(durable)
            return True
        except (nats.js.errors.BucketNotFoundError, nats.js.errors.KeyNotFoundError):
            return False
        finally:
            await nc.close()

    proc = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not asyncio.run(snapshotted()):
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        assert time.monotonic() < deadline
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    killed_at = len(open_store(pg_url).list_incidents())

    done = subprocess.run(
        [*args, "--idle", "1", "--finish"], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert "resumed after #" in done.stdout

    reference = Pipeline(
        pack=load_pack(),
        topology=load_topology(scenario["inventory"], load_pack()),
        lateness_intervals=REPLAY_LATENESS_INTERVALS,
    ).replay(read_replay(scenario["telemetry"]))
    stored = {
        i.id: (i.state, i.opened_at, i.resolved_at, i.entities)
        for i in open_store(pg_url).list_incidents()
    }
    want = {
        i.id: (i.state, i.opened_at, i.resolved_at, i.entities)
        for i in reference.correlator.incidents.values()
    }
    assert stored == want
    assert killed_at < len(want)  # the kill came before the end


def test_sigterm_stops_a_worker_with_a_snapshot_of_all_it_read(
    scenario: dict[str, Path], stream: tuple[str, str, str], tmp_path: Path
) -> None:
    """A service manager's stop: the worker finishes its batch, snapshots and exits 0, and
    the snapshot covers every message it read."""
    name, prefix, durable = stream
    publish_replay(scenario["telemetry"], url=URL, stream=name, prefix=prefix)
    env = {
        **os.environ,
        "NOC_NATS_STREAM": name,
        "NOC_NATS_SUBJECT_PREFIX": prefix,
        "NOC_DB_URL": f"sqlite:///{tmp_path / 'noc.db'}",
        "NOC_DATA_DIR": str(tmp_path),
        "NOC_STATE_KEY": KEY.decode(),
    }
    args = [sys.executable, "-m", "noc_assistant", "bus", "worker", "--durable", durable]
    proc = subprocess.Popen(
        [*args, "--checkpoint-every", "100000"], env=env, stdout=subprocess.PIPE, text=True
    )

    async def manifest_seq() -> int | None:
        nc = await nats.connect(URL)
        try:
            info = await nc.jetstream().consumer_info(name, durable)
            return int(info.delivered.stream_seq)
        except nats.js.errors.NotFoundError:
            return None
        finally:
            await nc.close()

    deadline = time.monotonic() + 120
    while (asyncio.run(manifest_seq()) or 0) < 100:  # reading, no snapshot taken yet
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    m = re.search(r"started afresh, ([\d,]+) messages .*? to\s+#(\d+),\s+1\s+snapshots", out, re.S)
    assert m is not None, out
    read_to = int(m.group(2))

    async def snapshot_seq() -> int:
        nc = await nats.connect(URL)
        kv = await nc.jetstream().key_value(STATE_BUCKET)
        seq = int(json.loads((await kv.get(durable)).value)["seq"])
        await nc.close()
        return seq

    assert asyncio.run(snapshot_seq()) == read_to > 0


def test_workers_of_slices_feed_one_correlator_that_stores_the_networks_incidents(
    scenario: dict[str, Path],
    stream: tuple[str, str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Two workers, each half of the entities (``--part``), send their findings; one of them
    crashes between snapshots and is started again; ``noc bus correlate`` stores what one
    worker over the whole network would have: incidents that span both halves included."""
    name, prefix, durable = stream
    findings, fprefix = f"{name}_F", prefix.replace("noctest.", "noctestf.")
    a, b, corr = f"{durable}a", f"{durable}b", f"{durable}c"
    db = f"sqlite:///{tmp_path / 'noc.db'}"
    publish_replay(scenario["telemetry"], url=URL, stream=name, prefix=prefix)
    pack = load_pack()
    topology = load_topology(scenario["inventory"], pack)
    try:
        crashed = BusWorker(
            url=URL,
            stream=name,
            durable=a,
            key=KEY,
            pack=pack,
            make_pipeline=lambda: Pipeline(
                pack=pack,
                topology=topology,
                lateness_intervals=REPLAY_LATENESS_INTERVALS,
                rca=False,
            ),
            prefix=prefix,
            part=(0, 2),
            checkpoint_every=400,
            idle_s=1.0,
            findings_stream=findings,
            findings_prefix=fprefix,
            stop_after=1500,  # a crash after three snapshots: what followed is sent again
        )
        assert crashed.run().checkpoints == 3
        for k, v in {
            "NOC_NATS_STREAM": name,
            "NOC_NATS_SUBJECT_PREFIX": prefix,
            "NOC_NATS_FINDINGS_STREAM": findings,
            "NOC_NATS_FINDINGS_PREFIX": fprefix,
            "NOC_DB_URL": db,
            "NOC_DATA_DIR": str(tmp_path),
            "NOC_STATE_KEY": KEY.decode(),
        }.items():
            monkeypatch.setenv(k, v)
        get_settings.cache_clear()
        common = ["--idle", "1", "--finish", "--inventory", str(scenario["inventory"])]
        for worker, part in ((a, "0/2"), (b, "1/2")):
            args = ["bus", "worker", "--findings", "--durable", worker, "--part", part]
            assert run([*args, *common]) == 0
        out = capsys.readouterr().out
        assert "resumed after #1200" in out and "ALERT" not in out  # workers page nobody
        assert open_store(db).count("incidents") == 0
        assert run(["bus", "worker", "--part", "2/2", *common]) == 2
        assert "--part" in capsys.readouterr().err

        args = ["bus", "correlate", "--durable", corr, "--expect", f"{a},{b}", *common]
        assert run(args) == 0
        captured = capsys.readouterr()
        assert "ALERT" in captured.out
        # b's batches follow all of a's on the stream: the correlator waited for b, then not
        assert f"waits for worker {b}: not heard from yet" in captured.err
        assert f"worker {b} caught up" in captured.out
        # a worker named but never started holds the clock back, and the operator is told
        args = ["bus", "correlate", "--durable", f"{corr}x", "--expect", f"{a},{b},ghost"]
        assert run([*args, "--idle", "1", "--inventory", str(scenario["inventory"])]) == 0
        captured = capsys.readouterr()
        assert "waits for worker ghost: not heard from yet" in captured.err
        assert "ALERT" not in captured.out  # everything held back
        # the ghost is retired: the restarted correlator releases what it held back
        args = ["bus", "correlate", "--durable", f"{corr}x", "--expect", f"{a},{b}"]
        args += ["--retire", "ghost", "--idle", "1", "--inventory", str(scenario["inventory"])]
        assert run(args) == 0
        captured = capsys.readouterr()
        assert "resumed after" in captured.out and "waits for" not in captured.err
        assert "ALERT" in captured.out
    finally:
        get_settings.cache_clear()
        for d in (a, b, corr, f"{corr}x"):
            remove(URL, findings, d)
            remove(URL, name, d)

    reference = Pipeline(
        pack=pack, topology=topology, lateness_intervals=REPLAY_LATENESS_INTERVALS
    ).replay(read_replay(scenario["telemetry"]))
    stored = {
        i.id: (i.state, i.opened_at, i.resolved_at, i.entities)
        for i in open_store(db).list_incidents()
    }
    want = {
        i.id: (i.state, i.opened_at, i.resolved_at, i.entities)
        for i in reference.correlator.incidents.values()
    }
    assert stored == want and len(want) >= 5
    halves = [
        {bool(in_part(entity_subject(e, prefix), (0, 2))) for e in entities}
        for *_, entities in want.values()
    ]
    assert {True, False} in halves  # an incident neither worker saw whole


def test_a_worker_takes_the_entities_of_its_slice() -> None:
    pack = load_pack()
    worker = BusWorker(
        url=URL,
        stream="S",
        durable="d",
        key=KEY,
        pack=pack,
        make_pipeline=lambda: Pipeline(pack=pack),
        prefix="lab.telemetry",
        entities=("upf-*", "smf-1"),
    )
    takes = [worker.config.takes(entity_subject(e, "lab.telemetry")) for e in ("upf-2", "smf-1")]
    assert takes == [True, True]
    assert worker.config.takes("lab.telemetry.1.upf-2")  # filed by the server under partition 1
    assert not any(
        worker.config.takes(entity_subject(e, "lab.telemetry"))
        for e in ("smf-12", "amf-1", "xupf-1")
    )
    half = replace(worker.config, part=(0, 2))  # both: the patterns' entities of part 0
    names = [f"upf-{i}" for i in range(40)]
    mine = [e for e in names if half.takes(entity_subject(e, "lab.telemetry"))]
    assert mine == [e for e in names if in_part(entity_subject(e, "lab.telemetry"), (0, 2))]
    assert 10 <= len(mine) <= 30  # a hash spreads similar names


def test_bus_status_shows_how_far_each_worker_is(
    scenario: dict[str, Path],
    stream: tuple[str, str, str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A worker that stopped mid-stream: ``noc bus status`` shows what it read, what is left
    for it and the sequence its snapshot covers (where a restart resumes)."""
    name, prefix, durable = stream
    published = publish_replay(scenario["telemetry"], url=URL, stream=name, prefix=prefix)
    pack = load_pack()
    worker = BusWorker(
        url=URL,
        stream=name,
        durable=durable,
        key=KEY,
        pack=pack,
        make_pipeline=lambda: Pipeline(pack=pack, lateness_intervals=REPLAY_LATENESS_INTERVALS),
        prefix=prefix,
        checkpoint_every=250,
        stop_after=600,
    )
    assert worker.run().last_seq == 600
    (state, findings) = status(URL, name, f"{name}_none")
    assert findings.exists is False and state.messages == published.messages
    (mine,) = [c for c in state.consumers if c.durable == durable]
    assert mine.snapshot_seq == 500 and mine.delivered >= 600
    assert mine.pending == published.messages - mine.delivered > 0

    monkeypatch.setenv("NOC_NATS_STREAM", name)
    monkeypatch.setenv("NOC_NATS_FINDINGS_STREAM", f"{name}_none")
    get_settings.cache_clear()
    try:
        assert run(["bus", "status"]) == 0
        out = capsys.readouterr().out
        assert f"stream {name}: {published.messages:,} messages" in out
        assert f"{durable}: read to #{mine.delivered:,}, {mine.pending:,} left" in out
        assert "snapshot #500" in out and f"stream {name}_none: not made yet" in out
    finally:
        get_settings.cache_clear()


@pytest.fixture()
def partitioned(tmp_path: Path) -> Iterator[Callable[[str, int], str]]:
    """``serve(prefix, n)``: a nats-server of this test (JetStream in ``tmp_path``) whose
    configuration is :func:`partition_config`'s mapping of ``prefix`` into ``n`` partitions;
    its URL. The real server does the split: nothing in the worker computes it."""
    procs: list[subprocess.Popen[bytes]] = []

    def serve(prefix: str, n: int) -> str:
        port, http = _free_port(), _free_port()
        config = tmp_path / "nats.conf"
        config.write_text(
            f"listen: 127.0.0.1:{port}\nhttp: 127.0.0.1:{http}\n"
            f'jetstream {{ store_dir: "{tmp_path / "js"}" }}\n{partition_config(n, prefix)}\n'
        )
        health = f"http://127.0.0.1:{http}/healthz?js-enabled-only=true"
        binary = shutil.which("nats-server")
        assert binary, "nats-server is not installed (scripts/system-deps.sh installs it)"
        ready = lambda: httpx.get(health, timeout=1).status_code == 200  # noqa: E731
        procs.append(_launch([binary, "-c", str(config)], health, ready))
        return f"nats://127.0.0.1:{port}"

    yield serve
    for proc in procs:
        proc.terminate()
        proc.wait(timeout=10)


def test_the_server_splits_the_network_among_partition_workers(
    scenario: dict[str, Path],
    stream: tuple[str, str, str],
    partitioned: Callable[[str, int], str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """With the mapping of ``noc bus partitions 2`` in nats-server's configuration, the
    publisher is unchanged, the server files each entity under its partition, each
    ``--partition`` worker is sent only its own entities' messages, and the correlator stores
    what one worker over the whole network would have. A stream of unpartitioned telemetry is
    refused by a partition worker (it would read nothing of it), with the fix in the message."""
    name, prefix, durable = stream
    findings, fprefix = f"{name}_F", prefix.replace("noctest.", "noctestf.")
    url = partitioned(prefix, 2)
    published = publish_replay(scenario["telemetry"], url=url, stream=name, prefix=prefix)
    filed = asyncio.run(_subjects(url, name))
    assert filed and all(re.fullmatch(rf"{re.escape(prefix)}\.[01]\.[\w-]+", s) for s in filed)
    for k, v in {
        "NOC_NATS_URL": url,
        "NOC_NATS_STREAM": name,
        "NOC_NATS_SUBJECT_PREFIX": prefix,
        "NOC_NATS_FINDINGS_STREAM": findings,
        "NOC_NATS_FINDINGS_PREFIX": fprefix,
        "NOC_DB_URL": f"sqlite:///{tmp_path / 'noc.db'}",
        "NOC_DATA_DIR": str(tmp_path),
        "NOC_STATE_KEY": KEY.decode(),
    }.items():
        monkeypatch.setenv(k, v)
    get_settings.cache_clear()
    try:
        assert run(["bus", "partitions", "2"]) == 0
        assert capsys.readouterr().out.strip() == partition_config(2, prefix)
        common = ["--idle", "1", "--finish", "--inventory", str(scenario["inventory"])]
        workers, read = (f"{durable}a", f"{durable}b"), []
        for k, worker in enumerate(workers):
            args = ["bus", "worker", "--findings", "--durable", worker, "--partition", str(k)]
            assert run([*args, *common]) == 0
            out = capsys.readouterr().out
            messages, lines = re.search(r"([\d,]+) messages \(([\d,]+) lines\)", out).groups()
            read.append((int(messages.replace(",", "")), int(lines.replace(",", ""))))
        # the server sent each worker its own messages only: together, each message once
        assert sum(m for m, _ in read) == published.messages and all(m for m, _ in read)
        assert sum(n for _, n in read) == published.lines
        args = ["bus", "correlate", "--durable", f"{durable}c", "--expect", ",".join(workers)]
        assert run([*args, *common]) == 0
        assert "ALERT" in capsys.readouterr().out
        assert run(["bus", "worker", "--partition", "0", "--subject", "x", *common]) == 2
        assert "exclude each other" in capsys.readouterr().err

        # the same telemetry on the loopback server, which maps nothing: refused, not idle
        monkeypatch.setenv("NOC_NATS_URL", URL)
        get_settings.cache_clear()
        publish_replay(scenario["telemetry"], url=URL, stream=name, prefix=prefix)
        assert run(["bus", "worker", "--durable", durable, "--partition", "1", *common]) == 2
        err = " ".join(capsys.readouterr().err.split())
        assert f"stream {name} holds {published.messages:,} messages" in err
        assert "maps no partitions" in err and "noc bus partitions N" in err
    finally:
        get_settings.cache_clear()

    pack = load_pack()
    reference = Pipeline(
        pack=pack,
        topology=load_topology(scenario["inventory"], pack),
        lateness_intervals=REPLAY_LATENESS_INTERVALS,
    ).replay(read_replay(scenario["telemetry"]))
    stored = {
        i.id: (i.state, i.opened_at, i.resolved_at, i.entities)
        for i in open_store(f"sqlite:///{tmp_path / 'noc.db'}").list_incidents()
    }
    want = {
        i.id: (i.state, i.opened_at, i.resolved_at, i.entities)
        for i in reference.correlator.incidents.values()
    }
    assert stored == want and len(want) >= 5


async def _subjects(url: str, stream: str) -> list[str]:
    nc = await nats.connect(url)
    try:
        info = await nc.jetstream().stream_info(stream, subjects_filter=">")
        return sorted(info.state.subjects or {})
    finally:
        await nc.close()
