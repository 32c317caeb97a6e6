"""Storage of findings, incidents, e-mail drafts, reviews and kept chat turns.

:class:`Store` (``base``) holds every SQL statement; :class:`SqliteStore` (``sqlite``) is the
embedded default and :class:`~noc_assistant.store.postgres.PostgresStore` the store at scale;
:func:`open_store` picks one from ``NOC_DB_URL``.
"""

from __future__ import annotations

from pathlib import Path

from noc_assistant.errors import ConfigError
from noc_assistant.store.base import Store, schema
from noc_assistant.store.sqlite import SqliteStore

__all__ = ["SqliteStore", "Store", "open_store", "schema"]


def open_store(db_url: str) -> Store:
    """Open the store named by a settings URL: ``sqlite:///PATH`` or
    ``postgresql://USER[:PASSWORD]@HOST[:PORT]/DATABASE``."""
    if db_url.startswith("sqlite:///"):
        path = Path(db_url[len("sqlite:///") :])
        if path.parent and not path.parent.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
        return SqliteStore(path)
    if db_url.startswith(("postgresql://", "postgres://")):
        from noc_assistant.store.postgres import PostgresStore

        return PostgresStore(db_url)
    raise ConfigError(
        f"NOC_DB_URL {db_url!r}: use sqlite:///PATH or postgresql://USER@HOST/DATABASE"
    )
