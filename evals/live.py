"""Evaluation from the NOC's own verdicts: how often production paged for nothing.

`noc eval run` scores a replay against labels written beforehand; in operation the labels are
the engineers' verdicts on the incidents they were paged for (:class:`~noc_assistant.models.
Review`: ``fault``, ``no_fault`` — a false page — or ``maintenance``). :func:`live_report`
turns the incidents opened in a period and their verdicts into the figures a NOC reviews every
week, with the report keys of docs/FORMATS.md §5 where they mean the same thing:

- ``false_positives``: incidents judged ``no_fault``; ``false_alarm_share`` the share of the
  judged incidents (``fault`` or ``no_fault``) that were false, with its Wilson 95 % interval
  (``false_alarm_share_ci95``) and, since verdicts lag, the range it would take if every
  incident not yet judged were real or false (``false_alarm_share_bounds``);
- the pages (an incident pages at its opening, each reopening and each escalation; one
  marked as a notice pages no one, ``notices_total`` counts them): ``false_pages`` those of
  incidents judged ``no_fault``; ``duplicate_pages`` those beyond the first for one confirmed
  fault (its repeat pages, and incidents judged ``fault`` with the same root cause that
  opened while an earlier one of it was still open); ``pages_per_labelled_fault_mean`` /
  ``_max`` per confirmed fault; ``no_fault_pages`` the incidents that paged although their
  own rank-1 cause is ``no_fault``;
- ``false_alerts_per_day`` and, given the number of monitored entities,
  ``false_alerts_per_entity_day`` (FORMATS' key): false and duplicate pages per day of data
  (``false_alerts_excluding_duplicates_per_entity_day``: the false pages alone). A day of data
  is a day the store holds records for: ``days`` is the part of the period from the first
  record to the last (``data_since``, ``data_until``; :func:`covered`), not the period asked
  for, so a store that holds one day is not divided by a week;
- ``rca_ac1``, ``rca_ac3``, ``rca_noop_accuracy``: the ranking against the root cause the
  engineers confirmed (``evals.rca``'s scorer; only verdicts that name one count);
- ``time_to_acknowledge_s_p50`` / ``_p95``: from the opening to the first acknowledgement;
  ``time_to_resolve_s_p50`` / ``_p95``: from the opening to the resolution, over the
  resolved incidents not judged false or maintenance (the faults' time to repair);
- ``per_kpi`` and ``per_detector``: incidents and false ones by the KPI and detector of the
  finding that opened them, so the noisiest KPI is the first line to read.

:func:`labels_from_reviews` writes the verdicts as a labels file (docs/FORMATS.md §2), so that a
recording of the same telemetry can be re-scored by `noc eval run` with another detector
version or knowledge pack: the operation's verdicts become its regression test.

>>> from noc_assistant.store import SqliteStore
>>> from noc_assistant.models import Incident, Review
>>> store = SqliteStore(":memory:")
>>> for i in range(4):
...     store.save_incident(Incident(id=f"inc-{i}", fingerprint="f", opened_at=3600.0 * i,
...                                  updated_at=3600.0 * i + 60, entities=["upf-1"]))
>>> store.save_review(Review(incident_id="inc-0").judged("no_fault", "ana", at=100.0))
>>> store.save_review(Review(incident_id="inc-1").judged("fault", "ana", at=3700.0))
>>> r = live_report(store, since=0.0, until=86400.0, entities=10)
>>> r["incidents_total"], r["reviewed"], r["false_positives"], r["false_alarm_share"]
(4, 2, 1, 0.5)
>>> r["false_alarm_share_bounds"], r["data_until"], round(r["days"] * 24, 3)
([0.25, 0.75], '1970-01-01T03:01:00Z', 3.017)
>>> round(r["false_alerts_per_entity_day"], 4), r["duplicate_pages"]  # 1 / (10 × 3.017 h)
(0.7956, 0)
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np

from evals.rca import RcaCase, report_keys, score_rca
from evals.scenario import is_page, rank1_cause, wilson
from noc_assistant.ingest.replay import parse_time
from noc_assistant.models import Incident, Review
from noc_assistant.ops.raised_bars import opening_finding
from noc_assistant.store import Store

__all__ = ["WEEK_S", "covered", "labels_from_reviews", "live_report", "period"]

WEEK_S = 7 * 86400.0
"""The default period of a live report: the week before its end."""


def period(
    since: str | None, until: str | None, now: float, *, flag: str = ""
) -> tuple[float, float]:
    """``[since, until)`` from two time options (RFC 3339 or epoch seconds): ``until``
    defaults to ``now``, ``since`` to :data:`WEEK_S` before it. ``ValueError`` names the
    option (``flag`` is its prefix: ``--`` on the command line).

    >>> period(None, "1970-01-08T00:00:00Z", 0.0)
    (0.0, 604800.0)
    """
    end = parse_time(until, now, f"{flag}until")
    return parse_time(since, end - WEEK_S, f"{flag}since"), end


def _stamp(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _pages(incident: Incident) -> int:
    """Times the on-call was paged for it: the opening (unless it opened as a notice, then
    its promotion is the first page, an escalation), each reopening and escalation (none for
    a notice, :func:`evals.scenario.is_page`)."""
    if not is_page(incident):
        return 0
    opening = 1 if incident.noticed_at is None else 0
    return opening + len(incident.reopened_at) + len(incident.escalated_at)


def _percentile(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else math.nan


def covered(store: Store, since: float, until: float) -> tuple[float, float]:
    """The part of ``[since, until)`` the stored data covers: from its first record (an
    incident's opening or a finding) to its last, so that a store holding one day is not
    divided by the week asked for. ``(since, since)`` when it holds nothing there.

    >>> from noc_assistant.store import SqliteStore
    >>> store = SqliteStore(":memory:")
    >>> store.save_incident(Incident(id="i", fingerprint="f", opened_at=3600.0,
    ...                              updated_at=7200.0))
    >>> covered(store, 0.0, 86400.0), covered(store, 5000.0, 86400.0)
    ((3600.0, 7200.0), (5000.0, 7200.0))
    """
    span = store.time_span()
    if span is None:
        return since, since
    lo, hi = max(since, span[0]), min(until, span[1])
    return (lo, hi) if hi > lo else (since, since)


@dataclass
class _Fault:
    """The pages for one fault the engineers confirmed: incidents judged ``fault`` with the
    same root cause, each opening while an earlier one was still open, are one fault."""

    cause: tuple[str, str] | None
    end: float
    pages: int


def _paging(incidents: list[Incident], reviews: dict[str, Review]) -> dict[str, Any]:
    """Pages judged false, duplicate pages (beyond the first for one confirmed fault) and
    pages per confirmed fault, over ``incidents`` in the order they opened."""
    faults: list[_Fault] = []
    false_pages = duplicates = 0
    for inc in incidents:
        review, pages = reviews.get(inc.id), _pages(inc)
        verdict = review.verdict if review is not None else None
        if verdict == "no_fault":
            false_pages += pages
        if review is None or verdict != "fault" or not pages:
            continue
        end = inc.resolved_at if inc.resolved_at is not None else inc.updated_at
        cause = review.root_cause
        same = [f for f in faults if cause and f.cause == cause and f.end >= inc.opened_at]
        if same:
            same[0].pages += pages
            same[0].end = max(same[0].end, end)
            duplicates += pages
        else:
            faults.append(_Fault(cause, end, pages))
            duplicates += pages - 1
    per = [f.pages for f in faults]
    return {
        "false_pages": false_pages,
        "duplicate_pages": duplicates,
        "pages_per_labelled_fault_mean": sum(per) / len(per) if per else math.nan,
        "pages_per_labelled_fault_max": max(per) if per else None,
    }


@dataclass
class _Tally:
    """What :func:`live_report` gathers incident by incident."""

    verdicts: Counter[str] = field(default_factory=Counter)
    per_kpi: dict[str, Counter[str]] = field(default_factory=dict)
    per_detector: dict[str, Counter[str]] = field(default_factory=dict)
    to_ack: list[float] = field(default_factory=list)
    to_resolve: list[float] = field(default_factory=list)
    cases: list[RcaCase] = field(default_factory=list)
    false_list: list[str] = field(default_factory=list)
    unreviewed: list[str] = field(default_factory=list)
    unknown_faults: list[str] = field(default_factory=list)
    no_fault_pages: list[str] = field(default_factory=list)


def _count(
    store: Store, inc: Incident, review: Review, t: _Tally, faults: Collection[str] | None
) -> None:
    """Add one incident and its verdict to ``t``."""
    verdict = review.verdict or "unreviewed"
    t.verdicts[verdict] += 1
    if review.acknowledged_at is not None:
        t.to_ack.append(max(review.acknowledged_at - inc.opened_at, 0.0))
    if inc.resolved_at is not None and verdict in ("fault", "unreviewed"):
        t.to_resolve.append(max(inc.resolved_at - inc.opened_at, 0.0))
    first = opening_finding(store.findings_for(inc.id))
    kpi = first.kpi if first else (inc.kpis[0] if inc.kpis else "unknown")
    detector = first.detector if first else "unknown"
    for table, key in ((t.per_kpi, kpi), (t.per_detector, detector)):
        row = table.setdefault(key, Counter())
        row["incidents"] += 1
        row[verdict] += 1
    if verdict == "unreviewed":
        t.unreviewed.append(inc.id)
    elif verdict == "no_fault":
        t.false_list.append(inc.id)
    if faults is not None and review.fault and review.fault not in faults:
        t.unknown_faults.append(f"{inc.id}: {review.fault}")
    diagnosis = store.get_diagnosis(inc.id)
    cause = rank1_cause(inc) or (diagnosis.top.fault if diagnosis else "")
    if cause == "no_fault" and _pages(inc):
        t.no_fault_pages.append(inc.id)
    if verdict not in ("fault", "no_fault") or (verdict == "fault" and not review.root_cause):
        return
    t.cases.append(
        RcaCase(
            case_id=inc.id,
            fault=review.fault if verdict == "fault" else None,
            entity=review.entity if verdict == "fault" else None,
            hypotheses=diagnosis.hypotheses if diagnosis else [],
            partner=review.partner,
        )
    )


def _rates(paging: dict[str, Any], days: float, entities: int | None) -> dict[str, float]:
    """False pages per day and per entity-day, with and without the duplicate pages."""
    pages = paging["false_pages"] + paging["duplicate_pages"]
    entity_days = entities * days if entities else 0.0
    return {
        "false_alerts_per_day": pages / days if days > 0 else math.nan,
        "false_alerts_per_entity_day": pages / entity_days if entity_days > 0 else math.nan,
        "false_alerts_excluding_duplicates_per_entity_day": (
            paging["false_pages"] / entity_days if entity_days > 0 else math.nan
        ),
    }


def live_report(
    store: Store,
    since: float,
    until: float,
    *,
    entities: int | None = None,
    faults: Collection[str] | None = None,
) -> dict[str, Any]:
    """The figures of the incidents opened in ``[since, until)`` and their verdicts (see the
    module docstring). ``entities``: how many entities are monitored (for the per-entity-day
    rate); ``faults``: the pack's fault classes, to flag verdicts naming one it does not know."""
    incidents = store.incidents_between(since, until)
    reviews = store.reviews()
    data_since, data_until = covered(store, since, until)
    days = (data_until - data_since) / 86400.0
    t = _Tally()
    for inc in incidents:
        _count(store, inc, reviews.get(inc.id) or Review(incident_id=inc.id), t, faults)
    fp, tp = t.verdicts["no_fault"], t.verdicts["fault"]
    judged = fp + tp
    open_ = t.verdicts["unreviewed"]
    paging = _paging(incidents, reviews)
    out: dict[str, Any] = {
        "since": _stamp(since),
        "until": _stamp(until),
        "data_since": _stamp(data_since),
        "data_until": _stamp(data_until),
        "days": days,
        "incidents_total": len(incidents),
        "alerts_total": sum(_pages(i) for i in incidents),
        "notices_total": sum(1 for i in incidents if not is_page(i)),
        "reviewed": len(incidents) - open_,
        "unreviewed": open_,
        "true_positives": tp,
        "false_positives": fp,
        "maintenance": t.verdicts["maintenance"],
        "false_alarm_share": fp / judged if judged else math.nan,
        "false_alarm_share_ci95": list(wilson(fp, judged)) if judged else [math.nan, math.nan],
        "false_alarm_share_bounds": (
            [fp / (judged + open_), (fp + open_) / (judged + open_)]
            if judged + open_
            else [math.nan, math.nan]
        ),
        **paging,
        **_rates(paging, days, entities),
        "no_fault_pages": t.no_fault_pages,
        "entities": entities,
        "time_to_acknowledge_s_p50": _percentile(t.to_ack, 50),
        "time_to_acknowledge_s_p95": _percentile(t.to_ack, 95),
        "time_to_resolve_s_p50": _percentile(t.to_resolve, 50),
        "time_to_resolve_s_p95": _percentile(t.to_resolve, 95),
        "false_alert_list": t.false_list,
        "unreviewed_list": t.unreviewed,
        "unknown_faults": t.unknown_faults,
    }
    scores = score_rca(t.cases)
    out.update(report_keys(scores))
    out["rca_cases"] = scores.cases
    out["rca_failures"] = scores.failures
    out["per_kpi"] = _table(t.per_kpi)
    out["per_detector"] = _table(t.per_detector)
    return out


def _table(rows: dict[str, Counter[str]]) -> dict[str, dict[str, Any]]:
    """Per key: incidents, verdict counts and the false share of the judged ones; the keys
    with the most false incidents first."""
    out: dict[str, dict[str, Any]] = {}
    for key, c in sorted(
        rows.items(), key=lambda kv: (-kv[1]["no_fault"], -kv[1]["incidents"], kv[0])
    ):
        judged = c["fault"] + c["no_fault"]
        out[key] = {
            "alerts": c["incidents"],
            "false_positives": c["no_fault"],
            "true_positives": c["fault"],
            "unreviewed": c["unreviewed"],
            "false_alarm_share": c["no_fault"] / judged if judged else math.nan,
        }
    return out


def labels_from_reviews(store: Store, since: float, until: float) -> dict[str, Any]:
    """The verdicts on the incidents opened in ``[since, until)`` as a labels file (docs/FORMATS.md
    §2): a ``fault`` with its confirmed root cause is an incident (from its first finding to
    its resolution; affected: its entities), ``no_fault`` a no-fault window, ``maintenance``
    a maintenance window per entity. A ``fault`` with no root cause yet cannot be a label: its
    id is listed under ``unlabelled``, and unjudged incidents under ``unreviewed``."""
    reviews = store.reviews()
    out: dict[str, Any] = {
        "incidents": [],
        "no_fault": [],
        "maintenance": [],
        "unlabelled": [],
        "unreviewed": [],
    }
    for inc in store.incidents_between(since, until):
        review = reviews.get(inc.id)
        findings = store.findings_for(inc.id)
        start = min([inc.opened_at, *(f.ts for f in findings)])
        end = inc.resolved_at if inc.resolved_at is not None else max(inc.updated_at, start)
        window = {"start": _stamp(start), "end": _stamp(end)}
        if review is None or review.verdict is None:
            out["unreviewed"].append(inc.id)
        elif review.verdict == "no_fault":
            out["no_fault"].append(
                {"id": inc.id, **window, "note": review.note or f"judged by {review.verdict_by}"}
            )
        elif review.verdict == "maintenance":
            out["maintenance"] += [{"entity": e, **window} for e in inc.entities]
        elif review.root_cause is None:
            out["unlabelled"].append(inc.id)
        else:
            affected = sorted({*inc.entities, review.entity or ""} - {""})
            out["incidents"].append(
                {
                    "id": inc.id,
                    **window,
                    "root_cause": {"entity": review.entity, "fault": review.fault},
                    "affected": affected,
                    "partner": review.partner,
                }
            )
    return out
