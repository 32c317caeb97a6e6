"""Planned maintenance over HTTP (mounted by :func:`create_app`).

A NOC declares planned work before it starts, so that nobody is paged for what it breaks: an
entity and a window (``start``, default now; ``end``, or ``duration_s``), who declared it and
why. The running pipeline (``noc watch``, ``noc bus worker``) takes the store's windows at its
next round (:meth:`noc_assistant.cli._live.IncidentOutput.sync_maintenance`): findings of the
entity and its topology neighbours are kept and page nobody, and a silence that outlasts the
window pages when it ends. Declaring and ending early are writes (an operator's token); a
window is never deleted, so what was muted when stays on record. With an Alertmanager, each
window is also a silence there (``silence_id``; ``silence_error`` says why not).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from fastapi import APIRouter, HTTPException
from pydantic import BaseModel, ConfigDict, Field

from noc_assistant.api.deps import Operator, StoreDep, acting, locked_step
from noc_assistant.api.spans import Ending, declared, loader
from noc_assistant.errors import MaintenanceError
from noc_assistant.ingest.window import TimeWindow
from noc_assistant.integrations.alertmanager import Silences
from noc_assistant.models import Maintenance
from noc_assistant.ops.maintenance import declare, end_early, new_window
from noc_assistant.triage.drafting import Drafter

__all__ = ["maintenance_router"]


class Declaration(BaseModel):
    model_config = ConfigDict(extra="forbid")

    entity: str = Field(min_length=1, max_length=200)
    by: str | None = Field(default=None, min_length=1, max_length=200)
    """Who (needed with the shared token; a named user is recorded as itself)."""
    reason: str | None = Field(default=None, max_length=2000)
    start: str | None = None
    """RFC 3339 or epoch seconds; default: now."""
    end: str | None = None
    duration_s: float | None = Field(default=None, gt=0)


PLAN_AHEAD_S = 100 * 365.25 * 86_400.0
"""How far ahead a window may start: a century (work planned for 2100 is odd, not damage), not
a date past any page's calendar (a start of 1e20 was stored, and every page that showed it
answered 500)."""


def maintenance_router(
    drafter: Drafter | None,
    silences: Silences | None = None,
    clock: Callable[[], float] = time.time,
) -> APIRouter:
    """The endpoints; the network of ``drafter`` (when it knows entities) checks that a
    declared entity exists, and ``silences`` mirrors each window in Alertmanager."""
    router = APIRouter()
    lock = threading.Lock()
    plan = TimeWindow(ahead_s=PLAN_AHEAD_S, clock=clock)

    @router.get("/api/maintenance")
    def windows(s: StoreDep, current: bool = False) -> list[Maintenance]:
        """Windows not yet over (``current``: only those in force now), by start."""
        now = clock()
        found = s.maintenance_windows(ending_after=now)
        return [w for w in found if w.active(now)] if current else found

    @router.post("/api/maintenance", status_code=201)
    def declare_window(s: StoreDep, caller: Operator, d: Declaration) -> Maintenance:
        known = set(drafter.network_topology.types) if drafter is not None else None
        window = declared(caller, d, new_window, MaintenanceError, clock, known=known)
        try:
            plan.check(window.start)
        except ValueError as exc:
            raise HTTPException(422, f"start: {exc}") from None
        return declare(s, window, silences)

    @router.post("/api/maintenance/{window_id}/end")
    def end(s: StoreDep, caller: Operator, window_id: str, e: Ending) -> Maintenance:
        by = acting(caller, e.by, "by") or ""
        load = loader(s.get_maintenance, window_id, "maintenance window")

        def step(w: Maintenance) -> Maintenance:
            return end_early(w, by, clock(), silences)

        return locked_step(lock, load, step, s.save_maintenance, MaintenanceError, 422)

    return router
