"""Shared fixtures, all real servers on loopback: the web console (uvicorn), a schema of its own
on PostgreSQL, Alertmanager and Prometheus (one process per test, on free ports), and HTTP
exporters that answer as an Open5GS AMF's does."""

from __future__ import annotations

import email
import email.policy
import shutil
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from email.message import EmailMessage
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
import uvicorn
import yaml
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP, Envelope, Session

from knowledge.topology import Topology
from noc_assistant.api.app import create_app
from noc_assistant.api.events import Broadcaster
from noc_assistant.store import SqliteStore, Store
from noc_assistant.stream.correlate import inhibit_rules


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def serve_app(app: Any) -> Iterator[str]:
    """Serve an ASGI app (the console's) with uvicorn on a free loopback port, once it answers
    ``/health``; its base URL. Stopped when the block ends."""
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{port}"
    for _ in range(200):
        try:
            httpx.get(base + "/health", timeout=1)
            break
        except httpx.TransportError:
            time.sleep(0.05)
    try:
        yield base
    finally:
        server.should_exit = True
        thread.join(timeout=5)


def _serve(
    tmp_path: Path, local_tz: str | None = None, **app_kwargs: Any
) -> Iterator[tuple[str, Store, Broadcaster]]:
    store = SqliteStore(tmp_path / "noc.db")
    hub = Broadcaster()
    with serve_app(create_app(store, hub, local_tz, **app_kwargs)) as base:
        yield base, store, hub


@pytest.fixture()
def served(tmp_path: Path) -> Iterator[tuple[str, Store, Broadcaster]]:
    yield from _serve(tmp_path)


@pytest.fixture()
def served_with_drafting(tmp_path: Path) -> Iterator[tuple[str, Store, Broadcaster]]:
    """The console with drafting on (the pack's fixture inventory; no model, no SMTP)."""
    from knowledge.pack import load_pack
    from knowledge.topology import load_inventory
    from noc_assistant.triage.drafting import Drafter

    pack = load_pack()
    topo = load_inventory(pack.fixture_path("inventory.yaml"), pack)
    yield from _serve(tmp_path, drafter=Drafter(pack, topo), api_token="t0ken")


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


def _launch(args: list[str], url: str, ready: Callable[[], bool]) -> subprocess.Popen[bytes]:
    """Start a server process and wait (up to a minute) until ``ready()``."""
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while True:
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else b""
        assert time.monotonic() < deadline, f"{args[0]} at {url} not ready in a minute"
        try:
            if ready():
                return proc
        except httpx.TransportError:
            pass
        time.sleep(0.05)


@pytest.fixture()
def use_store(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., None]]:
    """Point the CLI at a store: ``use_store(store, NOC_X="…")`` sets ``NOC_DB_URL`` (and the
    other settings given), widens the console, and has the settings read again; undone after
    the test."""
    from noc_assistant.cli._console import console
    from noc_assistant.settings import get_settings

    def point(store: Any, **env: str) -> None:
        monkeypatch.setenv("NOC_DB_URL", f"sqlite:///{store.path}")
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        monkeypatch.setattr(console, "width", 240)
        get_settings.cache_clear()

    yield point
    get_settings.cache_clear()


@pytest.fixture()
def free_port() -> int:
    """A loopback port nothing listens on."""
    return _free_port()


@contextmanager
def run_alertmanager(tmp_path: Path, config: dict[str, Any]) -> Iterator[str]:
    """A real Alertmanager with ``config`` on a free loopback port (its files under
    ``tmp_path``), once ready; its URL. Stopped when the block ends."""
    binary = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
    assert binary, "Alertmanager is not installed (scripts/system-deps.sh installs it)"
    (tmp_path / "am.yml").write_text(yaml.safe_dump(config))
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    args = [binary, f"--config.file={tmp_path / 'am.yml'}", f"--storage.path={tmp_path / 'am'}"]
    args += [f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address="]
    proc = _launch(args, url, lambda: httpx.get(f"{url}/-/ready", timeout=1).status_code == 200)
    try:
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@contextmanager
def run_prometheus(
    tmp_path: Path, config: dict[str, Any], ready: Callable[[str], bool]
) -> Iterator[str]:
    """A real Prometheus with ``config`` on a free loopback port (its files under ``tmp_path``),
    once ``ready(url)``; its URL. Stopped when the block ends."""
    binary = shutil.which("prometheus")
    assert binary, "Prometheus is not installed (scripts/system-deps.sh installs it)"
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    args = [binary, f"--config.file={tmp_path / 'prometheus.yml'}"]
    args += [f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}"]
    proc = _launch(args, url, lambda: ready(url))
    try:
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=20)


@pytest.fixture()
def alertmanager(tmp_path: Path) -> Iterator[str]:
    """A real Alertmanager on a free loopback port, inhibiting smf-1 while upf-2 is critical
    (``inhibit_rules`` of that topology); its URL."""
    topology = Topology({"smf-1": "smf", "upf-2": "upf"}, {"smf-1": {"upf-2"}, "upf-2": set()})
    config = {
        "route": {"receiver": "null", "group_wait": "1s"},
        "receivers": [{"name": "null"}],
        **inhibit_rules(topology),
    }
    with run_alertmanager(tmp_path, config) as url:
        yield url


class MetricsServer:
    """A loopback HTTP server that answers every GET with :meth:`scrape`, in Prometheus' text
    format; ``target`` is its ``host:port``, ``url`` its ``/metrics``."""

    def __init__(self) -> None:
        self.stopped = False
        metrics = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = metrics.scrape().encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.target = f"127.0.0.1:{self.server.server_address[1]}"
        self.url = f"http://{self.target}/metrics"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def scrape(self) -> str:
        raise NotImplementedError

    def stop(self) -> None:
        if not self.stopped:
            self.stopped = True
            self.server.shutdown()
            self.server.server_close()


class Exporter(MetricsServer):
    """An Open5GS-like AMF exporter: counters that grow at every scrape, a gauge, a
    histogram, and optionally a line no parser can read."""

    def __init__(self, broken_line: bool = False) -> None:
        self.scrapes = 0
        self.broken_line = broken_line
        super().__init__()

    def scrape(self) -> str:
        self.scrapes += 1
        return self.text()

    def text(self) -> str:
        n = self.scrapes
        lines = [
            "# HELP fivegs_amffunction_rm_reginitreq Registration requests",
            "# TYPE fivegs_amffunction_rm_reginitreq counter",
            f'fivegs_amffunction_rm_reginitreq{{nf="amf"}} {300 * n}',
            "# TYPE fivegs_amffunction_rm_reginitsucc counter",
            f'fivegs_amffunction_rm_reginitsucc{{nf="amf"}} {298 * n}',
            "# TYPE gnb gauge",
            'gnb{nf="amf"} 12',
            "# TYPE amf_sbi_seconds histogram",
            f'amf_sbi_seconds_bucket{{le="0.1"}} {n}',
            f'amf_sbi_seconds_bucket{{le="+Inf"}} {n}',
            f"amf_sbi_seconds_sum {0.05 * n}",
            f"amf_sbi_seconds_count {n}",
        ]
        if self.broken_line:
            lines.append('gnb{nf="amf" 12')
        return "\n".join(lines) + "\n"


@pytest.fixture()
def make_exporter() -> Iterator[Callable[..., Exporter]]:
    r"""Starts :class:`Exporter`\ s on free loopback ports; stops them after the test."""
    made: list[Exporter] = []

    def make(broken_line: bool = False) -> Exporter:
        made.append(Exporter(broken_line))
        return made[-1]

    yield make
    for e in made:
        e.stop()


@pytest.fixture()
def prometheus(tmp_path: Path, make_exporter: Callable[..., Exporter]) -> Iterator[str]:
    """Prometheus scraping one AMF exporter every second, its instance relabelled amf-1."""
    exporter = make_exporter()
    config = {
        "global": {"scrape_interval": "1s"},
        "scrape_configs": [
            {
                "job_name": "open5gs",
                "static_configs": [{"targets": [exporter.target]}],
                "relabel_configs": [{"target_label": "instance", "replacement": "amf-1"}],
            }
        ],
    }

    def five_scrapes_stored(url: str) -> bool:
        got = httpx.get(f"{url}/api/v1/query", params={"query": "count_over_time(gnb[1m])"})
        result = got.json()["data"]["result"] if got.status_code == 200 else []
        return bool(result) and float(result[0]["value"][1]) >= 5

    with run_prometheus(tmp_path, config, five_scrapes_stored) as url:
        yield url


@dataclass
class Inbox:
    """Records what the server accepted; refuses recipients at ``refuse.example``."""

    envelopes: list[Envelope] = field(default_factory=list)

    async def handle_RCPT(
        self,
        server: SMTP,
        session: Session,
        envelope: Envelope,
        address: str,
        rcpt_options: list[str],
    ) -> str:
        if address.endswith("@refuse.example"):
            return "550 5.1.1 no such mailbox"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        self.envelopes.append(envelope)
        return "250 Message accepted for delivery"

    def messages(self) -> list[EmailMessage]:
        return [
            email.message_from_bytes(e.original_content or b"", policy=email.policy.default)
            for e in self.envelopes
        ]


def serve_smtp(port: int, **smtp: Any) -> Iterator[tuple[Inbox, int]]:
    inbox = Inbox()
    controller = Controller(inbox, hostname="127.0.0.1", port=port, **smtp)
    controller.start()
    yield inbox, port
    controller.stop()


@pytest.fixture()
def smtp_server(free_port: int) -> Iterator[tuple[Inbox, int]]:
    """A real SMTP server on a free loopback port; its inbox and port."""
    yield from serve_smtp(free_port)
