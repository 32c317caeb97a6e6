"""``noc serve`` replicas over one PostgreSQL show the same live feed, from the store alone;
``noc replay`` puts a recording's incidents into the configured store."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from conftest import _free_port

from noc_assistant.cli import run
from noc_assistant.models import Incident
from noc_assistant.simulate import ScenarioConfig, build_scenario, write_scenario
from noc_assistant.store import SqliteStore, open_store


def _replica(db_url: str, tmp: Path) -> tuple[str, subprocess.Popen[bytes]]:
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "NOC_DB_URL": db_url, "NOC_DATA_DIR": str(tmp)}
    args = [sys.executable, "-m", "noc_assistant", "serve", "--port", str(port)]
    proc = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while True:
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else b""
        assert time.monotonic() < deadline, f"noc serve at {url} not ready in a minute"
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return url, proc
        except httpx.TransportError:
            pass
        time.sleep(0.1)


def _listen(url: str, got: queue.Queue[tuple[str, dict[str, str], float]]) -> None:
    """Read the SSE feed of one replica, putting (replica, event, arrival) on ``got``."""
    try:
        with httpx.stream("GET", f"{url}/api/stream", timeout=None) as r:
            for line in r.iter_lines():
                if line.startswith("data: "):
                    got.put((url, json.loads(line[6:]), time.monotonic()))
    except httpx.HTTPError:  # the replica stopped at the end of the test
        return


@pytest.fixture()
def replicas(pg_url: str, tmp_path: Path) -> Iterator[list[str]]:
    procs = [_replica(pg_url, tmp_path) for _ in range(2)]
    yield [u for u, _ in procs]
    for _, p in procs:
        p.terminate()  # open SSE streams hold a graceful shutdown: then kill
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout=10)


def test_two_replicas_show_an_incident_a_worker_stores_within_two_seconds(
    pg_url: str, replicas: list[str]
) -> None:
    got: queue.Queue[tuple[str, dict[str, str], float]] = queue.Queue()
    for url in replicas:
        threading.Thread(target=_listen, args=(url, got), daemon=True).start()
    time.sleep(1.0)  # both connected
    worker = open_store(pg_url)  # what a bus worker or `noc bus correlate` does
    now = time.time()
    inc = Incident(
        id="inc-serve-1",
        fingerprint="x",
        opened_at=now,
        updated_at=now,
        entities=["upf-1"],
        finding_ids=[],
    )
    stored = time.monotonic()
    worker.save_incident(inc)
    seen: dict[str, float] = {}
    deadline = stored + 5
    while len(seen) < 2 and time.monotonic() < deadline:
        try:
            url, event, at = got.get(timeout=0.2)
        except queue.Empty:
            continue
        if event == {"kind": "opened", "incident": "inc-serve-1", "state": "open"}:
            seen.setdefault(url, at - stored)
    assert sorted(seen) == sorted(replicas)
    assert max(seen.values()) <= 2.0, seen
    worker.save_incident(inc.model_copy(update={"state": "resolved", "resolved_at": now + 60}))
    kinds: set[tuple[str, str]] = set()
    deadline = time.monotonic() + 5
    while len(kinds) < 2 and time.monotonic() < deadline:
        try:
            url, event, _ = got.get(timeout=0.2)
        except queue.Empty:
            continue
        kinds.add((url, event["kind"]))
    assert kinds == {(u, "resolved") for u in replicas}
    page = httpx.get(f"{replicas[1]}/incidents/inc-serve-1", timeout=10)
    assert page.status_code == 200 and "upf-1" in page.text


def test_replay_puts_a_recordings_incidents_in_the_configured_store(
    tmp_path: Path, use_store: object, capsys: pytest.CaptureFixture[str]
) -> None:
    files = write_scenario(
        build_scenario(ScenarioConfig(days=1, faults="all", seed=5, interval_s=300)), tmp_path
    )
    store = SqliteStore(tmp_path / "noc.db")
    use_store(store)  # type: ignore[operator]
    before = Incident(
        id="inc-mine", fingerprint="y", opened_at=1.0, updated_at=1.0, entities=["amf-1"]
    )
    store.save_incident(before)
    code = run(
        ["replay", str(files["telemetry"]), "--inventory", str(files["inventory"]), "--json"]
    )
    assert code == 0
    summary = json.loads(capsys.readouterr().out)  # JSON alone on stdout
    kept = store.list_incidents(limit=10_000)
    assert summary["incidents"] == len(kept) - 1 > 0
    assert "inc-mine" in {i.id for i in kept}  # nothing it did not write is touched
    diagnosed = [i for i in kept if store.get_diagnosis(i.id) is not None]
    assert len(diagnosed) == summary["incidents"]
    assert run(["replay", str(tmp_path / "missing.jsonl")]) == 2
