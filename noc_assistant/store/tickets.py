"""Partner trouble tickets (:mod:`noc_assistant.integrations.tmf621`): one row per (incident,
partner PLMN), kept in the store beside the incidents, so that a ticket opened at a partner's
NOC is noted, resolved, and not opened twice by whichever process sees the incident next.

A row holds the partner's API base (``tmf621_url`` of the partner when the e-mail was
approved), the ticket's ``id`` and ``href`` once the partner has created it, its status
(``unsent`` until created, then the TMF621 status we last set or read: ``acknowledged`` …
``resolved``), the status still owed to the partner (``wanted``: a resolution whose PATCH
failed), the creation body (JSON, masked, kept so that a creation that failed is retried as
it was approved), when it was created and changed, when the last note was added (notes are
rate-limited), when the partner was last tried, and the last error. Never a token: those stay
in the environment.

The table is made on first use (``CREATE TABLE IF NOT EXISTS``), on SQLite and PostgreSQL
alike, through the store's own statements (``?`` placeholders; ``DOUBLE PRECISION``, which
SQLite reads as its 8-byte REAL, for the times).

>>> from noc_assistant.store import SqliteStore
>>> book = TicketBook(SqliteStore(":memory:"))
>>> row = TicketRow("inc-1", "262-01", "http://tt.example/tmf-api/troubleTicket/v5", {"a": 1})
>>> book.add(row); book.add(row)
>>> [(r.plmn, r.status, r.ticket_id) for r in book.for_incident("inc-1")]
[('26201', 'unsent', None)]
>>> book.save(book.for_incident("inc-1")[0].created("TT-7", "http://tt/7", "acknowledged", 5.0))
>>> got = book.get("inc-1", "26201")
>>> (got.ticket_id, got.status, got.updated_at) if got else None
('TT-7', 'acknowledged', 5.0)
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from typing import Any

from noc_assistant.store.table import Table

__all__ = ["UNSENT", "TicketBook", "TicketRow"]

UNSENT = "unsent"
"""The status of a row whose ticket the partner has not created yet."""

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS tickets (
    incident_id TEXT NOT NULL,
    plmn TEXT NOT NULL,
    base_url TEXT NOT NULL,
    ticket_id TEXT,
    href TEXT,
    status TEXT NOT NULL,
    wanted TEXT,
    payload TEXT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL,
    updated_at DOUBLE PRECISION NOT NULL,
    noted_at DOUBLE PRECISION NOT NULL,
    tried_at DOUBLE PRECISION NOT NULL,
    last_error TEXT,
    PRIMARY KEY (incident_id, plmn)
)""",
)

_COLUMNS = (
    "incident_id, plmn, base_url, ticket_id, href, status, wanted, payload, created_at,"
    " updated_at, noted_at, tried_at, last_error"
)


def _digits(plmn: str) -> str:
    return re.sub(r"\D", "", plmn)


@dataclass(frozen=True)
class TicketRow:
    """One partner ticket of one incident (module docstring); ``plmn`` is kept as digits."""

    incident_id: str
    plmn: str
    base_url: str
    payload: dict[str, Any] = field(repr=False)
    ticket_id: str | None = None
    href: str | None = None
    status: str = UNSENT
    wanted: str | None = None
    created_at: float = 0.0
    updated_at: float = 0.0
    noted_at: float = 0.0
    tried_at: float = 0.0
    last_error: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "plmn", _digits(self.plmn))

    def created(self, ticket_id: str, href: str | None, status: str, at: float) -> TicketRow:
        """The row once the partner has created its ticket."""
        return replace(
            self, ticket_id=ticket_id, href=href, status=status, updated_at=at, last_error=None
        )


def _row(r: tuple[Any, ...]) -> TicketRow:
    return TicketRow(
        incident_id=str(r[0]),
        plmn=str(r[1]),
        base_url=str(r[2]),
        ticket_id=None if r[3] is None else str(r[3]),
        href=None if r[4] is None else str(r[4]),
        status=str(r[5]),
        wanted=None if r[6] is None else str(r[6]),
        payload=json.loads(r[7]),
        created_at=float(r[8]),
        updated_at=float(r[9]),
        noted_at=float(r[10]),
        tried_at=float(r[11]),
        last_error=r[12],
    )


class TicketBook(Table):
    """The ``tickets`` table of ``store`` (module docstring); thread-safe as the store is."""

    schema = _SCHEMA
    what, name, columns = "the tickets table", "tickets", _COLUMNS

    def add(self, row: TicketRow) -> None:
        """Keep ``row``, unless the incident already has a row for that partner (the first
        one stays: one ticket per incident and partner)."""
        self._table()
        self.store._save(
            f"the ticket of {row.incident_id}",
            f"INSERT INTO tickets ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT(incident_id, plmn) DO NOTHING",
            [_values(row)],
        )

    def save(self, row: TicketRow) -> None:
        """Write ``row`` over the stored one of its incident and partner."""
        self._table()
        self.store._save(
            f"the ticket of {row.incident_id}",
            "UPDATE tickets SET base_url = ?, ticket_id = ?, href = ?, status = ?, wanted = ?,"
            " payload = ?, created_at = ?, updated_at = ?, noted_at = ?, tried_at = ?,"
            " last_error = ? WHERE incident_id = ? AND plmn = ?",
            [(*_values(row)[2:], row.incident_id, row.plmn)],
        )

    def get(self, incident_id: str, plmn: str) -> TicketRow | None:
        """The row of one incident and partner, if any."""
        rows = self._select("WHERE incident_id = ? AND plmn = ?", (incident_id, _digits(plmn)))
        return _row(rows[0]) if rows else None

    def for_incident(self, incident_id: str) -> list[TicketRow]:
        """The rows of one incident (one per partner told), by PLMN."""
        rows = self._select("WHERE incident_id = ? ORDER BY plmn", (incident_id,))
        return [_row(r) for r in rows]

    def failing(self) -> list[TicketRow]:
        """The rows whose last request to the partner failed (a ticket not created, a note
        not added, a resolution owed), by when that was tried."""
        rows = self._select("WHERE last_error IS NOT NULL ORDER BY tried_at, incident_id, plmn")
        return [_row(r) for r in rows]


def _values(row: TicketRow) -> tuple[object, ...]:
    return (
        row.incident_id,
        row.plmn,
        row.base_url,
        row.ticket_id,
        row.href,
        row.status,
        row.wanted,
        json.dumps(row.payload, sort_keys=True),
        row.created_at,
        row.updated_at,
        row.noted_at,
        row.tried_at,
        row.last_error,
    )
