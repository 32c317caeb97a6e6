"""Incidents reach the real Prometheus Alertmanager (installed by scripts/system-deps.sh, one
started per test on a loopback port by conftest's ``alertmanager`` fixture), configured with
our topology export as inhibit_rules."""

from __future__ import annotations

import time
from typing import Any

import httpx

from noc_assistant.alertmanager import AlertmanagerSink
from noc_assistant.correlate import IncidentEvent
from noc_assistant.models import Hypothesis, Incident


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
