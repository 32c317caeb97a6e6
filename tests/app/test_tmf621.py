"""TMF621 trouble tickets at a roaming partner's NOC: opened when the partner e-mail is
approved, noted as the incident changes, resolved with it; against a stub TMF621 server on
loopback (uvicorn) that checks every body against the JSON Schemas below and the bearer
token, and keeps its tickets in memory."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import jsonschema_rs
import pytest
import uvicorn
import yaml
from conftest import _free_port
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from fastapi.testclient import TestClient
from test_drafting import IMSI, PACK, case

from knowledge.topology import Topology, TopologyError
from noc_assistant.api.app import create_app
from noc_assistant.cli._live import IncidentOutput
from noc_assistant.integrations.tmf621 import (
    TicketClient,
    TicketConfigError,
    TicketRejectedError,
    TicketUnreachableError,
)
from noc_assistant.settings import Settings
from noc_assistant.store import SqliteStore, Store
from noc_assistant.store.tickets import TicketBook
from noc_assistant.stream.correlate import IncidentEvent
from noc_assistant.triage.drafting import Drafter

TOKEN = "t0ken-for-tests"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
PARTNER_TOKEN = "s3cret-partner-token"
ROAMING = "inc-roaming-partner-registration-0"
API = "/tmf-api/troubleTicket/v5"

# -- the TMF621 v5 schemas the stub holds requests to (the parts we use) ----------------------

STATUS = {
    "type": "string",
    "enum": [
        "acknowledged",
        "rejected",
        "pending",
        "held",
        "inProgress",
        "cancelled",
        "resolved",
        "closed",
    ],
}
DATE_TIME = {"type": "string", "format": "date-time"}
NOTE = {
    "type": "object",
    "required": ["text", "@type"],
    "properties": {
        "id": {"type": "string"},
        "author": {"type": "string"},
        "date": DATE_TIME,
        "text": {"type": "string", "minLength": 1},
        "@type": {"const": "Note"},
    },
    "additionalProperties": True,
}
EXTERNAL_IDENTIFIER = {
    "type": "object",
    "required": ["id", "@type"],
    "properties": {
        "id": {"type": "string"},
        "owner": {"type": "string"},
        "externalIdentifierType": {"type": "string"},
        "@type": {"const": "ExternalIdentifier"},
    },
}
RELATED_ENTITY = {
    "type": "object",
    "required": ["role", "entity", "@type"],
    "properties": {
        "role": {"type": "string"},
        "entity": {
            "type": "object",
            "required": ["id", "@type"],
            "properties": {
                "id": {"type": "string"},
                "name": {"type": "string"},
                "@referredType": {"type": "string"},
                "@type": {"const": "EntityRef"},
            },
        },
        "@type": {"const": "RelatedEntity"},
    },
}
TROUBLE_TICKET_CREATE = {
    "type": "object",
    "required": ["description", "severity", "ticketType", "@type"],
    "properties": {
        "description": {"type": "string", "minLength": 1},
        "severity": {"type": "string", "minLength": 1},
        "ticketType": {"type": "string", "minLength": 1},
        "@type": {"const": "TroubleTicket"},
        "name": {"type": "string"},
        "priority": {"type": "string"},
        "externalIdentifier": {"type": "array", "items": EXTERNAL_IDENTIFIER},
        "relatedEntity": {"type": "array", "items": RELATED_ENTITY},
        "note": {"type": "array", "items": NOTE},
        "requestedResolutionDate": DATE_TIME,
        "status": STATUS,
    },
    "not": {"anyOf": [{"required": ["id"]}, {"required": ["href"]}]},
    "additionalProperties": True,
}
TROUBLE_TICKET_UPDATE = {
    "type": "object",
    "minProperties": 1,
    "properties": {
        "description": {"type": "string", "minLength": 1},
        "severity": {"type": "string"},
        "status": STATUS,
        "statusChangeReason": {"type": "string", "minLength": 1},
        "note": {"type": "array", "items": NOTE},
        "resolutionDate": DATE_TIME,
    },
    "not": {"anyOf": [{"required": ["id"]}, {"required": ["href"]}]},
    "additionalProperties": True,
}


@dataclass
class Stub:
    """The partner's TMF621 server: its tickets and every request it took (method, path)."""

    url: str
    tickets: dict[str, dict[str, Any]] = field(default_factory=dict)
    requests: list[tuple[str, str]] = field(default_factory=list)


def _stub_app(stub: Stub) -> FastAPI:
    app = FastAPI()
    create = jsonschema_rs.validator_for(TROUBLE_TICKET_CREATE, validate_formats=True)
    update = jsonschema_rs.validator_for(TROUBLE_TICKET_UPDATE, validate_formats=True)

    def refused(request: Request, media: str) -> JSONResponse | None:
        if request.headers.get("authorization") != f"Bearer {PARTNER_TOKEN}":
            return JSONResponse({"code": "401", "reason": "bad token"}, 401)
        given = request.headers.get("content-type", "").split(";")[0]
        if request.method != "GET" and given != media:
            return JSONResponse({"code": "415", "reason": f"not {media}"}, 415)
        return None

    def invalid(validator: Any, body: Any) -> JSONResponse | None:
        errors = [e.message for e in validator.iter_errors(body)]
        return JSONResponse({"code": "400", "reason": "; ".join(errors)}, 400) if errors else None

    @app.post(f"{API}/troubleTicket")
    async def post(request: Request) -> JSONResponse:
        stub.requests.append(("POST", ""))
        body = await request.json()
        bad = refused(request, "application/json") or invalid(create, body)
        if bad is not None:
            return bad
        tid = f"TT-{len(stub.tickets) + 1}"
        ticket = body | {
            "id": tid,
            "href": f"{stub.url}{API}/troubleTicket/{tid}",
            "status": "acknowledged",
            "creationDate": "2026-01-01T00:00:00Z",
        }
        stub.tickets[tid] = ticket
        return JSONResponse(ticket, 201)

    @app.get(f"{API}/troubleTicket/{{tid}}")
    async def get(request: Request, tid: str) -> JSONResponse:
        stub.requests.append(("GET", tid))
        bad = refused(request, "")
        if bad is not None:
            return bad
        if tid not in stub.tickets:
            return JSONResponse({"code": "404"}, 404)
        return JSONResponse(stub.tickets[tid])

    @app.patch(f"{API}/troubleTicket/{{tid}}")
    async def patch(request: Request, tid: str) -> JSONResponse:
        stub.requests.append(("PATCH", tid))
        body = await request.json()
        bad = refused(request, "application/merge-patch+json") or invalid(update, body)
        if bad is not None:
            return bad
        if tid not in stub.tickets:
            return JSONResponse({"code": "404"}, 404)
        stub.tickets[tid] |= body  # a merge patch: an array is replaced whole
        return JSONResponse(stub.tickets[tid])

    return app


def _start_stub(port: int) -> Iterator[Stub]:
    stub = Stub(f"http://127.0.0.1:{port}")
    config = uvicorn.Config(_stub_app(stub), host="127.0.0.1", port=port, log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    for _ in range(100):
        try:
            httpx.get(stub.url + "/docs", timeout=1)
            break
        except httpx.TransportError:
            time.sleep(0.05)
    yield stub
    server.should_exit = True
    thread.join(timeout=5)


@pytest.fixture()
def partner(monkeypatch: pytest.MonkeyPatch) -> Iterator[Stub]:
    monkeypatch.setenv("NOC_TMF621_TOKEN_26201", PARTNER_TOKEN)
    yield from _start_stub(_free_port())


def _topology(tmf621_url: str) -> Topology:
    """The pack's fixture inventory, partner 262-01 taking tickets at ``tmf621_url``."""
    data = yaml.safe_load(PACK.fixture_path("inventory.yaml").read_text())
    sepp = next(e for e in data["entities"] if e["id"] == "sepp-01")
    sepp["partners"][0]["tmf621_url"] = tmf621_url
    return Topology.from_inventory(data, PACK)


def _setup(tmp_path: Path, tmf621_url: str) -> tuple[Store, TestClient, str, Any]:
    """A store with the roaming incident, the console on it, and a drafted e-mail with a
    subscriber's IMSI pasted in (as an older draft might hold): its id, and the case."""
    store = SqliteStore(tmp_path / f"noc-{uuid.uuid4().hex[:6]}.db")
    topo = _topology(tmf621_url)
    inc, diagnosis, findings = case("roaming-partner-registration", 0, topo)
    store.save_incident(inc)
    store.save_findings(findings, incident_id=inc.id)
    store.save_diagnosis(diagnosis)
    c = TestClient(create_app(store, drafter=Drafter(PACK, topo), api_token=TOKEN))
    r = c.post(f"/api/incidents/{ROAMING}/emails", headers=AUTH)
    assert r.status_code == 201, r.text
    mid = r.json()["id"]
    draft = store.get_email(mid)
    assert draft is not None
    store.save_email(draft.model_copy(update={"body": draft.body + f"UE imsi-{IMSI}\n"}))
    return store, c, mid, (inc, findings)


def _approve(c: TestClient, mid: str) -> Any:
    r = c.post(f"/api/emails/{mid}/approve", headers=AUTH, json={"approver": "A. Engineer"})
    assert r.status_code == 200 and r.json()["status"] == "approved", r.text
    return r


def test_a_ticket_is_opened_on_approval_noted_and_resolved(tmp_path: Path, partner: Stub) -> None:
    store, c, mid, (inc, findings) = _setup(tmp_path, partner.url + API)
    r = _approve(c, mid)
    assert "warning" not in {k.lower() for k in r.headers}
    assert len(partner.tickets) == 1
    ticket = partner.tickets["TT-1"]
    assert ticket["@type"] == "TroubleTicket" and ticket["ticketType"] == "networkIncident"
    assert ticket["severity"] in ("critical", "major")
    assert (
        ticket["externalIdentifier"][0] | {"id": ROAMING, "owner": "noc-assistant"}
        == (ticket["externalIdentifier"][0])
    )
    related = {e["role"]: e["entity"]["id"] for e in ticket["relatedEntity"]}
    assert related == {"partnerNetwork": "262-01", "ourSepp": "sepp-01"}
    assert ticket["note"][0]["author"] == "A. Engineer"
    email = store.get_email(mid)
    assert email is not None and email.subject in ticket["description"]
    assert IMSI not in json.dumps(ticket) and "masked>" in ticket["description"]
    # approving again (a second draft's approval) opens no second ticket
    assert c.post(f"/api/emails/{mid}/approve", headers=AUTH, json={"approver": "B"}).status_code
    assert len(partner.tickets) == 1

    out = IncidentOutput(Settings(alertmanager_url=None), store, lambda: None)
    now = [1000.0]
    out.tickets.clock = lambda: now[0]
    titled = inc.model_copy(update={"title": f"registrations fail for imsi-{IMSI}"})
    out(IncidentEvent("updated", titled, findings[0]))
    notes = partner.tickets["TT-1"]["note"]
    assert len(notes) == 2 and notes[0]["author"] == "A. Engineer"  # the list kept whole
    assert "updated" in notes[1]["text"] and IMSI not in notes[1]["text"]
    now[0] += 60.0
    out(IncidentEvent("escalated", titled, findings[-1]))
    out(IncidentEvent("updated", titled, None))  # no new finding: no note
    assert len(partner.tickets["TT-1"]["note"]) == 2  # one note per 10 minutes
    now[0] += 600.0
    out(IncidentEvent("escalated", titled, findings[-1]))
    assert len(partner.tickets["TT-1"]["note"]) == 3

    resolved = titled.model_copy(update={"state": "resolved", "resolved_at": inc.updated_at})
    out(IncidentEvent("resolved", resolved))
    ticket = partner.tickets["TT-1"]
    assert ticket["status"] == "resolved" and ticket["resolutionDate"].endswith("Z")
    assert ROAMING in ticket["statusChangeReason"]
    row = TicketBook(store).get(ROAMING, "262-01")
    assert row is not None and (row.ticket_id, row.status, row.last_error) == (
        "TT-1",
        "resolved",
        None,
    )
    posts = [r for r in partner.requests if r[0] == "POST"]
    assert len(posts) == 1


def test_a_partner_down_at_approval_gets_its_ticket_at_the_next_event(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NOC_TMF621_TOKEN_26201", PARTNER_TOKEN)
    port = _free_port()
    store, c, mid, (inc, findings) = _setup(tmp_path, f"http://127.0.0.1:{port}{API}")
    r = _approve(c, mid)  # the approval stands
    warning = r.headers["warning"]
    assert warning.startswith("199 noc-assistant") and "cannot connect" in warning
    assert f"partner 262-01 TMF621 (http://127.0.0.1:{port}{API})" in warning
    row = TicketBook(store).get(ROAMING, "26201")
    assert row is not None and row.ticket_id is None and row.status == "unsent"
    out = IncidentOutput(Settings(alertmanager_url=None), store, lambda: None)
    out.tickets.retry_after_s = 0.0
    for stub in _start_stub(port):
        out(IncidentEvent("updated", inc, findings[0]))
        assert len(stub.tickets) == 1
        assert IMSI not in json.dumps(stub.tickets["TT-1"])
        row = TicketBook(store).get(ROAMING, "26201")
        assert row is not None and row.ticket_id == "TT-1" and row.last_error is None


def test_a_wrong_token_names_the_endpoint_never_the_token(
    tmp_path: Path, partner: Stub, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NOC_TMF621_TOKEN_26201", "wr0ng-t0ken")
    store, c, mid, _ = _setup(tmp_path, partner.url + API)
    warning = _approve(c, mid).headers["warning"]
    assert "HTTP 401" in warning and f"partner 262-01 TMF621 ({partner.url}" in warning
    assert "wr0ng-t0ken" not in warning and partner.tickets == {}
    row = TicketBook(store).get(ROAMING, "26201")
    assert row is not None and row.last_error and "wr0ng-t0ken" not in row.last_error
    client = TicketClient(partner.url + API, "wr0ng-t0ken", name="partner 262-01")
    with client, pytest.raises(TicketConfigError) as caught:
        client.create({"@type": "TroubleTicket"})
    assert "partner 262-01" in str(caught.value) and "wr0ng-t0ken" not in str(caught.value)
    monkeypatch.delenv("NOC_TMF621_TOKEN_26201")
    _, c2, mid2, _ = _setup(tmp_path, partner.url + API)
    assert "set NOC_TMF621_TOKEN_26201" in _approve(c2, mid2).headers["warning"]


def test_the_stub_holds_bodies_to_the_schema(partner: Stub, free_port: int) -> None:
    with TicketClient(partner.url + API, PARTNER_TOKEN) as client:
        with pytest.raises(TicketRejectedError, match=r"HTTP 400.*severity"):
            client.create({"@type": "TroubleTicket", "description": "x", "ticketType": "t"})
        made = client.create(
            {"@type": "TroubleTicket", "description": "x", "severity": "major", "ticketType": "t"}
        )
        with pytest.raises(TicketRejectedError, match="HTTP 400"):
            client.set_status(made["id"], "fixed", "why")  # not a TMF621 status
        with pytest.raises(TicketRejectedError, match="HTTP 400"):
            client.add_note(made["id"], {"text": "x", "@type": "Note", "date": "yesterday"})
        assert client.set_status(made["id"], "inProgress", "looking")["status"] == "inProgress"
    down = TicketClient(f"http://127.0.0.1:{free_port}{API}", PARTNER_TOKEN, 2.0)
    with down, pytest.raises(TicketUnreachableError, match="cannot connect"):
        down.create({})


def test_an_inventory_tmf621_url_must_be_http() -> None:
    with pytest.raises(TopologyError, match=r"partners\.0\.tmf621_url"):
        _topology("ftp://tt.example/x")
    assert _topology("https://tt.example/tmf").partner_for_plmn("26201") is not None
