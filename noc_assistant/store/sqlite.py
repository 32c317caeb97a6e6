"""The embedded default store: one SQLite file (WAL journal), the statements of
:class:`~noc_assistant.store.base.Store`."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from noc_assistant.errors import StorageError
from noc_assistant.store.base import Store, schema


class SqliteStore(Store):
    """The embedded default: one SQLite file (WAL journal)."""

    def __init__(self, path: Path | str) -> None:
        super().__init__()
        self.path = str(path)
        try:
            self._conn = sqlite3.connect(self.path, check_same_thread=False, timeout=30)
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=NORMAL")
            for statement in schema("REAL"):
                self._conn.execute(statement)
        except sqlite3.Error as exc:
            raise StorageError(f"{self.path}: cannot open database: {exc}") from exc

    def _write(self, sql: str, rows: Sequence[Sequence[object]]) -> None:
        with self._conn:
            self._conn.executemany(sql, rows)

    def _read(self, sql: str, args: Sequence[object] = ()) -> list[tuple[Any, ...]]:
        return list(self._conn.execute(sql, tuple(args)).fetchall())

    def close(self) -> None:
        with self._lock:
            self._conn.close()
