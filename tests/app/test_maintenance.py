"""Planned maintenance: declared in the console or the CLI (writes need the token and a
name), checked (an end after the start, at most two weeks, an entity of the network), kept in
the store, ended early on record, and taken by a running pipeline at its next round. The live
hold itself is tested against real exporters in test_watch.py."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from test_drafting import PACK
from test_reviews import AUTH, TOKEN, _client

from knowledge.topology import load_inventory
from noc_assistant.api.app import create_app
from noc_assistant.cli import run
from noc_assistant.cli._live import IncidentOutput
from noc_assistant.errors import MaintenanceError
from noc_assistant.integrations.alertmanager import Silences
from noc_assistant.ops.maintenance import new_window
from noc_assistant.settings import Settings
from noc_assistant.store import SqliteStore, Store
from noc_assistant.stream.correlate import MaintenanceWindow
from noc_assistant.stream.pipeline import Pipeline
from noc_assistant.triage.drafting import Drafter


@pytest.fixture()
def store(tmp_path: Path) -> Iterator[Store]:
    s = SqliteStore(tmp_path / "noc.db")
    yield s
    s.close()


def test_a_window_must_hold_together() -> None:
    with pytest.raises(MaintenanceError, match="end: missing"):
        new_window("smf-1", "ana", 0.0)
    with pytest.raises(MaintenanceError, match="ends before it starts"):
        new_window("smf-1", "ana", 0.0, start="1970-01-01T01:00:00Z", end="1970-01-01T00:30:00Z")
    with pytest.raises(MaintenanceError, match="14 days at most"):
        new_window("smf-1", "ana", 0.0, duration_s=15 * 86400)
    with pytest.raises(MaintenanceError, match="'smf-9' is not in the network"):
        new_window("smf-9", "ana", 0.0, duration_s=60, known={"smf-1"})
    with pytest.raises(MaintenanceError, match="start: ts 'tomorrow' is not RFC 3339"):
        new_window("smf-1", "ana", 0.0, start="tomorrow", duration_s=60)
    w = new_window("smf-1", "ana", 100.0, start="1970-01-01T01:00:00Z", end="1970-01-01T02:00:00Z")
    assert (w.start, w.end, w.created_at) == (3600.0, 7200.0, 100.0)
    assert w.ended("bo", 50.0).end == w.start  # ended before it began: an empty window


def test_declare_list_and_end_over_http(store: Store) -> None:
    c = _client(store)
    body = {"entity": "smf-01", "by": "ana", "duration_s": 7200, "reason": "CHG-1234 upgrade"}
    assert c.post("/api/maintenance", json=body).status_code == 401
    assert _client(store, None).post("/api/maintenance", headers=AUTH, json=body).status_code == 503
    r = c.post("/api/maintenance", headers=AUTH, json={**body, "entity": "smf-99"})
    assert r.status_code == 422 and "not in the network" in r.json()["detail"]
    r = c.post("/api/maintenance", headers=AUTH, json={**body, "duration_s": 30 * 86400})
    assert r.status_code == 422
    r = c.post("/api/maintenance", headers=AUTH, json=body)
    assert r.status_code == 201
    window = r.json()
    later = {**body, "start": "2100-01-01T00:00:00Z", "entity": "upf-01"}
    assert c.post("/api/maintenance", headers=AUTH, json=later).status_code == 201
    assert [w["entity"] for w in c.get("/api/maintenance").json()] == ["smf-01", "upf-01"]
    assert [w["id"] for w in c.get("/api/maintenance?current=true").json()] == [window["id"]]
    page = c.get("/").text
    assert "CHG-1234 upgrade" in page and "in force" in page
    url = f"/api/maintenance/{window['id']}/end"
    assert c.post(url, json={"by": "bo"}).status_code == 401
    r = c.post(url, headers=AUTH, json={"by": "bo"})
    assert r.status_code == 200 and r.json()["ended_by"] == "bo"
    assert r.json()["planned_end"] == window["end"] and r.json()["end"] < window["end"]
    assert c.get("/api/maintenance?current=true").json() == []
    kept = store.maintenance_windows()
    assert {w.id for w in kept} >= {window["id"]}  # never deleted: on record
    assert (
        c.post("/api/maintenance/mw-nope/end", headers=AUTH, json={"by": "bo"}).status_code == 404
    )


def test_a_running_pipeline_takes_the_stores_windows_at_its_next_round(store: Store) -> None:
    pipe = Pipeline(pack=PACK)
    from_labels = MaintenanceWindow("amf-01", 0.0, 10.0)
    pipe.correlator.maintenance.append(from_labels)
    output = IncidentOutput(Settings(alertmanager_url=None), store, lambda: pipe)
    now = 1_800_000_000.0
    w = new_window("smf-01", "ana", now, duration_s=3600)
    store.save_maintenance(w)
    output.sync_maintenance(now)
    assert pipe.correlator.in_maintenance("smf-01", now + 60)
    assert from_labels in pipe.correlator.maintenance  # given otherwise: kept
    store.save_maintenance(w.ended("bo", now + 120))  # ended early in the console
    output.sync_maintenance(now + 121)
    assert not pipe.correlator.in_maintenance("smf-01", now + 180)
    assert pipe.correlator.maintenance == [from_labels, MaintenanceWindow("smf-01", now, now + 120)]
    # a pipeline restored from a snapshot holds the window as it was: replaced, not doubled
    restored = IncidentOutput(Settings(alertmanager_url=None), store, lambda: pipe)
    pipe.correlator.maintenance = [from_labels, MaintenanceWindow("smf-01", now, now + 3600)]
    restored.sync_maintenance(now + 200)
    assert pipe.correlator.maintenance == [from_labels, MaintenanceWindow("smf-01", now, now + 120)]
    # one ended early days before the restart, still whole in the snapshot: the first round
    # reads every window on record, so it is not held for the rest of its planned span
    old = new_window("upf-01", "ana", now - 5 * 86400, duration_s=10 * 86400)
    store.save_maintenance(old.ended("bo", now - 3 * 86400))
    pipe.correlator.maintenance = [MaintenanceWindow("upf-01", old.start, old.end)]
    again = IncidentOutput(Settings(alertmanager_url=None), store, lambda: pipe)
    again.sync_maintenance(now + 300)
    assert not pipe.correlator.in_maintenance("upf-01", now + 300)


def test_the_cli_declares_lists_and_ends(
    store: Store, use_store: Callable[..., None], capsys: pytest.CaptureFixture[str]
) -> None:
    use_store(store)
    assert run(["maintenance", "add", "upf-3", "--by", "ana", "--for", "90m"]) == 0
    assert run(["maintenance", "add", "upf-3", "--by", "ana", "--for", "soon"]) == 2
    assert "not a duration" in capsys.readouterr().err
    assert run(["maintenance", "add", "upf-3", "--by", "ana"]) == 2  # no end
    (w,) = store.maintenance_windows()
    assert w.end - w.start == 5400.0
    capsys.readouterr()
    assert run(["maintenance", "list"]) == 0
    assert "in force" in capsys.readouterr().out
    assert run(["maintenance", "end", w.id, "--by", "bo"]) == 0
    assert run(["maintenance", "end", "mw-nope", "--by", "bo"]) == 2
    capsys.readouterr()
    assert run(["maintenance", "list"]) == 0
    assert "upf-3" not in capsys.readouterr().out  # over
    assert run(["maintenance", "list", "--all"]) == 0
    assert "ended by bo" in capsys.readouterr().out


def test_a_window_is_a_silence_in_the_real_alertmanager(
    store: Store, alertmanager: str, free_port: int
) -> None:
    """One declaration mutes the operator's own alert rules on the entity too: the window is
    an Alertmanager silence on ``instance``, an alert of another source on that entity is
    suppressed by it, and ending the window early expires it. Alertmanager down costs the
    silence, not the window."""
    topo = load_inventory(PACK.fixture_path("inventory.yaml"), PACK)

    def client(url: str) -> TestClient:
        app = create_app(
            store, drafter=Drafter(PACK, topo), api_token=TOKEN, silences=Silences(url)
        )
        return TestClient(app)

    c = client(alertmanager)
    body = {"entity": "smf-01", "by": "ana", "duration_s": 3600, "reason": "CHG-9 upgrade"}
    r = c.post("/api/maintenance", headers=AUTH, json=body)
    assert r.status_code == 201, r.text
    window = r.json()
    assert window["silence_id"] and window["silence_error"] is None
    url = f"{alertmanager}/api/v2/silence/{window['silence_id']}"
    got = httpx.get(url, timeout=5).json()
    assert got["status"]["state"] == "active" and got["createdBy"] == "ana"
    assert [(m["name"], m["value"]) for m in got["matchers"]] == [("instance", "smf-01")]
    assert "CHG-9 upgrade" in got["comment"]
    # a Prometheus rule's alert on the entity, sent by someone else: silenced
    alert = [{"labels": {"alertname": "HighCpu", "instance": "smf-01"}}]
    httpx.post(f"{alertmanager}/api/v2/alerts", json=alert, timeout=5).raise_for_status()
    state = None
    deadline = time.monotonic() + 15
    while state != "suppressed" and time.monotonic() < deadline:
        time.sleep(0.2)
        alerts = httpx.get(f"{alertmanager}/api/v2/alerts", timeout=5).json()
        mine = [a for a in alerts if a["labels"].get("alertname") == "HighCpu"]
        state = mine[0]["status"]["state"] if mine else None
    assert state == "suppressed" and mine[0]["status"]["silencedBy"] == [window["silence_id"]]
    r = c.post(f"/api/maintenance/{window['id']}/end", headers=AUTH, json={"by": "bo"})
    assert r.status_code == 200 and r.json()["ended_by"] == "bo"
    assert httpx.get(url, timeout=5).json()["status"]["state"] == "expired"

    down = client(f"http://127.0.0.1:{free_port}")
    r = down.post("/api/maintenance", headers=AUTH, json={**body, "entity": "upf-01"})
    assert r.status_code == 201  # the hold stands
    assert r.json()["silence_id"] is None
    assert "cannot create the silence" in r.json()["silence_error"]


def test_the_cli_silences_through_alertmanager_too(
    store: Store,
    alertmanager: str,
    use_store: Callable[..., None],
    capsys: pytest.CaptureFixture[str],
) -> None:
    use_store(store, NOC_ALERTMANAGER_URL=alertmanager)
    assert run(["maintenance", "add", "upf-3", "--by", "ana", "--for", "1h"]) == 0
    assert "silenced in Alertmanager" in capsys.readouterr().out
    (w,) = store.maintenance_windows()
    url = f"{alertmanager}/api/v2/silence/{w.silence_id}"
    assert httpx.get(url, timeout=5).json()["status"]["state"] == "active"
    assert run(["maintenance", "end", w.id, "--by", "bo"]) == 0
    assert httpx.get(url, timeout=5).json()["status"]["state"] == "expired"


def test_the_cli_refuses_entities_outside_the_network_as_the_api_does(
    store: Store,
    use_store: Callable[..., None],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """With an inventory (given, or NOC_DATA_DIR's), `maintenance add` and `tune add` refuse
    an entity the network does not have; without one nothing can be checked."""
    import json

    inventory = tmp_path / "inventory.json"
    entities = [{"id": "amf-1", "type": "amf"}, {"id": "upf-3", "type": "upf"}]
    inventory.write_text(json.dumps({"entities": entities}))
    use_store(store)
    add = ["maintenance", "add", "--by", "ana", "--for", "1h", "--inventory", str(inventory)]
    assert run([*add, "smf-99"]) == 2
    assert "entity: 'smf-99' is not in the network" in capsys.readouterr().err
    assert run([*add, "upf-3"]) == 0
    tune = ["tune", "add", "amf-registration-success", "--min-score", "2", "--by", "ana"]
    tune += ["--reason", "r", "--inventory", str(inventory)]
    assert run([*tune, "--entity", "smf-*"]) == 2
    assert "entity: 'smf-*' matches no entity of the network" in capsys.readouterr().err
    assert run([*tune, "--entity", "amf-*"]) == 0
    assert [w.entity for w in store.maintenance_windows()] == ["upf-3"]
    assert [t.entity for t in store.tuning_rules()] == ["amf-*"]
