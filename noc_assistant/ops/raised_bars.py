"""Raised bars: the NOC's verdicts turned into fewer false pages, by a person's decision.

An engineer who judges an incident ``no_fault`` (a false page) says which KPI paged for
nothing; when the same KPI of the same entity does it again and again, the fix a NOC expects is
a higher bar for that KPI there, for a while, with a reason on record — not a silenced entity
and not a detector re-tuned for the whole network. :func:`suggest` reads the verdicts of a
period and proposes, for each KPI and entity that opened at least ``min_false`` false pages,
the score a finding must reach to page (``margin`` above the strongest false page), with what
it would have cost: the confirmed faults that KPI opened there below that bar, which would then
have paged only through another KPI. Nothing changes until a person declares the bar
(:func:`new_rule`, `noc tune add`, the API); the running pipeline takes it at its next round.
A held finding is not lost: it is stored, marked evidence-only, and joins an incident that
something else opens (:meth:`noc_assistant.stream.correlate.Correlator.held`).

>>> from noc_assistant.store import SqliteStore
>>> from noc_assistant.models import Finding, Incident, Review
>>> store = SqliteStore(":memory:")
>>> for i, (score, verdict) in enumerate([(1.4, "no_fault"), (1.9, "no_fault"), (6.0, "fault")]):
...     f = Finding(id=f"f-{i}", detector="ensemble:point", kpi="amf-registration-success",
...                 entity="amf-1", ts=3600.0 * i, score=score, observed=0.9,
...                 expected_low=0.97, expected_high=1.0, direction="down")
...     store.save_incident(Incident(id=f"inc-{i}", fingerprint="x", opened_at=f.ts,
...                                  updated_at=f.ts, entities=["amf-1"], finding_ids=[f.id]))
...     store.save_findings([f], incident_id=f"inc-{i}")
...     store.save_review(Review(incident_id=f"inc-{i}").judged(verdict, "ana", at=f.ts + 60))
>>> [s] = suggest(store, since=0.0, until=86400.0)
>>> s.kpi, s.entity, s.false_pages, s.min_score, s.confirmed, s.would_hold
('amf-registration-success', 'amf-1', ['inc-0', 'inc-1'], 2.4, ['inc-2'], [])
"""

from __future__ import annotations

import fnmatch
import math
import secrets
from collections.abc import Collection
from dataclasses import dataclass, field

from noc_assistant.errors import TuningError
from noc_assistant.models import LIVENESS_DETECTOR, Finding, Tuning
from noc_assistant.store import Store

__all__ = [
    "DEFAULT_TUNING_S",
    "MAX_MIN_SCORE",
    "MAX_TUNING_S",
    "Suggestion",
    "new_rule",
    "opening_finding",
    "suggest",
]

DEFAULT_TUNING_S = 30 * 86400.0
"""How long a raised bar holds unless told otherwise: a month, then the KPI pages as the
detectors decide again, so that a bar raised for a bad week is not forgotten for good."""
MAX_TUNING_S = 90 * 86400.0
"""The longest a raised bar may hold: a KPI that pages for nothing for a quarter needs its
formula or its pack entry fixed, not a bar."""
MAX_MIN_SCORE = 100.0
"""The highest bar (100 × the detectors' own): above it a KPI is in effect switched off, which
is the pack's decision (a rule switched off in ``operator.yaml``), not a tuning."""


def opening_finding(findings: list[Finding]) -> Finding | None:
    """The finding that opened an incident: its first that may page (evidence-only findings
    held for it before it opened do not count).

    >>> opening_finding([])
    """
    paging = [f for f in findings if not f.evidence_only] or findings
    return min(paging, key=lambda f: (f.ts, f.id)) if paging else None


def new_rule(
    kpi: str,
    by: str,
    now: float,
    *,
    min_score: float,
    reason: str,
    entity: str = "*",
    duration_s: float = DEFAULT_TUNING_S,
    kpis: Collection[str] | None = None,
    entities: Collection[str] | None = None,
) -> Tuning:
    """A raised bar as declared, in force from ``now`` (:class:`TuningError` naming the field
    when it does not hold: a KPI outside ``kpis``, an entity pattern that matches none of
    ``entities`` (the network's, when known), a bar not above the detectors' own (1) or
    above :data:`MAX_MIN_SCORE`, no reason, a duration past :data:`MAX_TUNING_S`).

    >>> t = new_rule("gpu-kv-cache-usage", "ana", 0.0, min_score=2.5, entity="gpu-srv-*",
    ...              reason="inc-1, inc-7: batch jobs at night")
    >>> t.kpi, t.entity, t.min_score, t.end / 86400
    ('gpu-kv-cache-usage', 'gpu-srv-*', 2.5, 30.0)
    >>> new_rule("gpu-kv-cache-usage", "ana", 0.0, min_score=0.8, reason="noisy")
    Traceback (most recent call last):
    ...
    noc_assistant.errors.TuningError: min_score: 0.8 is not above the detectors' own bar (1)
    """
    if kpis is not None and kpi not in kpis:
        raise TuningError(f"kpi: {kpi!r} is not a KPI of the knowledge pack")
    if not math.isfinite(min_score) or min_score <= 1.0:
        raise TuningError(f"min_score: {min_score:g} is not above the detectors' own bar (1)")
    if min_score > MAX_MIN_SCORE:
        raise TuningError(
            f"min_score: {min_score:g} is above {MAX_MIN_SCORE:g} (switch the KPI's rule off "
            "in the pack instead)"
        )
    if not reason.strip():
        raise TuningError("reason: missing (the false pages it answers, a ticket)")
    if not entity.strip():
        raise TuningError("entity: empty (a name or a shell pattern; * for every entity)")
    if entities is not None and not fnmatch.filter(sorted(entities), entity.strip()):
        raise TuningError(f"entity: {entity.strip()!r} matches no entity of the network")
    if not 0.0 < duration_s <= MAX_TUNING_S:
        raise TuningError(
            f"duration: a raised bar holds between a second and {MAX_TUNING_S / 86400:g} days"
        )
    return Tuning(
        id=f"tn-{secrets.token_hex(5)}",
        kpi=kpi,
        entity=entity.strip(),
        min_score=min_score,
        start=now,
        end=now + duration_s,
        by=by,
        reason=reason.strip(),
        created_at=now,
    )


@dataclass
class Suggestion:
    """A raised bar the verdicts argue for (see the module docstring)."""

    kpi: str
    entity: str
    false_pages: list[str]
    """The incidents it opened that were judged ``no_fault``."""
    max_false_score: float
    min_score: float
    """The bar proposed: ``margin`` × the strongest false page, rounded up to a tenth."""
    confirmed: list[str] = field(default_factory=list)
    """The incidents it opened that were judged ``fault``."""
    would_hold: list[str] = field(default_factory=list)
    """Of those, the ones that scored below the proposed bar: with it, they would have paged
    only through another KPI, or not at all."""
    covered_by: str | None = None
    """A raised bar in force now that already holds every false page (nothing to add)."""


def suggest(
    store: Store,
    since: float,
    until: float,
    *,
    min_false: int = 2,
    margin: float = 1.25,
    rules: Collection[Tuning] | None = None,
) -> list[Suggestion]:
    """The raised bars that the verdicts on the incidents opened in ``[since, until)`` argue
    for, the most false pages first. ``rules``: the raised bars to mark a suggestion one of
    them already covers (default: the store's, those not over at ``until``). Pages for a
    silent target are never suggested (a target that stops answering is always a page)."""
    if min_false < 1:
        raise TuningError("min_false: at least one false page")
    if margin < 1.0:
        raise TuningError("margin: at least 1 (the bar must clear the false pages)")
    if rules is None:
        rules = store.tuning_rules(ending_after=until)
    incidents = store.incidents_between(since, until)
    reviews = store.reviews_for([i.id for i in incidents])
    groups: dict[tuple[str, str], dict[str, list[tuple[str, float]]]] = {}
    for inc in incidents:
        review = reviews.get(inc.id)
        if review is None or review.verdict not in ("fault", "no_fault"):
            continue
        first = opening_finding(store.findings_for(inc.id))
        if first is None or first.detector == LIVENESS_DETECTOR:
            continue
        group = groups.setdefault((first.kpi, first.entity), {"fault": [], "no_fault": []})
        group[review.verdict].append((inc.id, first.score))
    out: list[Suggestion] = []
    for (kpi, entity), group in groups.items():
        false = group["no_fault"]
        if len(false) < min_false:
            continue
        worst = max(score for _, score in false)
        bar = math.ceil(worst * margin * 10.0 - 1e-9) / 10.0
        covering = next(
            (r for r in rules if all(r.holds(kpi, entity, s, until) for _, s in false)), None
        )
        out.append(
            Suggestion(
                kpi=kpi,
                entity=entity,
                false_pages=[i for i, _ in false],
                max_false_score=worst,
                min_score=bar,
                confirmed=[i for i, _ in group["fault"]],
                would_hold=[i for i, score in group["fault"] if score < bar],
                covered_by=covering.id if covering is not None else None,
            )
        )
    return sorted(out, key=lambda s: (-len(s.false_pages), s.kpi, s.entity))
