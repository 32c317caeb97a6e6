"""Named users, roles and four eyes: every write endpoint of the API (as its own OpenAPI schema
lists them) refuses anonymous callers (401) and callers of a role below its own (403) before it
reads the body and without changing anything; a partner e-mail is approved by nobody who asked
for it or edited it; tokens are kept only hashed; ``noc user`` manages them on the store."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from test_drafting import PACK, case

from knowledge.topology import load_inventory
from noc_assistant.api.app import create_app
from noc_assistant.cli import run
from noc_assistant.errors import FourEyesError, UserError
from noc_assistant.models import EmailDraft, EmailEvent
from noc_assistant.store import SqliteStore, Store
from noc_assistant.triage.drafting import Drafter
from noc_assistant.users import ROLES, User

LEGACY = "legacy-t0ken-for-users"
ROAMING = "inc-roaming-partner-registration-0"
KPI = "amf-registration-success"
WRITES = ("post", "put", "patch", "delete")


@pytest.fixture()
def store(tmp_path: Path) -> Iterator[Store]:
    s = SqliteStore(tmp_path / "noc.db")
    topo = load_inventory(PACK.fixture_path("inventory.yaml"), PACK)
    inc, diagnosis, findings = case("roaming-partner-registration", 0, topo)
    s.save_incident(inc)
    s.save_findings(findings, incident_id=inc.id)
    s.save_diagnosis(diagnosis)
    yield s
    s.close()


def _client(store: Store, api_token: str | None = LEGACY) -> TestClient:
    topo = load_inventory(PACK.fixture_path("inventory.yaml"), PACK)
    return TestClient(create_app(store, drafter=Drafter(PACK, topo), api_token=api_token))


def _users(store: Store, *names: tuple[str, str]) -> dict[str, dict[str, str]]:
    """Users added to the store: name → its Authorization header."""
    out = {}
    for name, role in names:
        user, token = User.issue(name, role, at=1.0)
        store.save_user(user)
        out[name] = {"Authorization": f"Bearer {token}"}
    return out


def _state(store: Store) -> dict[str, Any]:
    """Everything a write could change."""
    return {
        "emails": [e.model_dump() for e in store.list_emails()],
        "reviews": {k: v.model_dump() for k, v in store.reviews().items()},
        "chat": [c.model_dump() for c in store.chat_for(ROAMING)],
        "maintenance": [w.model_dump() for w in store.maintenance_windows()],
        "tuning": [t.model_dump() for t in store.tuning_rules()],
        "users": [u.model_dump() for u in store.list_users()],
    }


#: (method, path template) → (least role, path parameters, a body it would take)
KNOWN: dict[tuple[str, str], tuple[str, dict[str, str], dict[str, Any] | None]] = {
    ("post", "/api/incidents/{incident_id}/ack"): ("operator", {}, {}),
    ("post", "/api/incidents/{incident_id}/verdict"): ("operator", {}, {"verdict": "no_fault"}),
    ("post", "/api/incidents/{incident_id}/chat"): (
        "operator",
        {},
        {"question": "why?", "keep": True},
    ),
    ("post", "/api/incidents/{incident_id}/emails"): ("operator", {}, None),
    ("put", "/api/emails/{email_id}"): ("operator", {}, {"subject": "Roaming, checked"}),
    ("post", "/api/emails/{email_id}/reject"): ("operator", {}, {"reason": "by phone"}),
    ("post", "/api/emails/{email_id}/approve"): ("approver", {}, {}),
    ("post", "/api/emails/{email_id}/send"): ("approver", {}, {}),
    ("post", "/api/maintenance"): ("operator", {}, {"entity": "smf-01", "duration_s": 60}),
    ("post", "/api/maintenance/{window_id}/end"): ("operator", {}, {}),
    ("post", "/api/tuning"): (
        "operator",
        {},
        {"kpi": KPI, "min_score": 9, "reason": "noisy"},
    ),
    ("post", "/api/tuning/{rule_id}/end"): ("operator", {}, {}),
    ("post", "/api/users"): ("admin", {}, {"name": "newbie", "role": "viewer"}),
    ("post", "/api/users/{name}/token"): ("admin", {"name": "victim"}, None),
    ("delete", "/api/users/{name}"): ("admin", {"name": "victim"}, None),
}


def _targets(c: TestClient, store: Store) -> dict[str, str]:
    """Path parameters naming things that exist: an e-mail, a window, a raised bar."""
    legacy = {"Authorization": f"Bearer {LEGACY}"}
    mail = c.post(f"/api/incidents/{ROAMING}/emails", headers=legacy).json()
    window = c.post(
        "/api/maintenance", headers=legacy, json={"entity": "smf-01", "by": "x", "duration_s": 60}
    ).json()
    rule = c.post(
        "/api/tuning",
        headers=legacy,
        json={"kpi": KPI, "min_score": 9, "by": "x", "reason": "noisy"},
    ).json()
    return {
        "incident_id": ROAMING,
        "email_id": mail["id"],
        "window_id": window["id"],
        "rule_id": rule["id"],
    }


def test_every_write_endpoint_refuses_anonymous_callers_and_lower_roles(store: Store) -> None:
    c = _client(store)
    targets = _targets(c, store)
    auth = _users(store, *((f"a-{r}", r) for r in ROLES), ("victim", "viewer"))
    operations = [
        (method, path)
        for path, item in c.get("/openapi.json").json()["paths"].items()
        for method in item
        if method in WRITES
    ]
    assert set(KNOWN) <= set(operations)  # the table names real endpoints
    before = _state(store)
    for method, path in operations:
        role, params, body = KNOWN.get((method, path), ("operator", {}, {}))
        url = path.format_map({**targets, **params})
        where = f"{method.upper()} {path}"
        for headers in ({}, {"Authorization": "Bearer made-up"}):
            for payload in ({}, body):  # {}: a body it would refuse, were auth not first
                r = c.request(method, url, headers=headers, json=payload)
                assert r.status_code == 401, (where, r.status_code, r.text)
        below = ROLES[: ROLES.index(role)] if (method, path) in KNOWN else ()
        for lower in below:
            r = c.request(method, url, headers=auth[f"a-{lower}"], json=body)
            assert r.status_code == 403, (where, lower, r.status_code, r.text)
            assert f"needs {role}" in r.json()["detail"]
    assert _state(store) == before  # nothing refused changed anything
    for (method, path), (role, params, body) in KNOWN.items():  # the least role gets past
        url = path.format_map({**targets, **params})
        r = c.request(method, url, headers=auth[f"a-{role}"], json=body)
        assert r.status_code not in (401, 403, 500), (path, r.status_code, r.text)


def test_without_a_write_token_or_user_writes_are_disabled_and_then_need_one(
    store: Store,
) -> None:
    c = _client(store, api_token=None)
    url = f"/api/incidents/{ROAMING}/ack"
    assert c.post(url, json={"by": "ana"}).status_code == 503
    auth = _users(store, ("ana", "operator"))
    assert c.post(url, json={"by": "ana"}).status_code == 401
    r = c.post(url, headers=auth["ana"], json={})
    assert r.status_code == 200 and r.json()["acknowledged_by"] == "ana"


def test_a_named_user_is_recorded_as_itself_and_the_legacy_token_names_the_person(
    store: Store,
) -> None:
    c = _client(store)
    auth = _users(store, ("ana", "operator"))
    url = f"/api/incidents/{ROAMING}/ack"
    r = c.post(url, headers=auth["ana"], json={"by": "the-boss"})  # a body name is ignored
    assert r.status_code == 200
    assert [(e["action"], e["by"]) for e in r.json()["history"]] == [("acknowledged", "ana")]
    legacy = {"Authorization": f"Bearer {LEGACY}"}
    assert c.post(url, headers=legacy, json={}).status_code == 422  # names nobody
    r = c.post(url, headers=legacy, json={"by": "bo"})
    assert r.json()["history"][-1]["by"] == "bo"
    assert c.get("/api/users/me", headers=auth["ana"]).json() == {
        "name": "ana",
        "role": "operator",
        "shared": False,
    }
    assert c.get("/api/users/me", headers=legacy).json()["name"] == "api-token"
    assert c.get("/api/users/me").status_code == 401


def test_four_eyes_over_http(store: Store) -> None:
    c = _client(store)
    auth = _users(store, ("dora", "approver"), ("ed", "approver"), ("al", "approver"))
    r = c.post(f"/api/incidents/{ROAMING}/emails", headers=auth["dora"])
    assert r.status_code == 201
    mid = r.json()["id"]
    assert r.json()["history"][0]["by"] == "dora"
    approve = f"/api/emails/{mid}/approve"
    r = c.post(approve, headers=auth["dora"], json={"approver": "al"})  # as herself anyway
    assert r.status_code == 403 and "may not be approved by dora" in r.json()["detail"]
    edit = {"to": ["noc@attacker.example"]}
    assert c.put(f"/api/emails/{mid}", headers=auth["ed"], json=edit).status_code == 200
    r = c.post(approve, headers=auth["ed"], json={})
    assert r.status_code == 403 and "dora, ed" in r.json()["detail"]
    assert store.get_email(mid).status == "draft"  # type: ignore[union-attr]
    r = c.post(approve, headers=auth["al"], json={})
    assert r.status_code == 200 and r.json()["approved_by"] == "al"
    # with the shared token the names given count, whatever their case
    mid2 = _second_draft(c, store)
    legacy = {"Authorization": f"Bearer {LEGACY}"}
    assert c.put(f"/api/emails/{mid2}", headers=legacy, json={**edit, "editor": "eve"}).is_success
    r = c.post(f"/api/emails/{mid2}/approve", headers=legacy, json={"approver": "EVE"})
    assert r.status_code == 403
    r = c.post(f"/api/emails/{mid2}/approve", headers=legacy, json={"approver": "bo"})
    assert r.status_code == 200


def _second_draft(c: TestClient, store: Store) -> str:
    """The first e-mail sent out of the way (rejected), a new draft for the same partner."""
    legacy = {"Authorization": f"Bearer {LEGACY}"}
    (first,) = [e for e in store.list_emails() if e.status != "rejected"]
    c.post(f"/api/emails/{first.id}/reject", headers=legacy, json={"approver": "x"})
    r = c.post(f"/api/incidents/{ROAMING}/emails", headers=legacy)
    assert r.status_code == 201, r.text
    mid: str = r.json()["id"]
    return mid


def test_four_eyes_in_the_model() -> None:
    d = EmailDraft(
        id="em-9",
        incident_id="i",
        to=["a@b.example"],
        subject="s",
        body="b",
        created_at=0.0,
        history=[EmailEvent(at=0.0, action="drafted")],
    )
    assert d.approved("ana", at=1.0).approved_by == "ana"  # the assistant drafted it
    mine = d.drafted_by("ana")
    with pytest.raises(FourEyesError, match="may not be approved by ana"):
        mine.approved("ana", at=1.0)
    edited = mine.edited(body="b2", by="bo", at=1.0).edited(subject="s2", by="cy", at=2.0)
    assert edited.authors() == ["ana", "bo", "cy"]
    for who in ("ana", "Bo", "cy"):  # every author, not only the last editor
        with pytest.raises(FourEyesError):
            edited.approved(who, at=3.0)
    assert edited.approved("di", at=3.0).status == "approved"


def test_tokens_are_kept_hashed_and_rotate(store: Store, tmp_path: Path) -> None:
    c = _client(store)
    legacy = {"Authorization": f"Bearer {LEGACY}"}
    r = c.post("/api/users", headers=legacy, json={"name": "ana", "role": "approver"})
    assert r.status_code == 201
    token = r.json()["token"]
    assert (
        c.post("/api/users", headers=legacy, json={"name": "ana", "role": "admin"}).status_code
        == 409
    )
    bad = {"name": "api-token", "role": "admin"}
    assert c.post("/api/users", headers=legacy, json=bad).status_code == 422
    listed = c.get("/api/users", headers=legacy).json()
    assert listed == [{k: v for k, v in r.json().items() if k != "token"}]
    me = c.get("/api/users/me", headers={"Authorization": f"Bearer {token}"})
    assert me.json()["name"] == "ana"
    store.close()  # everything on disk (the WAL checkpointed)
    raw = b"".join(p.read_bytes() for p in tmp_path.glob("noc.db*"))
    assert token.encode() not in raw
    assert hashlib.sha256(token.encode()).hexdigest().encode() in raw
    store = SqliteStore(tmp_path / "noc.db")
    c = _client(store)
    r = c.post("/api/users/ana/token", headers=legacy)
    new = r.json()["token"]
    assert new != token
    assert c.get("/api/users/me", headers={"Authorization": f"Bearer {token}"}).status_code == 401
    assert c.get("/api/users/me", headers={"Authorization": f"Bearer {new}"}).status_code == 200
    assert c.delete("/api/users/ana", headers=legacy).status_code == 204
    assert c.get("/api/users/me", headers={"Authorization": f"Bearer {new}"}).status_code == 401
    assert c.delete("/api/users/ana", headers=legacy).status_code == 404
    store.close()


def test_reads_need_a_user_once_one_exists(store: Store) -> None:
    c = _client(store)
    report = f"/api/incidents/{ROAMING}/report"
    assert c.get(report).status_code == 200  # open before any user
    auth = _users(store, ("vi", "viewer"))
    assert c.get(report).status_code == 401
    assert c.get(report, headers=auth["vi"]).status_code == 200
    chat = f"/api/incidents/{ROAMING}/chat"
    assert c.post(chat, json={"question": "why?"}).status_code == 401
    assert c.post(chat, headers=auth["vi"], json={"question": "why?"}).status_code == 200
    r = c.post(chat, headers=auth["vi"], json={"question": "why?", "keep": True})
    assert r.status_code == 403 and store.chat_for(ROAMING) == []


def test_a_user_is_named_and_roled_properly() -> None:
    for name, role in (("api-token", "admin"), ("-x", "viewer"), ("a b", "viewer"), ("ok", "god")):
        with pytest.raises(UserError):
            User.issue(name, role, at=0.0)


def test_the_cli_manages_users_and_applies_four_eyes(
    store: Store,
    use_store: Callable[..., None],
    capsys: pytest.CaptureFixture[str],
) -> None:
    use_store(store)
    assert run(["user", "add", "ana", "--role", "approver"]) == 0
    token = capsys.readouterr().out.strip()
    ana = store.get_user("ana")
    assert ana is not None and ana.role == "approver" and ana.holds(token)
    assert run(["user", "add", "ana", "--role", "admin"]) == 2
    assert run(["user", "add", "bo", "--role", "root"]) == 2
    assert "role 'root'" in capsys.readouterr().err
    assert run(["user", "list"]) == 0
    out = capsys.readouterr().out
    assert "ana" in out and "approver" in out and token not in out
    assert run(["user", "token", "ana"]) == 0
    new = capsys.readouterr().out.strip()
    ana = store.get_user("ana")
    assert ana is not None and ana.holds(new) and not ana.holds(token)
    assert run(["user", "remove", "ana"]) == 0
    assert store.get_user("ana") is None
    assert run(["user", "remove", "ana"]) == 2
    # four eyes from the terminal: --by names the person (local admin access)
    c = _client(store)
    legacy = {"Authorization": f"Bearer {LEGACY}"}
    mid = c.post(f"/api/incidents/{ROAMING}/emails", headers=legacy).json()["id"]
    assert run(["email", "edit", mid, "--to", "x@evil.example", "--by", "eve"]) == 0
    capsys.readouterr()
    assert run(["email", "approve", mid, "--by", "eve"]) == 2
    assert "may not be approved by eve" in capsys.readouterr().err
    assert store.get_email(mid).status == "draft"  # type: ignore[union-attr]
    assert run(["email", "approve", mid, "--by", "bo"]) == 0


def test_users_on_postgres(pg_url: str) -> None:
    from noc_assistant.store.postgres import PostgresStore

    s = PostgresStore(pg_url)
    try:
        assert not s.has_users() and s.list_users() == []
        ana, token = User.issue("ana", "operator", at=5.0)
        s.save_user(ana)
        assert s.has_users() and s.get_user("ana") == ana
        assert s.user_by_token_hash(User.hash_token(token)) == ana
        rotated, new = ana.with_new_token(at=6.0)
        s.save_user(rotated)
        assert s.user_by_token_hash(User.hash_token(token)) is None
        assert s.user_by_token_hash(User.hash_token(new)) == rotated
        s.clear()  # a fresh demo run keeps the users
        assert [u.name for u in s.list_users()] == ["ana"]
        assert s.remove_user("ana") and not s.remove_user("ana") and not s.has_users()
    finally:
        s.close()
