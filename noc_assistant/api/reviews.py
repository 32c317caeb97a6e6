"""What the NOC did with its incidents, over HTTP (mounted by :func:`create_app`).

Acknowledging an incident (who took it) and judging it (``fault`` with the confirmed root
cause, ``no_fault`` for a false page, ``maintenance``) are writes: they need an operator's
token (:mod:`noc_assistant.api.deps`; a named user is recorded as itself, the shared
``NOC_API_TOKEN`` needs the person's name in ``by``), and each step is kept in the review's
history. Reading a review, and the live evaluation the verdicts make
(:func:`evals.live.live_report`: the false-alarm share with its interval, false alerts per
day, RCA accuracy against the confirmed causes, time to acknowledge, the noisiest KPIs) and
the verdicts as a labels file (:func:`evals.live.labels_from_reviews`), need none.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Annotated, Any

import jinja2
from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, PlainTextResponse
from pydantic import BaseModel, ConfigDict, Field

from evals._io import json_safe
from evals.live import labels_from_reviews, live_report, period
from noc_assistant.api.deps import Operator, StoreDep, acting, locked_step
from noc_assistant.errors import ReviewError
from noc_assistant.ingest.replay import parse_time
from noc_assistant.ingest.window import TimeWindow
from noc_assistant.models import Review, Verdict
from noc_assistant.store import Store
from noc_assistant.triage.drafting import Drafter
from noc_assistant.triage.handover import handover, render

__all__ = ["reviews_router"]


class Ack(BaseModel):
    model_config = ConfigDict(extra="forbid")

    by: str | None = Field(default=None, min_length=1, max_length=200)


class Judgement(BaseModel):
    model_config = ConfigDict(extra="forbid")

    by: str | None = Field(default=None, min_length=1, max_length=200)
    verdict: Verdict
    fault: str | None = Field(default=None, min_length=1, max_length=100)
    entity: str | None = Field(default=None, min_length=1, max_length=200)
    partner: str | None = Field(default=None, pattern=r"^\d{3}-?\d{2,3}$")
    note: str | None = Field(default=None, max_length=2000)


TimeParam = Annotated[str | None, Query(description="RFC 3339 time or epoch seconds")]

QUERY_AHEAD_S = 100 * 365.25 * 86_400.0
"""How far past now a report's period may reach (``until=2100-01-01`` reads "from then on");
1e20 or year 9999 are no period (they answered 500 where a date was written)."""


def reviews_router(drafter: Drafter | None, clock: Callable[[], float] = time.time) -> APIRouter:
    """The endpoints; the pack's fault classes (through ``drafter``) check a verdict's root
    cause, and its network counts the monitored entities."""
    router = APIRouter()
    window = TimeWindow(ahead_s=QUERY_AHEAD_S, clock=clock)
    _review_routes(router, drafter, clock)
    _report_routes(router, drafter, clock, window)
    return router


def _review_of(s: Store, incident_id: str) -> Review:
    review = s.review_of(incident_id)
    if review is None:
        raise HTTPException(404, f"incident {incident_id} not found")
    return review


def _review_routes(router: APIRouter, drafter: Drafter | None, clock: Callable[[], float]) -> None:
    """Reading a review; acknowledging and judging (an operator)."""
    lock = threading.Lock()

    def change(s: Store, incident_id: str, step: Callable[[Review], Review]) -> Review:
        # two engineers at once both land in the history
        return locked_step(
            lock, lambda: _review_of(s, incident_id), step, s.save_review, ReviewError, 422
        )

    @router.get("/api/incidents/{incident_id}/review")
    def get_review(s: StoreDep, incident_id: str) -> Review:
        return _review_of(s, incident_id)

    @router.post("/api/incidents/{incident_id}/ack")
    def acknowledge(s: StoreDep, caller: Operator, incident_id: str, ack: Ack) -> Review:
        by = acting(caller, ack.by, "by") or ""
        return change(s, incident_id, lambda r: r.acknowledged(by, clock()))

    @router.post("/api/incidents/{incident_id}/verdict")
    def judge(s: StoreDep, caller: Operator, incident_id: str, j: Judgement) -> Review:
        known = set(drafter.pack.faults) if drafter is not None else None
        by = acting(caller, j.by, "by") or ""
        return change(
            s,
            incident_id,
            lambda r: r.judged(
                j.verdict,
                by,
                clock(),
                fault=j.fault,
                entity=j.entity,
                partner=j.partner,
                note=j.note,
                known_faults=known,
            ),
        )


def _report_routes(
    router: APIRouter, drafter: Drafter | None, clock: Callable[[], float], window: TimeWindow
) -> None:
    """The live evaluation (JSON and page), the shift handover and the verdicts as labels."""

    def within(name: str, ts: float) -> float:
        """``ts`` if a report may start or end there (since 2000, not a century ahead)."""
        try:
            return window.check(ts)
        except ValueError as exc:
            raise HTTPException(422, f"{name}: {exc}") from None

    def span(since: str | None, until: str | None) -> tuple[float, float]:
        try:
            start, end = period(since, until, clock())
        except ValueError as exc:
            raise HTTPException(422, str(exc)) from None
        return within("since", start), within("until", end)

    def figures(s: Store, since: str | None, until: str | None) -> dict[str, Any]:
        start, end = span(since, until)
        entities = len(drafter.network_topology.types) if drafter is not None else None
        faults = set(drafter.pack.faults) if drafter is not None else None
        report = live_report(s, start, end, entities=entities or None, faults=faults)
        safe: dict[str, Any] = json_safe(report)  # an undefined figure is null, not NaN
        return safe

    @router.get("/api/eval/live")
    def live(s: StoreDep, since: TimeParam = None, until: TimeParam = None) -> dict[str, Any]:
        return figures(s, since, until)

    @router.get("/eval", response_class=HTMLResponse)
    def live_page(
        s: StoreDep, request: Request, since: TimeParam = None, until: TimeParam = None
    ) -> str:
        """The live report as a page: the headline figures, then KPIs and detectors by how
        many false pages they gave, then the RCA misses."""
        env: jinja2.Environment = request.app.state.templates
        return env.get_template("eval.html").render(r=figures(s, since, until))

    @router.get("/api/handover")
    def shift_handover(
        s: StoreDep, hours: float = 8.0, until: TimeParam = None, format: str = "markdown"
    ) -> Any:
        """The shift handover (:mod:`noc_assistant.triage.handover`): Markdown or JSON."""
        if not 0 < hours <= 24 * 7:  # NaN too
            raise HTTPException(422, "hours: between 0 and 168")
        try:
            end = parse_time(until, clock(), "until")
        except ValueError as exc:
            raise HTTPException(422, str(exc)) from None
        end = within("until", end)
        data = handover(s, within("until - hours", end - hours * 3600.0), end)
        if format == "json":
            return data
        return PlainTextResponse(render(data), media_type="text/markdown; charset=utf-8")

    @router.get("/api/eval/labels")
    def labels(s: StoreDep, since: TimeParam = None, until: TimeParam = None) -> dict[str, Any]:
        start, end = span(since, until)
        doc: dict[str, Any] = json_safe(labels_from_reviews(s, start, end))
        return doc
