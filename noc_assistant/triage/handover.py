"""The shift handover: what the next shift must know, from the store alone.

A NOC hands over at every shift change. :func:`handover` gathers, for the shift that ends at
``until`` and began at ``since``:

- the incidents still open, nobody's first (an open incident that nobody has taken is the
  first thing the next shift reads), each with its owner, verdict, the top-ranked cause and
  what was seen before (:mod:`noc_assistant.triage.history`);
- what the shift saw: incidents opened and resolved, how many were judged false, how many
  pages it took (openings, reopenings, escalations);
- maintenance in force now, planned for the next shift, and over within the shift (what held
  its pages back);
- the raised bars in force (:mod:`noc_assistant.ops.raised_bars`: KPIs that page only from a higher
  score), and those over within the shift;
- partner-NOC e-mails waiting for approval or for sending, and sent ones some recipients did
  not get;
- the integrations needing attention: notifications (:mod:`noc_assistant.integrations.notify`)
  and partner trouble tickets (:mod:`noc_assistant.integrations.tmf621`) that failed within
  the shift or are still being retried, each with its route or partner, incident, attempts,
  last error and since when;
- the incidents whose triage chat was kept during the shift.

``prompts/templates/handover.md.j2`` writes it as Markdown (``noc incident handover``,
``GET /api/handover``, which also answers it as JSON). No model writes any of it.

>>> from noc_assistant.store import SqliteStore
>>> from noc_assistant.models import Incident
>>> store = SqliteStore(":memory:")
>>> store.save_incident(Incident(id="inc-1", fingerprint="f", opened_at=3600.0,
...                              updated_at=3660.0, entities=["upf-3"], title="upf-3 down"))
>>> h = handover(store, since=0.0, until=7200.0)
>>> [i["id"] for i in h["open"]], h["open"][0]["owner"], h["counts"]["opened"]
(['inc-1'], None, 1)
>>> print(render(h).splitlines()[0])
# Shift handover, 1970-01-01 00:00 → 02:00 UTC
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from noc_assistant.models import Incident, Maintenance, Review, Tuning
from noc_assistant.store import Store
from noc_assistant.store.deliveries import Deliveries
from noc_assistant.store.tickets import TicketBook
from noc_assistant.triage.history import LOOKBACK_S, similar
from prompts import environment

__all__ = ["handover", "render"]

NEXT_SHIFT_S = 12 * 3600.0
"""How far ahead planned maintenance is listed."""


def _utc(ts: float | None) -> str:
    if ts is None:
        return ""
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M")


def handover(store: Store, since: float, until: float) -> dict[str, Any]:
    """The handover of the shift ``[since, until)`` (see the module docstring), as data."""
    reviews = store.reviews()
    open_now = [i for i in store.list_incidents(state="open", limit=10_000) if i.opened_at < until]
    rows = _open_rows(store, open_now, reviews, until)
    during = store.incidents_between(since, until)
    resolved = [i for i in store.incidents_resolved_between(since, until) if i.state == "resolved"]
    judged_false = [
        i.id for i in during if (r := reviews.get(i.id)) is not None and r.verdict == "no_fault"
    ]
    seen = {i.id: i for i in [*during, *open_now, *resolved]}
    pages = sum(
        _within(t, since, until)
        for i in seen.values()
        for t in [i.opened_at, *i.reopened_at, *i.escalated_at]
    )
    windows = store.maintenance_windows(ending_after=since)
    bars = store.tuning_rules(ending_after=since)
    chats: dict[str, int] = {}
    for incident_id in sorted(seen):
        n = sum(_within(t.at, since, until) for t in store.chat_for(incident_id))
        if n:
            chats[incident_id] = n
    return {
        "since": _utc(since),
        "until": _utc(until),
        "open": rows,
        "counts": {
            "open": len(rows),
            "not_taken": sum(1 for r in rows if r["owner"] is None),
            "opened": len(during),
            "resolved": len(resolved),
            "judged_false": len(judged_false),
            "pages": pages,
        },
        "judged_false": judged_false,
        "integrations": _integrations(store, {i.id for i in open_now}, since, until),
        "maintenance_now": [_window(w) for w in windows if w.active(until)],
        "maintenance_planned": [
            _window(w) for w in windows if until < w.start <= until + NEXT_SHIFT_S
        ],
        "maintenance_over": [_window(w) for w in windows if since < w.end < until],
        "tuning_now": [_bar(t) for t in bars if t.active(until)],
        "tuning_over": [_bar(t) for t in bars if since < t.end < until],
        **_emails(store, since, until),
        "chats": chats,
    }


def _open_rows(
    store: Store, open_now: list[Incident], reviews: dict[str, Review], until: float
) -> list[dict[str, Any]]:
    """The open incidents, nobody's first, then the oldest: owner, verdict, the top-ranked
    cause, and what each was seen before as."""
    # the incidents any open one may have been seen before as: read once, not once per incident
    first = min((i.opened_at for i in open_now), default=until)
    earlier = store.incidents_between(first - LOOKBACK_S, until)
    rows = []
    for inc in open_now:
        review = reviews.get(inc.id)
        diagnosis = store.get_diagnosis(inc.id)
        top = diagnosis.top if diagnosis is not None else None
        rows.append(
            {
                "id": inc.id,
                "title": inc.title,
                "opened": _utc(inc.opened_at),
                "opened_at": inc.opened_at,
                "entities": list(inc.entities),
                "owner": review.acknowledged_by if review else None,
                "verdict": review.verdict if review else None,
                "cause": (
                    f"{top.fault} on {top.entity} ({100 * top.confidence:.0f} %)" if top else None
                ),
                "seen_before": similar(inc, earlier, reviews).hint or None,
            }
        )
    rows.sort(key=lambda r: (r["owner"] is not None, r["opened_at"]))
    return rows


def _emails(store: Store, since: float, until: float) -> dict[str, list[dict[str, Any]]]:
    """Partner-NOC e-mails waiting (for approval or sending), and those sent within the shift
    that some recipients did not get."""
    emails = store.list_emails()
    return {
        "emails_waiting": [
            {"id": m.id, "incident": m.incident_id, "status": m.status, "to": list(m.to)}
            for m in emails
            if m.status in ("draft", "approved")
        ],
        "emails_partly_delivered": [
            {"id": m.id, "incident": m.incident_id, "undelivered": dict(m.undelivered)}
            for m in emails
            if m.status == "sent" and m.undelivered and _within(m.sent_at, since, until)
        ],
    }


def _integrations(
    store: Store, open_ids: set[str], since: float, until: float
) -> list[dict[str, Any]]:
    """Notifications (:mod:`noc_assistant.store.deliveries`) and partner tickets
    (:mod:`noc_assistant.store.tickets`) that failed within the shift or are still retried:
    a notification pending after a failed attempt, a ticket not created or a resolution
    owed of an open incident (retried at its next event); none made after the shift."""
    out = []
    deliveries = Deliveries(store).troubled(since, until)
    for d in sorted(deliveries, key=lambda d: (d.created_at, d.route, d.seq)):
        retrying = d.status == "pending"
        out.append(
            {
                "integration": "notification",
                "target": f"route {d.route}",
                "incident": d.incident_id,
                "what": d.event,
                "state": "retrying" if retrying else "failed",
                "attempts": d.attempts,
                "last_error": d.last_error or "",
                "since": _utc(d.created_at),
                "next": _utc(d.next_at) if retrying else None,
            }
        )
    for t in TicketBook(store).failing():
        owed = t.ticket_id is None or t.wanted is not None
        retrying = owed and t.incident_id in open_ids and t.created_at < until
        if not (retrying or _within(t.tried_at, since, until)):
            continue
        if t.ticket_id is None:
            what = "ticket not created"
        elif t.wanted:
            what = f"ticket {t.ticket_id}: status {t.wanted} owed"
        else:
            what = f"ticket {t.ticket_id}: note not added"
        out.append(
            {
                "integration": "ticket",
                "target": f"partner {t.plmn[:3]}-{t.plmn[3:]}",
                "incident": t.incident_id,
                "what": what,
                "state": "retrying" if retrying else "failed",
                "attempts": None,  # the tickets table keeps the last try, not a count
                "last_error": t.last_error or "",
                "since": _utc(t.created_at if t.ticket_id is None else t.updated_at),
                "next": None,
            }
        )
    return out


def _within(ts: float | None, since: float, until: float) -> bool:
    return ts is not None and since <= ts < until


def _window(w: Maintenance) -> dict[str, Any]:
    return {
        "id": w.id,
        "entity": w.entity,
        "start": _utc(w.start),
        "end": _utc(w.end),
        "by": w.by,
        "reason": w.reason,
    }


def _bar(t: Tuning) -> dict[str, Any]:
    return {
        "id": t.id,
        "kpi": t.kpi,
        "entity": t.entity,
        "min_score": t.min_score,
        "end": _utc(t.end),
        "by": t.by,
        "reason": t.reason,
        "ended_by": t.ended_by,
    }


def render(data: dict[str, Any]) -> str:
    """The handover as Markdown (``prompts/templates/handover.md.j2``)."""
    text: str = environment().get_template("handover.md.j2").render(**data)
    return text.strip() + "\n"
