"""Incident notifications out: a generic JSON webhook, a Slack or Mattermost incoming webhook,
and PagerDuty (Events API v2); the only module that speaks to them.

Routes
    A YAML or JSON file named by ``NOC_NOTIFY_ROUTES`` (it holds secrets: keep it out of the
    repository)::

        routes:
          - name: oncall                 # letters, digits, ``_.-``; unique
            kind: pagerduty              # webhook | slack | pagerduty
            routing_key: R0UT1NGKEY      # pagerduty only (its integration key)
            # url: https://events.pagerduty.com/v2/enqueue   (pagerduty's default)
            min_severity: error          # info | warning | error | critical (default info)
            entities: "upf-*"            # shell pattern(s), any entity of the incident
            faults: [upf_gtpu_drop]      # fault classes of the top hypothesis (default any)
            timeout_s: 10
          - {name: chat, kind: slack, url: "https://hooks.slack.com/services/..."}

    A route takes an incident's trigger (opened, escalated, reopened) when it passes the
    route's filters; from then on it takes every event of that incident (an update,
    the acknowledgement, the resolution), so what it opened it also closes. The routing key
    and the URL (a Slack webhook's path is its token) never reach the store, a message or a
    log line: a route shows as ``name (scheme://host:port)``.

Severity (:func:`severity_of`)
    An incident's own ``severity`` when it is one of ours (``info`` or ``notice``: a notice
    pages nobody, ``info``); otherwise from the top hypothesis: ``no_fault`` → warning, a
    fault at least :data:`CRITICAL_CONFIDENCE` sure → critical, a less sure fault or no
    ranking yet → error.

Events (:data:`ACTIONS`)
    ``opened``, ``escalated``, ``reopened`` → trigger (PagerDuty ``trigger`` again with the
    updated summary, same ``dedup_key``); ``acknowledged`` (someone took it in the console)
    → PagerDuty ``acknowledge``, a message elsewhere; ``resolved`` → ``resolve``. The
    ``dedup_key`` is the incident id. ``updated`` (one more finding) sends nothing.

Delivery: at least once, no duplicate on restart
    Each (route, incident, event) is one row of the store's outbox
    (:class:`~noc_assistant.store.deliveries.Deliveries`) with a stable id
    (:func:`delivery_id`), written before anything is sent; the message in it is already
    masked (:mod:`guardrails.masking`: entity names and titles come from telemetry). The
    sender (:meth:`Notifier.deliver_due`, in a thread after :meth:`Notifier.start`) sends
    the pending rows in order per route and incident, marks each delivered on a 2xx, retries
    a connection failure, a timeout, 408, 429 or 5xx with exponential backoff (``Retry-After``
    honoured), and gives up on any other answer or after ``max_attempts`` (300: a day at the
    5-minute cap of the backoff). A route that fails is asked once per round. A restarted
    sender on the same store sends what was pending and nothing delivered; an event seen
    again after a restart (a snapshot's replay) maps to the row it already has. A crash
    between a receiver's 2xx and the store's update sends that one message again: each
    carries an ``Idempotency-Key`` header (the row's id), and PagerDuty de-duplicates by
    ``dedup_key``.
"""

from __future__ import annotations

import hashlib
import json
import socket
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from fnmatch import fnmatchcase
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit

import httpx
import yaml
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError
from pydantic.functional_validators import field_validator, model_validator

from knowledge.schema import http_url
from noc_assistant.errors import ConfigError, NocError, UnreachableError
from noc_assistant.models import Incident
from noc_assistant.store.deliveries import Deliveries, Delivery
from noc_assistant.timefmt import rfc3339

if TYPE_CHECKING:
    from guardrails.masking import Masker
    from knowledge.pack import Pack
    from noc_assistant.settings import Settings
    from noc_assistant.store import Store
    from noc_assistant.stream.correlate import IncidentEvent

__all__ = ["Notifier", "NotifyUnreachableError", "Route", "load_routes", "message", "probe"]

Severity = Literal["info", "warning", "error", "critical"]
Kind = Literal["webhook", "slack", "pagerduty"]
Action = Literal["trigger", "acknowledge", "resolve"]
_Outcome = Literal["ok", "retry", "fail"]

SEVERITIES: tuple[Severity, ...] = ("info", "warning", "error", "critical")
PAGERDUTY_URL = "https://events.pagerduty.com/v2/enqueue"
"""PagerDuty's Events API v2 endpoint (a route of kind ``pagerduty`` without ``url``)."""
CRITICAL_CONFIDENCE = 0.6
"""A fault ranked at least this sure is ``critical``; a less sure one ``error``."""
_EVENTS: dict[str, tuple[Action, str]] = {
    "opened": ("trigger", "ALERT"),
    "escalated": ("trigger", "ESCALATED"),
    "reopened": ("trigger", "REOPENED"),
    "acknowledged": ("acknowledge", "ACKNOWLEDGED"),
    "resolved": ("resolve", "RESOLVED"),
}
ACTIONS: dict[str, Action] = {kind: action for kind, (action, _) in _EVENTS.items()}
"""The incident events that notify, and what each is to PagerDuty."""
_RETRY_STATUS = frozenset({408, 425, 429})


class NotifyUnreachableError(UnreachableError):
    """A route's host refused the connection or did not answer in time (``noc check``)."""


class Route(BaseModel):
    """One receiver and what it takes (module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")
    kind: Kind
    url: str | None = None
    routing_key: SecretStr | None = None
    min_severity: Severity = "info"
    entities: tuple[str, ...] = ()
    faults: tuple[str, ...] = ()
    timeout_s: float = Field(10.0, gt=0.0, le=120.0)

    @field_validator("entities", "faults", mode="before")
    @classmethod
    def _one_or_many(cls, value: object) -> object:
        return (value,) if isinstance(value, str) else value

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        return None if value is None else http_url(value)

    @model_validator(mode="after")
    def _kind_fields(self) -> Route:
        if self.kind == "pagerduty" and self.routing_key is None:
            raise ValueError("routing_key: required for kind pagerduty")
        if self.kind != "pagerduty" and self.routing_key is not None:
            raise ValueError(f"routing_key: only for kind pagerduty, not {self.kind}")
        if self.kind != "pagerduty" and self.url is None:
            raise ValueError(f"url: required for kind {self.kind}")
        return self

    @property
    def endpoint(self) -> str:
        return self.url or PAGERDUTY_URL

    @property
    def shown(self) -> str:
        """The route for messages: its name and ``scheme://host:port`` (no path, no query:
        a webhook's path may be its token)."""
        parts = urlsplit(self.endpoint)
        port = parts.port or (443 if parts.scheme == "https" else 80)
        return f"{self.name} ({parts.scheme}://{parts.hostname}:{port})"

    def takes(self, incident: Incident, severity: Severity) -> bool:
        """Whether an incident of ``severity`` passes the filters of this route."""
        if SEVERITIES.index(severity) < SEVERITIES.index(self.min_severity):
            return False
        if self.entities and not any(
            fnmatchcase(e, p) for e in incident.entities for p in self.entities
        ):
            return False
        top = incident.hypotheses[0].fault if incident.hypotheses else None
        return not self.faults or top in self.faults


class _RoutesFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    routes: list[Route] = Field(min_length=1)


def load_routes(path: Path | str) -> tuple[Route, ...]:
    """The routes of a YAML or JSON file; :class:`ConfigError` naming the file and field.

    >>> import tempfile
    >>> f = Path(tempfile.mkdtemp()) / "routes.yaml"
    >>> _ = f.write_text("routes:\\n- {name: a, kind: pagerduty}\\n")
    >>> load_routes(f)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    noc_assistant.errors.ConfigError: .../routes.yaml: routes[0]: routing_key: required for kind \
pagerduty
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (OSError, ValueError, yaml.YAMLError) as exc:
        raise ConfigError(f"{path}: cannot read the notification routes: {exc}") from None
    try:
        routes = tuple(_RoutesFile.model_validate(data).routes)
    except ValidationError as exc:
        raise ConfigError(f"{path}: {_errors(exc)}") from None
    names = [r.name for r in routes]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ConfigError(f"{path}: routes: the name {twice[0]!r} is used twice")
    return routes


def _errors(exc: ValidationError) -> str:
    """Pydantic's errors as ``routes[0].field: message``, joined (no input echoed: it may be
    a secret)."""
    out = []
    for err in exc.errors():
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err["loc"])
        msg = err["msg"].removeprefix("Value error, ")
        out.append(f"{where.lstrip('.') or 'routes'}: {msg}")
    return "; ".join(out)


def severity_of(incident: Incident) -> Severity:
    """An incident's severity for notifications (module docstring).

    >>> from noc_assistant.models import Hypothesis
    >>> inc = Incident(id="inc-1", fingerprint="f", opened_at=0.0, updated_at=0.0)
    >>> inc.hypotheses = [Hypothesis(fault="upf_gtpu_drop", entity="upf-1", confidence=0.8)]
    >>> severity_of(inc)
    'critical'
    >>> severity_of(inc.model_copy(update={"severity": "info"}))
    'info'
    """
    own = getattr(incident, "severity", None)
    if own in ("info", "notice"):
        return "info"
    if own in SEVERITIES and own != "info":
        return own  # type: ignore[no-any-return]
    top = incident.hypotheses[0] if incident.hypotheses else None
    if top is None:
        return "error"
    if top.fault == "no_fault":
        return "warning"
    return "critical" if top.confidence >= CRITICAL_CONFIDENCE else "error"


def _event_at(kind: str, incident: Incident) -> float:
    """When (the data's time) event ``kind`` of ``incident`` happened."""
    times = {"escalated": incident.escalated_at, "reopened": incident.reopened_at}.get(kind)
    if times:
        return times[-1]
    if kind == "resolved" and incident.resolved_at is not None:
        return incident.resolved_at
    return incident.opened_at if kind == "opened" else incident.updated_at


def event_key(kind: str, incident: Incident) -> str:
    """What tells this event of ``incident`` from its others: an incident escalates, reopens
    and resolves more than once, each time at its own time of the data."""
    return kind if kind in ("opened", "acknowledged") else f"{kind}@{_event_at(kind, incident)!r}"


def delivery_id(route: str, incident_id: str, key: str) -> str:
    """The outbox id of one event of one incident for one route: the same after a restart.

    >>> delivery_id("oncall", "inc-1", "opened")
    'f810a31f89635312e01a4ea719560a9a'
    """
    return hashlib.sha256(f"{route}\0{incident_id}\0{key}".encode()).hexdigest()[:32]


def _summary(kind: str, incident: Incident, severity: Severity, by: str | None) -> str:
    what = incident.title or ", ".join(incident.entities) or incident.id
    line = f"{_EVENTS[kind][1]} [{severity}] {what}"
    if incident.hypotheses and incident.hypotheses[0].fault != "no_fault":
        top = incident.hypotheses[0]
        line += f" ({top.confidence:.0%} sure)"
    if incident.entities:
        line += f" on {', '.join(incident.entities[:8])}"
        line += f" +{len(incident.entities) - 8}" if len(incident.entities) > 8 else ""
    return line + (f", taken by {by}" if by else "")


def message(
    route: Route,
    kind: str,
    incident: Incident,
    *,
    console_url: str | None = None,
    by: str | None = None,
    at: float | None = None,
) -> dict[str, Any]:
    """The body ``route`` is sent for event ``kind`` of ``incident`` (not masked yet, and
    without the routing key, which is added as it is sent). ``by``/``at``: who acknowledged,
    and when."""
    severity = severity_of(incident)
    summary = _summary(kind, incident, severity, by)
    link = f"{console_url.rstrip('/')}/incidents/{incident.id}" if console_url else None
    action = ACTIONS[kind]
    when = rfc3339(at if at is not None else _event_at(kind, incident))
    hypotheses = [
        {"fault": h.fault, "entity": h.entity, "confidence": round(h.confidence, 3)}
        for h in incident.hypotheses[:3]
    ]
    if route.kind == "slack":  # its control characters escaped: no title says <!channel>
        text = summary.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
        return {"text": text + (f" <{link}|{incident.id}>" if link else f" ({incident.id})")}
    if route.kind == "pagerduty":
        body: dict[str, Any] = {"event_action": action, "dedup_key": incident.id}
        if action == "trigger":
            top = incident.hypotheses[0] if incident.hypotheses else None
            body["payload"] = {
                "summary": summary[:1024],
                "source": (incident.entities or ["noc-assistant"])[0],
                "severity": severity,
                "timestamp": when,
                "component": top.entity if top else (incident.entities or ["network"])[0],
                "class": top.fault if top else "unranked",
                "custom_details": {
                    "incident": incident.id,
                    "event": kind,
                    "entities": incident.entities,
                    "kpis": incident.kpis,
                    "hypotheses": hypotheses,
                },
            }
            body["client"] = "noc-assistant"
            if link:
                body["client_url"] = link
                body["links"] = [{"href": link, "text": f"NOC console: {incident.id}"}]
        return body
    return {
        "version": 1,
        "event": kind,
        "action": action,
        "dedup_key": incident.id,
        "severity": severity,
        "summary": summary,
        "timestamp": when,
        "link": link,
        "acknowledged_by": by,
        "incident": {
            **incident.model_dump(include={"id", "state", "title", "entities", "kpis"}),
            "opened_at": rfc3339(incident.opened_at),
            "resolved_at": rfc3339(incident.resolved_at) if incident.resolved_at else None,
            "hypotheses": hypotheses,
        },
    }


def probe(route: Route) -> str:
    """Whether ``route``'s host answers a TCP connect (nothing is sent);
    :class:`NotifyUnreachableError` naming the route (never its path or key) otherwise."""
    parts = urlsplit(route.endpoint)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((parts.hostname or "", port), min(route.timeout_s, 5.0)):
            pass
    except OSError as exc:
        raise NotifyUnreachableError(f"{route.shown}: cannot connect: {exc}") from None
    return f"{route.kind}: {parts.hostname}:{port} answers (TCP connect, nothing sent)"


class Notifier:
    """Incident events → outbox rows → receivers (module docstring). ``masker`` masks every
    message before it is stored; ``clock`` is the wall clock of retries (tests move it)."""

    def __init__(
        self,
        routes: Sequence[Route],
        outbox: Deliveries,
        masker: Masker,
        *,
        console_url: str | None = None,
        backoff_s: float = 2.0,
        max_backoff_s: float = 300.0,
        max_attempts: int = 300,
        clock: Callable[[], float] = time.time,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.routes = {r.name: r for r in routes}
        self.outbox = outbox
        self.masker = masker
        self.console_url = console_url
        self.backoff_s, self.max_backoff_s = backoff_s, max_backoff_s
        self.max_attempts, self.clock = max_attempts, clock
        self.delivered = self.failed = 0
        self.last_error: str | None = None
        self._client = httpx.Client(transport=transport, follow_redirects=False)
        self._acked: set[str] = set()
        self._seq = 0
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @classmethod
    def from_settings(cls, settings: Settings, store: Store, pack: Pack) -> Notifier | None:
        """The notifier of ``NOC_NOTIFY_ROUTES`` (None when unset), masking with the pack's
        patterns, its outbox in ``store``."""
        from guardrails.masking import Masker

        if settings.notify_routes is None:
            return None
        return cls(
            load_routes(settings.notify_routes),
            Deliveries(store),
            Masker.from_pack(pack),
            console_url=settings.console_url,
        )

    # -- events in ---------------------------------------------------------------------------

    def on_incident(self, event: IncidentEvent) -> int:
        """An incident sink: the outbox rows of ``event`` for the routes it goes to; how many
        (``updated`` events notify nobody)."""
        if event.kind not in ACTIONS:
            return 0
        return self._enqueue(event.kind, event.incident)

    def check_acknowledgements(self, incidents: Iterable[Incident]) -> int:
        """Notify the acknowledgement of each of these open incidents someone has taken
        since (the store's reviews; once per incident); how many rows were added."""
        todo = [i for i in incidents if i.state == "open" and i.id not in self._acked]
        if not todo:
            return 0
        try:
            reviews = self.outbox.store.reviews_for([i.id for i in todo])
        except NocError as exc:  # the store: look again at the next round
            self.last_error = str(exc)
            return 0
        added = 0
        for inc in todo:
            review = reviews.get(inc.id)
            if review is not None and review.acknowledged_by:
                added += self._enqueue(
                    "acknowledged", inc, by=review.acknowledged_by, at=review.acknowledged_at
                )
                self._acked.add(inc.id)
        return added

    def _enqueue(
        self, kind: str, incident: Incident, by: str | None = None, at: float | None = None
    ) -> int:
        told = self.outbox.routes_told(incident.id)
        severity = severity_of(incident)
        trigger = ACTIONS[kind] == "trigger"
        targets = [
            r
            for r in self.routes.values()
            if r.name in told or (trigger and r.takes(incident, severity))
        ]
        if not targets:
            return 0
        key = event_key(kind, incident)
        now = self.clock()
        with self._lock:
            self._seq = max(self._seq + 1, time.time_ns())
            seq = self._seq
        rows = []
        for r in targets:
            body = message(r, kind, incident, console_url=self.console_url, by=by, at=at)
            row_id = delivery_id(r.name, incident.id, key)
            masked = self.masker.mask_mapping(body)
            row = Delivery(row_id, r.name, incident.id, kind, masked, seq, next_at=now)
            rows.append(replace(row, created_at=now))
        self.outbox.enqueue(rows)
        self._wake.set()
        return len(rows)

    # -- deliveries out ----------------------------------------------------------------------

    def deliver_due(self) -> int:
        """Send each pending row that is due and first in line for its route and incident;
        how many the receivers took."""
        now = self.clock()
        seen: set[tuple[str, str]] = set()
        down: set[str] = set()  # routes that failed this round: their next rows wait too
        took = 0
        for row in self.outbox.pending():
            if self._stop.is_set():
                break  # stopping: the rest stays pending for the next sender
            line = (row.route, row.incident_id)
            if line in seen:
                continue  # an earlier message of the same line waits: keep the order
            seen.add(line)
            if row.next_at > now or row.route in down:
                continue
            outcome = self._attempt(row, now)
            took += outcome == "ok"
            if outcome == "retry":
                down.add(row.route)
        return took

    def next_due(self) -> float | None:
        """When the first pending row is due (None: nothing pending)."""
        rows = self.outbox.pending()
        return min((r.next_at for r in rows), default=None)

    def _attempt(self, row: Delivery, now: float) -> _Outcome:
        """Send one row and record the outcome in the outbox."""
        route = self.routes.get(row.route)
        attempts = row.attempts + 1
        if route is None:
            self._give_up(row, attempts, f"route {row.route!r} is no longer configured", now)
            return "fail"
        outcome, why, wait = self._post(route, row)
        if outcome == "ok":
            self.outbox.delivered(row.id, attempts, self.clock())
            self.delivered += 1
        elif outcome == "retry" and attempts < self.max_attempts:
            delay = min(self.max_backoff_s, self.backoff_s * 2 ** (attempts - 1))
            delay = max(delay, min(wait or 0.0, self.max_backoff_s))
            self.outbox.retry(row.id, attempts, now + delay, why)
            self.last_error = f"{route.shown}: {why} (attempt {attempts}, again in {delay:g} s)"
        else:
            self._give_up(row, attempts, why, now)
        return outcome

    def _give_up(self, row: Delivery, attempts: int, why: str, now: float) -> None:
        self.outbox.failed(row.id, attempts, why, now)
        self.failed += 1
        self.last_error = f"{row.route}: {why}; {row.event} of {row.incident_id} not sent"

    def _post(self, route: Route, row: Delivery) -> tuple[_Outcome, str, float | None]:
        """POST the row's message; (outcome, why, the receiver's ``Retry-After``)."""
        body = dict(row.body)
        if route.kind == "pagerduty" and route.routing_key is not None:
            body["routing_key"] = route.routing_key.get_secret_value()
        try:
            resp = self._client.post(
                route.endpoint,
                json=body,
                timeout=route.timeout_s,
                headers={"Idempotency-Key": row.id, "User-Agent": "noc-assistant"},
            )
        except httpx.TimeoutException:
            return "retry", f"no answer in {route.timeout_s:g} s", None
        except httpx.HTTPError as exc:  # refused, reset, name not resolved …
            return "retry", f"cannot connect: {type(exc).__name__}", None
        if 200 <= resp.status_code < 300:
            return "ok", "", None
        why = f"HTTP {resp.status_code} {resp.reason_phrase}".rstrip()
        if resp.status_code in _RETRY_STATUS or resp.status_code >= 500:
            after = resp.headers.get("Retry-After", "")  # seconds (not the HTTP-date form)
            return "retry", why, float(after) if after.isdigit() else None
        return "fail", why, None

    # -- the sender thread -------------------------------------------------------------------

    def start(self, poll_s: float = 1.0) -> None:
        """Send in a daemon thread until :meth:`stop`: at once when a row is added, else when
        the next is due (at least every ``poll_s``)."""
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._run, args=(poll_s,), name="noc-notify", daemon=True
        )
        self._thread.start()

    def _run(self, poll_s: float) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            wait = poll_s
            try:
                self.deliver_due()
                due = self.next_due()
                if due is not None:
                    wait = min(poll_s, max(0.0, due - self.clock()))
            except NocError as exc:  # the store: try again at the next round
                self.last_error = str(exc)
            self._wake.wait(max(wait, 0.01))

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop the sender thread (what is pending stays in the outbox for the next one)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                return  # a send in flight past the timeout: it stops after that send
            self._thread = None
        self._stop.clear()

    def close(self) -> None:
        self.stop()
        self._client.close()

    def summary(self) -> str:
        pending = self.outbox.counts().get("pending", 0)
        line = f"notifications to {len(self.routes)} route(s): {self.delivered} delivered, "
        line += f"{pending} pending, {self.failed} failed"
        return line + (f" ({self.last_error})" if self.last_error else "")
