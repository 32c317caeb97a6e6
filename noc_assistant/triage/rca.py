"""Root-cause analysis: the knowledge pack's rules, run on one incident, give ranked hypotheses.

Each hypothesis is a fault class (docs/FORMATS.md §3) on a root-cause entity, with the evidence
it rests on (findings, inventory links, expected-but-absent signals), its references, the checks
to run, what refutes it, and a confidence. Confidences are a softmax over rule scores against a
``no_fault`` baseline (pack params ``no_fault_score`` and ``confidence_temperature``), so an
incident no rule explains well is answered ``no_fault`` (insufficient evidence) rather than
forced onto a fault. ``evals/rca.py`` measures how well the confidences are calibrated.

The diagnosis also settles whether the incident pages (:func:`severity`): a confident
``no_fault`` over findings that only say "more load" is a notice; :func:`diagnose` records it on
the incident (``Incident.severity``), so that every sink of the event that carried the diagnosis
(console, API, Alertmanager) sees it.

>>> from knowledge.pack import load_pack
>>> from knowledge.topology import Topology
>>> from noc_assistant.models import Finding, Incident
>>> pack = load_pack()
>>> topo = Topology.from_inventory({"entities": [
...     {"id": "smf-1", "type": "smf", "peers": ["upf-1"]}, {"id": "upf-1", "type": "upf"}]}, pack)
>>> f = Finding(id="f1", detector="d", kpi="smf-pfcp-peers", entity="smf-1", entity_type="smf",
...             ts=100.0, score=0.9, observed=0.0, expected_low=1.0, expected_high=1.0,
...             direction="down")
>>> inc = Incident(id="inc-1", fingerprint="x", opened_at=100.0, updated_at=100.0,
...                finding_ids=["f1"])
>>> d = diagnose(inc, [f], topo, pack)
>>> d.top.fault, d.top.entity
('pfcp_association_loss', 'upf-1')
>>> all(e in d.evidence_ids for h in d.hypotheses for e in h.evidence_ids)
True
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

from knowledge.pack import Pack
from knowledge.rules import ConditionHit, Match, evaluate, no_fault_score
from knowledge.topology import Topology
from noc_assistant.models import (
    LIVENESS_DETECTOR,
    Diagnosis,
    Evidence,
    Finding,
    Hypothesis,
    Incident,
)
from noc_assistant.triage import present

__all__ = ["Diagnosis", "Severity", "diagnose", "held", "severity"]

Severity = Literal["page", "info"]

_MAX_FINDINGS_PER_CONDITION = 3
_MAX_HYPOTHESES = 5


def diagnose(
    incident: Incident,
    findings: Sequence[Finding],
    topology: Topology,
    pack: Pack,
    now: float | None = None,
) -> Diagnosis:
    """Rank root-cause hypotheses for ``incident`` from its findings and the topology.

    ``findings`` may hold more than the incident's; only those listed in
    ``incident.finding_ids`` are used (all of them when the list is empty). ``now``: the
    evaluation time (default: the newest finding's), which ends a held claim (:func:`severity`).
    """
    wanted = set(incident.finding_ids)
    used = [f for f in findings if not wanted or f.id in wanted]
    seen_types = {f.entity: f.entity_type for f in used if f.entity_type}
    topo = topology.with_entities(seen_types, pack)
    matches = evaluate(used, topo, pack)

    builder = _EvidenceBuilder(incident)
    scored: list[tuple[float, Hypothesis]] = []
    for match in matches[: 3 * _MAX_HYPOTHESES]:
        scored.append((match.score, _hypothesis(match, builder, pack)))

    temperature = pack.param("confidence_temperature", 0.5)
    baseline = no_fault_score(pack)
    weights = [math.exp(s / temperature) for s, _ in scored]
    total = sum(weights) + math.exp(baseline / temperature)

    no_fault_p = math.exp(baseline / temperature) / total
    no_fault_evidence: list[str] = []
    no_fault_rule = ""
    no_fault_entity = ""
    ranked: list[Hypothesis] = []
    for (_, hyp), weight in zip(scored, weights, strict=True):
        p = weight / total
        if hyp.fault == "no_fault":
            no_fault_p += p
            no_fault_evidence += [e for e in hyp.evidence_ids if e not in no_fault_evidence]
            no_fault_rule = no_fault_rule or hyp.rule_id
            no_fault_entity = no_fault_entity or hyp.entity
            continue
        ranked.append(hyp.model_copy(update={"confidence": _clip(p)}))
    if not no_fault_evidence:
        no_fault_evidence.append(builder.baseline(used, pack))
    no_fault = Hypothesis(
        fault="no_fault",
        entity=no_fault_entity,
        confidence=_clip(no_fault_p),
        rule_id=no_fault_rule,
        evidence_ids=tuple(no_fault_evidence),
        refuted_by=tuple(e for h in ranked[:1] for e in h.evidence_ids[:3]),
    )
    ranked.append(no_fault)
    ranked.sort(key=lambda h: -h.confidence)
    ranked = _dedupe(ranked)[: _MAX_HYPOTHESES + 1]
    if ranked[0].fault != "no_fault" and no_fault not in ranked:
        ranked.append(no_fault)
    cited = {e for h in ranked for e in (*h.evidence_ids, *h.refuted_by)}
    diagnosis = Diagnosis(
        incident_id=incident.id,
        verdict="no_fault" if ranked[0].fault == "no_fault" else "fault",
        hypotheses=ranked,
        evidence=[e for e in builder.items.values() if e.id in cited],
        pack=f"{pack.meta.name}@{pack.meta.version}",
    )
    at = now if now is not None else max((f.ts for f in used), default=incident.updated_at)
    _apply_severity(incident, severity(incident, diagnosis, used, pack, at), at)
    return diagnosis


def severity(
    incident: Incident,
    diagnosis: Diagnosis,
    findings: Sequence[Finding],
    pack: Pack,
    now: float | None = None,
) -> Severity:
    """Whether ``incident`` pages (``page``) or is a notice (``info``), by its diagnosis.

    A notice: the leading hypothesis is ``no_fault`` with at least the pack's
    ``notice_min_no_fault_confidence``, and every finding of the incident is in its KPI's
    ``benign_direction`` (more load or resources; a KPI without one is a service symptom, so
    an unknown KPI pages). A claimed fault whose findings are all in benign directions is a
    notice too while the incident is younger than the pack's ``benign_claim_hold_s`` at
    ``now`` (default: the newest finding's time), and so is any incident made of liveness
    findings only (targets not answering) while younger than ``silence_hold_s``: a target
    unreachable for a few scrapes answers again within it. :func:`held` says when such an
    incident must be judged again. A page stays a page: the on-call was told (an incident is
    a page from the moment it was diagnosed so: its hypotheses are set).

    >>> from knowledge.pack import load_pack
    >>> pack = load_pack()
    >>> def f(kpi, direction):
    ...     return Finding(id=kpi, detector="d", kpi=kpi, entity="amf-1", ts=0.0, score=9.0,
    ...         observed=1.0, expected_low=0.0, expected_high=0.5, direction=direction)
    >>> calm = Diagnosis(incident_id="i", verdict="no_fault",
    ...     hypotheses=[Hypothesis(fault="no_fault", entity="amf-1", confidence=0.97)])
    >>> inc = Incident(id="i", fingerprint="x", opened_at=0.0, updated_at=0.0)
    >>> severity(inc, calm, [f("amf-registration-attempts", "up")], pack)
    'info'
    >>> severity(inc, calm, [f("amf-registration-success", "down")], pack)
    'page'
    >>> storm = Diagnosis(incident_id="i", verdict="fault",
    ...     hypotheses=[Hypothesis(fault="registration_storm", entity="mme-1", confidence=0.9)])
    >>> surge = [f("mme-gateway-selections", "up")]
    >>> severity(inc, storm, surge, pack, now=60.0), severity(inc, storm, surge, pack, now=120.0)
    ('info', 'page')
    """
    if incident.severity == "page" and incident.hypotheses:
        return "page"
    when = now if now is not None else max((f.ts for f in findings), default=0.0)
    if _silent_only(findings):
        return "page" if _hold_ended(incident, "silence_hold_s", pack, when) else "info"
    benign = bool(findings) and all(_benign(f, pack) for f in findings)
    top = diagnosis.top
    if top.fault != "no_fault":
        held_now = benign and not _hold_ended(incident, "benign_claim_hold_s", pack, when)
        return "info" if held_now else "page"
    if top.confidence < pack.param("notice_min_no_fault_confidence", 0.9):
        return "page"
    return "info" if benign else "page"


def held(incident: Incident, findings: Sequence[Finding], pack: Pack, now: float) -> bool:
    """Whether ``incident`` (with its ``findings``) is held as a notice (:func:`severity`) and
    its hold has ended at ``now``: it must be diagnosed again, and pages if the claim (or the
    silence) still stands."""
    if incident.severity != "info" or not incident.hypotheses:
        return False
    if _silent_only(findings):
        return _hold_ended(incident, "silence_hold_s", pack, now)
    top = incident.hypotheses[0]
    return top.fault != "no_fault" and _hold_ended(incident, "benign_claim_hold_s", pack, now)


def _silent_only(findings: Sequence[Finding]) -> bool:
    """Whether every one of ``findings`` (at least one) is a liveness finding."""
    return bool(findings) and all(f.detector == LIVENESS_DETECTOR for f in findings)


def _hold_ended(incident: Incident, param: str, pack: Pack, now: float) -> bool:
    """Whether the pack's hold ``param`` (seconds) since ``incident`` opened is over at
    ``now``."""
    return now - incident.opened_at >= pack.param(param, 0.0)


def _benign(f: Finding, pack: Pack) -> bool:
    """Whether ``f`` is in its KPI's ``benign_direction`` (an unknown KPI is not)."""
    kpi = pack.kpis.get(f.kpi)
    benign = kpi.benign_direction if kpi is not None else None
    return benign is not None and (benign == "both" or f.direction == benign)


def _apply_severity(incident: Incident, level: Severity, at: float) -> None:
    """Record ``level`` on ``incident``; a notice turning into a page pages now (an
    escalation, at ``at``: the evaluation time, or the newest finding's)."""
    if level == "info" and incident.noticed_at is None:
        incident.noticed_at = incident.opened_at
    # the correlator may have escalated on that finding already
    if incident.severity == "info" and level == "page" and at not in incident.escalated_at:
        incident.escalated_at.append(at)
    incident.severity = level


def _clip(p: float) -> float:
    return min(1.0, max(0.0, round(p, 4)))


def _dedupe(hypotheses: list[Hypothesis]) -> list[Hypothesis]:
    seen: set[tuple[str, str]] = set()
    out = []
    for h in hypotheses:
        key = (h.fault, h.entity)
        if key not in seen:
            seen.add(key)
            out.append(h)
    return out


def _hypothesis(match: Match, builder: _EvidenceBuilder, pack: Pack) -> Hypothesis:
    evidence: list[str] = []
    for hit in match.hits:
        evidence += builder.from_hit(hit)
    if match.root_via in ("topology", "partner"):
        evidence.append(builder.link(match))
    refuted: list[str] = []
    for hit in match.refutations:
        refuted += builder.from_hit(hit, against=match.rule.id)
    for hit in match.missing:
        refuted.append(builder.absence(hit, match))
    rule = match.rule
    fault = pack.faults.get(rule.fault)
    references = tuple(dict.fromkeys((*rule.references, *(fault.references if fault else ()))))
    return Hypothesis(
        fault=rule.fault,
        entity=match.root,
        confidence=0.0,
        rule_id=rule.id,
        evidence_ids=tuple(dict.fromkeys(evidence)),
        references=references,
        checks=rule.checks,
        refuted_by=tuple(dict.fromkeys(refuted)),
        partner=match.partner,
    )


class _EvidenceBuilder:
    """Creates evidence items once, under stable ids, as hypotheses cite them."""

    def __init__(self, incident: Incident) -> None:
        self.incident = incident
        self.items: dict[str, Evidence] = {}

    def _add(self, evidence: Evidence) -> str:
        self.items.setdefault(evidence.id, evidence)
        return evidence.id

    def finding(self, f: Finding, note: str = "", against: str = "") -> str:
        eid = f"ev-{f.id}-against-{against}" if against else f"ev-{f.id}"
        if eid in self.items:  # cited by an earlier hypothesis: the first item stands
            return eid
        # in the KPI's unit, clipped to what it can be; thousands not grouped: grounding
        # reads the numbers of a summary back as evidence, and would read 2,275 as two
        observed = present.value(f.kpi, f.observed, grouping=False)
        expected = present.band(f.kpi, f.expected_low, f.expected_high, grouping=False)
        summary = f"{f.kpi} {f.direction} on {f.entity}: {observed} (expected {expected})"
        labels = ",".join(f"{k}={v}" for k, v in f.labels)
        if labels:
            summary += f" [{labels}]"
        if against:
            summary += f"; refutes {against}: {note}"
        return self._add(
            Evidence(
                id=eid,
                kind="finding",
                finding_id=f.id,
                entity=f.entity,
                kpi=f.kpi,
                start=f.ts,
                end=f.ts,
                values=(f.observed, f.expected_low, f.expected_high),
                summary=summary,
            )
        )

    def from_hit(self, hit: ConditionHit, against: str = "") -> list[str]:
        chosen = sorted(hit.findings, key=lambda f: (f.ts, -f.score))
        ids = []
        for f in chosen[:_MAX_FINDINGS_PER_CONDITION]:
            if isinstance(f, Finding):
                ids.append(self.finding(f, hit.condition.note, against))
        return ids

    def link(self, match: Match) -> str:
        anchor = match.anchor
        if match.root_via == "partner":
            labels = ",".join(f"{k}={v}" for k, v in anchor.labels)
            summary = (
                f"{labels} on {anchor.entity} is partner {match.partner}, reached via {match.root}"
            )
        else:
            summary = f"{anchor.entity} depends on {match.root} (inventory)"
        return self._add(
            Evidence(
                id=f"ev-link-{anchor.entity}-{match.root}",
                kind="inventory",
                entity=match.root,
                start=anchor.ts,
                end=anchor.ts,
                summary=summary,
            )
        )

    def absence(self, hit: ConditionHit, match: Match) -> str:
        cond = hit.condition
        where = match.root if cond.scope == "root" else match.anchor.entity
        summary = f"no {'/'.join(cond.kpis)} {cond.direction} seen near {where}"
        if cond.note:
            summary += f" (expected if: {cond.note})"
        return self._add(
            Evidence(
                id=f"ev-absent-{match.rule.id}-{hit.index}-{where}",
                kind="absence",
                entity=where,
                kpi=cond.kpis[0],
                start=self.incident.opened_at,
                end=self.incident.updated_at,
                summary=summary,
            )
        )

    def baseline(self, findings: Sequence[Finding], pack: Pack) -> str:
        entity = findings[0].entity if findings else ""
        summary = (
            f"{len(findings)} finding(s); no rule of {pack.meta.name} explains them above the "
            "no-fault baseline"
        )
        return self._add(
            Evidence(
                id=f"ev-baseline-{self.incident.id}",
                kind="absence",
                entity=entity,
                start=self.incident.opened_at,
                end=self.incident.updated_at,
                summary=summary,
            )
        )
