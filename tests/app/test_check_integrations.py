"""``noc check`` asks every configured integration, against real HTTP servers on loopback (a
plain ``http.server`` answering as a TMF621 partner and as a webhook receiver) and ports where
nothing listens: each notification route's host (a TCP connect: no page is sent), and each
roaming partner that takes TMF621 tickets, named in the inventory or in the overlay's
``operator.yaml`` (``GET …/troubleTicket?limit=1`` with its token: no ticket is made).
An unconfigured integration asks nothing; an unreachable one fails, naming what to correct."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml
from conftest import _free_port

from knowledge.pack import PackError, load_pack
from knowledge.topology import Topology
from noc_assistant.cli import run
from noc_assistant.ops.readiness import Check, check_all
from noc_assistant.settings import Settings, get_settings

API = "/tmf-api/troubleTicket/v5"
NATS = "nats://127.0.0.1:4222"  # the loopback JetStream of scripts/system-deps.sh
TOKEN = "partner-t0ken-for-check"


@dataclass
class Server:
    """A real HTTP server on loopback: a TMF621 ticket list under :data:`API` for the bearer
    :data:`TOKEN`, 404 elsewhere; every request it took (method, path, Authorization)."""

    url: str
    requests: list[tuple[str, str, str]] = field(default_factory=list)


@pytest.fixture()
def server() -> Iterator[Server]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    srv = Server(f"http://127.0.0.1:{httpd.server_address[1]}")

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            srv.requests.append((self.command, self.path, self.headers.get("Authorization", "")))
            if not self.path.startswith(f"{API}/troubleTicket"):
                code, body = 404, {"code": "404"}
            elif self.headers.get("Authorization") != f"Bearer {TOKEN}":
                code, body = 401, {"code": "401", "reason": "bad token"}
            else:
                code, body = 200, []
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_HEAD = do_PATCH = _answer

        def log_message(self, *_: object) -> None:
            pass

    httpd.RequestHandlerClass = Handler
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield srv
    httpd.shutdown()
    httpd.server_close()
    thread.join(timeout=5)


def _overlay(tmp_path: Path, partners: list[dict[str, str]]) -> Path:
    root = tmp_path / "overlay"
    root.mkdir()
    (root / "pack.yaml").write_text("name: acme-noc\nversion: 1.0.0\nextends: default\n")
    (root / "operator.yaml").write_text(yaml.safe_dump({"operator": "acme", "partners": partners}))
    return root


def _inventory(tmp_path: Path, partners: list[dict[str, str]]) -> Path:
    path = tmp_path / "inventory.json"
    path.write_text(
        json.dumps(
            {
                "entities": [
                    {"id": "sepp-01", "type": "sepp", "partners": partners},
                    {"id": "amf-01", "type": "amf"},
                ]
            }
        )
    )
    return path


def _settings(tmp_path: Path, **kw: object) -> Settings:
    """Settings whose store is a fresh SQLite file, whose LLM is a closed port and whose
    streams are not made (their rows are test_readiness's), the demo's data dir out of the
    way."""
    return Settings(
        db_url=f"sqlite:///{tmp_path / 'noc.db'}",
        data_dir=tmp_path / "data",
        llm_base_url=f"http://127.0.0.1:{_free_port()}/v1",
        nats_url=NATS,
        nats_stream="NOCTEST_CHECKINT_NONE",
        nats_findings_stream="NOCTEST_CHECKINT_NONE_F",
        alertmanager_url=None,
        **kw,  # type: ignore[arg-type]
    )


def _by_part(checks: list[Check]) -> dict[str, Check]:
    return {c.part: c for c in checks}


def test_unconfigured_integrations_are_not_asked(tmp_path: Path, server: Server) -> None:
    # a partner without tmf621_url takes no tickets: nothing to ask
    inventory = _inventory(tmp_path, [{"plmn": "262-01", "noc_email": "noc@a.example"}])
    checks = _by_part(check_all(_settings(tmp_path), inventory))
    assert not [p for p in checks if p.startswith(("notify", "tmf621", "inventory"))]
    assert checks["smtp"].status == "not configured"
    assert checks["alertmanager"].status == "not configured"
    assert server.requests == []


def test_notify_routes_are_reached_without_a_message(tmp_path: Path, server: Server) -> None:
    routes = tmp_path / "routes.yaml"
    closed = _free_port()
    routes.write_text(
        yaml.safe_dump(
            {
                "routes": [
                    {"name": "itsm", "kind": "webhook", "url": f"{server.url}/hook/s3cret"},
                    {"name": "chat", "kind": "slack", "url": f"http://127.0.0.1:{closed}/x/y"},
                    {
                        "name": "oncall",
                        "kind": "pagerduty",
                        "routing_key": "R0UT1NGKEY",
                        "url": f"{server.url}/v2/enqueue",
                    },
                ]
            }
        )
    )
    checks = _by_part(check_all(_settings(tmp_path, notify_routes=routes)))
    up, down, pager = checks["notify itsm"], checks["notify chat"], checks["notify oncall"]
    assert up.status == "ok" and "TCP connect, nothing sent" in up.detail
    assert up.target == f"itsm ({server.url})"
    assert pager.status == "ok" and pager.detail.startswith("pagerduty: 127.0.0.1:")
    assert down.status == "failed" and "cannot connect" in down.detail
    assert f"check the url of route chat in NOC_NOTIFY_ROUTES ({routes})" in down.detail
    assert "/x/y" not in down.line() and "s3cret" not in up.line()
    assert server.requests == []  # a connect: no webhook call, no page


def test_tmf621_partners_of_the_inventory_and_the_overlay_are_read(
    tmp_path: Path, server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    closed = _free_port()
    inventory = _inventory(
        tmp_path,
        [
            {"plmn": "262-01", "tmf621_url": server.url + API},  # up, with its token
            {"plmn": "208-10", "tmf621_url": server.url + API},  # up, a wrong token
            {"plmn": "310-260", "tmf621_url": server.url + API},  # no token at all
            {"plmn": "222-01"},  # takes no tickets
        ],
    )
    # the overlay names a partner of its own, whose endpoint refuses connections
    overlay = _overlay(
        tmp_path, [{"plmn": "234-15", "tmf621_url": f"http://127.0.0.1:{closed}{API}"}]
    )
    monkeypatch.setenv("NOC_TMF621_TOKEN_26201", TOKEN)
    monkeypatch.setenv("NOC_TMF621_TOKEN_20810", "not-the-token")
    monkeypatch.setenv("NOC_TMF621_TOKEN_23415", TOKEN)
    monkeypatch.delenv("NOC_TMF621_TOKEN_310260", raising=False)
    checks = _by_part(check_all(_settings(tmp_path, pack_dir=overlay), inventory))
    assert [p for p in checks if p.startswith("tmf621")] == [
        "tmf621 262-01",
        "tmf621 208-10",
        "tmf621 310-260",
        "tmf621 234-15",
    ]

    ok = checks["tmf621 262-01"]
    assert ok.status == "ok" and ok.detail.startswith("GET troubleTicket?limit=1: 0 ticket(s)")
    assert ok.target == f"partner 262-01 TMF621 ({server.url}{API})"
    # a conforming read, nothing created; the token only in the header
    assert (("GET", f"{API}/troubleTicket?limit=1", f"Bearer {TOKEN}")) in server.requests
    assert {method for method, _, _ in server.requests} == {"GET"}

    refused = checks["tmf621 208-10"]
    assert refused.status == "failed" and "HTTP 401" in refused.detail
    assert "check the token" in refused.detail and "NOC_TMF621_TOKEN_20810" in refused.detail
    assert f"in {inventory}" in refused.detail and "not-the-token" not in refused.line()

    tokenless = checks["tmf621 310-260"]
    assert tokenless.status == "failed"
    assert (
        tokenless.detail
        == f"no token: set NOC_TMF621_TOKEN_310260 (its tmf621_url is in {inventory})"
    )

    down = checks["tmf621 234-15"]
    assert down.status == "failed" and "cannot connect" in down.detail
    assert f"check tmf621_url of partner 234-15 in {overlay}/operator.yaml" in down.detail
    assert TOKEN not in down.line()
    assert len([r for r in server.requests if r[2] == "Bearer not-the-token"]) == 1


def test_a_broken_inventory_fails_the_check(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "inventory.json").write_text(
        json.dumps({"entities": [{"id": "sepp-01", "type": "sepp", "partners": [
            {"plmn": "262-01", "tmf621_url": "ftp://tt.example/x"}]}]})
    )  # fmt: skip
    checks = _by_part(check_all(_settings(tmp_path)))  # NOC_DATA_DIR/inventory.json
    assert checks["inventory"].status == "failed"
    assert "tmf621_url" in checks["inventory"].detail
    assert "http:// or https://" in checks["inventory"].detail


def test_the_overlay_partner_takes_tmf621_url_as_the_inventory_does(tmp_path: Path) -> None:
    overlay = _overlay(
        tmp_path,
        [
            {"plmn": "262-01", "tmf621_url": "https://tt.a.example/tmf-api/troubleTicket/v5"},
            {"plmn": "208-10", "noc_email": "noc@b.example"},
        ],
    )
    pack = load_pack(overlay)
    assert pack.partners[0].tmf621_url == "https://tt.a.example/tmf-api/troubleTicket/v5"
    inventory = {
        "entities": [
            {
                "id": "sepp-01",
                "type": "sepp",
                "partners": [
                    {"plmn": "262-01", "tmf621_url": "https://tt.inventory.example/v5"},
                    {"plmn": "208-10", "tmf621_url": "https://tt.b.example/v5"},
                ],
            }
        ]
    }
    topo = Topology.from_inventory(inventory, pack)
    a, b = topo.partner_for_plmn("262-01"), topo.partner_for_plmn("208-10")
    assert a is not None and a.tmf621_url == "https://tt.a.example/tmf-api/troubleTicket/v5"
    assert b is not None and b.tmf621_url == "https://tt.b.example/v5"  # the inventory's kept
    alone = Topology.infer({}, pack).partner_for_plmn("262-01")  # no inventory at all
    assert alone is not None and alone.tmf621_url == pack.partners[0].tmf621_url

    (overlay / "operator.yaml").write_text(
        yaml.safe_dump({"operator": "acme", "partners": [
            {"plmn": "262-01", "tmf621_url": "tt.a.example/v5"}]})
    )  # fmt: skip
    with pytest.raises(PackError) as err:
        load_pack(overlay)
    assert err.value.field == "partners.0.tmf621_url"
    assert "http:// or https:// URL with a host" in str(err.value)


def test_the_cli_names_the_failing_integration_and_exits_2(
    tmp_path: Path,
    server: Server,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    closed = _free_port()
    inventory = _inventory(
        tmp_path,
        [
            {"plmn": "262-01", "tmf621_url": server.url + API},
            {"plmn": "208-10", "tmf621_url": f"http://127.0.0.1:{closed}{API}"},
        ],
    )
    monkeypatch.setenv("NOC_DB_URL", f"sqlite:///{tmp_path / 'noc.db'}")
    monkeypatch.setenv("NOC_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("NOC_LLM_BASE_URL", f"http://127.0.0.1:{closed}/v1")
    monkeypatch.setenv("NOC_NATS_URL", NATS)
    monkeypatch.setenv("NOC_NATS_STREAM", "NOCTEST_CHECKINT_NONE")
    monkeypatch.setenv("NOC_NATS_FINDINGS_STREAM", "NOCTEST_CHECKINT_NONE_F")
    monkeypatch.setenv("NOC_TMF621_TOKEN_26201", TOKEN)
    monkeypatch.setenv("NOC_TMF621_TOKEN_20810", TOKEN)
    get_settings.cache_clear()
    try:
        assert run(["check", "--inventory", str(inventory)]) == 2
    finally:
        get_settings.cache_clear()
    out = capsys.readouterr().out
    assert f"ok             tmf621 262-01 partner 262-01 TMF621 ({server.url}{API})" in out
    line = next(ln for ln in out.splitlines() if "tmf621 208-10" in ln)
    assert line.startswith("failed") and "cannot connect" in line
    assert f"check tmf621_url of partner 208-10 in {inventory}" in out.replace("\n", "")
