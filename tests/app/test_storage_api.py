"""Both stores keep one contract: SQLite (embedded) and the real PostgreSQL on loopback (started
by scripts/system-deps.sh; without it the tests fail, as docs/ARCHITECTURE.md asks). SQLite
survives a reopen; the web console serves incidents over real HTTP."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest

from noc_assistant.api.events import Broadcaster
from noc_assistant.errors import ConfigError, NotFoundError, StorageError
from noc_assistant.models import (
    ChatRecord,
    Diagnosis,
    EmailDraft,
    Finding,
    Hypothesis,
    Incident,
    Review,
)
from noc_assistant.store import SqliteStore, Store, open_store
from noc_assistant.store.postgres import PostgresStore
from tests.builders import make_finding

POSTGRES = "postgresql://postgres@127.0.0.1:5432/postgres"  # as conftest.pg_url


def _incident(i: str = "inc-1", opened: float = 1.0e9, state: str = "open") -> Incident:
    return Incident(
        id=i,
        fingerprint="fp",
        opened_at=opened,
        updated_at=opened + 60,
        state=state,  # type: ignore[arg-type]
        resolved_at=opened + 900.125 if state == "resolved" else None,
        entities=["upf-3"],
        kpis=["upf-pfcp-peers"],
        max_score=12.5,
        title="upf-pfcp-peers down on upf-3",
    )


def _finding(i: str = "f-1", ts: float = 1.0e9) -> Finding:
    return make_finding(
        "upf-pfcp-peers",
        "upf-3",
        0.0,
        (1.5, 2.5),
        id=i,
        detector="robust-zscore",
        entity_type="upf",
        ts=ts,
        score=12.5,
    )


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    url = (
        f"sqlite:///{tmp_path / 'noc.db'}"
        if request.param == "sqlite"
        else request.getfixturevalue("pg_url")
    )
    s = open_store(url)
    yield s
    s.close()


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
    assert "verdict: <strong>no fault</strong>" in detail and "candidates" in detail
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


def test_the_store_contract(store: Store) -> None:
    t0 = 1_795_910_400.125  # a time stamp to the millisecond survives (8-byte floats)
    store.save_incident(_incident("inc-1", t0))
    store.save_incident(_incident("inc-2", t0 + 3600, state="resolved"))
    store.save_findings([_finding("f-1", t0), _finding("f-2", t0 + 15)], incident_id="inc-1")
    # written again after a restart, or without an incident: still once, still attached
    store.save_findings([_finding("f-1", t0)])
    store.save_findings([_finding("f-1", t0)], incident_id="inc-1")
    store.save_findings([])
    assert store.count("findings") == 2 and store.count("incidents") == 2
    assert [f.id for f in store.findings_for("inc-1")] == ["f-1", "f-2"]
    assert store.findings_for("inc-1")[0].ts == t0

    got = store.get_incident("inc-2")
    assert got is not None and got.state == "resolved" and got.resolved_at == t0 + 3600 + 900.125
    assert [i.id for i in store.list_incidents()] == ["inc-2", "inc-1"]  # newest first
    assert [i.id for i in store.list_incidents(state="open")] == ["inc-1"]
    assert [i.id for i in store.list_incidents(limit=1)] == ["inc-2"]
    assert store.get_incident("nope") is None

    update = _incident("inc-1", t0, state="resolved")
    store.save_incident(update)
    assert store.list_incidents(state="open") == []

    assert store.get_diagnosis("inc-1") is None
    with pytest.raises(NotFoundError, match="no diagnosis yet") as not_yet:
        store.diagnosed_incident("inc-1")
    assert not not_yet.value.ready
    with pytest.raises(NotFoundError, match="no incident 'nope'") as missing:
        store.diagnosed_incident("nope")
    assert missing.value.ready
    diag = Diagnosis(
        incident_id="inc-1",
        verdict="fault",
        hypotheses=[Hypothesis(fault="pfcp_association_loss", entity="upf-3", confidence=0.9)],
    )
    store.save_diagnosis(diag)
    store.save_diagnosis(diag)
    again = store.get_diagnosis("inc-1")
    assert again == diag
    assert store.diagnosed_incident("inc-1") == (update, diag)

    store.clear()
    assert store.count("findings") == store.count("incidents") == 0


def test_the_store_keeps_email_drafts(store: Store) -> None:
    t0 = 1_795_910_400.125
    draft = EmailDraft(
        id="em-2",
        incident_id="inc-1",
        to=["noc@partner.example"],
        subject="Roaming degradation",
        body="Grüße aus dem NOC\n",
        partner_plmn="26201",
        created_at=t0 + 60,
    )
    other = draft.model_copy(update={"id": "em-9", "incident_id": "inc-2", "created_at": t0})
    first = draft.model_copy(update={"id": "em-1"})  # same time: ordered by id
    for d in (draft, other, first):
        store.save_email(d)
    assert store.get_email("em-2") == draft and store.get_email("nope") is None

    approved = draft.model_copy(
        update={"status": "approved", "approved_by": "alice", "approved_at": t0 + 120}
    )
    store.save_email(approved)
    got = store.get_email("em-2")
    assert got == approved and got.status == "approved" and got.created_at == t0 + 60
    assert [e.id for e in store.list_emails("inc-1")] == ["em-1", "em-2"]
    assert [e.id for e in store.list_emails()] == ["em-9", "em-1", "em-2"]  # oldest first
    assert store.list_emails("inc-3") == []

    # the audit trail survives the store, every step with its time to the microsecond
    done = draft.edited(body="v2\n", by="bo", at=t0 + 90.5)
    done = done.approved("alice", at=t0 + 120).sent(
        "<m@op>", at=t0 + 130.25, undelivered={"x@refuse.example": "550 no such mailbox"}
    )
    store.save_email(done)
    assert store.get_email("em-2") == done
    assert [e.action for e in done.history] == ["edited", "approved", "sent"]

    store.clear()
    assert store.list_emails() == [] and store.get_email("em-2") is None


def test_the_store_keeps_the_triage_chat(store: Store) -> None:
    t0 = 1_795_910_400.125
    turns = [
        ChatRecord(
            id=f"chat-{n}",
            incident_id=inc,
            at=t0 + at,
            asked_by="ana",
            question=f"q{n}",
            answer=f"a{n} [ev-1]",
            generated_by="template",
            cited=["ev-1"],
        )
        for n, inc, at in ((1, "inc-1", 60.0), (2, "inc-2", 0.0), (3, "inc-1", 30.0))
    ]
    for t in turns:
        store.save_chat(t)
    assert store.chat_for("inc-1") == [turns[2], turns[0]]  # oldest first
    assert store.chat_for("inc-3") == []
    store.clear()
    assert store.chat_for("inc-1") == []


def test_the_store_keeps_reviews(store: Store) -> None:
    t0 = 1_795_910_400.125
    for i, at in (("inc-1", t0), ("inc-2", t0 + 3600), ("inc-3", t0 + 7200.5)):
        store.save_incident(_incident(i, at))
    review = Review(incident_id="inc-1").acknowledged("ana", at=t0 + 61.25)
    store.save_review(review)
    assert store.get_review("inc-1") == review and store.get_review("inc-2") is None
    judged = review.judged("fault", "bo", at=t0 + 900.5, fault="udm_timeout", entity="udm-1")
    store.save_review(judged)
    store.save_review(Review(incident_id="inc-2").judged("no_fault", "cy", at=t0 + 3700))
    assert store.reviews()["inc-1"] == judged and set(store.reviews()) == {"inc-1", "inc-2"}
    assert [i.id for i in store.incidents_between(t0, t0 + 7200.5)] == ["inc-1", "inc-2"]
    store.save_incident(_incident("inc-4", t0, state="resolved"))
    assert store.incident_counts() == {"open": 3, "resolved": 1}
    resolved_at = t0 + 900.125  # as _incident resolves one
    assert [i.id for i in store.incidents_resolved_between(resolved_at, resolved_at + 1)] == [
        "inc-4"
    ]
    assert store.incidents_resolved_between(t0, resolved_at) == []
    store.clear()
    assert store.reviews() == {}


def test_the_store_keeps_maintenance_windows(store: Store) -> None:
    from noc_assistant.ops.maintenance import new_window

    t0 = 1_795_910_400.125
    a = new_window("smf-1", "ana", t0, duration_s=3600.5, reason="CHG-1")
    b = new_window("upf-2", "ana", t0, start=str(t0 - 7200), duration_s=3600)  # over
    for w in (a, b):
        store.save_maintenance(w)
    assert store.get_maintenance(a.id) == a and store.get_maintenance("nope") is None
    assert store.maintenance_windows(ending_after=t0) == [a]
    assert store.maintenance_windows() == [b, a]  # by start
    ended = a.ended("bo", t0 + 60)
    store.save_maintenance(ended)
    assert store.maintenance_windows(ending_after=t0 + 61) == []
    assert store.get_maintenance(a.id) == ended
    store.clear()
    assert store.maintenance_windows() == []


def test_the_store_keeps_raised_bars(store: Store) -> None:
    from noc_assistant.ops.raised_bars import new_rule

    t0 = 1_795_910_400.125
    a = new_rule("amf-registration-success", "ana", t0, min_score=2.5, reason="inc-1, inc-2")
    b = new_rule("gpu-kv-cache-usage", "ana", t0 - 7200, min_score=3, reason="x", duration_s=60)
    for t in (a, b):
        store.save_tuning(t)
    assert store.get_tuning(a.id) == a and store.get_tuning("nope") is None
    assert store.tuning_rules(ending_after=t0) == [a]
    assert store.tuning_rules() == [b, a]  # by start
    ended = a.ended("bo", t0 + 60)
    store.save_tuning(ended)
    assert store.tuning_rules(ending_after=t0 + 61) == []
    assert store.get_tuning(a.id) == ended and ended.planned_end == a.end
    store.clear()
    assert store.tuning_rules() == []


def test_postgres_reconnects_after_the_server_dropped_it(store: Store) -> None:
    if not isinstance(store, PostgresStore):
        pytest.skip("the PostgreSQL connection only")
    store.save_incident(_incident("inc-1", 1.0e9))
    pid = store._conn.info.backend_pid
    with psycopg.connect(POSTGRES, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
    store.save_incident(_incident("inc-2", 2.0e9))  # a new connection, no error
    assert store._conn.info.backend_pid != pid
    assert store.count("incidents") == 2


def test_unusable_urls_are_clear_errors_without_the_password() -> None:
    with pytest.raises(StorageError, match=r"postgresql://noc:\*\*\*@127\.0\.0\.1:1/x") as err:
        open_store("postgresql://noc:hunter2@127.0.0.1:1/x")
    assert "hunter2" not in str(err.value)
    with pytest.raises(ConfigError, match="use sqlite:///PATH or postgresql://"):
        open_store("mysql://x")
