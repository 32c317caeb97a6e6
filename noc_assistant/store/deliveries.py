"""The notification outbox (:mod:`noc_assistant.integrations.notify`): one row per (route,
incident, event), kept in the store beside the incidents, so that what was promised to a
receiver outlives the process that promised it.

A row has a stable id (the sender derives it from route, incident and event, so an event seen
again after a restart maps to the row it already has: :meth:`Deliveries.enqueue` keeps the
first), a status (``pending``, ``delivered``, ``failed``: failed for good), the attempts made,
when the next may be made, and the message to send (JSON, masked, without the route's
secrets: a routing key or a webhook's URL stays in the routes file). A restarted sender reads
the pending rows and goes on; a delivered row is never sent again.

The table is made on first use (``CREATE TABLE IF NOT EXISTS``), on SQLite and PostgreSQL
alike, through the store's own statements (``?`` placeholders; ``DOUBLE PRECISION``, which
SQLite reads as its 8-byte REAL, for the times).

>>> from noc_assistant.store import SqliteStore
>>> outbox = Deliveries(SqliteStore(":memory:"))
>>> row = Delivery("d1", "oncall", "inc-1", "opened", {"text": "ALERT"}, seq=1, created_at=0.0)
>>> outbox.enqueue([row]); outbox.enqueue([row])
>>> [(d.id, d.status, d.attempts) for d in outbox.pending()]
[('d1', 'pending', 0)]
>>> outbox.retry("d1", 1, next_at=5.0, error="HTTP 503")
>>> outbox.delivered("d1", 1, at=6.0)
>>> outbox.pending(), outbox.counts()
([], {'delivered': 1})
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from noc_assistant.store.table import Table

__all__ = ["Deliveries", "Delivery", "DeliveryStatus"]

DeliveryStatus = Literal["pending", "delivered", "failed"]

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS deliveries (
    id TEXT PRIMARY KEY,
    route TEXT NOT NULL,
    incident_id TEXT NOT NULL,
    event TEXT NOT NULL,
    seq BIGINT NOT NULL,
    status TEXT NOT NULL,
    attempts INTEGER NOT NULL,
    next_at DOUBLE PRECISION NOT NULL,
    created_at DOUBLE PRECISION NOT NULL,
    delivered_at DOUBLE PRECISION,
    last_error TEXT,
    body TEXT NOT NULL
)""",
    "CREATE INDEX IF NOT EXISTS deliveries_status ON deliveries (status, seq)",
    "CREATE INDEX IF NOT EXISTS deliveries_incident ON deliveries (incident_id, route)",
)

_COLUMNS = (
    "id, route, incident_id, event, seq, status, attempts, next_at, created_at, delivered_at,"
    " last_error, body"
)


@dataclass(frozen=True)
class Delivery:
    """One message for one route about one incident event (module docstring). ``seq``
    orders the messages of a route and incident: the sender sends them in that order."""

    id: str
    route: str
    incident_id: str
    event: str
    body: dict[str, Any] = field(repr=False)
    seq: int = 0
    status: DeliveryStatus = "pending"
    attempts: int = 0
    next_at: float = 0.0
    created_at: float = 0.0
    delivered_at: float | None = None
    last_error: str | None = None


def _row(r: tuple[Any, ...]) -> Delivery:
    return Delivery(
        id=str(r[0]),
        route=str(r[1]),
        incident_id=str(r[2]),
        event=str(r[3]),
        seq=int(r[4]),
        status=r[5],
        attempts=int(r[6]),
        next_at=float(r[7]),
        created_at=float(r[8]),
        delivered_at=None if r[9] is None else float(r[9]),
        last_error=r[10],
        body=json.loads(r[11]),
    )


class Deliveries(Table):
    """The outbox table of ``store`` (module docstring); thread-safe as the store is."""

    schema = _SCHEMA
    what, name, columns = "the outbox table", "deliveries", _COLUMNS

    def enqueue(self, rows: Iterable[Delivery]) -> None:
        """Add these messages as pending; a row whose id is already there (delivered or not)
        is left as it is: an event seen twice is sent once."""
        self._table()
        values = [
            (d.id, d.route, d.incident_id, d.event, d.seq, "pending", 0, d.next_at,
             d.created_at, None, None, json.dumps(d.body, sort_keys=True))
            for d in rows
        ]  # fmt: skip
        if values:
            self.store._save(
                "deliveries",
                f"INSERT INTO deliveries ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT(id) DO NOTHING",
                values,
            )

    def pending(self, limit: int = 1000) -> list[Delivery]:
        """The pending messages, oldest first (by ``seq``, then id)."""
        rows = self._select("WHERE status = ? ORDER BY seq, id LIMIT ?", ("pending", limit))
        return [_row(r) for r in rows]

    def rows(self, incident_id: str | None = None) -> list[Delivery]:
        """Every message (of one incident, if given), oldest first."""
        tail, args = "ORDER BY seq, id", tuple[str, ...]()
        if incident_id is not None:
            tail, args = "WHERE incident_id = ? " + tail, (incident_id,)
        return [_row(r) for r in self._select(tail, args)]

    def troubled(self, since: float, until: float) -> list[Delivery]:
        """The messages that failed for good within ``[since, until)`` (a failed row's
        ``next_at`` is when it failed) and those made before ``until`` still being retried
        (pending after a failed attempt), oldest first: what the shift handover lists."""
        rows = self._select(
            "WHERE (status = ? AND next_at >= ? AND next_at < ?)"
            " OR (status = ? AND attempts > 0 AND created_at < ?) ORDER BY seq, id",
            ("failed", since, until, "pending", until),
        )
        return [_row(r) for r in rows]

    def routes_told(self, incident_id: str) -> set[str]:
        """The routes that have (or will have) a message about this incident."""
        self._table()
        rows = self.store._query(
            "SELECT DISTINCT route FROM deliveries WHERE incident_id = ?", (incident_id,)
        )
        return {str(r[0]) for r in rows}

    def delivered(self, delivery_id: str, attempts: int, at: float) -> None:
        """The receiver took it: never sent again."""
        self._set(delivery_id, "delivered", attempts, at, None, at)

    def retry(self, delivery_id: str, attempts: int, next_at: float, error: str) -> None:
        """It failed for now: pending again from ``next_at``."""
        self._set(delivery_id, "pending", attempts, next_at, error, None)

    def failed(self, delivery_id: str, attempts: int, error: str, at: float = 0.0) -> None:
        """It failed for good (refused as malformed, or out of attempts): not sent again."""
        self._set(delivery_id, "failed", attempts, at, error, None)

    def _set(
        self,
        delivery_id: str,
        status: DeliveryStatus,
        attempts: int,
        next_at: float,
        error: str | None,
        delivered_at: float | None,
    ) -> None:
        self._table()
        self.store._save(
            f"delivery {delivery_id}",
            "UPDATE deliveries SET status = ?, attempts = ?, next_at = ?, last_error = ?,"
            " delivered_at = ? WHERE id = ?",
            [(status, attempts, next_at, error, delivered_at, delivery_id)],
        )

    def counts(self) -> dict[str, int]:
        """How many messages are stored, by status."""
        self._table()
        rows = self.store._query("SELECT status, COUNT(*) FROM deliveries GROUP BY status")
        return {str(status): int(n) for status, n in rows}

    def prune(self, before: float) -> None:
        """Forget the delivered and failed messages made before ``before`` (epoch seconds):
        their incidents are long gone from any live pipeline."""
        self._table()
        self.store._save(
            "old deliveries",
            "DELETE FROM deliveries WHERE status <> ? AND created_at < ?",
            [("pending", before)],
        )
