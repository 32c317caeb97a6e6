"""The web console and JSON API (FastAPI).

Pages: ``/`` lists incidents (live, via ``/api/stream``), ``/incidents/{id}`` shows one with
its findings, root-cause report, e-mail drafts, triage chat, the earlier incidents like it and
those beside it. JSON: ``/api/incidents``, ``/api/incidents/{id}``,
``/api/incidents/{id}/similar``, ``/api/incidents/{id}/concurrent``,
``/health``, and the drafting endpoints of
:mod:`noc_assistant.api.drafts` (reports, chat, partner-NOC e-mails).

Every response carries security headers (:data:`SECURITY_HEADERS`, and a
``Content-Security-Policy`` whose nonce is new for each response: the console's inline
``<script>`` and ``<style>`` blocks get it when their template is loaded, so a script that
reaches a page any other way does not run). Every JSON body is read strictly before an
endpoint sees it (:class:`StrictJsonBodies`): ``NaN``, ``Infinity``, numbers past a float and
nesting past the parser's depth answer 422, a body over :data:`MAX_BODY_BYTES` 413, instead of
reaching a model or the store as a value no JSON reader can write back (a 500).
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import math
import re
import secrets
import time
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from importlib import resources
from typing import Annotated, Any
from zoneinfo import ZoneInfo

import jinja2
from fastapi import APIRouter, FastAPI, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from noc_assistant.api.alert_intake import AlertIntake, alert_router, default_intake
from noc_assistant.api.deps import StoreDep
from noc_assistant.api.drafts import drafts_router
from noc_assistant.api.events import Broadcaster
from noc_assistant.api.maintenance import maintenance_router
from noc_assistant.api.metrics import registry
from noc_assistant.api.plots import evidence_plots, sparkline, topology_svg
from noc_assistant.api.reviews import reviews_router
from noc_assistant.api.triage import Triage
from noc_assistant.api.tuning import tuning_router
from noc_assistant.api.users import users_router
from noc_assistant.integrations.alertmanager import Silences
from noc_assistant.integrations.mail import Mailer
from noc_assistant.models import Finding, Incident, Review
from noc_assistant.store import Store
from noc_assistant.triage import present
from noc_assistant.triage.drafting import Drafter, DraftingError, review_refuses_partner
from noc_assistant.triage.history import (
    IncidentHistory,
    PastIncident,
    concurrent_in_store,
    similar_in_store,
)
from noc_assistant.triage.rca import Diagnosis

__all__ = ["MAX_BODY_BYTES", "SECURITY_HEADERS", "StrictJsonBodies", "create_app"]

LookbackDays = Annotated[float, Query(gt=0, le=366, description="how many days back")]


def _utc(ts: float | None) -> str:
    if ts is None:
        return ""
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S")


def _local(ts: float | None, zone: ZoneInfo | None) -> str:
    """`` (HH:MM zone-abbreviation)``: ``ts`` on the network's wall clock, empty without a
    zone (the NOC reads its own time beside UTC; the abbreviation tells summer from winter)."""
    if ts is None or zone is None:
        return ""
    at = datetime.fromtimestamp(ts, UTC).astimezone(zone)
    return f" ({at.strftime('%H:%M')} {at.tzname() or zone.key})"


SECURITY_HEADERS: dict[str, str] = {
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Permissions-Policy": "camera=(), microphone=(), geolocation=()",
}
"""Headers of every response: no framing (clickjacking), no content sniffing, no referrer
(an incident's URL names the incident)."""

_CSP = (
    "default-src 'self'; script-src 'self' 'nonce-{nonce}'; style-src 'self' 'nonce-{nonce}'; "
    "img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; "
    "frame-ancestors 'none'; form-action 'self'"
)
"""The console's policy: its own origin, and inline blocks only with this response's nonce."""

_DOCS = ("/docs", "/redoc")
"""FastAPI's API docs load their script from a CDN: no Content-Security-Policy there (they
hold no data of ours); the other headers apply."""

MAX_BODY_BYTES = 1 << 20
"""Largest request body read (an e-mail edit is a few kB)."""

_NONCE: contextvars.ContextVar[str] = contextvars.ContextVar("noc_csp_nonce", default="")
_INLINE = re.compile(r"<(script|style)(?=[\s>])")


class _NoncedLoader(jinja2.FileSystemLoader):
    """Templates with the response's CSP nonce on each inline ``<script>`` and ``<style>``
    (added to the template's source, so text rendered into a page never gets it)."""

    def get_source(
        self, environment: jinja2.Environment, template: str
    ) -> tuple[str, str, Callable[[], bool]]:
        source, filename, uptodate = super().get_source(environment, template)
        return _INLINE.sub(r'<\1 nonce="{{ csp_nonce() }}"', source), filename, uptodate


class _NotStrictJson(ValueError):
    """A JSON body that parses only leniently (``NaN``, ``Infinity``, 1e400)."""


def _constant(name: str) -> Any:
    raise _NotStrictJson(f"{name} is not a JSON number")


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NotStrictJson(f"{text[:40]} is past the largest number")
    return value


def _int(text: str) -> int:
    if len(text) > 100:  # Python refuses 4,300 digits with a ValueError FastAPI does not map
        raise _NotStrictJson(f"an integer of {len(text)} digits")
    return int(text)


def strict_json_problem(body: bytes) -> str | None:
    """Why ``body`` is no strict JSON a model can hold (None: it is, or it is no JSON at all,
    which the endpoint's own parsing answers).

    >>> strict_json_problem(b'{"duration_s": NaN}'), strict_json_problem(b'{"a": 1e400}')
    ('NaN is not a JSON number', '1e400 is past the largest number')
    >>> strict_json_problem(b'{"by": "ana"}') is None, strict_json_problem(b"{oops") is None
    (True, True)
    """
    try:
        json.loads(body, parse_constant=_constant, parse_float=_float, parse_int=_int)
    except _NotStrictJson as exc:
        return str(exc)
    except RecursionError:
        return "nested too deeply"
    except ValueError:  # not JSON (or not UTF-8): the endpoint says so, as 422
        return None
    return None


class StrictJsonBodies:
    """ASGI middleware: the security headers on every response, and every request body read
    whole (up to :data:`MAX_BODY_BYTES`) and refused with 422 where it is JSON only a lenient
    parser reads, before any endpoint (its pydantic model would take ``NaN`` for a float)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        nonce = secrets.token_urlsafe(18)
        token = _NONCE.set(nonce)
        path: str = scope.get("path", "")
        csp = None if path.startswith(_DOCS) else _CSP.format(nonce=nonce)

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [
                    (k, v)
                    for k, v in message.get("headers", [])
                    if k.decode("latin-1").lower() != "content-security-policy"
                ]
                extra = dict(SECURITY_HEADERS)
                if csp is not None:
                    extra["Content-Security-Policy"] = csp
                headers += [(k.lower().encode(), v.encode()) for k, v in extra.items()]
                message = {**message, "headers": headers}
            await send(message)

        try:
            if scope.get("method") in ("POST", "PUT", "PATCH", "DELETE"):
                await self._checked(scope, receive, send_with_headers)
            else:
                await self.app(scope, receive, send_with_headers)
        finally:
            _NONCE.reset(token)

    async def _checked(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = bytearray()
        pending: list[Message] = []
        while True:
            message = await receive()
            pending.append(message)
            if message["type"] != "http.request":
                break
            body += message.get("body", b"")
            if len(body) > MAX_BODY_BYTES:
                detail = f"request body over {MAX_BODY_BYTES} bytes"
                await JSONResponse({"detail": detail}, status_code=413)(scope, receive, send)
                return
            if not message.get("more_body", False):
                break
        problem = strict_json_problem(bytes(body)) if body else None
        if problem is not None:
            detail = f"request body is not strict JSON: {problem}"
            await JSONResponse({"detail": detail}, status_code=422)(scope, receive, send)
            return
        whole: Message = {"type": "http.request", "body": bytes(body), "more_body": False}
        replay = [whole] if pending and pending[-1]["type"] == "http.request" else pending

        async def receive_again() -> Message:
            if replay:
                return replay.pop(0)
            return await receive()

        await self.app(scope, receive_again, send)


def _templates(local_tz: str | None = None) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=_NoncedLoader(str(resources.files("noc_assistant.api") / "templates")),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
    )
    zone = None if local_tz is None else ZoneInfo(local_tz)
    env.filters["utc"] = _utc
    env.globals.update(
        present.template_helpers()
    )  # numbers in their units (noc_assistant.triage.present)
    env.filters["local"] = lambda ts: _local(ts, zone)
    env.globals["csp_nonce"] = _NONCE.get  # this response's (StrictJsonBodies sets it)
    return env


def _partner(
    drafter: Drafter | None, diagnosis: Diagnosis | None, review: Review | None
) -> str | None:
    """The roaming partner an e-mail could be drafted to, if the diagnosis names one and the
    NOC's verdict does not rule it out."""
    if drafter is None or diagnosis is None:
        return None
    try:
        hypothesis, link = drafter.partner_hypothesis(diagnosis)
    except DraftingError:
        return None
    return None if review_refuses_partner(review, hypothesis, link) else link.plmn


#: incident rows of the list that get a sparkline of their findings (one query for all)
SPARKLINES = 100


def create_app(
    store: Store,
    broadcaster: Broadcaster | None = None,
    local_tz: str | None = None,
    *,
    drafter: Drafter | None = None,
    mailer: Mailer | None = None,
    api_token: str | None = None,
    silences: Silences | None = None,
    alerts: AlertIntake | None = None,
) -> FastAPI:
    """Build the application around a store (and a live event hub, if one runs); an incident's
    times are shown on the network's wall clock ``local_tz`` too (``NOC_LOCAL_TZ``).

    ``drafter`` writes reports, chat answers and e-mail drafts (none: those endpoints answer
    503), ``mailer`` sends approved e-mails, ``api_token`` guards the write endpoints,
    ``silences`` mirrors maintenance windows in Alertmanager, ``alerts`` takes Alertmanager's
    webhook (default: correlated here and stored, :mod:`noc_assistant.api.alert_intake`)."""
    app = FastAPI(title="noc-assistant", version="0.1.0")
    app.add_middleware(StrictJsonBodies)
    hub = broadcaster or Broadcaster()
    env = _templates(local_tz)
    app.state.store = store
    app.state.api_token = api_token
    app.state.templates = env
    app.include_router(drafts_router(drafter, mailer))
    app.include_router(reviews_router(drafter))
    app.include_router(maintenance_router(drafter, silences))
    app.include_router(tuning_router(drafter))
    app.include_router(users_router())
    app.include_router(alert_router(alerts or default_intake(store, drafter)))
    neighbours = _neighbours(drafter)
    app.include_router(_service_router(store))
    app.include_router(_incidents_router(neighbours))
    app.include_router(_stream_router(hub))
    app.include_router(_console_router(env, drafter, neighbours))
    return app


def _incident_or_404(s: Store, incident_id: str) -> Incident:
    inc = s.get_incident(incident_id)
    if inc is None:
        raise HTTPException(status_code=404, detail=f"incident {incident_id} not found")
    return inc


def _neighbours(drafter: Drafter | None) -> Callable[[str], set[str]]:
    """The entities beside an entity in the drafter's topology (none without a drafter)."""

    def neighbours(entity: str) -> set[str]:
        return drafter.network_topology.neighbours(entity) if drafter is not None else set()

    return neighbours


def _service_router(store: Store) -> APIRouter:
    """``/health`` and ``/metrics``."""
    router = APIRouter()

    @router.get("/health")
    async def health() -> dict[str, str]:
        """On the event loop, not the threadpool: it answers while every worker thread waits
        for the model."""
        return {"status": "ok"}

    metrics_registry = registry(store)

    @router.get("/metrics")
    def metrics() -> Response:
        """The assistant's own state for Prometheus (:mod:`noc_assistant.api.metrics`)."""
        return Response(generate_latest(metrics_registry), media_type=CONTENT_TYPE_LATEST)

    return router


def _incidents_router(neighbours: Callable[[str], set[str]]) -> APIRouter:
    """The incidents as JSON: the list, one incident, those like it and those beside it."""
    router = APIRouter()

    @router.get("/api/incidents")
    def list_incidents(s: StoreDep, state: str | None = None) -> list[Incident]:
        return s.list_incidents(state=state)

    @router.get("/api/incidents/{incident_id}")
    def get_incident(s: StoreDep, incident_id: str) -> dict[str, Any]:
        inc = _incident_or_404(s, incident_id)
        diagnosis = s.get_diagnosis(incident_id)
        return {
            "incident": inc.model_dump(),
            "findings": [f.model_dump() for f in s.findings_for(incident_id)],
            "evidence": [e.model_dump() for e in diagnosis.evidence] if diagnosis else [],
        }

    @router.get("/api/incidents/{incident_id}/similar")
    def similar_incidents(
        s: StoreDep, incident_id: str, days: LookbackDays = 90
    ) -> IncidentHistory:
        """The earlier incidents like this one (same entity and KPI, or same cause) and what
        the NOC's verdicts on them were (:mod:`noc_assistant.triage.history`)."""
        return similar_in_store(s, _incident_or_404(s, incident_id), lookback_s=days * 86_400)

    @router.get("/api/incidents/{incident_id}/concurrent")
    def concurrent_incidents(s: StoreDep, incident_id: str) -> list[PastIncident]:
        """The incidents at the same time on the same or a neighbouring entity (another bus
        worker's pages of the same fault, say), by opening."""
        inc = _incident_or_404(s, incident_id)
        return concurrent_in_store(s, inc, neighbours, now=time.time())

    return router


def _stream_router(hub: Broadcaster) -> APIRouter:
    """``/api/stream``: the hub's events as server-sent events, with a keep-alive."""
    router = APIRouter()

    @router.get("/api/stream")
    async def stream(request: Request) -> StreamingResponse:
        queue = hub.subscribe()

        async def events() -> AsyncIterator[str]:
            try:
                yield ": connected\n\n"
                while not await request.is_disconnected():
                    try:
                        event = await asyncio.wait_for(queue.get(), timeout=15)
                    except TimeoutError:
                        yield ": keep-alive\n\n"
                        continue
                    yield f"event: {event.get('kind', 'message')}\ndata: {json.dumps(event)}\n\n"
            finally:
                hub.unsubscribe(queue)

        return StreamingResponse(events(), media_type="text/event-stream")

    return router


def _console_router(
    env: jinja2.Environment, drafter: Drafter | None, neighbours: Callable[[str], set[str]]
) -> APIRouter:
    """The console's pages: the incident list and one incident."""
    router = APIRouter()

    @router.get("/", response_class=HTMLResponse)
    def index(
        s: StoreDep,
        state: Annotated[str | None, Query(max_length=20)] = None,
        entity: Annotated[str | None, Query(max_length=200)] = None,
        fault: Annotated[str | None, Query(max_length=100)] = None,
        q: Annotated[str | None, Query(max_length=200)] = None,
        hours: Annotated[float | None, Query(gt=0, le=24 * 366)] = None,
    ) -> str:
        """Open incidents first, then the rest by opening; filtered by state, entity (a shell
        pattern), the assistant's top fault, free text (id, title, entities, KPIs) and the
        last ``hours``."""
        wanted = Triage(state, entity, fault, q, time.time() - hours * 3600 if hours else None)
        return _index_page(env, s, wanted)

    @router.get("/incidents/{incident_id}", response_class=HTMLResponse)
    def incident_page(s: StoreDep, incident_id: str) -> str:
        return _incident_page(env, s, _incident_or_404(s, incident_id), drafter, neighbours)

    return router


def _index_page(env: jinja2.Environment, s: Store, wanted: Triage) -> str:
    """The incident list as ``wanted`` filters and orders it."""
    listed = s.list_incidents()
    incidents = wanted.order([i for i in listed if wanted.keeps(i)])
    reviews = s.reviews()
    verdicts = [reviews[i.id].verdict if i.id in reviews else None for i in incidents]
    judged = sum(1 for v in verdicts if v in ("fault", "no_fault"))
    false = sum(1 for v in verdicts if v == "no_fault")
    return env.get_template("index.html").render(
        incidents=incidents,
        open_count=sum(1 for i in incidents if i.state == "open"),
        reviews=reviews,
        judged=judged,
        false_count=false,
        unreviewed=sum(1 for v in verdicts if v is None),
        maintenance=s.maintenance_windows(ending_after=time.time()),
        tuning=s.tuning_rules(ending_after=time.time()),
        now=time.time(),
        wanted=wanted,
        listed=len(listed),
        sparks={
            i: sparkline(fs)
            for i, fs in s.findings_of([x.id for x in incidents[:SPARKLINES]]).items()
        },
        faults=sorted({i.hypotheses[0].fault for i in listed if i.hypotheses}),
    )


def _incident_page(
    env: jinja2.Environment,
    s: Store,
    inc: Incident,
    drafter: Drafter | None,
    neighbours: Callable[[str], set[str]],
) -> str:
    """One incident's page: findings, report, e-mails, chat, and the incidents like it and
    beside it."""
    incident_id = inc.id
    findings: list[Finding] = s.findings_for(incident_id)
    diagnosis = s.get_diagnosis(incident_id)
    review = s.get_review(incident_id)
    seen = similar_in_store(s, inc)
    beside = concurrent_in_store(s, inc, neighbours, now=time.time())
    report = (
        drafter.report(inc, diagnosis, review=review, seen=seen, beside=beside)
        if drafter and diagnosis
        else None
    )
    return env.get_template("incident.html").render(
        incident=inc,
        findings=findings,
        evidence=diagnosis.evidence if diagnosis else [],
        report=report,
        emails=s.list_emails(incident_id),
        partner=_partner(drafter, diagnosis, review),
        chat=drafter is not None and diagnosis is not None,
        kept=s.chat_for(incident_id),
        review=review,
        faults=sorted(set(drafter.pack.faults) - {"no_fault"}) if drafter else [],
        top=diagnosis.top if diagnosis else None,
        seen=seen,
        beside=beside,
        plots=evidence_plots(
            inc, findings, s.maintenance_windows(), drafter.pack.kpis if drafter else None
        ),
        topology=topology_svg(
            inc.entities,
            diagnosis.top.entity if diagnosis else None,
            drafter.network_topology,
        )
        if drafter
        else "",
    )
