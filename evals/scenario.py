"""Scenario scoring: alerts of a replay against ground-truth labels (FORMATS §2 and §5).

Definitions (the report documents them by these names):

- an **alert** is an incident after correlation, raised when it opens and raised again each
  time it reopens (a finding of one of its KPIs within the flap window after it resolved: the
  console shows REOPENED and the on-call is paged again); ``alerts_total`` counts the raises
  (:func:`alerts_raised`);
- an alert is a **true positive** of an incident when it opens on the incident's root-cause
  entity or one of its ``affected`` entities, at ``start ≤ opened_at ≤ end``;
- an alert that is a true positive of no incident and does not open inside a maintenance
  window of its entity is a **false positive**;
- **normal time** of an entity is the replay span minus its incidents (as root or affected)
  and its maintenance; ``false_alerts_per_entity_day`` = false positives / normal entity-days;
- **fpr** tiles each entity's span into fixed half-open windows of ``window_s`` (default 1 h)
  aligned to the span start; a window is a *normal window* when it overlaps none of the entity's
  incidents or maintenance; fpr = normal windows containing ≥ 1 false-positive opening of that
  entity / normal windows, with a 95 % Wilson interval;
- **incident_recall** = incidents with ≥ 1 true positive / incidents;
  **detection delay** = first true-positive opening − incident start (p50 / p95 over detected
  incidents, linear-interpolated percentiles);
- **delay after the signal** (when the scrape times are known): first true-positive opening −
  the incident's first scrape, the earliest sample of its entities after its start (before it
  no telemetry can show the fault: with targets scraped at their own phases the first sample
  comes up to an interval after the start); ``detection_delay_intervals_p50`` is the median of
  each incident's delay in its own entities' scrape intervals (the shortest of their median
  steps), the issue's "intervals after the fault's signal begins";
- **per_detector**: the same counts restricted to alerts a detector contributed to.

What a person is paged for (the alerts are the pages: an incident marked as a *notice* shows
on the console and pages no one, see :func:`is_page`; notices are counted apart in
``notices_total`` and are not alerts of any other figure):

- a **duplicate page** is a true positive all of whose incidents were already paged for (in
  the order the pages opened): the on-call paged again for a fault they already have;
  ``duplicate_pages`` counts them, ``duplicate_page_list`` names them;
- ``false_alerts_per_entity_day`` = (false positives + duplicate pages) / normal entity-days:
  every page beyond one per fault is a page too many; the rate without the duplicates is kept
  as ``false_alerts_excluding_duplicates_per_entity_day``;
- ``pages_per_labelled_fault_mean`` / ``_max``: the pages that are true positives of a labelled
  incident, per detected labelled incident (1.0: one page per fault);
- ``no_fault_pages``: the incidents that paged although their own rank-1 cause is
  ``no_fault`` (``no_fault_pages_total``: their pages, repeats included);
- ``incident_recall_with_notices``: the recall when a notice also counts as a detection.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

import numpy as np

from evals.scenario_labels import (
    Interval,
    labelled_incidents,
    labelled_maintenance,
    parse_time,
)

__all__ = [
    "Alert",
    "alerts_raised",
    "is_page",
    "parse_time",
    "rank1_cause",
    "score_scenario",
    "wilson",
]


@dataclass(frozen=True)
class Alert:
    """One alert (an incident after correlation) as the scorer sees it."""

    entity: str
    opened_at: float
    detectors: tuple[str, ...] = ()
    incident_id: str = ""
    related: tuple[str, ...] = ()
    """Further entities of the same alert; a match on any of them makes it a true positive."""
    kpis: tuple[str, ...] = ()
    """The KPIs whose findings the alert carries (for the false-alert list)."""
    page: bool = True
    """False: a notice (shown on the console, paging no one): not an alert of the scores."""
    cause: str = ""
    """The rank-1 fault of its incident's diagnosis (``""``: none)."""


class _Incident(Protocol):
    id: str
    opened_at: float
    entities: list[str]
    finding_ids: list[str]
    reopened_at: list[float]
    escalated_at: list[float]


class _Finding(Protocol):
    id: str
    detector: str
    kpi: str


def is_page(incident: object) -> bool:
    """Whether an incident pages the on-call: every one does unless it is a notice
    (:attr:`noc_assistant.models.Incident.severity` ``"info"``; an object without the field,
    like an incident stored before it, is a page).

    >>> from types import SimpleNamespace as NS
    >>> is_page(NS(id="i1")), is_page(NS(severity="page")), is_page(NS(severity="info"))
    (True, True, False)
    """
    return getattr(incident, "severity", "page") != "info"


def rank1_cause(incident: object) -> str:
    """The rank-1 fault of an incident's hypotheses (``""``: none yet)."""
    hypotheses = getattr(incident, "hypotheses", None) or []
    return str(getattr(hypotheses[0], "fault", "")) if hypotheses else ""


def alerts_raised(incidents: Iterable[_Incident], findings: Iterable[_Finding]) -> list[Alert]:
    """The alerts a run raised: each incident when it opened, and again at each reopening (a
    finding of one of its KPIs soon after it resolved: the console's REOPENED line, a page
    like the first) and each escalation (a much stronger finding joined it while open:
    ESCALATED). A repeat page inside an incident window is a true positive, outside every
    window a false one, like any other alert. An incident marked as a notice (:func:`is_page`)
    gives alerts with ``page`` false; ``cause`` is its rank-1 fault.

    >>> from types import SimpleNamespace as NS
    >>> inc = NS(id="i1", opened_at=100.0, entities=["amf-1"], finding_ids=["f1"],
    ...          reopened_at=[4000.0], escalated_at=[300.0])
    >>> for a in alerts_raised([inc], [NS(id="f1", detector="ensemble:point", kpi="amf-rr")]):
    ...     print(a.incident_id, a.opened_at, a.detectors, a.kpis, a.page)
    i1 100.0 ('ensemble:point',) ('amf-rr',) True
    i1@1 4000.0 ('ensemble:point',) ('amf-rr',) True
    i1^1 300.0 ('ensemble:point',) ('amf-rr',) True
    """
    by_id = {f.id: f for f in findings}
    alerts: list[Alert] = []
    for inc in incidents:
        mine = [by_id[f] for f in inc.finding_ids if f in by_id]
        dets = tuple(sorted({f.detector for f in mine}))
        kpis = tuple(sorted({f.kpi for f in mine}))
        ents = list(inc.entities) or [""]
        related = tuple(ents[1:])
        page, cause = is_page(inc), rank1_cause(inc)
        # an incident that opened as a notice first paged when it was promoted
        opened_paging = page and getattr(inc, "noticed_at", None) is None
        times = [
            (inc.id, inc.opened_at, opened_paging),
            *((f"{inc.id}@{k}", ts, page) for k, ts in enumerate(inc.reopened_at, 1)),
            *((f"{inc.id}^{k}", ts, page) for k, ts in enumerate(inc.escalated_at, 1)),
        ]
        alerts += [Alert(ents[0], ts, dets, i, related, kpis, p, cause) for i, ts, p in times]
    return alerts


def _incident_of(alert: Alert) -> str:
    """The incident an alert belongs to (a repeat page's id is the incident's with ``@k`` or
    ``^k``: :func:`alerts_raised`)."""
    return alert.incident_id.split("@")[0].split("^")[0]


def wilson(successes: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """Wilson score interval of a proportion.

    >>> [round(v, 4) for v in wilson(0, 100)]
    [0.0, 0.037]
    >>> wilson(0, 290)[0], wilson(7, 7)[1]          # exact ends, not a rounding error off
    (0.0, 1.0)
    """
    if n <= 0:
        return (0.0, 1.0)
    p = successes / n
    den = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    lo = 0.0 if successes <= 0 else max(0.0, centre - half)
    hi = 1.0 if successes >= n else min(1.0, centre + half)
    return (lo, hi)


def _by_fault(incidents: Sequence[Interval], c: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Per fault class: incidents, detected, recall and median delays (which classes the
    detectors miss or see late, the first thing an engineer tuning them asks)."""
    found = {d["incident"]: d for d in c["detected"]}
    out: dict[str, dict[str, Any]] = {}
    for fault in sorted({i.fault for i in incidents}):
        mine = [i.id for i in incidents if i.fault == fault]
        hits = [found[i] for i in mine if i in found]
        after = [h["delay_after_signal_intervals"] for h in hits]
        out[fault] = {
            "incidents": len(mine),
            "detected": len(hits),
            "recall": len(hits) / len(mine),
            "detection_delay_s_p50": _percentile([h["delay_s"] for h in hits], 50),
            "detection_delay_intervals_p50": _percentile([a for a in after if a is not None], 50),
        }
    return out


def _percentile(values: Sequence[float], q: float) -> float | None:
    return float(np.percentile(np.asarray(values, np.float64), q)) if values else None


def _signal_start(inc: Interval, scrapes: Mapping[str, Sequence[float]]) -> float | None:
    """The first scrape of ``inc``'s entities after its start (None: none was scraped)."""
    firsts = []
    for ent in inc.entities:
        times = scrapes.get(ent)
        if times:
            k = bisect.bisect_right(times, inc.start)
            if k < len(times):
                firsts.append(times[k])
    return min(firsts) if firsts else None


def _scrape_step(
    inc: Interval,
    scrapes: Mapping[str, Sequence[float]],
    medians: dict[str, float | None] | None = None,
) -> float | None:
    """The scrape interval of ``inc``'s entities: the shortest of their median steps (a GPU
    server scraped every 15 s beside a core on 60-s periods is judged on its own clock).
    ``medians`` keeps each entity's median step across calls (incidents share entities).

    >>> _scrape_step(Interval(frozenset({"a", "b"}), 0.0, 1.0), {"a": [0, 60, 120, 300],
    ...                                                          "b": [0, 15, 30]})
    15.0
    """
    medians = {} if medians is None else medians
    steps = []
    for ent in inc.entities:
        if ent not in medians:
            times = scrapes.get(ent)
            medians[ent] = (
                float(np.median(np.diff(np.asarray(times, np.float64))))
                if times and len(times) > 1
                else None
            )
        step = medians[ent]
        if step is not None and step > 0:
            steps.append(step)
    return min(steps) if steps else None


@dataclass
class _Matches:
    """Each alert judged against the labels (:func:`_match`)."""

    first_tp: dict[str, float]
    """Incident id → its first true-positive opening."""
    fps: list[Alert]
    duplicates: list[tuple[Alert, list[str]]]
    """Duplicate pages, each with the incidents it is a true positive of."""
    pages_per: dict[str, int]
    """Incident id → the alerts that are true positives of it."""


def _match(
    alerts: Sequence[Alert], incidents: Sequence[Interval], maint: Sequence[Interval]
) -> _Matches:
    """True positives, false positives and duplicate pages, the alerts taken in the order
    they opened: a true positive all of whose incidents were paged for before is a duplicate."""
    m = _Matches({}, [], [], {})
    for a in sorted(alerts, key=lambda x: x.opened_at):
        ents = {a.entity, *a.related}
        hits = [i.id for i in incidents if ents & i.entities and i.start <= a.opened_at <= i.end]
        if hits:
            if all(h in m.first_tp for h in hits):
                m.duplicates.append((a, hits))
            for h in hits:
                m.first_tp.setdefault(h, a.opened_at)
                m.pages_per[h] = m.pages_per.get(h, 0) + 1
        elif not any(a.entity in w.entities and w.start <= a.opened_at <= w.end for w in maint):
            m.fps.append(a)
    return m


def _normal_time(
    fps: Sequence[Alert],
    busy_spans: Sequence[Interval],
    entities: Iterable[str],
    span: tuple[float, float],
    window_s: float,
) -> tuple[int, int, float]:
    """Normal windows, those of them with a false-positive opening, and normal seconds, over
    the entities (``busy_spans``: the incidents and maintenance windows)."""
    t0, t1 = span
    n_win = max(1, math.ceil((t1 - t0) / window_s))
    normal_windows = hit_windows = 0
    normal_s = 0.0
    for ent in sorted(set(entities)):
        busy = [(i.start, i.end) for i in busy_spans if ent in i.entities]
        normal = np.ones(n_win, np.bool_)
        for s, e in busy:
            lo = max(0, math.floor((max(s, t0) - t0) / window_s))
            hi = min(n_win - 1, max(lo, math.ceil((min(e, t1) - t0) / window_s) - 1))
            if lo <= hi:
                normal[lo : hi + 1] = False
        # normal seconds: span minus the union of busy intervals
        merged: list[list[float]] = []
        for s, e in sorted((max(s, t0), min(e, t1)) for s, e in busy):
            if e <= s:
                continue
            if merged and s <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], e)
            else:
                merged.append([s, e])
        normal_s += max(0.0, (t1 - t0) - sum(e - s for s, e in merged))
        hits = np.zeros(n_win, np.bool_)
        for a in fps:
            if a.entity == ent and t0 <= a.opened_at <= t1:
                hits[min(n_win - 1, int((a.opened_at - t0) // window_s))] = True
        normal_windows += int(normal.sum())
        hit_windows += int((hits & normal).sum())
    return normal_windows, hit_windows, normal_s


def _delays(
    incidents: Sequence[Interval],
    first_tp: Mapping[str, float],
    scrapes: Mapping[str, Sequence[float]] | None,
) -> dict[str, Any]:
    """Each detected incident's delays: after its start, after its signal (in seconds and in
    its entities' scrape intervals)."""
    out: dict[str, Any] = {"after_signal": [], "in_intervals": [], "detected": []}
    out["delays"] = [first_tp[i.id] - i.start for i in incidents if i.id in first_tp]
    medians: dict[str, float | None] = {}
    for inc in incidents:
        if inc.id not in first_tp:
            continue
        signal = _signal_start(inc, scrapes) if scrapes else None
        after = None if signal is None else max(0.0, first_tp[inc.id] - signal)
        step = _scrape_step(inc, scrapes, medians) if scrapes else None
        intervals = after / step if after is not None and step else None
        if after is not None:
            out["after_signal"].append(after)
        if intervals is not None:
            out["in_intervals"].append(intervals)
        out["detected"].append(
            {
                "incident": inc.id,
                "first_alert_at": _iso(first_tp[inc.id]),
                "delay_s": first_tp[inc.id] - inc.start,
                "delay_after_signal_s": after,
                "delay_after_signal_intervals": intervals,
            }
        )
    return out


def _counts(
    alerts: Sequence[Alert],
    incidents: Sequence[Interval],
    maint: Sequence[Interval],
    entities: Iterable[str],
    span: tuple[float, float],
    window_s: float,
    scrapes: Mapping[str, Sequence[float]] | None = None,
) -> dict[str, Any]:
    m = _match(alerts, incidents, maint)
    normal_windows, hit_windows, normal_s = _normal_time(
        m.fps, [*incidents, *maint], entities, span, window_s
    )
    return {
        "alerts": len(alerts),
        "false_positives": len(m.fps),
        "duplicate_pages": len(m.duplicates),
        "normal_entity_days": normal_s / 86400.0,
        "normal_windows": normal_windows,
        "windows_with_false_alert": hit_windows,
        "fpr": hit_windows / normal_windows if normal_windows else 0.0,
        "recall": len(m.first_tp) / len(incidents) if incidents else None,
        **_delays(incidents, m.first_tp, scrapes),
        "fps": m.fps,
        "duplicates": m.duplicates,
        "pages_per": m.pages_per,
        "missed": [i.id for i in incidents if i.id not in m.first_tp],
    }


def _intervals_p50(c: Mapping[str, Any], interval_s: float | None) -> float | None:
    """Median delay after the signal in scrape intervals: each incident's own step where
    scrape times are known, else the median delay over the replay's ``interval_s``."""
    if c["in_intervals"]:
        return _percentile(c["in_intervals"], 50)
    after = _percentile(c["after_signal"], 50)
    return after / interval_s if after is not None and interval_s else None


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat().replace("+00:00", "Z")


def _rates(c: Mapping[str, Any], days: float) -> dict[str, float]:
    """False pages per normal entity-day, with and without the duplicate pages."""
    fp, dup = c["false_positives"], c["duplicate_pages"]
    return {
        "false_alerts_per_entity_day": (fp + dup) / days if days > 0 else 0.0,
        "false_alerts_excluding_duplicates_per_entity_day": fp / days if days > 0 else 0.0,
    }


def _per_detector(
    alerts: Sequence[Alert],
    args: tuple[Sequence[Interval], Sequence[Interval], set[str], tuple[float, float], float],
    scrapes: Mapping[str, Sequence[float]] | None,
    days: float,
    interval_s: float | None,
) -> dict[str, dict[str, Any]]:
    """The counts restricted to the alerts each detector contributed to (``args``: the
    incidents, maintenance, entities, span and window of :func:`_counts`)."""
    out: dict[str, dict[str, Any]] = {}
    for det in sorted({d for a in alerts for d in a.detectors}):
        dc = _counts([a for a in alerts if det in a.detectors], *args, scrapes)
        out[det] = {
            "alerts": dc["alerts"],
            "false_positives": dc["false_positives"],
            "fpr": dc["fpr"],
            "recall": dc["recall"],
            # beyond FORMATS §5's four keys: the ensemble's figures, per detector
            "fpr_ci95": list(wilson(dc["windows_with_false_alert"], dc["normal_windows"])),
            "duplicate_pages": dc["duplicate_pages"],
            **_rates(dc, days),
            "detection_delay_s_p50": _percentile(dc["delays"], 50),
            "detection_delay_after_signal_s_p50": _percentile(dc["after_signal"], 50),
            "detection_delay_intervals_p50": _intervals_p50(dc, interval_s),
        }
    return out


def _page_keys(c: Mapping[str, Any], pages: Sequence[Alert]) -> dict[str, Any]:
    """What the on-call was paged for beyond the detection figures: the duplicate pages,
    pages per labelled fault, and the pages whose own rank-1 cause is ``no_fault``."""
    per = list(c["pages_per"].values())
    no_fault = [a for a in pages if a.cause == "no_fault"]
    return {
        "duplicate_pages": c["duplicate_pages"],
        "duplicate_page_list": [
            {
                "alert": a.incident_id,
                "entity": a.entity,
                "opened_at": _iso(a.opened_at),
                "incidents": hits,
            }
            for a, hits in c["duplicates"]
        ],
        "pages_per_labelled_fault_mean": sum(per) / len(per) if per else None,
        "pages_per_labelled_fault_max": max(per) if per else None,
        "no_fault_pages": sorted({_incident_of(a) for a in no_fault}),
        "no_fault_pages_total": len(no_fault),
    }


def _false_alert_list(fps: Sequence[Alert]) -> list[dict[str, Any]]:
    """The false alerts by name, for the engineer checking them."""
    return [
        {
            "alert": a.incident_id,
            "entity": a.entity,
            "opened_at": _iso(a.opened_at),
            "detectors": list(a.detectors),
            "kpis": list(a.kpis),
        }
        for a in fps
    ]


def score_scenario(
    alerts: Sequence[Alert],
    labels: Mapping[str, Any],
    entities: Iterable[str],
    span: tuple[float, float],
    *,
    window_s: float = 3600.0,
    source: str = "labels",
    scrapes: Mapping[str, Sequence[float]] | None = None,
    interval_s: float | None = None,
) -> dict[str, Any]:
    """FORMATS §5 detection keys for one replay (RCA keys are left ``None``); with
    ``scrapes`` (entity → its scrape times, in order) also the delay after the signal, in
    seconds and, with ``interval_s``, in scrape intervals. The alerts that are notices
    (``page`` false) are counted apart (module docstring).

    >>> labels = {"incidents": [{"id": "i1", "start": 1000, "end": 2000,
    ...           "root_cause": {"entity": "upf-3", "fault": "upf_gtpu_drop"},
    ...           "affected": ["smf-1"]}]}
    >>> alerts = [Alert("smf-1", 1300.0, ("ensemble:point",), "a1"),
    ...           Alert("amf-1", 5000.0, ("ensemble:shift",), "a2")]
    >>> r = score_scenario(alerts, labels, ["smf-1", "upf-3", "amf-1"], (0.0, 86400.0))
    >>> r["incident_recall"], r["false_positives"], r["detection_delay_s_p50"]
    (1.0, 1, 300.0)
    >>> shift = r["per_detector"]["ensemble:shift"]
    >>> shift["false_positives"], shift["detection_delay_s_p50"], shift["fpr_ci95"][0] > 0
    (1, None, True)
    >>> r["per_detector"]["ensemble:point"]["detection_delay_s_p50"]
    300.0
    >>> r["false_alert_list"][0]["alert"], r["false_alert_list"][0]["opened_at"]
    ('a2', '1970-01-01T01:23:20Z')
    >>> r["missed_incidents"]
    []
    >>> r["detected_incidents"][0]["incident"], r["detected_incidents"][0]["delay_s"]
    ('i1', 300.0)
    >>> r["duplicate_pages"], r["pages_per_labelled_fault_max"]
    (0, 1)
    >>> scrapes = {"smf-1": [990.0, 1050.0, 1110.0, 1290.0], "upf-3": [1020.0, 1080.0]}
    >>> r = score_scenario(alerts, labels, ["smf-1", "upf-3", "amf-1"], (0.0, 86400.0),
    ...                    scrapes=scrapes, interval_s=60.0)
    >>> r["detection_delay_after_signal_s_p50"], r["detection_delay_intervals_p50"]
    (280.0, 4.666666666666667)
    """
    incidents = labelled_incidents(labels, source)
    maint = labelled_maintenance(labels, source)
    ents = set(entities) | {a.entity for a in alerts}
    pages = [a for a in alerts if a.page]
    args = (incidents, maint, ents, span, window_s)
    c = _counts(pages, *args, scrapes)
    days = c["normal_entity_days"]
    notices = len(alerts) - len(pages)
    return {
        "alerts_total": c["alerts"],
        "false_positives": c["false_positives"],
        **_rates(c, days),
        "fpr": c["fpr"],
        "fpr_ci95": list(wilson(c["windows_with_false_alert"], c["normal_windows"])),
        "fpr_window_s": window_s,
        "normal_windows": c["normal_windows"],
        "normal_entity_days": days,
        "incidents_total": len(incidents),
        "incident_recall": c["recall"],
        "incident_recall_with_notices": (
            _counts(alerts, *args)["recall"] if notices else c["recall"]
        ),
        "notices_total": notices,
        **_page_keys(c, pages),
        "detection_delay_s_p50": _percentile(c["delays"], 50),
        "detection_delay_s_p95": _percentile(c["delays"], 95),
        "rca_ac1": None,
        "rca_ac3": None,
        "rca_noop_accuracy": None,
        "grounding_rate": None,
        "per_detector": _per_detector(pages, args, scrapes, days, interval_s),
        **_follow_up_keys(c, incidents, interval_s),
    }


def _follow_up_keys(
    c: Mapping[str, Any], incidents: Sequence[Interval], interval_s: float | None
) -> dict[str, Any]:
    """The delays after the signal, and what an engineer checks next: which alerts were
    false, which incidents were missed or seen, and the recall of each fault class."""
    return {
        "detection_delay_after_signal_s_p50": _percentile(c["after_signal"], 50),
        "detection_delay_after_signal_s_p95": _percentile(c["after_signal"], 95),
        "detection_delay_intervals_p50": _intervals_p50(c, interval_s),
        "false_alert_list": _false_alert_list(c["fps"]),
        "missed_incidents": c["missed"],
        "detected_incidents": c["detected"],
        "recall_by_fault": _by_fault(incidents, c),
    }
