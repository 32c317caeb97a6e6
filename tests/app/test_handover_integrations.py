"""Failed integrations reach the shift handover: notifications that a receiver refused or that
are still being retried, and partner trouble tickets whose last request failed, each with its
route or partner, incident, attempts, last error and since when. The failures are made for
real: the notifier and the tickets talk to a plain ``http.server`` on loopback (refusing
what it is sent) and to a port where nothing listens, into a SQLite store."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from conftest import _free_port
from fastapi.testclient import TestClient

from guardrails.masking import Masker
from knowledge.pack import load_pack
from noc_assistant.api.app import create_app
from noc_assistant.integrations.notify import Notifier, Route
from noc_assistant.integrations.tmf621 import Tickets
from noc_assistant.models import Incident
from noc_assistant.store import SqliteStore, Store
from noc_assistant.store.deliveries import Deliveries, Delivery
from noc_assistant.store.tickets import TicketBook, TicketRow
from noc_assistant.stream.correlate import IncidentEvent
from noc_assistant.triage.handover import handover, render

END = 1_796_292_000.0  # 2026-12-03 10:00 UTC
H = 3600.0
API = "/tmf-api/troubleTicket/v5"
TOKENS = {"NOC_TMF621_TOKEN_26201": "t0ken-a", "NOC_TMF621_TOKEN_20810": "t0ken-b"}


@pytest.fixture()
def server() -> Iterator[str]:
    """A receiver that takes ``/ok`` (202) and refuses everything else (400)."""

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            code = 202 if self.path == "/ok" else 400
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        do_POST = do_PATCH = _answer

        def log_message(self, *_: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()
    thread.join(timeout=5)


def _inc(i: str, entity: str, opened: float, resolved: float | None = None) -> Incident:
    return Incident(
        id=i,
        fingerprint=i,
        opened_at=opened,
        updated_at=resolved or opened + 60,
        state="resolved" if resolved else "open",
        resolved_at=resolved,
        entities=[entity],
        title=f"{entity} degraded",
    )


@pytest.fixture()
def store(tmp_path: Path, server: str) -> Iterator[Store]:
    """A store where, through the real notifier and tickets:

    - route ``refuse`` refused (HTTP 400) the opening of ``inc-old`` 20 h before END and of
      ``inc-1`` 2 h before; route ``down`` (nothing listens) is retrying ``inc-1``'s;
      route ``ok`` took every message and has one queued, not tried yet;
    - ``inc-1``'s ticket at partner 262-01 (nothing listens) was never created;
    - ``inc-2``'s ticket TT-9 at partner 208-10 was not resolved (HTTP 400) when the
      incident resolved, 3 h before END.
    """
    s = SqliteStore(tmp_path / "noc.db")
    old, one = _inc("inc-old", "amf-1", END - 20 * H), _inc("inc-1", "upf-3", END - 2 * H)
    two = _inc("inc-2", "smf-1", END - 5 * H, resolved=END - 3 * H)
    for inc in (old, one, two):
        s.save_incident(inc)
    closed = f"http://127.0.0.1:{_free_port()}"
    pack = load_pack()
    now = [END - 20 * H]
    routes = [
        Route(name="ok", kind="webhook", url=f"{server}/ok"),
        Route(name="refuse", kind="webhook", url=f"{server}/refuse"),
        Route(name="down", kind="webhook", url=f"{closed}/hook", entities=("upf-*",)),
    ]
    notifier = Notifier(
        routes, Deliveries(s), Masker.from_pack(pack), backoff_s=60.0, clock=lambda: now[0]
    )
    notifier.on_incident(IncidentEvent("opened", old))
    assert notifier.deliver_due() == 1  # ok took it; refuse refused it
    now[0] = END - 2 * H
    notifier.on_incident(IncidentEvent("opened", one))
    assert notifier.deliver_due() == 1
    now[0] = END - H
    assert notifier.deliver_due() == 0  # down: the second attempt fails too
    notifier.close()
    # a message just queued, not tried yet: nothing has failed
    queued = Delivery("d-new", "ok", "inc-1", "acknowledged", {}, seq=1, created_at=END - 600)
    Deliveries(s).enqueue([queued])

    book = TicketBook(s)
    tickets = Tickets(book, Masker.from_pack(pack), env=TOKENS, clock=lambda: now[0])
    now[0] = END - 2 * H
    book.add(TicketRow("inc-1", "262-01", f"{closed}{API}", {"a": 1}, created_at=now[0]))
    assert tickets.on_incident(IncidentEvent("updated", one))  # a warning: not created
    now[0] = END - 5 * H
    book.add(TicketRow("inc-2", "208-10", f"{server}{API}", {"a": 1}, created_at=now[0]))
    book.save(book.get("inc-2", "208-10").created("TT-9", None, "acknowledged", now[0]))  # type: ignore[union-attr]
    now[0] = END - 3 * H
    assert tickets.on_incident(IncidentEvent("resolved", two))  # a warning: not resolved
    yield s
    s.close()


def test_failed_and_retrying_integrations_reach_the_handover(store: Store, tmp_path: Path) -> None:
    h = handover(store, END - 8 * H, END)
    got = {(f["target"], f["incident"]): f for f in h["integrations"]}
    assert list(got) == [  # notifications by when they were made, then tickets by last try
        ("route down", "inc-1"),
        ("route refuse", "inc-1"),
        ("partner 208-10", "inc-2"),
        ("partner 262-01", "inc-1"),
    ]
    refused = got["route refuse", "inc-1"]
    assert refused == {
        "integration": "notification",
        "target": "route refuse",
        "incident": "inc-1",
        "what": "opened",
        "state": "failed",
        "attempts": 1,
        "last_error": "HTTP 400 Bad Request",
        "since": "2026-12-03 08:00",
        "next": None,
    }
    down = got["route down", "inc-1"]
    assert (down["state"], down["attempts"]) == ("retrying", 2)
    assert down["last_error"].startswith("cannot connect") and down["next"] == "2026-12-03 09:02"
    created = got["partner 262-01", "inc-1"]
    assert (created["state"], created["what"]) == ("retrying", "ticket not created")
    assert (
        "partner 262-01 TMF621" in created["last_error"]
        and "cannot connect" in created["last_error"]
    )
    assert created["since"] == "2026-12-03 08:00" and created["attempts"] is None
    owed = got["partner 208-10", "inc-2"]
    assert (owed["state"], owed["what"]) == ("failed", "ticket TT-9: status resolved owed")
    assert "HTTP 400" in owed["last_error"] and owed["since"] == "2026-12-03 05:00"
    assert all("t0ken" not in f["last_error"] for f in h["integrations"])

    text = render(h)
    section = text.split("## Integrations needing attention\n", 1)[1].split("\n## ", 1)[0]
    lines = [ln for ln in section.splitlines() if ln]
    assert lines[1] == (
        "- **FAILED** route refuse: `inc-1` opened, 1 attempt, failing since 2026-12-03 08:00 UTC:"
        " HTTP 400 Bad Request"
    )
    assert lines[0].startswith("- **RETRYING** route down: `inc-1` opened, 2 attempts, failing")
    assert lines[0].endswith("; next try 2026-12-03 09:02 UTC")
    assert lines[2].startswith("- **FAILED** partner 208-10: `inc-2` ticket TT-9: status resolved")
    assert lines[3].startswith("- **RETRYING** partner 262-01: `inc-1` ticket not created, fail")
    assert lines[3].endswith("; tried again at the incident's next event")
    assert (
        text.index("## Open incidents")
        < text.index("## Integrations")
        < text.index("## Maintenance")
    )

    # over HTTP too (JSON and Markdown)
    c = TestClient(create_app(store))
    data = c.get("/api/handover", params={"until": str(END), "format": "json"}).json()
    assert data["integrations"] == h["integrations"]
    assert "**RETRYING** route down" in c.get("/api/handover", params={"until": str(END)}).text


def test_each_shift_lists_what_failed_in_it_and_what_is_still_retried(store: Store) -> None:
    def listed(since: float, until: float) -> list[tuple[str, str, str]]:
        h = handover(store, since, until)
        return [(f["target"], f["incident"], f["state"]) for f in h["integrations"]]

    # the shift of inc-old's refusal: only that (inc-1's rows were made after it)
    assert listed(END - 24 * H, END - 16 * H) == [("route refuse", "inc-old", "failed")]
    # the next shift: the refusals and the failed resolution are the last one's; what is still
    # retried stays
    assert listed(END, END + 8 * H) == [
        ("route down", "inc-1", "retrying"),
        ("partner 262-01", "inc-1", "retrying"),
    ]
    # once the partner takes the ticket and the route its message, nothing is left
    book, outbox = TicketBook(store), Deliveries(store)
    row = book.get("inc-1", "262-01")
    assert row is not None
    book.save(row.created("TT-1", None, "acknowledged", END + H))
    (pending,) = [d for d in outbox.pending() if d.route == "down"]
    outbox.delivered(pending.id, pending.attempts + 1, END + H)
    h = handover(store, END, END + 8 * H)
    assert h["integrations"] == [] and "Integrations needing attention" not in render(h)
