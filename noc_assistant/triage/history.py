"""Seen before and at the same time: the incidents the store remembers that look like this
one, and what the NOC found each time; and the incidents that ran beside it on the same or a
neighbouring entity.

An on-call engineer's first question after "what is it?" is "has this happened before, and
what was it then?". An earlier incident (opened in the ``lookback`` before this one) is like
this one when

- it paged on the same thing: it shares an entity **and** a KPI with this one
  (``same_alert``), or
- it pointed at the same cause: its top hypothesis, or the root cause the NOC confirmed for it,
  is this incident's top hypothesis (the same fault class on the same entity;
  ``same_cause``).

Each comes with its review, so the summary can say what the verdicts were: an alert judged a
false alarm the last three times it fired is a different page from one that was a real UDM
timeout each time. Nothing here changes a detector or a diagnosis; it is for the person.

**At the same time** (:func:`concurrent`): incidents whose span overlaps this one's (give or
take :data:`MARGIN_S`) on an entity of this one or a topology neighbour of one (what the
entity depends on, what depends on it). Several bus workers each correlate only their own
entities, and a fault upstream pages from each; this is where the on-call sees them together.

>>> from noc_assistant.models import Hypothesis, Incident, Review
>>> now = Incident(id="i-3", fingerprint="f", opened_at=3e6, updated_at=3e6,
...                entities=["upf-2"], kpis=["upf-rx-drop"],
...                hypotheses=[Hypothesis(fault="upf_gtpu_drop", entity="upf-2", confidence=0.8)])
>>> old = Incident(id="i-1", fingerprint="f", opened_at=2e6, updated_at=2e6,
...                entities=["upf-2", "smf-1"], kpis=["upf-rx-drop"])
>>> past = similar(now, [old], {"i-1": Review(incident_id="i-1", verdict="no_fault",
...                                          verdict_by="ana", verdict_at=2.1e6)})
>>> [(p.id, p.match, p.verdict) for p in past.similar]
[('i-1', ['same_alert'], 'no_fault')]
>>> past.hint
'Seen 1 time in the last 90 days: judged a false alarm 1 of 1 time.'
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Literal

from pydantic import BaseModel, Field

from noc_assistant.models import Hypothesis, Incident, Review
from noc_assistant.store import Store

__all__ = [
    "LOOKBACK_S",
    "MARGIN_S",
    "IncidentHistory",
    "PastIncident",
    "concurrent",
    "concurrent_in_store",
    "similar",
    "similar_in_store",
]

LOOKBACK_S = 90 * 86_400.0
"""How far back an earlier incident counts (90 days: a quarter of the same network)."""
MAX_SHOWN = 20
MARGIN_S = 600.0
"""How far apart two incidents' spans may lie and still count as at the same time (the
correlation window's default)."""

Match = Literal["same_alert", "same_cause", "same_entity", "neighbour"]


class PastIncident(BaseModel):
    """One earlier incident like this one, with what the NOC found."""

    id: str
    opened_at: float
    resolved_at: float | None
    state: str
    title: str
    entities: list[str]
    kpis: list[str]
    top: Hypothesis | None
    match: list[Match]
    verdict: str | None = None
    """The NOC's verdict (``fault``, ``no_fault``, ``maintenance``); None: not judged."""
    confirmed: str | None = None
    """The confirmed root cause (``fault on entity``) of a verdict ``fault`` that names one."""
    verdict_by: str | None = None


class IncidentHistory(BaseModel):
    """The earlier incidents like one incident, newest first, and what their verdicts say."""

    incident_id: str
    lookback_s: float
    total: int
    """How many matched (``similar`` shows the newest :data:`MAX_SHOWN`)."""
    similar: list[PastIncident] = Field(default_factory=list)
    judged: int = 0
    false_alarms: int = 0
    confirmed: dict[str, int] = Field(default_factory=dict)
    """Confirmed root causes among them (``fault on entity`` → times), most frequent first."""
    hint: str = ""


def _top(inc: Incident) -> tuple[str, str] | None:
    h = inc.hypotheses[0] if inc.hypotheses else None
    return (h.fault, h.entity) if h is not None and h.fault != "no_fault" else None


def _past(inc: Incident, review: Review | None, match: list[Match]) -> PastIncident:
    """``inc`` as an earlier (or concurrent) incident, with what the NOC found: its verdict
    and confirmed root cause."""
    rc = review.root_cause if review is not None else None  # (entity, fault)
    return PastIncident(
        id=inc.id,
        opened_at=inc.opened_at,
        resolved_at=inc.resolved_at,
        state=inc.state,
        title=inc.title,
        entities=inc.entities,
        kpis=inc.kpis,
        top=inc.hypotheses[0] if inc.hypotheses else None,
        match=match,
        verdict=review.verdict if review is not None else None,
        confirmed=f"{rc[1]} on {rc[0]}" if rc else None,
        verdict_by=review.verdict_by if review is not None else None,
    )


def _span(inc: Incident, now: float | None) -> tuple[float, float]:
    """When ``inc`` ran: from its opening to its resolution (an open one: to ``now``, or its
    last update without one)."""
    end = inc.resolved_at if inc.resolved_at is not None else (now or inc.updated_at)
    return inc.opened_at, max(end, inc.updated_at)


def _times(n: int) -> str:
    return f"{n} time" if n == 1 else f"{n} times"


def similar(
    incident: Incident,
    earlier: Iterable[Incident],
    reviews: Mapping[str, Review],
    *,
    lookback_s: float = LOOKBACK_S,
) -> IncidentHistory:
    """The incidents of ``earlier`` like ``incident`` (see the module docstring)."""
    cause = _top(incident)
    entities, kpis = set(incident.entities), set(incident.kpis)
    found: list[PastIncident] = []
    for inc in earlier:
        if inc.id == incident.id or inc.opened_at >= incident.opened_at:
            continue
        if inc.opened_at < incident.opened_at - lookback_s:
            continue
        review = reviews.get(inc.id)
        match: list[Match] = []
        if entities & set(inc.entities) and kpis & set(inc.kpis):
            match.append("same_alert")
        rc = review.root_cause if review is not None else None
        confirmed = (rc[1], rc[0]) if rc is not None else None  # (fault, entity)
        if cause is not None and cause in (_top(inc), confirmed):
            match.append("same_cause")
        if not match:
            continue
        found.append(_past(inc, review, match))
    found.sort(key=lambda p: (-p.opened_at, p.id))
    judged = [p for p in found if p.verdict is not None]
    false_alarms = sum(p.verdict == "no_fault" for p in judged)
    causes = Counter(p.confirmed for p in judged if p.confirmed)
    days = lookback_s / 86_400.0
    hint = ""
    if found:
        hint = f"Seen {_times(len(found))} in the last {days:g} days"
        if judged:
            hint += f": judged a false alarm {false_alarms} of {_times(len(judged))}"
            if causes:
                (top_cause, n), *_ = causes.most_common(1)
                hint += f"; confirmed {top_cause} {_times(n)}"
        else:
            hint += ", none judged"
        hint += "."
    return IncidentHistory(
        incident_id=incident.id,
        lookback_s=lookback_s,
        total=len(found),
        similar=found[:MAX_SHOWN],
        judged=len(judged),
        false_alarms=false_alarms,
        confirmed=dict(causes.most_common()),
        hint=hint,
    )


def similar_in_store(
    store: Store, incident: Incident, *, lookback_s: float = LOOKBACK_S
) -> IncidentHistory:
    """:func:`similar` over the store's incidents opened in the ``lookback_s`` before
    ``incident``, with their reviews."""
    since, until = incident.opened_at - lookback_s, incident.opened_at
    cause = _top(incident)
    # candidates only: an earlier incident like this one shares an entity, or its own top
    # cause or its review's confirmed cause names this one's fault class
    needles: list[str | tuple[str, ...]] = [*incident.entities, *([cause] if cause else [])]
    earlier = store.incidents_between(since, until, mentioning=needles) if needles else []
    if cause is not None:
        have = {i.id for i in earlier}
        judged = [i for i in store.reviewed_mentioning(cause) if i not in have]
        earlier += [i for i in store.incidents_with_ids(judged) if since <= i.opened_at < until]
    reviews = store.reviews_for([i.id for i in earlier])
    return similar(incident, earlier, reviews, lookback_s=lookback_s)


def concurrent(
    incident: Incident,
    others: Iterable[Incident],
    neighbours: Callable[[str], set[str]] | None = None,
    reviews: Mapping[str, Review] | None = None,
    *,
    now: float | None = None,
    margin_s: float = MARGIN_S,
) -> list[PastIncident]:
    """The incidents of ``others`` at the same time as ``incident`` on one of its entities or,
    given ``neighbours`` (an entity's topology neighbours), on a neighbour of one; by opening,
    each with its review from ``reviews``. An open incident's span runs to ``now`` (default:
    its last update).

    >>> a = Incident(id="a", fingerprint="a", opened_at=0.0, updated_at=60.0, state="open",
    ...              entities=["smf-1"], kpis=["smf-pfcp-peers"])
    >>> b = Incident(id="b", fingerprint="b", opened_at=30.0, updated_at=90.0, state="open",
    ...              entities=["upf-2"], kpis=["upf-pfcp-peers"])
    >>> near = {"smf-1": {"upf-2"}}
    >>> [(p.id, p.match) for p in concurrent(a, [b], lambda e: near.get(e, set()))]
    [('b', ['neighbour'])]
    >>> concurrent(a, [b])
    []
    """
    begin, end = _span(incident, now)
    ours = set(incident.entities)
    near = set().union(*(neighbours(e) for e in ours)) - ours if neighbours else set()
    out: list[PastIncident] = []
    for inc in others:
        if inc.id == incident.id:
            continue
        b, e = _span(inc, now)
        if b > end + margin_s or e < begin - margin_s:
            continue
        theirs = set(inc.entities)
        match: list[Match] = []
        if theirs & ours:
            match.append("same_entity")
        elif theirs & near:
            match.append("neighbour")
        else:
            continue
        out.append(_past(inc, (reviews or {}).get(inc.id), match))
    out.sort(key=lambda p: (p.opened_at, p.id))
    return out


def concurrent_in_store(
    store: Store,
    incident: Incident,
    neighbours: Callable[[str], set[str]] | None = None,
    *,
    now: float | None = None,
    margin_s: float = MARGIN_S,
) -> list[PastIncident]:
    """:func:`concurrent` over the store's incidents opened from a day before ``incident`` to
    its end, with their reviews."""
    _, end = _span(incident, now)
    ours = set(incident.entities)
    near = set().union(*(neighbours(e) for e in ours)) if neighbours else set()
    others = store.incidents_between(
        incident.opened_at - 86_400.0, end + margin_s, mentioning=sorted(ours | near)
    )
    reviews = store.reviews_for([i.id for i in others])
    return concurrent(incident, others, neighbours, reviews, now=now, margin_s=margin_s)
