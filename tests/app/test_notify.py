"""Notifications out (:mod:`noc_assistant.integrations.notify`) to real receivers on loopback:
a threaded HTTP server that checks each body against the schema of its kind (PagerDuty Events
API v2, a Slack incoming webhook, our generic webhook), can be stopped and started again on
the same port, and counts what it took by ``dedup_key`` and action, so a loss or a duplicate
shows. The outbox is the real store: SQLite, and PostgreSQL for the restart."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import jsonschema_rs
import pytest
import yaml

from guardrails.masking import Masker
from knowledge.pack import Pack, load_pack
from noc_assistant.errors import ConfigError
from noc_assistant.integrations.notify import (
    Notifier,
    NotifyUnreachableError,
    Route,
    load_routes,
    probe,
    severity_of,
)
from noc_assistant.models import Hypothesis, Incident, Review
from noc_assistant.settings import Settings
from noc_assistant.store import SqliteStore, Store, open_store
from noc_assistant.store.deliveries import Deliveries
from noc_assistant.stream.correlate import IncidentEvent

ROUTING_KEY = "R0UT1NGKEYR0UT1NGKEYR0UT1NGKEY00"  # 32 characters, as PagerDuty's are
SLACK_TOKEN = "T0000/B0000/XXXXSECRETXXXX"
IMSI = "262011234567890"

# -- the published formats, as data ------------------------------------------------------------

PAGERDUTY_EVENTS_V2: dict[str, Any] = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "PagerDuty Events API v2: POST /v2/enqueue",
    "type": "object",
    "required": ["routing_key", "event_action"],
    "properties": {
        "routing_key": {"type": "string", "pattern": "^[A-Za-z0-9]{32}$"},
        "event_action": {"enum": ["trigger", "acknowledge", "resolve"]},
        "dedup_key": {"type": "string", "minLength": 1, "maxLength": 255},
        "payload": {
            "type": "object",
            "required": ["summary", "source", "severity"],
            "properties": {
                "summary": {"type": "string", "minLength": 1, "maxLength": 1024},
                "source": {"type": "string", "minLength": 1},
                "severity": {"enum": ["critical", "error", "warning", "info"]},
                "timestamp": {"type": "string", "format": "date-time"},
                "component": {"type": "string"},
                "group": {"type": "string"},
                "class": {"type": "string"},
                "custom_details": {"type": "object"},
            },
            "additionalProperties": False,
        },
        "images": {"type": "array"},
        "links": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["href"],
                "properties": {"href": {"type": "string", "format": "uri"}, "text": {}},
                "additionalProperties": False,
            },
        },
        "client": {"type": "string"},
        "client_url": {"type": "string", "format": "uri"},
    },
    "additionalProperties": False,
    "allOf": [
        {
            "if": {"properties": {"event_action": {"const": "trigger"}}},
            "then": {"required": ["payload"]},
            "else": {"required": ["dedup_key"]},
        }
    ],
}

SLACK_INCOMING_WEBHOOK: dict[str, Any] = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "Slack / Mattermost incoming webhook message",
    "type": "object",
    "required": ["text"],
    "properties": {
        "text": {"type": "string", "minLength": 1, "maxLength": 40000},
        "blocks": {"type": "array"},
        "attachments": {"type": "array"},
        "mrkdwn": {"type": "boolean"},
        "username": {"type": "string"},
        "icon_emoji": {"type": "string"},
        "icon_url": {"type": "string"},
        "channel": {"type": "string"},
    },
    "additionalProperties": False,
}

NOC_WEBHOOK_V1: dict[str, Any] = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "noc-assistant generic webhook, version 1",
    "type": "object",
    "required": ["version", "event", "action", "dedup_key", "severity", "summary", "incident"],
    "properties": {
        "version": {"const": 1},
        "event": {"enum": ["opened", "escalated", "reopened", "acknowledged", "resolved"]},
        "action": {"enum": ["trigger", "acknowledge", "resolve"]},
        "dedup_key": {"type": "string"},
        "severity": {"enum": ["critical", "error", "warning", "info"]},
        "summary": {"type": "string"},
        "timestamp": {"type": "string", "format": "date-time"},
        "link": {"type": ["string", "null"]},
        "acknowledged_by": {"type": ["string", "null"]},
        "incident": {
            "type": "object",
            "required": ["id", "state", "entities"],
            "properties": {
                "id": {"type": "string"},
                "state": {"enum": ["open", "resolved"]},
                "entities": {"type": "array", "items": {"type": "string"}},
            },
        },
    },
    "additionalProperties": False,
}

SCHEMAS = {"/pd": PAGERDUTY_EVENTS_V2, "/slack": SLACK_INCOMING_WEBHOOK, "/hook": NOC_WEBHOOK_V1}


# -- the receiver ------------------------------------------------------------------------------


@dataclass
class Receiver:
    """A threaded HTTP receiver on loopback; ``answers`` (status codes) are given to the next
    requests before it goes back to 202."""

    port: int = 0
    delay_s: float = 0.0
    answers: list[int] = field(default_factory=list)
    taken: list[tuple[str, dict[str, Any], dict[str, str]]] = field(default_factory=list)
    raw: list[tuple[str, bytes]] = field(default_factory=list)
    invalid: list[str] = field(default_factory=list)
    _server: ThreadingHTTPServer | None = None

    def start(self) -> Receiver:
        receiver = self
        validators = {
            p: jsonschema_rs.validator_for(s, validate_formats=True) for p, s in SCHEMAS.items()
        }

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                data = self.rfile.read(int(self.headers["Content-Length"]))
                time.sleep(receiver.delay_s)
                status = receiver.answers.pop(0) if receiver.answers else 202
                if status < 300:
                    body = json.loads(data)
                    path = self.path.split("/services/")[0]
                    errors = [e.message for e in validators[path].iter_errors(body)]
                    if errors:
                        receiver.invalid.append(f"{path}: {errors}")
                        status = 400
                    else:
                        receiver.raw.append((path, data))
                        receiver.taken.append((path, body, dict(self.headers)))
                self.send_response(status)
                if status == 429:
                    self.send_header("Retry-After", "0")
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args: object) -> None:
                pass

        ThreadingHTTPServer.allow_reuse_address = True
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def count(self, path: str) -> Counter[tuple[str, str]]:
        """What ``path`` took, by (dedup_key, action) (Slack: by the text's first word)."""
        out: Counter[tuple[str, str]] = Counter()
        for p, body, _ in self.taken:
            if p != path:
                continue
            if p == "/pd":
                out[body["dedup_key"], body["event_action"]] += 1
            elif p == "/hook":
                out[body["dedup_key"], body["event"]] += 1
            else:  # "… <link|inc-1>" or "… (inc-1)"
                text = body["text"]
                inc = text.rsplit("|", 1)[1] if "|" in text else text.rsplit("(", 1)[1]
                out[inc.rstrip(">)"), text.split()[0]] += 1
        return out


@pytest.fixture()
def receiver() -> Iterator[Receiver]:
    r = Receiver().start()
    yield r
    r.stop()


@pytest.fixture(scope="module")
def pack() -> Pack:
    return load_pack()


@pytest.fixture(scope="module")
def masker(pack: Pack) -> Masker:
    return Masker.from_pack(pack)


def routes(base: str, **pd: Any) -> list[Route]:
    return [
        Route(name="hook", kind="webhook", url=f"{base}/hook"),
        Route(name="chat", kind="slack", url=f"{base}/slack/services/{SLACK_TOKEN}"),
        Route(name="oncall", kind="pagerduty", url=f"{base}/pd", routing_key=ROUTING_KEY, **pd),
    ]


def incident(n: int, entity: str = "upf-1", fault: str = "upf_gtpu_drop", conf: float = 0.8,
             **kw: Any) -> Incident:  # fmt: skip
    return Incident(
        id=f"inc-{n:04d}",
        fingerprint="f",
        opened_at=1.8e9 + n,
        updated_at=1.8e9 + n,
        entities=[entity],
        kpis=["gtpu-drop-rate"],
        title=f"{fault} on {entity}",
        hypotheses=[Hypothesis(fault=fault, entity=entity, confidence=conf)],
        **kw,
    )


def resolved(inc: Incident, at: float) -> Incident:
    return inc.model_copy(update={"state": "resolved", "resolved_at": at})


def drain(notifier: Notifier, clock: list[float], rounds: int = 50) -> None:
    """Deliver until nothing is pending, moving the notifier's clock past each backoff."""
    for _ in range(rounds):
        notifier.deliver_due()
        due = notifier.next_due()
        if due is None:
            return
        clock[0] = max(clock[0], due)
    raise AssertionError(f"still pending: {notifier.outbox.counts()}")


def wait_for(what: Callable[[], bool], timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not what():
        assert time.monotonic() < deadline, "not in time"
        time.sleep(0.02)


# -- (1) each kind once per event, masked ------------------------------------------------------


def test_each_kind_gets_each_event_once_masked(
    tmp_path: Path, receiver: Receiver, masker: Masker
) -> None:
    store = SqliteStore(tmp_path / "noc.db")
    clock = [1000.0]
    n = Notifier(
        routes(receiver.base), Deliveries(store), masker, console_url="http://noc.example:8080",
        clock=lambda: clock[0],
    )  # fmt: skip
    inc = incident(1)
    inc.title = f"UE imsi-{IMSI} lost <!channel> on upf-1"
    assert n.on_incident(IncidentEvent("opened", inc)) == 3
    assert n.on_incident(IncidentEvent("opened", inc)) == 3  # seen again: the same rows
    assert n.on_incident(IncidentEvent("updated", inc)) == 0
    drain(n, clock)
    inc.escalated_at.append(inc.opened_at + 60)
    n.on_incident(IncidentEvent("escalated", inc))
    store.save_incident(inc)
    store.save_review(Review(incident_id=inc.id).acknowledged("ana", at=inc.opened_at + 90))
    assert n.check_acknowledgements([inc]) == 3
    assert n.check_acknowledgements([inc]) == 0
    n.on_incident(IncidentEvent("resolved", resolved(inc, inc.opened_at + 600)))
    drain(n, clock)

    assert receiver.invalid == []
    key = inc.id
    assert receiver.count("/pd") == {
        (key, "trigger"): 2, (key, "acknowledge"): 1, (key, "resolve"): 1
    }  # fmt: skip
    assert receiver.count("/hook") == {
        (key, "opened"): 1, (key, "escalated"): 1, (key, "acknowledged"): 1, (key, "resolved"): 1
    }  # fmt: skip
    assert receiver.count("/slack") == {
        (key, "ALERT"): 1, (key, "ESCALATED"): 1, (key, "ACKNOWLEDGED"): 1, (key, "RESOLVED"): 1
    }  # fmt: skip
    # PagerDuty: the trigger in full, in the order sent; Slack: a link, no mention
    pd = [body for path, body, _ in receiver.taken if path == "/pd"]
    assert [b["event_action"] for b in pd] == ["trigger", "trigger", "acknowledge", "resolve"]
    assert pd[0]["payload"]["severity"] == "critical"
    assert pd[0]["payload"]["source"] == "upf-1"
    assert pd[0]["links"][0]["href"] == f"http://noc.example:8080/incidents/{key}"
    assert all(b["routing_key"] == ROUTING_KEY for b in pd)
    slack = [body["text"] for path, body, _ in receiver.taken if path == "/slack"]
    assert f"<http://noc.example:8080/incidents/{key}|{key}>" in slack[0]
    assert "<!channel>" not in " ".join(slack) and "&lt;!channel&gt;" in slack[0]
    assert "taken by ana" in slack[2]
    # masked everywhere; the secrets never reach the store
    assert all(IMSI.encode() not in raw for _, raw in receiver.raw)
    for path in SCHEMAS:
        assert any(b"26201<masked>" in r for p, r in receiver.raw if p == path)
    kept = json.dumps([d.body for d in n.outbox.rows()])
    assert ROUTING_KEY not in kept and SLACK_TOKEN not in kept and IMSI not in kept
    assert {h["Idempotency-Key"] for _, _, h in receiver.taken} == {d.id for d in n.outbox.rows()}
    assert n.outbox.counts() == {"delivered": 12}
    n.close()


# -- (2) an outage: retried, none lost, none twice ---------------------------------------------


def test_a_receiver_outage_loses_and_duplicates_nothing(
    tmp_path: Path, receiver: Receiver, masker: Masker
) -> None:
    store = SqliteStore(tmp_path / "noc.db")
    n = Notifier(
        routes(receiver.base), Deliveries(store), masker, backoff_s=0.02, max_backoff_s=0.2
    )
    receiver.stop()  # down before the first event
    incidents = [incident(i) for i in range(8)]
    for inc in incidents:
        n.on_incident(IncidentEvent("opened", inc))
    n.start(poll_s=0.05)
    wait_for(lambda: all(d.attempts >= 2 for d in n.outbox.pending()))
    for inc in incidents[:4]:  # resolved while the receiver is down: sent after the trigger
        n.on_incident(IncidentEvent("resolved", resolved(inc, inc.opened_at + 300)))
    assert n.last_error is not None and "cannot connect" in n.last_error
    assert SLACK_TOKEN not in n.last_error
    receiver.answers = [503, 429, 500]  # back, but busy for three more requests
    receiver.start()
    wait_for(lambda: n.outbox.counts() == {"delivered": 36})
    n.close()

    assert receiver.invalid == []
    want_pd = {(i.id, "trigger"): 1 for i in incidents}
    want_pd |= {(i.id, "resolve"): 1 for i in incidents[:4]}
    assert receiver.count("/pd") == want_pd  # 0 lost, 0 duplicated
    assert sum(receiver.count("/hook").values()) == 12
    assert sum(receiver.count("/slack").values()) == 12
    assert max(receiver.count("/hook").values()) == 1
    order = [(b["dedup_key"], b["event_action"]) for p, b, _ in receiver.taken if p == "/pd"]
    for inc in incidents[:4]:
        assert order.index((inc.id, "trigger")) < order.index((inc.id, "resolve"))
    assert n.failed == 0


def test_a_refused_message_fails_for_good_and_the_next_goes(
    tmp_path: Path, receiver: Receiver, masker: Masker
) -> None:
    clock = [0.0]
    hook = [Route(name="hook", kind="webhook", url=f"{receiver.base}/hook")]
    n = Notifier(hook, Deliveries(SqliteStore(tmp_path / "noc.db")), masker, clock=lambda: clock[0])
    inc = incident(1)
    n.on_incident(IncidentEvent("opened", inc))
    n.on_incident(IncidentEvent("resolved", resolved(inc, inc.opened_at + 60)))
    receiver.answers = [400]  # the receiver refuses the first as malformed: not sent again
    drain(n, clock)
    assert [(d.event, d.status, d.attempts) for d in n.outbox.rows()] == [
        ("opened", "failed", 1), ("resolved", "delivered", 1)
    ]  # fmt: skip
    assert n.failed == 1 and n.last_error is not None and "HTTP 400" in n.last_error
    assert receiver.count("/hook") == {(inc.id, "resolved"): 1}
    n.close()


# -- (3) a restart: the pending ones once, the delivered ones never again ----------------------


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'noc.db'}"
    return str(request.getfixturevalue("pg_url"))


def test_a_restarted_sender_resumes_without_resending(
    store_url: str, receiver: Receiver, masker: Masker
) -> None:
    pd = [Route(name="oncall", kind="pagerduty", url=f"{receiver.base}/pd",
                routing_key=ROUTING_KEY)]  # fmt: skip
    events = [IncidentEvent("opened", incident(i)) for i in range(10)]
    first_store: Store = open_store(store_url)
    first = Notifier(pd, Deliveries(first_store), masker, backoff_s=0.02)
    for ev in events:
        first.on_incident(ev)
    receiver.delay_s = 0.1  # a slow receiver: the stop comes mid-way
    first.start(poll_s=0.05)
    wait_for(lambda: len(receiver.taken) >= 3)
    first.stop()
    first.close()
    first_store.close()
    sent_before = receiver.count("/pd")
    assert 3 <= len(sent_before) < 10, sent_before

    receiver.delay_s = 0.0
    second_store = open_store(store_url)
    second = Notifier(pd, Deliveries(second_store), masker, backoff_s=0.02)
    counts = second.outbox.counts()
    assert counts["delivered"] == len(sent_before) and counts["pending"] == 10 - len(sent_before)
    for ev in events:  # the restored pipeline sees its events again: the same rows
        second.on_incident(ev)
    second.start(poll_s=0.05)
    wait_for(lambda: second.outbox.counts() == {"delivered": 10})
    second.close()
    second_store.close()
    assert receiver.count("/pd") == {(ev.incident.id, "trigger"): 1 for ev in events}


# -- (4) filters -------------------------------------------------------------------------------


def test_a_route_takes_only_what_passes_its_filters(
    tmp_path: Path, receiver: Receiver, masker: Masker
) -> None:
    store = SqliteStore(tmp_path / "noc.db")
    clock = [0.0]
    upf = [
        Route(name="upf", kind="pagerduty", url=f"{receiver.base}/pd", routing_key=ROUTING_KEY,
              entities="upf-*", min_severity="error"),
        Route(name="gtpu", kind="webhook", url=f"{receiver.base}/hook",
              faults=["upf_gtpu_drop"]),
    ]  # fmt: skip
    n = Notifier(upf, Deliveries(store), masker, clock=lambda: clock[0])
    sure = incident(1, "upf-1")  # critical, upf: both
    notice = incident(2, "upf-2", severity="info")  # a notice: gtpu only (upf: not yet)
    other = incident(3, "smf-1", fault="smf_pfcp_down")  # critical, not upf: neither
    calm = incident(4, "upf-3", fault="no_fault")  # warning: neither
    unsure = incident(5, "upf-4", conf=0.3)  # error: both
    assert [severity_of(i) for i in (sure, notice, other, calm, unsure)] == [
        "critical", "info", "critical", "warning", "error"
    ]  # fmt: skip
    for inc in (sure, notice, other, calm, unsure):
        n.on_incident(IncidentEvent("opened", inc))
    escalated = notice.model_copy(update={"severity": "page", "escalated_at": [1.8e9 + 60]})
    n.on_incident(IncidentEvent("escalated", escalated))  # the notice becomes a page
    n.on_incident(IncidentEvent("resolved", resolved(other, 1.8e9 + 300)))  # never told
    n.on_incident(IncidentEvent("resolved", resolved(sure, 1.8e9 + 300)))
    drain(n, clock)
    assert receiver.invalid == []
    assert receiver.count("/pd") == {
        ("inc-0001", "trigger"): 1, ("inc-0001", "resolve"): 1,
        ("inc-0005", "trigger"): 1, ("inc-0002", "trigger"): 1,
    }  # fmt: skip
    assert receiver.count("/hook") == {
        ("inc-0001", "opened"): 1, ("inc-0001", "resolved"): 1, ("inc-0005", "opened"): 1,
        ("inc-0002", "opened"): 1, ("inc-0002", "escalated"): 1,  # any severity: the notice too
    }  # fmt: skip
    n.close()


# -- (5) a bad routes file ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("routes_text", "named"),
    [
        ("routes:\n- {name: a, kind: slack, url: 'http://h/x', severity: error}\n",
         "routes[0].severity: Extra inputs are not permitted"),
        ("routes:\n- {name: a, kind: pagerduty}\n",
         "routes[0]: routing_key: required for kind pagerduty"),
        ("routes:\n- {name: a, kind: webhook, url: 'http://h/x', min_severity: high}\n",
         "routes[0].min_severity: Input should be"),
        (f"routes:\n- {{name: a, kind: slack, url: 'hooks.slack.com/services/{SLACK_TOKEN}'}}\n",
         "routes[0].url: an http:// or https:// URL with a host"),
        ("routes:\n- {name: a, kind: webhook, url: 'http://h/x', timeout_s: 0}\n",
         "routes[0].timeout_s: Input should be greater than 0"),
        ("routes:\n- {name: a, kind: sms, url: 'http://h/x'}\n", "routes[0].kind: Input"),
        ("routes:\n- {name: a, kind: webhook, url: 'http://h/x'}\n"
         "- {name: a, kind: webhook, url: 'http://h/y'}\n", "the name 'a' is used twice"),
        ("routes: []\n", "routes: List should have at least 1 item"),
        ("route: []\n", "route: Extra inputs are not permitted"),
    ],
)  # fmt: skip
def test_a_bad_routes_file_names_the_field(tmp_path: Path, routes_text: str, named: str) -> None:
    path = tmp_path / "routes.yaml"
    path.write_text(routes_text)
    with pytest.raises(ConfigError) as err:
        load_routes(path)
    assert str(err.value).startswith(f"{path}: ") and named in str(err.value), str(err.value)
    assert SLACK_TOKEN not in str(err.value)


def test_routes_from_settings_json_and_the_readiness_probe(
    tmp_path: Path,
    receiver: Receiver,
    free_port: int,
    monkeypatch: pytest.MonkeyPatch,
    pack: Pack,
) -> None:
    import noc_assistant.integrations.bus as bus
    from noc_assistant.integrations.llm import LlmClient
    from noc_assistant.ops.readiness import check_all

    # the other parts are test_readiness's; here they answer at once
    monkeypatch.setattr(bus, "probe", lambda *_: "not asked")
    monkeypatch.setattr(LlmClient, "probe", lambda _: "not asked")

    path = tmp_path / "routes.json"
    path.write_text(json.dumps({"routes": [
        {"name": "up", "kind": "webhook", "url": f"{receiver.base}/hook", "timeout_s": 2},
        {"name": "down", "kind": "slack", "url": f"http://127.0.0.1:{free_port}/services/x"},
    ]}))  # fmt: skip
    up, down = load_routes(path)
    assert probe(up).startswith("webhook: 127.0.0.1:")
    with pytest.raises(NotifyUnreachableError, match=r"^down \(http://127.0.0.1:\d+\): cannot"):
        probe(down)
    settings = Settings(
        db_url=f"sqlite:///{tmp_path / 'noc.db'}",
        notify_routes=path,
        llm_base_url=f"http://127.0.0.1:{free_port}/v1",
        nats_url=f"nats://127.0.0.1:{free_port}",
    )
    checks = {c.part: c for c in check_all(settings)}
    assert checks["notify up"].status == "ok" and checks["notify down"].status == "failed"
    assert "/services/x" not in checks["notify down"].line()
    assert receiver.taken == []  # a connect, nothing sent
    store = SqliteStore(tmp_path / "noc.db")
    notifier = Notifier.from_settings(settings, store, pack)
    assert notifier is not None and set(notifier.routes) == {"up", "down"}
    notifier.close()
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"routes": [{"name": "x", "kind": "webhook"}]}))
    with pytest.raises(ConfigError, match=r"routes\[0\]: url: required for kind webhook"):
        Notifier.from_settings(settings.model_copy(update={"notify_routes": bad}), store, pack)


def test_the_live_sink_notifies(tmp_path: Path, receiver: Receiver) -> None:
    """``noc watch`` / ``noc bus`` : the incident sink hands each event to the notifier."""
    from noc_assistant.cli._live import IncidentOutput

    path = tmp_path / "routes.yaml"
    path.write_text(yaml.safe_dump({"routes": [
        {"name": "hook", "kind": "webhook", "url": f"{receiver.base}/hook"}
    ]}))  # fmt: skip
    store = SqliteStore(tmp_path / "noc.db")
    out = IncidentOutput(Settings(notify_routes=path), store, lambda: None)
    assert out.notifier is not None
    out(IncidentEvent("opened", incident(7)))
    wait_for(lambda: out.notifier is not None and out.notifier.delivered == 1)
    assert receiver.count("/hook") == {("inc-0007", "opened"): 1}
    assert "1 delivered" in (out.summary() or "")
    out.notifier.close()
