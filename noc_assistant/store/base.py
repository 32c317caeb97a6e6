"""Storage of findings, incidents, e-mail drafts and kept triage-chat turns: a SQLite file
(the embedded default) or PostgreSQL.

All SQL of the project lives here and in :mod:`noc_assistant.store.postgres` (the PostgreSQL
connection). Both backends run the same statements (``?`` placeholders, upserts by id), so a
worker that writes an event twice after a restart stores it once. Writes are transactional;
a crash loses at most the transaction in flight, and reopening continues where it stopped.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from typing import Any, TypeVar

from noc_assistant.errors import NotFoundError, StorageError
from noc_assistant.models import (
    ChatRecord,
    Diagnosis,
    EmailDraft,
    Finding,
    Incident,
    Maintenance,
    Review,
    Tuning,
)
from noc_assistant.users import User

__all__ = ["Store", "schema"]

_SpanT = TypeVar("_SpanT", Maintenance, Tuning)


def schema(real: str) -> list[str]:
    """The tables, with ``real`` the 8-byte float type of the backend (epoch seconds need
    it: PostgreSQL's REAL is 4 bytes and would round a time stamp to minutes)."""
    return [
        f"""CREATE TABLE IF NOT EXISTS incidents (
    id TEXT PRIMARY KEY,
    state TEXT NOT NULL,
    opened_at {real} NOT NULL,
    updated_at {real} NOT NULL,
    resolved_at {real},
    title TEXT NOT NULL,
    body TEXT NOT NULL
)""",
        "CREATE INDEX IF NOT EXISTS incidents_opened ON incidents (opened_at)",
        f"""CREATE TABLE IF NOT EXISTS findings (
    id TEXT PRIMARY KEY,
    incident_id TEXT,
    entity TEXT NOT NULL,
    kpi TEXT NOT NULL,
    ts {real} NOT NULL,
    score {real} NOT NULL,
    body TEXT NOT NULL
)""",
        "CREATE INDEX IF NOT EXISTS findings_incident ON findings (incident_id)",
        """CREATE TABLE IF NOT EXISTS diagnoses (
    incident_id TEXT PRIMARY KEY,
    body TEXT NOT NULL
)""",
        f"""CREATE TABLE IF NOT EXISTS emails (
    id TEXT PRIMARY KEY,
    incident_id TEXT NOT NULL,
    status TEXT NOT NULL,
    created_at {real} NOT NULL,
    body TEXT NOT NULL
)""",
        "CREATE INDEX IF NOT EXISTS emails_incident ON emails (incident_id)",
        f"""CREATE TABLE IF NOT EXISTS chat (
    id TEXT PRIMARY KEY,
    incident_id TEXT NOT NULL,
    at {real} NOT NULL,
    body TEXT NOT NULL
)""",
        "CREATE INDEX IF NOT EXISTS chat_incident ON chat (incident_id, at)",
        """CREATE TABLE IF NOT EXISTS reviews (
    incident_id TEXT PRIMARY KEY,
    body TEXT NOT NULL
)""",
        f"""CREATE TABLE IF NOT EXISTS maintenance (
    id TEXT PRIMARY KEY,
    entity TEXT NOT NULL,
    start_ts {real} NOT NULL,
    end_ts {real} NOT NULL,
    body TEXT NOT NULL
)""",
        "CREATE INDEX IF NOT EXISTS maintenance_end ON maintenance (end_ts)",
        f"""CREATE TABLE IF NOT EXISTS tuning (
    id TEXT PRIMARY KEY,
    kpi TEXT NOT NULL,
    start_ts {real} NOT NULL,
    end_ts {real} NOT NULL,
    body TEXT NOT NULL
)""",
        "CREATE INDEX IF NOT EXISTS tuning_end ON tuning (end_ts)",
        f"""CREATE TABLE IF NOT EXISTS paged (
    incident_id TEXT PRIMARY KEY,
    first_seen {real} NOT NULL
)""",
        """CREATE TABLE IF NOT EXISTS users (
    name TEXT PRIMARY KEY,
    token_sha256 TEXT NOT NULL UNIQUE,
    role TEXT NOT NULL,
    body TEXT NOT NULL
)""",
    ]


#: a string a stored text must contain, or strings it must all contain
Mention = str | tuple[str, ...]


def _mentions(mentioning: Sequence[Mention]) -> tuple[str, list[object]]:
    """A ``body LIKE`` clause true when any mention holds (all strings of a tuple)."""
    ors, args = [], []
    for m in mentioning:
        parts = (m,) if isinstance(m, str) else m
        ors.append("(" + " AND ".join("body LIKE ?" for _ in parts) + ")")
        args += [f"%{p}%" for p in parts]
    return "(" + " OR ".join(ors) + ")", list(args)


class Store:
    """Findings, incidents, diagnoses, e-mail drafts, chat turns, reviews and maintenance
    windows; the SQL is shared, the connection is the subclass's (:class:`SqliteStore`,
    :class:`noc_assistant.store.postgres.PostgresStore`). Thread-safe: one connection guarded by a
    lock."""

    path: str
    """Where the data lives, for messages (a file, or a URL without its password)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()

    # -- the backend's part ------------------------------------------------------------------

    def _write(self, sql: str, rows: Sequence[Sequence[object]]) -> None:
        """Run ``sql`` once per row in one transaction."""
        raise NotImplementedError

    def _read(self, sql: str, args: Sequence[object] = ()) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    # -- shared ------------------------------------------------------------------------------

    def _save(self, what: str, sql: str, rows: Sequence[Sequence[object]]) -> None:
        try:
            with self._lock:
                self._write(sql, rows)
        except StorageError:
            raise
        except Exception as exc:  # the backend's own error class
            raise StorageError(f"{self.path}: cannot save {what}: {exc}") from exc

    def _query(self, sql: str, args: Sequence[object] = ()) -> list[tuple[Any, ...]]:
        try:
            with self._lock:
                return self._read(sql, args)
        except StorageError:
            raise
        except Exception as exc:
            raise StorageError(f"{self.path}: cannot read: {exc}") from exc

    def clear(self) -> None:
        """Remove every finding, incident, diagnosis, e-mail draft, chat turn, review,
        maintenance window, raised bar and paging time (a fresh demo run); the users stay."""
        tables = (
            "findings",
            "incidents",
            "diagnoses",
            "emails",
            "chat",
            "reviews",
            "maintenance",
            "tuning",
            "paged",
        )
        for table in tables:
            self._save(table, f"DELETE FROM {table}", [()])

    def save_findings(self, findings: Iterable[Finding], incident_id: str | None = None) -> None:
        rows = [
            (f.id, incident_id, f.entity, f.kpi, f.ts, f.score, f.model_dump_json())
            for f in findings
        ]
        if rows:
            self._save(
                "findings",
                "INSERT INTO findings (id, incident_id, entity, kpi, ts, score, body) "
                "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT(id) DO UPDATE SET "
                "incident_id = COALESCE(excluded.incident_id, findings.incident_id)",
                rows,
            )

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
        self._save(
            f"incident {incident.id}",
            "INSERT INTO incidents (id, state, opened_at, updated_at, resolved_at, title,"
            " body) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT(id) DO UPDATE SET"
            " state = excluded.state, updated_at = excluded.updated_at,"
            " resolved_at = excluded.resolved_at, title = excluded.title,"
            " body = excluded.body",
            [row],
        )

    def save_diagnosis(self, diagnosis: Diagnosis) -> None:
        """Keep the latest diagnosis of an incident (hypotheses with their evidence)."""
        self._save(
            "diagnosis",
            "INSERT INTO diagnoses (incident_id, body) VALUES (?, ?) ON CONFLICT"
            "(incident_id) DO UPDATE SET body = excluded.body",
            [(diagnosis.incident_id, diagnosis.model_dump_json())],
        )

    def get_diagnosis(self, incident_id: str) -> Diagnosis | None:
        rows = self._query("SELECT body FROM diagnoses WHERE incident_id = ?", (incident_id,))
        return Diagnosis.model_validate_json(rows[0][0]) if rows else None

    def list_incidents(self, state: str | None = None, limit: int = 500) -> list[Incident]:
        query = "SELECT body FROM incidents"
        args: tuple[object, ...] = ()
        if state:
            query += " WHERE state = ?"
            args = (state,)
        query += " ORDER BY opened_at DESC, id LIMIT ?"
        rows = self._query(query, (*args, limit))
        return [Incident.model_validate_json(r[0]) for r in rows]

    def incident_versions(self) -> dict[str, tuple[str, float]]:
        """Every incident's id → (state, updated_at), without reading bodies: what a console
        replica compares between two looks at the store to publish what changed."""
        rows = self._query("SELECT id, state, updated_at FROM incidents")
        return {str(r[0]): (str(r[1]), float(r[2])) for r in rows}

    def get_incident(self, incident_id: str) -> Incident | None:
        rows = self._query("SELECT body FROM incidents WHERE id = ?", (incident_id,))
        return Incident.model_validate_json(rows[0][0]) if rows else None

    def diagnosed_incident(self, incident_id: str) -> tuple[Incident, Diagnosis]:
        """An incident with its diagnosis; :class:`NotFoundError` if there is no such incident
        or (``ready`` False) it has no diagnosis yet."""
        inc = self.get_incident(incident_id)
        if inc is None:
            raise NotFoundError(f"no incident {incident_id!r} in {self.path}")
        diagnosis = self.get_diagnosis(incident_id)
        if diagnosis is None:
            raise NotFoundError(
                f"incident {incident_id} has no diagnosis yet in {self.path}", ready=False
            )
        return inc, diagnosis

    def findings_for(self, incident_id: str) -> list[Finding]:
        rows = self._query(
            "SELECT body FROM findings WHERE incident_id = ? ORDER BY ts, id", (incident_id,)
        )
        return [Finding.model_validate_json(r[0]) for r in rows]

    def findings_of(self, incident_ids: Sequence[str]) -> dict[str, list[Finding]]:
        """The findings of several incidents (one query per 500 ids), by incident, by time."""
        out: dict[str, list[Finding]] = {i: [] for i in incident_ids}
        for incident_id, body in self._query_in(
            "SELECT incident_id, body FROM findings WHERE incident_id", incident_ids
        ):
            out[str(incident_id)].append(Finding.model_validate_json(body))
        for found in out.values():
            found.sort(key=lambda f: (f.ts, f.id))
        return out

    def save_email(self, draft: EmailDraft) -> None:
        """Keep a partner-NOC e-mail draft; saving it again (approved, sent, rejected) replaces
        its status and content."""
        row = (draft.id, draft.incident_id, draft.status, draft.created_at, draft.model_dump_json())
        self._save(
            f"e-mail {draft.id}",
            "INSERT INTO emails (id, incident_id, status, created_at, body) VALUES"
            " (?, ?, ?, ?, ?) ON CONFLICT(id) DO UPDATE SET status = excluded.status,"
            " body = excluded.body",
            [row],
        )

    def get_email(self, email_id: str) -> EmailDraft | None:
        rows = self._query("SELECT body FROM emails WHERE id = ?", (email_id,))
        return EmailDraft.model_validate_json(rows[0][0]) if rows else None

    def list_emails(self, incident_id: str | None = None) -> list[EmailDraft]:
        """The e-mail drafts (of one incident, if given), oldest first."""
        query = "SELECT body FROM emails"
        args: tuple[object, ...] = ()
        if incident_id is not None:
            query += " WHERE incident_id = ?"
            args = (incident_id,)
        rows = self._query(query + " ORDER BY created_at, id", args)
        return [EmailDraft.model_validate_json(r[0]) for r in rows]

    def save_chat(self, turn: ChatRecord) -> None:
        """Keep a triage-chat question and its answer in the incident's log (saving the same
        id again replaces it)."""
        self._save(
            f"chat turn {turn.id}",
            "INSERT INTO chat (id, incident_id, at, body) VALUES (?, ?, ?, ?)"
            " ON CONFLICT(id) DO UPDATE SET body = excluded.body",
            [(turn.id, turn.incident_id, turn.at, turn.model_dump_json())],
        )

    def chat_for(self, incident_id: str) -> list[ChatRecord]:
        """The kept chat turns of an incident, oldest first."""
        rows = self._query(
            "SELECT body FROM chat WHERE incident_id = ? ORDER BY at, id", (incident_id,)
        )
        return [ChatRecord.model_validate_json(r[0]) for r in rows]

    def save_review(self, review: Review) -> None:
        """Keep what the NOC did with an incident (saving again replaces it)."""
        self._save(
            f"review of {review.incident_id}",
            "INSERT INTO reviews (incident_id, body) VALUES (?, ?)"
            " ON CONFLICT(incident_id) DO UPDATE SET body = excluded.body",
            [(review.incident_id, review.model_dump_json())],
        )

    def get_review(self, incident_id: str) -> Review | None:
        rows = self._query("SELECT body FROM reviews WHERE incident_id = ?", (incident_id,))
        return Review.model_validate_json(rows[0][0]) if rows else None

    def review_of(self, incident_id: str) -> Review | None:
        """An incident's review, empty if nobody has touched it; None if there is no such
        incident."""
        if self.get_incident(incident_id) is None:
            return None
        return self.get_review(incident_id) or Review(incident_id=incident_id)

    def reviews(self) -> dict[str, Review]:
        """Every review, by incident id."""
        rows = self._query("SELECT body FROM reviews")
        out = [Review.model_validate_json(r[0]) for r in rows]
        return {r.incident_id: r for r in out}

    def reviews_for(self, incident_ids: Sequence[str]) -> dict[str, Review]:
        """The reviews of these incidents (those that have one), by incident id."""
        out: dict[str, Review] = {}
        for r in self._query_in("SELECT body FROM reviews WHERE incident_id", incident_ids):
            review = Review.model_validate_json(r[0])
            out[review.incident_id] = review
        return out

    def _query_in(self, head: str, ids: Sequence[str]) -> list[tuple[Any, ...]]:
        """The rows of ``head IN (ids)``, asked in chunks of 500 (SQLite's bound parameters
        are limited), each id once."""
        unique = list(dict.fromkeys(ids))
        rows: list[tuple[Any, ...]] = []
        for i in range(0, len(unique), 500):
            chunk = unique[i : i + 500]
            rows += self._query(f"{head} IN ({', '.join('?' * len(chunk))})", chunk)
        return rows

    def first_seen(self, incident_ids: Sequence[str], now: float) -> dict[str, float]:
        """When a live command first saw each of these incidents open (wall clock, epoch
        seconds); those no process has seen before are recorded as ``now``. The
        acknowledgement timer counts from it, so a restart does not start it again, and
        every process that shares the store counts from the same moment."""
        if not incident_ids:
            return {}
        self._save(
            "paging times",
            "INSERT INTO paged (incident_id, first_seen) VALUES (?, ?)"
            " ON CONFLICT(incident_id) DO NOTHING",
            [(i, now) for i in dict.fromkeys(incident_ids)],
        )
        rows = self._query_in(
            "SELECT incident_id, first_seen FROM paged WHERE incident_id", incident_ids
        )
        return {r[0]: float(r[1]) for r in rows}

    def save_maintenance(self, window: Maintenance) -> None:
        """Keep a maintenance window (saving it again, ended early, replaces it)."""
        self._put_span("maintenance", "entity", "maintenance window", window)

    def get_maintenance(self, window_id: str) -> Maintenance | None:
        return self._get_span("maintenance", Maintenance, window_id)

    def maintenance_windows(self, ending_after: float = float("-inf")) -> list[Maintenance]:
        """The maintenance windows that end after ``ending_after``, by start."""
        return self._spans("maintenance", Maintenance, ending_after)

    def save_tuning(self, rule: Tuning) -> None:
        """Keep a raised bar (saving it again, ended early, replaces it)."""
        self._put_span("tuning", "kpi", "raised bar", rule)

    def get_tuning(self, rule_id: str) -> Tuning | None:
        return self._get_span("tuning", Tuning, rule_id)

    def tuning_rules(self, ending_after: float = float("-inf")) -> list[Tuning]:
        """The raised bars that end after ``ending_after``, by start."""
        return self._spans("tuning", Tuning, ending_after)

    def _put_span(self, table: str, column: str, what: str, span: Maintenance | Tuning) -> None:
        """Upsert ``span`` into ``table``, whose ``column`` holds the span's field of that
        name (the entity of a window, the KPI of a raised bar)."""
        self._save(
            f"{what} {span.id}",
            f"INSERT INTO {table} (id, {column}, start_ts, end_ts, body) VALUES (?, ?, ?, ?, ?)"
            " ON CONFLICT(id) DO UPDATE SET start_ts = excluded.start_ts,"
            " end_ts = excluded.end_ts, body = excluded.body",
            [(span.id, getattr(span, column), span.start, span.end, span.model_dump_json())],
        )

    def _get_span(self, table: str, model: type[_SpanT], span_id: str) -> _SpanT | None:
        rows = self._query(f"SELECT body FROM {table} WHERE id = ?", (span_id,))
        return model.model_validate_json(rows[0][0]) if rows else None

    def _spans(self, table: str, model: type[_SpanT], ending_after: float) -> list[_SpanT]:
        rows = self._query(
            f"SELECT body FROM {table} WHERE end_ts > ? ORDER BY start_ts, id",
            (max(ending_after, -1e300),),
        )
        return [model.model_validate_json(r[0]) for r in rows]

    def _incidents_by(
        self, column: str, since: float, until: float, mentioning: Sequence[Mention] = ()
    ) -> list[Incident]:
        where = f"{column} >= ? AND {column} < ?"
        args: list[object] = [since, until]
        if mentioning:
            clause, more = _mentions(mentioning)
            where += f" AND {clause}"
            args += more
        rows = self._query(f"SELECT body FROM incidents WHERE {where} ORDER BY {column}, id", args)
        return [Incident.model_validate_json(r[0]) for r in rows]

    def incidents_between(
        self, since: float, until: float, mentioning: Sequence[Mention] = ()
    ) -> list[Incident]:
        """The incidents opened in ``[since, until)``, oldest first; with ``mentioning``, only
        those whose stored text contains one of these strings (an entity, a KPI) or all the
        strings of one of these tuples (a fault class and its entity): a filter in the
        database that may let more through, never fewer, so that a page over a large store
        reads only the candidates."""
        return self._incidents_by("opened_at", since, until, mentioning)

    def incidents_with_ids(self, incident_ids: Sequence[str]) -> list[Incident]:
        """The stored incidents of these ids (one query per 500)."""
        rows = self._query_in("SELECT body FROM incidents WHERE id", incident_ids)
        return [Incident.model_validate_json(r[0]) for r in rows]

    def reviewed_mentioning(self, mention: Mention) -> list[str]:
        """Ids of the incidents whose review's text mentions ``mention`` (a superset, like
        ``mentioning`` above)."""
        clause, args = _mentions([mention])
        rows = self._query(f"SELECT incident_id FROM reviews WHERE {clause}", args)
        return [str(r[0]) for r in rows]

    def incidents_resolved_between(self, since: float, until: float) -> list[Incident]:
        """The incidents resolved in ``[since, until)``, by resolution."""
        return self._incidents_by("resolved_at", since, until)

    def incident_counts(self) -> dict[str, int]:
        """How many incidents are stored, by state (one query, no bodies read)."""
        rows = self._query("SELECT state, COUNT(*) FROM incidents GROUP BY state")
        return {str(state): int(n) for state, n in rows}

    def time_span(self) -> tuple[float, float] | None:
        """The earliest and latest time the stored incidents and findings hold (None: none)."""
        rows = self._query(
            "SELECT MIN(opened_at), MAX(updated_at) FROM incidents"
            " UNION ALL SELECT MIN(ts), MAX(ts) FROM findings"
        )
        ends = [(float(lo), float(hi)) for lo, hi in rows if lo is not None and hi is not None]
        return (min(e[0] for e in ends), max(e[1] for e in ends)) if ends else None

    def count(self, table: str) -> int:
        if table not in {"findings", "incidents"}:
            raise ValueError(table)
        return int(self._query(f"SELECT COUNT(*) FROM {table}")[0][0])

    # -- users (noc_assistant.users): the token's SHA-256 only, never the token ------------

    def save_user(self, user: User) -> None:
        """Keep a user (saving the same name again replaces its role and token hash)."""
        self._save(
            f"user {user.name}",
            "INSERT INTO users (name, token_sha256, role, body) VALUES (?, ?, ?, ?)"
            " ON CONFLICT(name) DO UPDATE SET token_sha256 = excluded.token_sha256,"
            " role = excluded.role, body = excluded.body",
            [(user.name, user.token_sha256, user.role, user.model_dump_json())],
        )

    def get_user(self, name: str) -> User | None:
        rows = self._query("SELECT body FROM users WHERE name = ?", (name,))
        return User.model_validate_json(rows[0][0]) if rows else None

    def user_by_token_hash(self, token_sha256: str) -> User | None:
        """The user whose token has this SHA-256 (hex), if any."""
        rows = self._query("SELECT body FROM users WHERE token_sha256 = ?", (token_sha256,))
        return User.model_validate_json(rows[0][0]) if rows else None

    def list_users(self) -> list[User]:
        """Every user, by name."""
        rows = self._query("SELECT body FROM users ORDER BY name")
        return [User.model_validate_json(r[0]) for r in rows]

    def has_users(self) -> bool:
        """Whether any user exists (then every guarded read needs a token)."""
        return bool(self._query("SELECT 1 FROM users LIMIT 1"))

    def remove_user(self, name: str) -> bool:
        """Remove a user (its token stops working); False if there was none of that name."""
        if self.get_user(name) is None:
            return False
        self._save(f"user {name}", "DELETE FROM users WHERE name = ?", [(name,)])
        return True
