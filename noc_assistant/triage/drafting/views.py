"""What the prompts and templates are given: the incident, its ranked causes and its evidence,
masked and with telemetry text wrapped as data, and the pool a draft is checked against.

:class:`DraftViews` holds the drafter's configuration (the pack, the network, the model and
the limits of its answers) and builds these views; the writers of reports, partner e-mails and
chat answers (:mod:`.report`, :mod:`.partner_email`, :mod:`.chat`) extend it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from guardrails.injection import injection_policy, scan, screen
from guardrails.masking import Masker
from knowledge.pack import Pack
from knowledge.topology import Topology
from noc_assistant.integrations.llm import LlmClient
from noc_assistant.models import Evidence, Hypothesis, Incident, Review
from noc_assistant.triage import present
from noc_assistant.triage.rca import Diagnosis
from prompts import environment

if TYPE_CHECKING:
    from noc_assistant.triage.history import IncidentHistory, PastIncident

__all__ = [
    "RANK_ID",
    "SEEN_ID",
    "DraftViews",
    "Pool",
    "first_sign",
    "pct",
    "seen_text",
    "sign_view",
    "utc",
    "verdict_view",
]

RANK_ID = "ev-rca"
"""The evidence id under which a draft cites the ranking's confidences."""
SEEN_ID = "ev-seen"
"""Pool id of what the NOC's records say of earlier incidents like this one
(:mod:`noc_assistant.triage.history`), which a chat answer cites like evidence."""
Pool = dict[str, Evidence | Mapping[str, Any]]
"""What a draft is checked against: evidence id → item (with the ranking under ``RANK_ID``)."""


def verdict_view(review: Review | None, mask: Callable[[str], str]) -> dict[str, Any] | None:
    """The NOC's verdict as the report shows it (the note masked: an engineer wrote it)."""
    if review is None or review.verdict is None:
        return None
    return {
        "verdict": review.verdict.replace("_", " "),
        "fault": review.fault,
        "entity": review.entity,
        "by": review.verdict_by,
        "note": mask(review.note) if review.note else None,
    }


def utc(ts: float | None) -> str | None:
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M")


def pct(p: float) -> str:
    """A confidence as a percentage at the precision grounding can match.

    >>> pct(0.9691), pct(0.0), pct(1.0)
    ('96.9 %', '0 %', '100 %')
    """
    text = f"{100 * p:.1f}".rstrip("0").rstrip(".")
    return f"{text} %"


def first_sign(diagnosis: Diagnosis) -> Evidence | None:
    """The earliest finding the top hypothesis rests on."""
    top = set(diagnosis.top.evidence_ids)
    items = [e for e in diagnosis.evidence if e.kind == "finding" and e.id in top]
    return min(items, key=lambda e: (e.start, e.id), default=None)


def sign_view(view: dict[str, Any], sign: Evidence | None) -> dict[str, Any] | None:
    """A first sign as the templates show it: its masked evidence line and its time."""
    if sign is None:
        return None
    line: dict[str, Any] = next(e for e in view["evidence"] if e["id"] == sign.id)
    return line | {"at": utc(sign.start)}


def seen_text(seen: IncidentHistory) -> str:
    days = seen.lookback_s / 86_400.0
    return seen.hint or f"No earlier incident like this one in the last {days:g} days."


def _seen_values(seen: IncidentHistory) -> tuple[float, ...]:
    days = seen.lookback_s / 86_400.0
    return (seen.total, seen.judged, seen.false_alarms, days, *seen.confirmed.values())


@dataclass
class DraftViews:
    """The drafter's configuration, and the views of an incident its drafts are made from."""

    pack: Pack
    topology: Topology | Callable[[], Topology]
    """The network (partners and their contacts, entity names), or a function giving the
    current one (a pipeline that infers it from telemetry)."""
    llm: LlmClient | None = None
    network: str = "noc"
    """How our network names itself in a partner e-mail's subject."""
    signature: str = "NOC on-call"
    contact: str = ""
    """How a partner reaches our NOC (phone, e-mail, escalation line), under the signature
    of a partner e-mail; kept as written by the masking (it is ours, not a subscriber's)."""
    narrate_sentences: int = 2
    """A narration's headline and details, all told: SmolLM2-135M writes one detail well
    (it copies its example's shape) and a second as noise (bench/drafting_results.md)."""
    narrate_tokens: int = 160
    """The most tokens a narration may take (its JSON included)."""
    frequency_penalty: float = 0.3
    """OpenAI ``frequency_penalty`` of every drafting request: a small model's greedy decoding
    loops (``at 2.22 tokens at 2.22 tokens at …``), and a loop is withheld whole; the
    penalty makes each repeat of a token cost, so the model moves on instead. It also
    taxes the braces of a second placeholder, so it stays small: on the seed-7 day, 0.3
    and 0.5 left the most narrations shown, 1.0 the fewest (bench/drafting_results.md)."""
    max_tool_calls: int = 1
    """The most read-only look-ups the triage chat's model may make for one answer."""
    chat_budget_s: float = 30.0
    """The most time one chat answer may take, look-ups included; then the fallback."""
    masker: Masker = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.masker = Masker.from_pack(self.pack)
        self._injection = injection_policy(self.pack)
        self._env = environment()
        self._cite = re.compile(self.pack.grounding.evidence_id_pattern)

    @property
    def network_topology(self) -> Topology:
        return self.topology if isinstance(self.topology, Topology) else self.topology()

    def _mask(self, text: str) -> str:
        return self.masker.mask(text).text

    def _data(self, text: str) -> str:
        """Text that came from telemetry (an entity name …), wrapped as data for a prompt."""
        return screen(text, "telemetry", self._injection).text

    def _hypothesis_view(self, h: Hypothesis) -> dict[str, Any]:
        fault = self.pack.faults.get(h.fault)
        title = fault.title if fault is not None else h.fault
        if h.fault == "no_fault":
            title = "No fault (insufficient evidence)"
        entity = self._mask(h.entity)
        return {
            "fault": h.fault,
            "title": title,
            "entity": entity,
            "entity_data": self._data(entity) if entity else "",
            "pct": pct(h.confidence),
            "evidence_ids": [e for e in h.evidence_ids if e != RANK_ID],
            "refuted_by": list(h.refuted_by),
            "references": [r for r in h.references if r in self.pack.references],
            "checks": [self._mask(c) for c in h.checks],
            "partner": h.partner,
        }

    def _rank_item(self, diagnosis: Diagnosis) -> dict[str, Any]:
        parts = [f"{h.fault} on {h.entity or '-'} {h.confidence:.4f}" for h in diagnosis.hypotheses]
        return {
            "values": tuple(h.confidence for h in diagnosis.hypotheses),
            "summary": "confidences of the ranked root causes: " + "; ".join(parts),
        }

    def _grounding_pool(self, diagnosis: Diagnosis, seen: IncidentHistory | None = None) -> Pool:
        pool: Pool = {e.id: e for e in diagnosis.evidence}
        pool[RANK_ID] = self._rank_item(diagnosis)
        if seen is not None:
            pool[SEEN_ID] = {"values": _seen_values(seen), "summary": seen_text(seen)}
        return pool

    def _evidence_view(self, evidence: Iterable[Evidence]) -> list[dict[str, Any]]:
        out = []
        for e in evidence:
            summary = self._mask(self._readable(e))
            screened = screen(f"[{e.id}] {summary}", "telemetry", self._injection)
            out.append(
                {
                    "id": e.id,
                    "summary": summary,
                    "wrapped": screened.text,
                    "flags": list(screened.findings),
                }
            )
        return out

    def _readable(self, e: Evidence) -> str:
        """An evidence item's summary, with the raw numbers of a diagnosis stored before
        summaries showed units (``0.902439 (expected 0.920626..1.05845)``) shown in its KPI's
        unit instead, from its values (:func:`noc_assistant.triage.present.placeholder`: they still
        match them)."""
        summary = e.summary or f"{e.kind} on {e.entity}"
        raw = re.search(r": (\S+) \(expected (\S+?)\.\.(\S+?)\)", summary)
        if e.kind != "finding" or len(e.values) < 3 or raw is None:
            return summary
        observed = present.placeholder(e, "observed", self.pack.kpis)
        expected = present.placeholder(e, "band", self.pack.kpis)
        return f"{summary[: raw.start()]}: {observed} (expected {expected}){summary[raw.end() :]}"

    def _view(self, incident: Incident, diagnosis: Diagnosis) -> dict[str, Any]:
        hypotheses = [self._hypothesis_view(h) for h in diagnosis.hypotheses]
        cited = {r for h in hypotheses for r in h["references"]}
        refs = self.pack.references
        title = self._mask(incident.title)
        entities = [self._mask(e) for e in incident.entities]
        header = screen(f"{title}; entities: {', '.join(entities)}", "telemetry", self._injection)
        evidence = self._evidence_view(diagnosis.evidence)
        flags = [*header.findings, *(f for e in evidence for f in e["flags"])]
        flags += [f for h in diagnosis.hypotheses for f in scan(h.entity, self._injection)]
        return {
            "incident": {
                "id": incident.id,
                "title": title,
                "state": incident.state,
                "opened": utc(incident.opened_at),
                "resolved": utc(incident.resolved_at),
                "entities": entities,
                "data": header.text,
            },
            "verdict": diagnosis.verdict,
            "hypotheses": hypotheses,
            "top": hypotheses[0],
            "evidence": evidence,
            "flags": sorted(set(flags)),
            "rank_id": RANK_ID,
            "references": [
                {"id": r, "spec": refs[r].spec, "clause": refs[r].clause, "title": refs[r].title}
                for r in sorted(cited)
            ],
        }

    def _past_view(self, p: PastIncident) -> dict[str, Any]:
        return {
            "opened": utc(p.opened_at),
            "id": p.id,
            "entities": ", ".join(p.entities),
            "state": p.state,
            "on": "a neighbour" if p.match == ["neighbour"] else "the same entity",
            "top": f"{p.top.fault} on {p.top.entity}" if p.top else "no hypothesis",
            "verdict": (p.verdict or "not judged").replace("_", " ")
            + (f": {p.confirmed}" if p.confirmed else ""),
        }

    def _seen_view(self, seen: IncidentHistory | None) -> dict[str, Any] | None:
        if seen is None:
            return None
        past = [self._past_view(p) for p in seen.similar[:5]]
        return {"id": SEEN_ID, "text": self._mask(seen_text(seen)), "past": past}
