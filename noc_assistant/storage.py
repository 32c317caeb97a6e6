"""Storage of findings and incidents. The embedded default is a SQLite file.

All SQL of the project lives here. Writes are transactional; a crash loses at most the
transaction in flight, and reopening the file continues where it stopped.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterable
from pathlib import Path

from noc_assistant.errors import ConfigError, StorageError
from noc_assistant.models import Finding, Incident
from noc_assistant.rca import Diagnosis

__all__ = ["Store", "open_store"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS incidents (
    id TEXT PRIMARY KEY,
    state TEXT NOT NULL,
    opened_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    resolved_at REAL,
    title TEXT NOT NULL,
    body TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS incidents_opened ON incidents (opened_at);
CREATE TABLE IF NOT EXISTS findings (
    id TEXT PRIMARY KEY,
    incident_id TEXT,
    entity TEXT NOT NULL,
    kpi TEXT NOT NULL,
    ts REAL NOT NULL,
    score REAL NOT NULL,
    body TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS findings_incident ON findings (incident_id);
CREATE TABLE IF NOT EXISTS diagnoses (
    incident_id TEXT PRIMARY KEY,
    body TEXT NOT NULL
);
"""


class Store:
    """Findings and incidents in SQLite (thread-safe; one connection guarded by a lock)."""

    def __init__(self, path: Path | str) -> None:
        self.path = str(path)
        try:
            self._conn = sqlite3.connect(self.path, check_same_thread=False, timeout=30)
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=NORMAL")
            self._conn.executescript(_SCHEMA)
        except sqlite3.Error as exc:
            raise StorageError(f"{self.path}: cannot open database: {exc}") from exc
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def clear(self) -> None:
        """Remove every finding and incident (a fresh demo run)."""
        with self._lock, self._conn:
            self._conn.execute("DELETE FROM findings")
            self._conn.execute("DELETE FROM incidents")
            self._conn.execute("DELETE FROM diagnoses")

    def save_findings(self, findings: Iterable[Finding], incident_id: str | None = None) -> None:
        rows = [
            (f.id, incident_id, f.entity, f.kpi, f.ts, f.score, f.model_dump_json())
            for f in findings
        ]
        try:
            with self._lock, self._conn:
                self._conn.executemany(
                    "INSERT INTO findings (id, incident_id, entity, kpi, ts, score, body) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT(id) DO UPDATE SET "
                    "incident_id = COALESCE(excluded.incident_id, findings.incident_id)",
                    rows,
                )
        except sqlite3.Error as exc:
            raise StorageError(f"{self.path}: cannot save findings: {exc}") from exc

    def save_incident(self, incident: Incident) -> None:
        row = (
            incident.id,
            incident.state,
            incident.opened_at,
            incident.updated_at,
            incident.resolved_at,
            incident.title,
            incident.model_dump_json(),
        )
        try:
            with self._lock, self._conn:
                self._conn.execute(
                    "INSERT INTO incidents (id, state, opened_at, updated_at, resolved_at, title,"
                    " body) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT(id) DO UPDATE SET"
                    " state = excluded.state, updated_at = excluded.updated_at,"
                    " resolved_at = excluded.resolved_at, title = excluded.title,"
                    " body = excluded.body",
                    row,
                )
        except sqlite3.Error as exc:
            raise StorageError(f"{self.path}: cannot save incident {incident.id}: {exc}") from exc

    def save_diagnosis(self, diagnosis: Diagnosis) -> None:
        """Keep the latest diagnosis of an incident (hypotheses with their evidence)."""
        try:
            with self._lock, self._conn:
                self._conn.execute(
                    "INSERT INTO diagnoses (incident_id, body) VALUES (?, ?) ON CONFLICT"
                    "(incident_id) DO UPDATE SET body = excluded.body",
                    (diagnosis.incident_id, diagnosis.model_dump_json()),
                )
        except sqlite3.Error as exc:
            raise StorageError(f"{self.path}: cannot save diagnosis: {exc}") from exc

    def get_diagnosis(self, incident_id: str) -> Diagnosis | None:
        with self._lock:
            row = self._conn.execute(
                "SELECT body FROM diagnoses WHERE incident_id = ?", (incident_id,)
            ).fetchone()
        return Diagnosis.model_validate_json(row[0]) if row else None

    def list_incidents(self, state: str | None = None, limit: int = 500) -> list[Incident]:
        query = "SELECT body FROM incidents"
        args: tuple[object, ...] = ()
        if state:
            query += " WHERE state = ?"
            args = (state,)
        query += " ORDER BY opened_at DESC LIMIT ?"
        with self._lock:
            rows = self._conn.execute(query, (*args, limit)).fetchall()
        return [Incident.model_validate_json(r[0]) for r in rows]

    def get_incident(self, incident_id: str) -> Incident | None:
        with self._lock:
            row = self._conn.execute(
                "SELECT body FROM incidents WHERE id = ?", (incident_id,)
            ).fetchone()
        return Incident.model_validate_json(row[0]) if row else None

    def findings_for(self, incident_id: str) -> list[Finding]:
        with self._lock:
            rows = self._conn.execute(
                "SELECT body FROM findings WHERE incident_id = ? ORDER BY ts", (incident_id,)
            ).fetchall()
        return [Finding.model_validate_json(r[0]) for r in rows]

    def count(self, table: str) -> int:
        if table not in {"findings", "incidents"}:
            raise ValueError(table)
        with self._lock:
            return int(self._conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])


def open_store(db_url: str) -> Store:
    """Open the store named by a settings URL (``sqlite:///PATH``)."""
    if db_url.startswith("sqlite:///"):
        path = Path(db_url[len("sqlite:///") :])
        if path.parent and not path.parent.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
        return Store(path)
    raise ConfigError(f"NOC_DB_URL {db_url!r}: only sqlite:///PATH is supported so far")
