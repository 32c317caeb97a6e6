"""The console's drafting endpoints: a report and a chat answer for anyone, writes only with
the API token, and a partner-NOC e-mail that reaches a real SMTP server (aiosmtpd on loopback)
only after a named person approved it, and only once."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import Inbox
from fastapi.testclient import TestClient
from test_drafting import IMSI, PACK, case

from knowledge.topology import Topology, load_inventory
from noc_assistant.api.app import create_app
from noc_assistant.cli import run
from noc_assistant.cli._console import console
from noc_assistant.integrations.mail import Mailer
from noc_assistant.models import EmailDraft
from noc_assistant.settings import get_settings
from noc_assistant.store import SqliteStore, Store
from noc_assistant.triage.drafting import Drafter

TOKEN = "t0ken-for-tests"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture()
def store(tmp_path: object) -> Iterator[Store]:
    s = SqliteStore(f"{tmp_path}/noc.db")
    topo = load_inventory(PACK.fixture_path("inventory.yaml"), PACK)
    for rule, index in (("roaming-partner-registration", 0), ("nrf-discovery-failure", 0)):
        inc, diagnosis, findings = case(rule, index, topo)
        s.save_incident(inc)
        s.save_findings(findings, incident_id=inc.id)
        s.save_diagnosis(diagnosis)
    yield s
    s.close()


def _client(store: Store, port: int | None, token: str | None = TOKEN) -> TestClient:
    topo = load_inventory(PACK.fixture_path("inventory.yaml"), PACK)
    mailer = Mailer("127.0.0.1", port) if port else None
    app = create_app(store, drafter=Drafter(PACK, topo), mailer=mailer, api_token=token)
    return TestClient(app)


ROAMING = "inc-roaming-partner-registration-0"
NRF = "inc-nrf-discovery-failure-0"


def test_report_and_chat_need_no_token(store: Store) -> None:
    c = _client(store, None)
    r = c.get(f"/api/incidents/{ROAMING}/report")
    assert r.status_code == 200
    body = r.json()
    assert body["generated_by"] == "template" and "sepp-01" in body["summary"]
    assert body["body"].startswith("# ")
    assert c.get("/api/incidents/inc-nope/report").status_code == 404
    undiagnosed = store.get_incident(NRF)
    assert undiagnosed is not None
    store.save_incident(undiagnosed.model_copy(update={"id": "inc-new"}))
    r = c.get("/api/incidents/inc-new/report")
    assert r.status_code == 409 and "no diagnosis yet" in r.text
    assert store.path not in r.text  # the store's own message names its file
    r = c.post(f"/api/incidents/{ROAMING}/chat", json={"question": f"imsi-{IMSI} fails?"})
    assert r.status_code == 200 and r.json()["generated_by"] == "template"
    assert c.post(f"/api/incidents/{ROAMING}/chat", json={"question": ""}).status_code == 422
    page = c.get(f"/incidents/{ROAMING}")
    assert page.status_code == 200
    assert f"<title>{ROAMING} · noc-assistant</title>" in page.text
    assert "Root-cause report" in page.text and "Draft an e-mail to partner 262-01" in page.text
    assert "Triage chat" in page.text
    assert "Draft an e-mail" not in c.get(f"/incidents/{NRF}").text


def test_writes_need_the_token(store: Store) -> None:
    url = f"/api/incidents/{ROAMING}/emails"
    assert _client(store, None, token=None).post(url, headers=AUTH).status_code == 503
    c = _client(store, None)
    assert c.post(url).status_code == 401
    assert c.post(url, headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert c.post(url, headers={"Authorization": TOKEN}).status_code == 401  # no scheme
    assert store.list_emails() == []


def test_an_email_is_sent_once_and_only_after_approval(
    store: Store, smtp_server: tuple[Inbox, int]
) -> None:
    inbox, port = smtp_server
    c = _client(store, port)
    assert c.post(f"/api/incidents/{NRF}/emails", headers=AUTH).status_code == 409
    r = c.post(f"/api/incidents/{ROAMING}/emails", headers=AUTH)
    assert r.status_code == 201
    draft = r.json()
    mid = draft["id"]
    assert draft["status"] == "draft" and draft["to"] == ["noc@partner-a.example"]
    assert c.post(f"/api/emails/{mid}/send", headers=AUTH).status_code == 409  # not approved
    assert inbox.envelopes == []
    # an engineer edits the draft and pastes a subscriber's identifier: it is masked
    edited = draft["body"] + f"\nOne affected subscriber: imsi-{IMSI}.\n"
    assert c.put(f"/api/emails/{mid}", headers=AUTH, json={"body": edited}).status_code == 422
    bad = {"to": ["duty@partner-a.example, x@evil.example"], "editor": "C. Shift"}
    assert c.put(f"/api/emails/{mid}", headers=AUTH, json=bad).status_code == 422  # one each
    assert c.put(f"/api/emails/{mid}", headers=AUTH, json={**bad, "to": []}).status_code == 422
    new_to = ["noc@partner-a.example", "duty@partner-a.example"]
    r = c.put(f"/api/emails/{mid}", headers=AUTH, json={"to": new_to, "editor": "C. Shift"})
    assert r.status_code == 200 and r.json()["to"] == new_to
    assert r.json()["history"][-1]["previous_to"] == ["noc@partner-a.example"]
    r = c.put(f"/api/emails/{mid}", headers=AUTH, json={"body": edited, "editor": "C. Shift"})
    assert r.status_code == 200 and IMSI not in r.json()["body"]
    assert c.post(f"/api/emails/{mid}/approve", headers=AUTH, json={}).status_code == 422
    r = c.post(f"/api/emails/{mid}/approve", headers=AUTH, json={"approver": "A. Engineer"})
    assert r.status_code == 200 and r.json()["approved_by"] == "A. Engineer"
    late = {"body": "x", "editor": "C. Shift"}
    assert c.put(f"/api/emails/{mid}", headers=AUTH, json=late).status_code == 409
    r = c.post(f"/api/emails/{mid}/send", headers=AUTH, json={"by": "A. Engineer"})
    assert r.status_code == 200, r.text
    sent = r.json()
    assert sent["status"] == "sent" and sent["message_id"]
    assert c.post(f"/api/emails/{mid}/send", headers=AUTH).status_code == 409  # once
    (msg,) = inbox.messages()
    assert inbox.envelopes[0].rcpt_tos == new_to
    assert msg["Message-ID"] == sent["message_id"] and msg["X-NOC-Incident"] == ROAMING
    text = msg.get_content()
    assert "262-01" in text and IMSI not in text and "[ev-" not in text
    assert store.get_email(mid) is not None and store.get_email(mid).status == "sent"  # type: ignore[union-attr]
    listed = c.get("/api/emails", params={"incident_id": ROAMING}).json()
    assert [m["id"] for m in listed] == [mid]
    # the audit trail: every step, who took it, and the text the edit replaced
    steps = [(e["action"], e["by"]) for e in sent["history"]]
    assert steps == [
        ("drafted", None),
        ("edited", "C. Shift"),
        ("edited", "C. Shift"),
        ("approved", "A. Engineer"),
        ("sent", "A. Engineer"),
    ]
    assert sent["history"][2]["previous_body"] == draft["body"]
    assert IMSI not in str(sent["history"]) and sent["undelivered"] == {}
    page = c.get(f"/incidents/{ROAMING}").text
    assert "edited by C. Shift" in page and "sent by A. Engineer" in page


def test_a_partly_refused_send_is_sent_and_says_to_whom_not(
    store: Store, smtp_server: tuple[Inbox, int]
) -> None:
    inbox, port = smtp_server
    c = _client(store, port)
    r = c.post(f"/api/incidents/{ROAMING}/emails", headers=AUTH)
    draft = EmailDraft.model_validate(r.json())
    store.save_email(draft.model_copy(update={"to": [*draft.to, "duty@refuse.example"]}))
    c.post(f"/api/emails/{draft.id}/approve", headers=AUTH, json={"approver": "A. Engineer"})
    r = c.post(f"/api/emails/{draft.id}/send", headers=AUTH)
    assert r.status_code == 200, r.text
    sent = r.json()
    assert sent["status"] == "sent"
    assert sent["undelivered"] == {"duty@refuse.example": "550 5.1.1 no such mailbox"}
    assert "not delivered to duty@refuse.example" in sent["history"][-1]["detail"]
    assert inbox.envelopes[0].rcpt_tos == ["noc@partner-a.example"]
    assert c.post(f"/api/emails/{draft.id}/send", headers=AUTH).status_code == 409  # no resend
    assert "Not delivered to duty@refuse.example" in c.get(f"/incidents/{ROAMING}").text


def test_a_rejected_email_is_never_sent(store: Store, smtp_server: tuple[Inbox, int]) -> None:
    inbox, port = smtp_server
    c = _client(store, port)
    mid = c.post(f"/api/incidents/{ROAMING}/emails", headers=AUTH).json()["id"]
    r = c.post(
        f"/api/emails/{mid}/reject",
        headers=AUTH,
        json={"approver": "B. Lead", "reason": "partner already informed by phone"},
    )
    assert r.status_code == 200 and r.json()["rejected_reason"].startswith("B. Lead: partner")
    assert (
        c.post(f"/api/emails/{mid}/approve", headers=AUTH, json={"approver": "x"}).status_code
        == 409
    )
    assert c.post(f"/api/emails/{mid}/send", headers=AUTH).status_code == 409
    assert inbox.envelopes == []


def test_sending_without_smtp_or_to_a_dead_server(store: Store, free_port: int) -> None:
    c = _client(store, None)
    mid = c.post(f"/api/incidents/{ROAMING}/emails", headers=AUTH).json()["id"]
    c.post(f"/api/emails/{mid}/approve", headers=AUTH, json={"approver": "A. Engineer"})
    r = c.post(f"/api/emails/{mid}/send", headers=AUTH)
    assert r.status_code == 503 and "NOC_SMTP_HOST" in r.json()["detail"]
    r = _client(store, free_port).post(f"/api/emails/{mid}/send", headers=AUTH, json={"by": "D"})
    assert r.status_code == 502 and f"127.0.0.1:{free_port}" in r.json()["detail"]
    kept = store.get_email(mid)
    assert kept is not None and kept.status == "approved"  # it may be sent again
    failed = kept.history[-1]
    assert failed.action == "send_failed" and failed.by == "D"
    assert f"127.0.0.1:{free_port}: cannot connect" in (failed.detail or "")


def test_kept_chat_needs_the_token_and_a_name_and_carries_on(store: Store) -> None:
    c = _client(store, None)
    url = f"/api/incidents/{ROAMING}/chat"
    q = {"question": f"When did it start for imsi-{IMSI}?", "keep": True, "asked_by": "E. Night"}
    assert c.post(url, json=q).status_code == 401  # keeping writes: the token
    assert c.post(url, headers=AUTH, json={**q, "asked_by": None}).status_code == 422
    assert _client(store, None, token=None).post(url, json=q).status_code == 503
    assert c.post(url, json={"question": "what else?"}).json()["kept"] is None  # not kept
    assert c.get(url).json() == []
    r = c.post(url, headers=AUTH, json=q)
    assert r.status_code == 200 and r.json()["kept"]
    r = c.post(url, headers=AUTH, json={**q, "question": "Why?", "asked_by": "F. Day"})
    log = c.get(url).json()
    assert [t["asked_by"] for t in log] == ["E. Night", "F. Day"]
    assert log[1]["id"] == r.json()["kept"]
    assert IMSI not in log[0]["question"] and "imsi-" in log[0]["question"]  # masked
    assert log[0]["answer"] and log[0]["generated_by"] == "template"
    assert c.get("/api/incidents/inc-nope/chat").status_code == 404
    page = c.get(f"/incidents/{ROAMING}").text
    assert "E. Night » When did it start" in page and "F. Day » Why?" in page
    assert IMSI not in page


def test_topology_may_come_from_a_function(store: Store) -> None:
    topo = load_inventory(PACK.fixture_path("inventory.yaml"), PACK)
    calls: list[int] = []

    def current() -> Topology:
        calls.append(1)
        return topo

    app = create_app(store, drafter=Drafter(PACK, current), api_token=TOKEN)
    r = TestClient(app).post(f"/api/incidents/{ROAMING}/emails", headers=AUTH)
    assert r.status_code == 201 and calls


def test_the_cli_drafts_approves_and_sends(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    smtp_server: tuple[Inbox, int],
    capsys: pytest.CaptureFixture[str],
) -> None:
    inbox, port = smtp_server
    url = f"sqlite:///{tmp_path / 'noc.db'}"
    store = SqliteStore(tmp_path / "noc.db")
    topo = load_inventory(PACK.fixture_path("inventory.yaml"), PACK)
    inc, diagnosis, findings = case("roaming-partner-registration", 0, topo)
    store.save_incident(inc)
    store.save_findings(findings, incident_id=inc.id)
    store.save_diagnosis(diagnosis)
    store.close()
    monkeypatch.setenv("NOC_DB_URL", url)
    monkeypatch.setenv("NOC_SMTP_HOST", "127.0.0.1")
    monkeypatch.setenv("NOC_SMTP_PORT", str(port))
    monkeypatch.setenv("NOC_DATA_DIR", str(tmp_path))  # no inventory there
    monkeypatch.setattr(console, "width", 240)
    get_settings.cache_clear()
    try:
        inventory = str(PACK.fixture_path("inventory.yaml"))
        assert run(["incident", "report", ROAMING]) == 0
        assert "# roaming-partner-registration fixture" in capsys.readouterr().out
        # without the inventory there is no contact to write to: exit 2, with the reason
        assert run(["incident", "email", ROAMING]) == 2
        assert "no NOC contact" in capsys.readouterr().err
        assert run(["incident", "email", ROAMING, "--inventory", inventory]) == 0
        (draft,) = SqliteStore(tmp_path / "noc.db").list_emails(ROAMING)
        assert run(["email", "send", draft.id]) == 2  # not approved
        assert "is draft: cannot send it" in capsys.readouterr().err
        body = tmp_path / "body.txt"
        body.write_text(f"Hello partner NOC,\nsubscriber imsi-{IMSI} cannot register.\n")
        assert run(["email", "edit", draft.id, "--by", "C. Shift"]) == 2  # nothing to change
        assert "nothing to change" in capsys.readouterr().err
        bad_to = [
            "email",
            "edit",
            draft.id,
            "--by",
            "C. Shift",
            "--to",
            "noc@a.example; x@b.example",
        ]
        assert run(bad_to) == 2
        assert "is not one e-mail address" in capsys.readouterr().err
        assert run(["email", "edit", draft.id, "--by", "C. Shift", "--body-file", str(body)]) == 0
        assert run(["email", "approve", draft.id, "--by", "A. Engineer"]) == 0
        assert run(["email", "send", draft.id, "--by", "A. Engineer"]) == 0
        assert len(inbox.envelopes) == 1
        assert IMSI not in inbox.messages()[0].get_content()
        capsys.readouterr()
        assert run(["email", "show", draft.id]) == 0
        shown = capsys.readouterr().out
        assert "edited by C. Shift" in shown and "sent by A. Engineer" in shown
        assert "cannot register" in shown and IMSI not in shown
        assert run(["email", "send", draft.id]) == 2  # once
        assert run(["email", "list"]) == 0
        assert "sent" in capsys.readouterr().out
        # the triage chat from the terminal, kept in the incident's log
        assert run(["incident", "ask", ROAMING, "When did it start?", "--by", "E. Night"]) == 0
        assert run(["incident", "ask", ROAMING, "What else?"]) == 0  # not kept
        capsys.readouterr()
        assert run(["incident", "chat", ROAMING]) == 0
        out = capsys.readouterr().out
        assert "E. Night: When did it start?" in out and "What else?" not in out
        assert run(["incident", "chat", "inc-nope"]) == 2
    finally:
        get_settings.cache_clear()
