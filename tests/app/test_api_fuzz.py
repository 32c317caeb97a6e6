"""Property-based fuzzing of the console's HTTP API (schemathesis over its own OpenAPI schema):
whatever a client sends, with the write token or without, no answer is a server error (5xx).

The console runs with a store holding diagnosed incidents (so their paths resolve), the
drafter (no model: template answers), a mailer to a real SMTP server on loopback (sending is
configured: a 503 "not configured" would say nothing) and a write token; each operation gets a
bounded number of generated requests, each sent twice: anonymously and with the token.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from conftest import _free_port, serve_smtp
from hypothesis import HealthCheck, settings
from test_drafting import PACK, case

from knowledge.topology import load_inventory
from noc_assistant.api.app import create_app
from noc_assistant.integrations.mail import Mailer
from noc_assistant.settings import get_settings
from noc_assistant.store import SqliteStore
from noc_assistant.triage.drafting import Drafter

TOKEN = "t0ken-for-fuzz"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
EXAMPLES = int(os.environ.get("NOC_FUZZ_EXAMPLES", "10"))
"""Generated requests per operation: the whole run stays under a minute or two."""


_SMTP_PORT = _free_port()
_smtp = serve_smtp(_SMTP_PORT)  # a real SMTP server on loopback: sending is configured
next(_smtp)


def _console() -> Any:
    """The console app over a fresh store in a temporary directory (built at import: the
    schema's operations become the test's parameters)."""
    before = os.environ.get("NOC_CHAT_RATE_PER_MIN")
    os.environ["NOC_CHAT_RATE_PER_MIN"] = "100000"  # fuzz the chat, not its rate limit
    get_settings.cache_clear()
    try:
        store = SqliteStore(Path(tempfile.mkdtemp(prefix="noc-fuzz-")) / "noc.db")
        topo = load_inventory(PACK.fixture_path("inventory.yaml"), PACK)
        for rule in ("roaming-partner-registration", "nrf-discovery-failure"):
            inc, diagnosis, findings = case(rule, 0, topo)
            store.save_incident(inc)
            store.save_findings(findings, incident_id=inc.id)
            store.save_diagnosis(diagnosis)
        mailer = Mailer("127.0.0.1", _SMTP_PORT)
        return create_app(store, drafter=Drafter(PACK, topo), mailer=mailer, api_token=TOKEN)
    finally:
        if before is None:
            os.environ.pop("NOC_CHAT_RATE_PER_MIN", None)
        else:
            os.environ["NOC_CHAT_RATE_PER_MIN"] = before
        get_settings.cache_clear()


# /api/stream is the live event feed: an endless SSE response with nothing to fuzz (a call
# only ends when the test client gives up, a minute later)
schema = schemathesis.openapi.from_asgi("/openapi.json", _console()).exclude(path="/api/stream")


@pytest.mark.slow
@schema.parametrize()
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
)
def test_no_server_errors(case: schemathesis.Case) -> None:
    for headers in ({}, AUTH):
        response = case.call(headers=headers)
        assert response.status_code < 500, (
            f"{case.method} {case.formatted_path} -> {response.status_code}: "
            f"{response.text[:500]}\n{case.as_curl_command()}"
        )
