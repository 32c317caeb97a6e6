"""PostgreSQL storage (``NOC_DB_URL=postgresql://...``): the store at scale, shared by the
console and every bus worker. The statements are :class:`noc_assistant.store.base.Store`'s; this
module owns the connection: it creates the tables, runs each write in one transaction, and
reconnects once when the server dropped the connection (a restart of PostgreSQL costs the
statement in flight a retry, not the worker)."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import psycopg

from noc_assistant.errors import StorageError
from noc_assistant.store.base import Store, schema

__all__ = ["PostgresStore", "redact"]

_T = TypeVar("_T")


def redact(url: str) -> str:
    """The URL without its password, for messages.

    >>> redact("postgresql://noc:s3cret@db.example:5432/noc")
    'postgresql://noc:***@db.example:5432/noc'
    >>> redact("postgresql://postgres@127.0.0.1/test")
    'postgresql://postgres@127.0.0.1/test'
    """
    return re.sub(r"^(\w+://[^:/@]+):[^@]*@", r"\1:***@", url)


def _placeholders(sql: str) -> str:
    """The shared statements use ``?``; psycopg wants ``%s`` (no statement has a literal
    ``?`` or ``%``)."""
    return sql.replace("?", "%s")


class PostgresStore(Store):
    """Findings and incidents in a PostgreSQL database (tables made if absent)."""

    def __init__(self, url: str) -> None:
        super().__init__()
        self._url = url
        self.path = redact(url)
        self._conn = self._connect()
        try:
            with self._conn.transaction():
                for statement in schema("DOUBLE PRECISION"):
                    self._conn.execute(statement)
        except psycopg.Error as exc:
            raise StorageError(f"{self.path}: cannot create the tables: {exc}") from exc

    def _connect(self) -> psycopg.Connection[Any]:
        try:
            return psycopg.connect(self._url, autocommit=True, connect_timeout=5)
        except psycopg.Error as exc:
            raise StorageError(f"{self.path}: cannot connect: {exc}") from exc

    def _retry(self, run: Callable[[], _T]) -> _T:
        try:
            return run()
        except psycopg.OperationalError:
            if not self._conn.closed and not self._conn.broken:
                raise
            self._conn = self._connect()  # the server restarted or dropped us: once more
            return run()

    def _write(self, sql: str, rows: Sequence[Sequence[object]]) -> None:
        statement = _placeholders(sql)

        def run() -> None:
            with self._conn.transaction(), self._conn.cursor() as cur:
                cur.executemany(statement, rows)

        self._retry(run)

    def _read(self, sql: str, args: Sequence[object] = ()) -> list[tuple[Any, ...]]:
        statement = _placeholders(sql)
        return self._retry(lambda: list(self._conn.execute(statement, tuple(args)).fetchall()))

    def close(self) -> None:
        with self._lock:
            self._conn.close()
