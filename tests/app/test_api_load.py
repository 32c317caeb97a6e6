"""The console under load: chats against a slow model (the project's own LLM server on
loopback, its tiny model slowed down) leave ``/health`` answering, one caller's chats are
rate-limited (429), and a read token guards the drafting reads."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import _serve
from fastapi.testclient import TestClient
from test_drafting import PACK, case

from knowledge.topology import load_inventory
from noc_assistant.api.app import create_app
from noc_assistant.integrations.llm import LlmClient
from noc_assistant.settings import get_settings
from noc_assistant.store import SqliteStore, Store
from noc_assistant.triage.drafting import Drafter

ROAMING = "inc-roaming-partner-registration-0"
TOKEN = "t0ken-for-tests"
READ = "read-t0ken"


class Slow:
    """A target proxy whose forwards each take ``delay`` seconds more (all else delegated)."""

    def __init__(self, inner: Any, delay: float) -> None:
        self.inner = inner
        self.delay = delay
        self.forwards = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def forward(self, ids: Sequence[int], cache: Any, *, all_logits: bool = True) -> Any:
        self.forwards += 1
        time.sleep(self.delay)
        return self.inner.forward(ids, cache, all_logits=all_logits)


def _fill(store: Store) -> None:
    topo = load_inventory(PACK.fixture_path("inventory.yaml"), PACK)
    inc, diagnosis, findings = case("roaming-partner-registration", 0, topo)
    store.save_incident(inc)
    store.save_findings(findings, incident_id=inc.id)
    store.save_diagnosis(diagnosis)


@pytest.fixture()
def settings_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    for name in ("NOC_CHAT_RATE_PER_MIN", "NOC_CHAT_MAX_CONCURRENT", "NOC_API_READ_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    get_settings.cache_clear()
    yield monkeypatch
    get_settings.cache_clear()


@pytest.fixture()
def slow_llm() -> Iterator[tuple[str, Slow]]:
    """The project's LLM server on loopback over the tiny model, 30 ms a forward."""
    from noc_assistant.serving.engine import Engine
    from noc_assistant.serving.loading import tiny_qwen3
    from noc_assistant.serving.server import ServerThread
    from noc_assistant.serving.server import create_app as create_llm_app

    slow = Slow(tiny_qwen3(seed=0), 0.03)
    srv = ServerThread(create_llm_app(Engine(slow, None, name="tiny"), max_waiting=64)).start()  # type: ignore[arg-type]
    yield f"http://127.0.0.1:{srv.port}/v1", slow
    srv.stop()


def test_health_answers_while_50_chats_wait_for_a_slow_model(
    tmp_path: Path, settings_env: pytest.MonkeyPatch, slow_llm: tuple[str, Slow]
) -> None:
    settings_env.setenv("NOC_CHAT_RATE_PER_MIN", "1000")  # one caller asks all 50 here
    get_settings.cache_clear()
    base_llm, slow = slow_llm
    topo = load_inventory(PACK.fixture_path("inventory.yaml"), PACK)
    llm = LlmClient(base_url=base_llm, model="tiny", timeout_s=5, max_tokens=4)
    drafter = Drafter(PACK, topo, llm=llm, max_tool_calls=0, chat_budget_s=5, narrate_tokens=8)
    served = _serve(tmp_path, drafter=drafter, api_token=TOKEN)
    base, store, _ = next(served)
    try:
        _fill(store)
        url = f"{base}/api/incidents/{ROAMING}/chat"
        with ThreadPoolExecutor(50) as pool:
            futs = [
                pool.submit(httpx.post, url, json={"question": f"why {i}?"}, timeout=120)
                for i in range(50)
            ]
            deadline = time.monotonic() + 60
            while slow.forwards == 0:  # the model is busy
                assert time.monotonic() < deadline
                time.sleep(0.02)
            probes: list[float] = []
            while not all(f.done() for f in futs) or len(probes) < 5:
                t0 = time.monotonic()
                r = httpx.get(f"{base}/health", timeout=10)
                probes.append(time.monotonic() - t0)
                assert r.status_code == 200
                time.sleep(0.2)
            codes = [f.result().status_code for f in futs]
        print(
            f"console /health under 50 chats: {len(probes)} probes, "
            f"worst {max(probes) * 1000:.0f} ms; forwards {slow.forwards}"
        )
        assert max(probes) < 1.0
        assert set(codes) == {200}
    finally:
        next(served, None)


def _client(store: Store, read_token: str | None = None) -> TestClient:
    topo = load_inventory(PACK.fixture_path("inventory.yaml"), PACK)
    app = create_app(store, drafter=Drafter(PACK, topo), api_token=TOKEN)
    app.state.api_read_token = read_token
    return TestClient(app)


@pytest.fixture()
def store(tmp_path: Path) -> Iterator[Store]:
    s = SqliteStore(tmp_path / "noc.db")
    _fill(s)
    yield s
    s.close()


def test_thirteenth_chat_of_a_caller_in_a_minute_gets_429(
    store: Store, settings_env: pytest.MonkeyPatch
) -> None:
    c = _client(store)
    url = f"/api/incidents/{ROAMING}/chat"
    for _ in range(12):
        assert c.post(url, json={"question": "why?"}).status_code == 200
    r = c.post(url, json={"question": "why?"})
    assert r.status_code == 429 and int(r.headers["Retry-After"]) >= 1
    # a narrated report draws on the same budget; a plain one (no model) does not
    assert c.get(f"/api/incidents/{ROAMING}/report?narrate=true").status_code == 429
    assert c.get(f"/api/incidents/{ROAMING}/report").status_code == 200
    # a made-up token is the same caller; the write token is another one
    bogus = {"Authorization": "Bearer made-up"}
    assert c.post(url, json={"question": "why?"}, headers=bogus).status_code == 429
    auth = {"Authorization": f"Bearer {TOKEN}"}
    assert c.post(url, json={"question": "why?"}, headers=auth).status_code == 200


def test_read_token_guards_drafting_reads(store: Store, settings_env: pytest.MonkeyPatch) -> None:
    c = _client(store, read_token=READ)
    chat, report = f"/api/incidents/{ROAMING}/chat", f"/api/incidents/{ROAMING}/report"
    assert c.post(chat, json={"question": "why?"}).status_code == 401
    assert c.get(report).status_code == 401
    assert c.get(chat).status_code == 401
    wrong = {"Authorization": "Bearer nope"}
    assert c.get(report, headers=wrong).status_code == 401
    for token in (READ, TOKEN):
        auth = {"Authorization": f"Bearer {token}"}
        assert c.post(chat, json={"question": "why?"}, headers=auth).status_code == 200
        assert c.get(report, headers=auth).status_code == 200
        assert c.get(chat, headers=auth).status_code == 200
    # keeping a turn is a write: the read token (a viewer) is not enough
    kept = {"question": "why?", "keep": True, "asked_by": "ana"}
    r = c.post(chat, json=kept, headers={"Authorization": f"Bearer {READ}"})
    assert r.status_code == 403


def test_read_token_from_the_settings(store: Store, settings_env: pytest.MonkeyPatch) -> None:
    settings_env.setenv("NOC_API_READ_TOKEN", READ)
    get_settings.cache_clear()
    topo = load_inventory(PACK.fixture_path("inventory.yaml"), PACK)
    c = TestClient(create_app(store, drafter=Drafter(PACK, topo), api_token=TOKEN))
    assert c.get(f"/api/incidents/{ROAMING}/report").status_code == 401
    auth = {"Authorization": f"Bearer {READ}"}
    assert c.get(f"/api/incidents/{ROAMING}/report", headers=auth).status_code == 200
