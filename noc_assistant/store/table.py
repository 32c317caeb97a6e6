"""A table kept beside the store's own by the module that owns its rows (the notification
outbox, :mod:`noc_assistant.store.deliveries`; the partner tickets,
:mod:`noc_assistant.store.tickets`).

Such a table is made on first use (``CREATE TABLE IF NOT EXISTS``, once per object), on SQLite
and PostgreSQL alike, through the store's own statements, and is read through them too: a
subclass names its statements (:attr:`Table.schema`), what a failure to make them is called
(:attr:`Table.what`), its table and its columns.

>>> from noc_assistant.store import SqliteStore
>>> class Notes(Table):
...     schema = ("CREATE TABLE IF NOT EXISTS notes (id TEXT PRIMARY KEY, text TEXT)",)
...     what, name, columns = "the notes table", "notes", "id, text"
>>> notes = Notes(SqliteStore(":memory:"))
>>> notes._select("WHERE id = ?", ("n1",))
[]
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any, ClassVar

from noc_assistant.store.base import Store

__all__ = ["Table"]


class Table:
    """One table of ``store``, made on first use; thread-safe as the store is."""

    schema: ClassVar[tuple[str, ...]]
    """The statements that make the table and its indexes (each ``IF NOT EXISTS``)."""
    what: ClassVar[str]
    """How a failure to make it names the table (``the outbox table``)."""
    name: ClassVar[str]
    """The table's name in SQL."""
    columns: ClassVar[str]
    """Its columns as rows are read, in the order of the subclass's row reader."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._made = False
        self._lock = threading.Lock()

    def _table(self) -> None:
        with self._lock:
            if not self._made:
                for statement in self.schema:
                    self.store._save(self.what, statement, [()])
                self._made = True

    def _select(self, tail: str = "", args: Sequence[object] = ()) -> list[tuple[Any, ...]]:
        """``SELECT`` the columns of the rows that ``tail`` (``WHERE … ORDER BY …``) keeps."""
        self._table()
        return self.store._query(f"SELECT {self.columns} FROM {self.name} {tail}".rstrip(), args)
