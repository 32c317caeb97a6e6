"""Shared fixtures: the web console served by a real uvicorn on a loopback port, and a schema
of its own on the loopback PostgreSQL."""

from __future__ import annotations

import socket
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest
import uvicorn

from noc_assistant.api.app import create_app
from noc_assistant.api.events import Broadcaster
from noc_assistant.storage import SqliteStore, Store


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serve(tmp_path: Path, local_tz: str | None = None) -> Iterator[tuple[str, Store, Broadcaster]]:
    store = SqliteStore(tmp_path / "noc.db")
    hub = Broadcaster()
    port = _free_port()
    app = create_app(store, hub, local_tz)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{port}"
    for _ in range(100):
        try:
            httpx.get(base + "/health", timeout=1)
            break
        except httpx.TransportError:
            time.sleep(0.05)
    yield base, store, hub
    server.should_exit = True
    thread.join(timeout=5)


@pytest.fixture()
def served(tmp_path: Path) -> Iterator[tuple[str, Store, Broadcaster]]:
    yield from _serve(tmp_path)


@pytest.fixture()
def served_in_berlin(tmp_path: Path) -> Iterator[tuple[str, Store, Broadcaster]]:
    """The console of a network on Berlin time (``NOC_LOCAL_TZ``)."""
    yield from _serve(tmp_path, "Europe/Berlin")


#: the loopback PostgreSQL of scripts/system-deps.sh (trust authentication, as on CI)
POSTGRES = "postgresql://postgres@127.0.0.1:5432/postgres"


@pytest.fixture()
def pg_url() -> Iterator[str]:
    """A ``NOC_DB_URL`` on the real PostgreSQL, in a schema of this test only (dropped after)."""
    schema = f"noctest_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(POSTGRES, autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {schema}")  # type: ignore[arg-type]
    yield f"{POSTGRES}?options=-csearch_path%3D{schema}"
    with psycopg.connect(POSTGRES, autocommit=True) as admin:
        admin.execute(f"DROP SCHEMA {schema} CASCADE")  # type: ignore[arg-type]
