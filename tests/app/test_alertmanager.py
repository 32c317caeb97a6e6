"""Incidents reach the real Prometheus Alertmanager (installed by scripts/system-deps.sh, one
started per test on a loopback port by conftest's ``alertmanager`` fixture), configured with
our topology export as inhibit_rules."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from noc_assistant.integrations.alertmanager import AlertmanagerSink
from noc_assistant.models import Hypothesis, Incident
from noc_assistant.stream.correlate import IncidentEvent


def _incident(i: str, entity: str, fault: str = "pfcp_association_loss") -> Incident:
    now = time.time()
    return Incident(
        id=i,
        fingerprint=i,
        opened_at=now - 120,
        updated_at=now - 60,
        entities=[entity],
        kpis=["upf-pfcp-peers"],
        title=f"{fault} on {entity}",
        hypotheses=[Hypothesis(fault=fault, entity=entity, confidence=0.8)],
    )


def _alerts(url: str) -> dict[str, dict[str, Any]]:
    got = httpx.get(f"{url}/api/v2/alerts", timeout=5).json()
    return {a["labels"]["incident"]: a for a in got}


def test_incidents_fire_resolve_and_inhibit(alertmanager: str) -> None:
    sink = AlertmanagerSink(alertmanager, console_url="http://127.0.0.1:8080")
    upf = _incident("inc-upf", "upf-2")
    sink.on_incident(IncidentEvent("opened", upf))
    alerts = _alerts(alertmanager)
    alert = alerts["inc-upf"]
    assert alert["labels"] == {
        "alertname": "NocIncident",
        "incident": "inc-upf",
        "instance": "upf-2",
        "severity": "critical",
    }
    assert alert["annotations"]["root_cause"] == "pfcp_association_loss on upf-2 (80%)"
    assert alert["generatorURL"] == "http://127.0.0.1:8080/incidents/inc-upf"
    assert alert["status"]["state"] == "active"

    # the SMF depends on the UPF: while the UPF's critical alert fires, the SMF's is muted
    smf = _incident("inc-smf", "smf-1", fault="nrf_discovery_failure")
    sink.on_incident(IncidentEvent("opened", smf))
    alert = _alerts(alertmanager)["inc-smf"]
    assert alert["status"]["state"] == "suppressed"
    assert alert["status"]["inhibitedBy"] == [_alerts(alertmanager)["inc-upf"]["fingerprint"]]

    # the incident grows: same alert (labels unchanged), new annotations
    upf.entities.append("smf-1")
    upf.hypotheses = [Hypothesis(fault="upf_gtpu_drop", entity="upf-2", confidence=0.6)]
    sink.on_incident(IncidentEvent("updated", upf))
    alerts = _alerts(alertmanager)
    assert len(alerts) == 2
    assert alerts["inc-upf"]["annotations"]["entities"] == "upf-2, smf-1"
    assert alerts["inc-upf"]["labels"]["severity"] == "critical"

    upf.state, upf.resolved_at = "resolved", time.time() - 1
    sink.on_incident(IncidentEvent("resolved", upf))
    assert "inc-upf" not in _alerts(alertmanager)  # resolved: out of the active list
    assert _alerts(alertmanager)["inc-smf"]["status"]["state"] == "active"  # no longer muted
    assert sink.sent == 4 and sink.pending == 0


def test_alertmanager_down_loses_nothing(alertmanager: str, free_port: int) -> None:
    sink = AlertmanagerSink(f"http://127.0.0.1:{free_port}", timeout_s=1)
    inc = _incident("inc-1", "upf-2")
    sink.on_incident(IncidentEvent("opened", inc))  # no exception: it waits
    assert sink.pending == 1 and sink.last_error is not None
    inc.entities.append("smf-1")
    sink.on_incident(IncidentEvent("updated", inc))
    assert sink.pending == 1  # the newest state per incident
    sink.url = alertmanager  # Alertmanager is back
    sink.refresh()
    assert sink.pending == 0 and sink.last_error is None
    assert _alerts(alertmanager)["inc-1"]["annotations"]["entities"] == "upf-2, smf-1"


def _by_name(url: str) -> dict[tuple[str, str], dict[str, Any]]:
    got = httpx.get(f"{url}/api/v2/alerts", timeout=5).json()
    return {(a["labels"]["alertname"], a["labels"]["incident"]): a for a in got}


def test_an_incident_nobody_takes_pages_again(alertmanager: str, tmp_path: Path) -> None:
    """An open incident ranked a fault that nobody acknowledges within NOC_ACK_TIMEOUT_S of
    the live command first seeing it gets a second alert (``NocIncidentUnacknowledged``,
    ``escalation="unacknowledged"``), once; it resolves when someone takes the incident, and
    with the incident. One ranked no fault pages nobody again."""
    from knowledge.pack import load_pack
    from noc_assistant.cli._live import IncidentOutput
    from noc_assistant.models import Review
    from noc_assistant.settings import Settings
    from noc_assistant.store import SqliteStore
    from noc_assistant.stream.pipeline import Pipeline

    store = SqliteStore(tmp_path / "noc.db")
    pipe = Pipeline(pack=load_pack())
    settings = Settings(alertmanager_url=alertmanager, ack_timeout_s=60.0)
    output = IncidentOutput(settings, store, lambda: pipe)
    assert output.alerts is not None
    upf, smf = _incident("inc-upf", "upf-2"), _incident("inc-smf", "smf-1", fault="no_fault")
    for inc in (upf, smf):
        pipe.correlator.incidents[inc.id] = inc
        output(IncidentEvent("opened", inc))
    t0 = 1_000.0
    assert output.check_acknowledgements(t0) == []  # first seen now
    assert output.check_acknowledgements(t0 + 59) == []
    assert output.check_acknowledgements(t0 + 61) == ["inc-upf"]
    assert output.check_acknowledgements(t0 + 120) == []  # paged once
    alerts = _by_name(alertmanager)
    unacked = alerts[("NocIncidentUnacknowledged", "inc-upf")]
    assert unacked["labels"]["escalation"] == "unacknowledged"
    assert unacked["labels"]["severity"] == "critical" and unacked["status"]["state"] == "active"
    assert unacked["annotations"]["summary"].startswith("nobody has acknowledged inc-upf")
    assert ("NocIncidentUnacknowledged", "inc-smf") not in alerts

    store.save_review(Review(incident_id="inc-upf").acknowledged("ana", time.time()))
    assert output.check_acknowledgements(t0 + 121) == []
    alerts = _by_name(alertmanager)
    assert ("NocIncidentUnacknowledged", "inc-upf") not in alerts  # taken: resolved
    assert alerts[("NocIncident", "inc-upf")]["status"]["state"] == "active"
    assert "inc-upf" not in output.unacknowledged

    # a third incident nobody takes, which then resolves: both its alerts resolve with it
    amf = _incident("inc-amf", "amf-1", fault="n2_sctp_loss")
    pipe.correlator.incidents[amf.id] = amf
    output(IncidentEvent("opened", amf))
    assert output.check_acknowledgements(t0 + 200) == []
    assert output.check_acknowledgements(t0 + 300) == ["inc-amf"]
    assert ("NocIncidentUnacknowledged", "inc-amf") in _by_name(alertmanager)
    amf.state, amf.resolved_at = "resolved", time.time() - 1
    output(IncidentEvent("resolved", amf))
    output.check_acknowledgements(t0 + 301)
    alerts = _by_name(alertmanager)
    assert ("NocIncidentUnacknowledged", "inc-amf") not in alerts
    assert ("NocIncident", "inc-amf") not in alerts and output.unacknowledged == {}
    store.close()


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_the_acknowledgement_timer_survives_a_restart(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """The time an incident was first seen open is kept in the store: a live command that
    restarts (or a second one on the same database) pages at the same moment, not a full
    timeout after it came back."""
    from knowledge.pack import load_pack
    from noc_assistant.cli._live import IncidentOutput
    from noc_assistant.settings import Settings
    from noc_assistant.store import open_store
    from noc_assistant.stream.pipeline import Pipeline

    url = (
        f"sqlite:///{tmp_path / 'noc.db'}"
        if backend == "sqlite"
        else request.getfixturevalue("pg_url")
    )
    store = open_store(url)
    settings = Settings(ack_timeout_s=60.0)
    pipe = Pipeline(pack=load_pack())
    upf = _incident("inc-upf", "upf-2")
    pipe.correlator.incidents[upf.id] = upf
    t0 = 1_000.0
    before = IncidentOutput(settings, store, lambda: pipe)
    assert before.check_acknowledgements(t0) == []
    assert before.check_acknowledgements(t0 + 40) == []
    # the process restarts 40 s in: the timer keeps counting from t0
    after = IncidentOutput(settings, store, lambda: pipe)
    assert after.check_acknowledgements(t0 + 50) == []
    assert after.check_acknowledgements(t0 + 61) == ["inc-upf"]
    # a later incident is timed from when it was first seen, by whichever process
    amf = _incident("inc-amf", "amf-1", fault="n2_sctp_loss")
    pipe.correlator.incidents[amf.id] = amf
    assert after.check_acknowledgements(t0 + 100) == []
    assert store.first_seen(["inc-amf", "inc-upf"], t0 + 500) == {
        "inc-amf": t0 + 100,
        "inc-upf": t0,
    }
    store.clear()
    assert store.first_seen(["inc-amf"], t0 + 900) == {"inc-amf": t0 + 900}
    store.close()
