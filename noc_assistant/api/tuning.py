"""Raised bars over HTTP (mounted by :func:`create_app`; :mod:`noc_assistant.ops.raised_bars`).

``GET /api/tuning/suggestions`` proposes bars from the verdicts (the KPIs that opened false
pages, the bar that would have held them, the confirmed faults it would have held too);
``POST /api/tuning`` declares one (a write: an operator's token; a reason is required); the running
pipeline takes it at its next round. Ending one early is a write too; a bar is never deleted.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Query
from pydantic import BaseModel, ConfigDict, Field

from noc_assistant.api.deps import Operator, StoreDep, acting, locked_step
from noc_assistant.api.spans import Ending, declared, loader
from noc_assistant.errors import TuningError
from noc_assistant.models import Tuning
from noc_assistant.ops.raised_bars import DEFAULT_TUNING_S, new_rule, suggest
from noc_assistant.triage.drafting import Drafter

__all__ = ["tuning_router"]


class Declaration(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kpi: str = Field(min_length=1, max_length=200)
    entity: str = Field(default="*", min_length=1, max_length=200)
    min_score: float
    by: str | None = Field(default=None, min_length=1, max_length=200)
    """Who (needed with the shared token; a named user is recorded as itself)."""
    reason: str = Field(min_length=1, max_length=2000)
    duration_s: float = Field(default=DEFAULT_TUNING_S, gt=0)


def tuning_router(drafter: Drafter | None, clock: Callable[[], float] = time.time) -> APIRouter:
    """The endpoints; the pack of ``drafter`` checks that a declared KPI exists."""
    router = APIRouter()
    lock = threading.Lock()

    @router.get("/api/tuning")
    def rules(s: StoreDep, every: Annotated[bool, Query(alias="all")] = False) -> list[Tuning]:
        """The raised bars in force (``?all=true``: every one on record), by start."""
        return s.tuning_rules(ending_after=float("-inf") if every else clock())

    @router.get("/api/tuning/suggestions")
    def suggestions(
        s: StoreDep,
        days: Annotated[float, Query(gt=0)] = 30.0,
        min_false: Annotated[int, Query(ge=1)] = 2,
        margin: Annotated[float, Query(ge=1.0)] = 1.25,
    ) -> list[dict[str, Any]]:
        now = clock()
        found = suggest(s, now - days * 86400.0, now, min_false=min_false, margin=margin)
        return [dataclasses.asdict(x) for x in found]

    @router.post("/api/tuning", status_code=201)
    def declare(s: StoreDep, caller: Operator, d: Declaration) -> Tuning:
        kpis = set(drafter.pack.kpis) if drafter is not None else None
        rule = declared(
            caller, d, new_rule, TuningError, clock, kpis=kpis, entities=_known(drafter)
        )
        s.save_tuning(rule)
        return rule

    @router.post("/api/tuning/{rule_id}/end")
    def end(s: StoreDep, caller: Operator, rule_id: str, e: Ending) -> Tuning:
        by = acting(caller, e.by, "by") or ""
        load = loader(s.get_tuning, rule_id, "raised bar")

        def step(t: Tuning) -> Tuning:
            return t.ended(by, clock())

        return locked_step(lock, load, step, s.save_tuning, TuningError, 422)

    return router


def _known(drafter: Drafter | None) -> set[str] | None:
    """The network's entities, where the drafter's topology knows any."""
    types = drafter.network_topology.types if drafter is not None else {}
    return set(types) or None
