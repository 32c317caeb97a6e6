"""Both stores keep the same contract: SQLite (embedded) and the real PostgreSQL on loopback
(started by scripts/system-deps.sh; without it these tests fail, as DESIGN.md asks)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from noc_assistant.errors import ConfigError, StorageError
from noc_assistant.models import Finding, Hypothesis, Incident
from noc_assistant.postgres import PostgresStore
from noc_assistant.rca import Diagnosis
from noc_assistant.storage import Store, open_store

POSTGRES = "postgresql://postgres@127.0.0.1:5432/postgres"  # as conftest.pg_url


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


def _incident(i: str, opened: float, state: str = "open") -> Incident:
    return Incident(
        id=i,
        fingerprint="fp",
        opened_at=opened,
        updated_at=opened + 60,
        state=state,  # type: ignore[arg-type]
        resolved_at=opened + 900.125 if state == "resolved" else None,
        entities=["upf-3"],
        kpis=["upf-pfcp-peers"],
        title=f"upf-pfcp-peers down on upf-3 ({i})",
    )


def _finding(i: str, ts: float) -> Finding:
    return Finding(
        id=i,
        detector="ensemble:point",
        kpi="upf-pfcp-peers",
        entity="upf-3",
        entity_type="upf",
        ts=ts,
        score=12.5,
        observed=0.0,
        expected_low=1.5,
        expected_high=2.5,
        direction="down",
    )


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
    diag = Diagnosis(
        incident_id="inc-1",
        verdict="fault",
        hypotheses=[Hypothesis(fault="pfcp_association_loss", entity="upf-3", confidence=0.9)],
    )
    store.save_diagnosis(diag)
    store.save_diagnosis(diag)
    again = store.get_diagnosis("inc-1")
    assert again == diag

    store.clear()
    assert store.count("findings") == store.count("incidents") == 0


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
