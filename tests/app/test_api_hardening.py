"""The console's API against odd input, on a real server (uvicorn on loopback): JSON bodies
with ``NaN``/``Infinity`` on every endpoint that takes one, times far in the past or future on
the report endpoints, the security headers of every response, and the bearer scheme in any
case."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from conftest import _serve

from noc_assistant.api.events import Broadcaster
from noc_assistant.models import Incident
from noc_assistant.store import Store

TOKEN = "t0ken"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
INC = "inc-hardening-1"

#: the twelve endpoints that read a JSON body, each with a body it would otherwise take
BODIES: list[tuple[str, str, str]] = [
    ("POST", "/api/maintenance", '{"entity": "smf-01", "by": "ana", "duration_s": %s}'),
    ("POST", "/api/maintenance/mw-1/end", '{"by": "ana", "x": %s}'),
    (
        "POST",
        "/api/tuning",
        '{"kpi": "amf-reg-success", "min_score": %s, "by": "ana", "reason": "noisy"}',
    ),
    ("POST", "/api/tuning/tr-1/end", '{"by": "ana", "x": %s}'),
    ("POST", f"/api/incidents/{INC}/ack", '{"by": "ana", "x": %s}'),
    ("POST", f"/api/incidents/{INC}/verdict", '{"by": "ana", "verdict": "no_fault", "x": %s}'),
    ("POST", f"/api/incidents/{INC}/chat", '{"question": "why?", "history": [], "x": %s}'),
    ("POST", f"/api/incidents/{INC}/emails", '{"partner": "999-70", "x": %s}'),
    ("PUT", "/api/emails/em-1", '{"subject": "s", "by": "ana", "x": %s}'),
    ("POST", "/api/emails/em-1/approve", '{"by": "ana", "x": %s}'),
    ("POST", "/api/emails/em-1/reject", '{"by": "ana", "x": %s}'),
    ("POST", "/api/emails/em-1/send", '{"by": "ana", "x": %s}'),
]

ODD_NUMBERS = ["NaN", "Infinity", "-Infinity", "1e400", "-1e400", "9" * 5000]

ODD_TIMES = [
    "1e20",
    "-1e20",
    "9999-12-31T23:59:59Z",
    "0001-01-01T00:00:00Z",
    "1900-01-01T00:00:00Z",
    "0",
    "nan",
    "inf",
    "1e400",
    "99999999999999999999999999",
]


@pytest.fixture()
def server(tmp_path: Path) -> Iterator[tuple[str, Store, Broadcaster]]:
    """The console with drafting on and a write token, one incident in its store."""
    from knowledge.pack import load_pack
    from knowledge.topology import load_inventory
    from noc_assistant.triage.drafting import Drafter

    pack = load_pack()
    topo = load_inventory(pack.fixture_path("inventory.yaml"), pack)
    for base, store, hub in _serve(tmp_path, drafter=Drafter(pack, topo), api_token=TOKEN):
        store.save_incident(
            Incident(
                id=INC,
                fingerprint="h",
                opened_at=1_796_292_000.0,
                updated_at=1_796_292_060.0,
                entities=["amf-01"],
            )
        )
        yield base, store, hub


@pytest.mark.parametrize(("method", "path", "body"), BODIES, ids=[b[1] for b in BODIES])
def test_non_finite_numbers_in_a_body_are_422_not_500(
    server: tuple[str, Store, Broadcaster], method: str, path: str, body: str
) -> None:
    base, _, _ = server
    with httpx.Client(base_url=base, headers=AUTH, timeout=30) as c:
        for number in ODD_NUMBERS:
            r = c.request(
                method,
                path,
                content=(body % number).encode(),
                headers={"Content-Type": "application/json"},
            )
            assert r.status_code == 422, (number, r.status_code, r.text[:300])
            assert "not strict JSON" in r.json()["detail"]
        deep = "[" * 100_000 + "]" * 100_000
        r = c.request(method, path, content=(body % deep).encode())
        assert r.status_code == 422, r.text[:300]


def test_a_strict_body_still_reaches_its_endpoint(server: tuple[str, Store, Broadcaster]) -> None:
    base, _, _ = server
    with httpx.Client(base_url=base, timeout=30) as c:
        body = {"entity": "smf-01", "by": "ana", "duration_s": 3600, "reason": "NaN is a word"}
        r = c.post("/api/maintenance", json=body, headers=AUTH)
        assert r.status_code == 201, r.text
        assert r.json()["reason"] == "NaN is a word"
        assert c.post("/api/maintenance", content=b"{oops", headers=AUTH).status_code == 422
        big = {"by": "ana", "pad": "x" * (2 << 20)}
        assert c.post(f"/api/incidents/{INC}/ack", json=big, headers=AUTH).status_code == 413


@pytest.mark.parametrize("when", ODD_TIMES)
def test_report_times_far_away_are_4xx_not_500(
    server: tuple[str, Store, Broadcaster], when: str
) -> None:
    base, _, _ = server
    with httpx.Client(base_url=base, timeout=30) as c:
        for path, params in [
            ("/api/handover", {"until": when}),
            ("/api/handover", {"until": when, "format": "json"}),
            ("/api/eval/live", {"since": when}),
            ("/api/eval/live", {"until": when}),
            ("/eval", {"since": when}),
            ("/eval", {"until": when}),
            ("/api/eval/labels", {"until": when}),
        ]:
            r = c.get(path, params=params)
            assert 400 <= r.status_code < 500, (path, params, r.status_code, r.text[:300])
        for hours in ("nan", "inf", "-1", "1e400"):
            assert c.get("/api/handover", params={"hours": hours}).status_code == 422
        r = c.post(
            "/api/maintenance",
            json={"entity": "smf-01", "by": "ana", "start": when, "duration_s": 60},
            headers=AUTH,
        )
        assert 400 <= r.status_code < 500, (when, r.status_code, r.text[:300])
        assert c.get("/").status_code == 200  # nothing odd was stored


def test_report_times_in_range_still_answer(server: tuple[str, Store, Broadcaster]) -> None:
    base, _, _ = server
    with httpx.Client(base_url=base, timeout=30) as c:
        assert c.get("/api/handover", params={"until": "1796292000"}).status_code == 200
        far = {"since": "2000-01-01T00:00:00Z", "until": "2100-01-01T00:00:00Z"}
        assert c.get("/api/eval/live", params=far).status_code == 200
        assert c.get("/eval", params=far).status_code == 200


def test_every_response_carries_the_security_headers(
    server: tuple[str, Store, Broadcaster],
) -> None:
    base, _, _ = server
    with httpx.Client(base_url=base, timeout=30) as c:
        responses = [
            c.get("/"),
            c.get(f"/incidents/{INC}"),
            c.get("/eval"),
            c.get("/health"),
            c.get("/metrics"),
            c.get("/api/incidents"),
            c.get("/api/incidents/nope"),
            c.get("/api/handover", params={"hours": 0}),
            c.post("/api/maintenance", json={"by": "ana"}),
            c.post("/api/maintenance", content=b'{"x": NaN}', headers=AUTH),
        ]
        for r in responses:
            h = r.headers
            assert h["x-frame-options"] == "DENY", r.url
            assert h["x-content-type-options"] == "nosniff", r.url
            assert h["referrer-policy"] == "no-referrer", r.url
            csp = h["content-security-policy"]
            assert "frame-ancestors 'none'" in csp and "object-src 'none'" in csp
            assert "'unsafe-inline'" not in csp and "'unsafe-eval'" not in csp
        nonces = set()
        for r in responses[:3]:  # the HTML pages: every inline block has this response's nonce
            (nonce,) = set(re.findall(r"'nonce-([^']+)'", r.headers["content-security-policy"]))
            nonces.add(nonce)
            blocks = re.findall(r"<(?:script|style)\b[^>]*>", r.text)
            assert blocks, r.url
            assert all(f'nonce="{nonce}"' in b for b in blocks), (r.url, blocks)
        assert len(nonces) == 3  # a new nonce for each response


def test_text_rendered_into_a_page_gets_no_nonce(server: tuple[str, Store, Broadcaster]) -> None:
    """An incident whose entity name is a script tag: escaped, and no nonce makes it run."""
    base, store, _ = server
    store.save_incident(
        Incident(
            id="inc-x",
            fingerprint="x",
            opened_at=1_796_292_000.0,
            updated_at=1_796_292_060.0,
            entities=["<script>alert(1)</script>"],
        )
    )
    page = httpx.get(f"{base}/", timeout=30).text
    assert "<script>alert(1)</script>" not in page
    assert 'nonce="' not in page.split("&lt;script&gt;alert(1)", 1)[1][:40]


@pytest.mark.parametrize("scheme", ["Bearer", "bearer", "BEARER", "bEaReR"])
def test_the_bearer_scheme_is_read_in_any_case(
    server: tuple[str, Store, Broadcaster], scheme: str
) -> None:
    base, _, _ = server
    r = httpx.post(
        f"{base}/api/incidents/{INC}/ack",
        json={"by": "ana"},
        headers={"Authorization": f"{scheme} {TOKEN}"},
        timeout=30,
    )
    assert r.status_code == 200, r.text


@pytest.mark.parametrize(
    "header", ["Bearer wrong", "Basic dDBrZW4=", "Bearer", "", f"Token {TOKEN}", TOKEN]
)
def test_a_wrong_token_or_scheme_is_still_401(
    server: tuple[str, Store, Broadcaster], header: str
) -> None:
    base, _, _ = server
    r = httpx.post(
        f"{base}/api/incidents/{INC}/ack",
        json={"by": "ana"},
        headers={"Authorization": header},
        timeout=30,
    )
    assert r.status_code == 401
