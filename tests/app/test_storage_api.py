"""SQLite storage survives a reopen; the web console serves incidents over real HTTP."""

from __future__ import annotations

from pathlib import Path

import httpx

from noc_assistant.api.events import Broadcaster
from noc_assistant.models import Finding, Hypothesis, Incident
from noc_assistant.storage import SqliteStore, Store, open_store


def _incident(i: str = "inc-1") -> Incident:
    return Incident(
        id=i,
        fingerprint="fp",
        opened_at=1.0e9,
        updated_at=1.0e9 + 60,
        entities=["upf-3"],
        kpis=["upf-pfcp-peers"],
        max_score=12.5,
        title="upf-pfcp-peers down on upf-3",
    )


def _finding(i: str = "f-1") -> Finding:
    return Finding(
        id=i,
        detector="robust-zscore",
        kpi="upf-pfcp-peers",
        entity="upf-3",
        entity_type="upf",
        ts=1.0e9,
        score=12.5,
        observed=0.0,
        expected_low=1.5,
        expected_high=2.5,
        direction="down",
    )


def test_store_round_trip_and_reopen(tmp_path: Path) -> None:
    db = tmp_path / "noc.db"
    store = open_store(f"sqlite:///{db}")
    inc = _incident()
    store.save_incident(inc)
    store.save_findings([_finding()], incident_id=inc.id)
    inc.state, inc.resolved_at = "resolved", 1.0e9 + 900
    store.save_incident(inc)
    store.close()
    again = SqliteStore(db)
    got = again.get_incident("inc-1")
    assert got is not None and got.state == "resolved" and got.resolved_at == 1.0e9 + 900
    assert [f.id for f in again.findings_for("inc-1")] == ["f-1"]
    assert again.count("incidents") == 1


def test_console_lists_and_shows_incidents(served: tuple[str, Store, Broadcaster]) -> None:
    base, store, _ = served
    page = httpx.get(base + "/")
    assert page.status_code == 200 and "No incidents yet" in page.text
    store.save_incident(_incident())
    store.save_findings([_finding()], incident_id="inc-1")
    page = httpx.get(base + "/")
    assert "upf-pfcp-peers down on upf-3" in page.text and "/incidents/inc-1" in page.text
    detail = httpx.get(base + "/incidents/inc-1")
    assert detail.status_code == 200 and "f-1" in detail.text
    # a no-fault verdict with a candidate under it, its refutation and its checks
    inc = _incident()
    inc.hypotheses = [
        Hypothesis(fault="no_fault", entity="", confidence=0.8),
        Hypothesis(
            fault="pfcp_association_loss",
            entity="upf-3",
            confidence=0.2,
            evidence_ids=("ev-f-1",),
            refuted_by=("ev-absent-x",),
            checks=("N4 heartbeat counters on the SMF",),
        ),
    ]
    store.save_incident(inc)
    inc.escalated_at = [1.0e9 + 600]  # a much stronger finding paged again
    store.save_incident(inc)
    detail = httpx.get(base + "/incidents/inc-1").text
    assert "Verdict: <strong>no fault</strong>" in detail and "candidates" in detail
    assert "escalated 2001-09-09 01:56:40 UTC" in detail and "CEST" not in detail
    assert "ev-absent-x" in detail and "N4 heartbeat counters on the SMF" in detail
    api = httpx.get(base + "/api/incidents/inc-1").json()
    assert api["incident"]["entities"] == ["upf-3"]
    assert [f["id"] for f in api["findings"]] == ["f-1"]
    assert httpx.get(base + "/api/incidents/nope").status_code == 404


def test_an_incidents_times_on_the_networks_wall_clock(
    served_in_berlin: tuple[str, Store, Broadcaster],
) -> None:
    """With ``NOC_LOCAL_TZ`` the incident page gives each time on Berlin's clock beside UTC,
    summer and winter told apart; without it, UTC only."""
    base, store, _ = served_in_berlin
    inc = _incident()
    inc.state, inc.resolved_at = "resolved", 1.0e9 + 90 * 86400.0  # 8 December: winter
    store.save_incident(inc)
    detail = httpx.get(base + "/incidents/inc-1").text
    assert "opened 2001-09-09 01:46:40 UTC (03:46 CEST)" in detail
    assert "resolved 2001-12-08 01:46:40 UTC (02:46 CET)" in detail


def test_live_feed_streams_published_events(served: tuple[str, Store, Broadcaster]) -> None:
    base, _, hub = served
    got: list[str] = []
    with httpx.stream("GET", base + "/api/stream", timeout=10) as resp:
        assert resp.headers["content-type"].startswith("text/event-stream")
        lines = resp.iter_lines()
        assert next(lines).startswith(": connected")
        hub.publish({"kind": "opened", "incident": "inc-9", "state": "open"})
        for line in lines:
            if line.startswith("data:"):
                got.append(line)
                break
    assert '"incident": "inc-9"' in got[0]
