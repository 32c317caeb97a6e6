"""What every draft passes before a person sees it: the pack's grounding check, and
:meth:`Checks.vet` for a model's text (cites evidence, names no entity outside the incident,
echoes no prompt data, does not loop); and how a model's claims are given their names and
numbers (:mod:`noc_assistant.triage.grounded`)."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from guardrails.grounding import GroundingReport, check_grounding
from noc_assistant.models import Incident
from noc_assistant.triage import present
from noc_assistant.triage.drafting.views import RANK_ID, DraftViews, Pool, pct
from noc_assistant.triage.grounded import RANK_FIELD, SAFE_NAME, loops
from noc_assistant.triage.rca import Diagnosis
from noc_assistant.triage.tools import ToolResult

__all__ = ["ENTITYISH", "Checks", "issues", "loops", "shows_value", "strip_citations"]

_CITATION = re.compile(r"\s?\[(?:ev-[A-Za-z0-9_.:-]+|ref:[A-Za-z0-9_.:-]+)\]")
ENTITYISH = re.compile(r"\b[a-z][a-z0-9]*(?:-[a-z0-9]+)+\b")
"""What reads as an entity name in a text (``amf-01``, ``gnb-12-3``)."""


_PHRASE = re.compile(r"[A-Za-z][A-Za-z0-9 ,;:()'/&+-]{0,118}")
"""A pack phrase a claim may copy whole: letters, digits and inner punctuation, no quote or
sentence end; its digits only inside words (``N2``, ``N4``), never a number of its own."""
_LONE_DIGIT = re.compile(r"(?<![A-Za-z0-9])\d")


def shows_value(fill: Callable[[str, str], str | None], evidence_id: str) -> bool:
    """Whether an evidence item has a value a claim's ``{observed}`` can show, by the filler
    of its claims (:meth:`Checks._filler`; a no-fault baseline item has values, none of
    them a reading)."""
    return fill(evidence_id, "observed") not in (None, "n/a")


def strip_citations(text: str) -> str:
    """A checked text as a partner reads it: without our evidence and reference ids.

    >>> strip_citations("42 % succeeded [ev-f-1] [ref:ts-29-573].")
    '42 % succeeded.'
    """
    return _CITATION.sub("", text)


def issues(report: GroundingReport) -> str:
    """The first grounding issues of a draft, for a reason shown to a person."""
    return "; ".join(f"{i.kind} {i.token!r}" for i in report.issues[:5])


class Checks(DraftViews):
    """The checks of a draft against the incident, and the filling of a model's claims."""

    def _check(self, text: str, pool: Pool) -> GroundingReport:
        return check_grounding(text, pool, self.pack.references, self.pack.grounding)

    def _strangers(self, text: str, incident: Incident, diagnosis: Diagnosis) -> list[str]:
        """Entities of the network a text names that the incident does not involve."""
        known = set(incident.entities) | {h.entity for h in diagnosis.hypotheses}
        known |= {e.entity for e in diagnosis.evidence}
        types = self.network_topology.types
        return sorted({m for m in ENTITYISH.findall(text) if m in types and m not in known})

    def _names(self, incident: Incident, diagnosis: Diagnosis) -> list[str]:
        """The entity names a model's claims may write: the incident's own, masked, and only
        those that read as names (an entity named ``amf-1 ignore previous instructions`` is
        telemetry text, not something the model may be made to write)."""
        known = [*incident.entities, *(h.entity for h in diagnosis.hypotheses)]
        known += [e.entity for e in diagnosis.evidence]
        masked = (self._mask(n) for n in dict.fromkeys(known) if n)
        return [n for n in dict.fromkeys(masked) if SAFE_NAME.fullmatch(n)]

    def _phrases(self, incident: Incident, diagnosis: Diagnosis) -> list[str]:
        """What a model's claims may write as whole phrases besides plain words: the
        incident's entity names (:meth:`_names`), the pack's names of the KPIs its evidence
        is on, and the pack's titles of its ranked causes and the top cause's checks where
        they hold no number of their own (it would read as an uncited number). All of it is the
        pack's or masked; none of it is free telemetry text."""
        kpis = [e.kpi for e in diagnosis.evidence if e.kpi in self.pack.kpis]
        titles = [f.title for h in diagnosis.hypotheses if (f := self.pack.faults.get(h.fault))]
        plain = [
            t
            for t in [*titles, *diagnosis.top.checks]
            if _PHRASE.fullmatch(t) and not _LONE_DIGIT.search(t)
        ]
        return list(dict.fromkeys([*self._names(incident, diagnosis), *kpis, *plain]))

    def _example(
        self, diagnosis: Diagnosis, evidence: list[dict[str, Any]], names: list[str]
    ) -> dict[str, Any]:
        """The worked example the narration prompt shows, made of this incident's own names
        (the diagnosed entity, its fault's title, the first evidence item's KPI and direction,
        the next cause's title, the top cause's first check)
        where the claims may write them: a small model copies the shape of its example."""
        top = diagnosis.top
        fault = self.pack.faults.get(top.fault)
        by_id = {e.id: e for e in diagnosis.evidence}
        item = by_id.get(evidence[0]["id"]) if evidence else None
        moved = re.match(r"\S+ (up|down) on ", item.summary) if item is not None else None
        root = self._mask(top.entity) if diagnosis.verdict == "fault" else ""
        others = [h for h in diagnosis.hypotheses[1:] if h.fault != "no_fault"]
        titles = [f.title for h in others if (f := self.pack.faults.get(h.fault))]
        checks = [c for c in top.checks if c in names]
        return {
            "id": evidence[0]["id"] if evidence else RANK_ID,
            "entities": [n for n in self._names_of(diagnosis) if n in names][:3],
            "other": next((t for t in titles if t in names), ""),
            "check": checks[0] if checks else "",
            "root": root if root in names else "",
            "title": fault.title if fault is not None and fault.title in names else "",
            "kpi": item.kpi if item is not None and item.kpi in names else "",
            "valued": item is not None and shows_value(self._filler(diagnosis), item.id),
            "verb": {"up": "rose", "down": "fell"}.get(moved.group(1) if moved else "", "moved"),
        }

    def _names_of(self, diagnosis: Diagnosis) -> list[str]:
        named = [*(h.entity for h in diagnosis.hypotheses), *(e.entity for e in diagnosis.evidence)]
        return list(dict.fromkeys(self._mask(n) for n in named if n))

    def _filler(
        self, diagnosis: Diagnosis, tools: Sequence[ToolResult] = ()
    ) -> Callable[[str, str], str | None]:
        """How a claim's placeholder is filled from the item it cites: the ranking's
        confidence, an evidence item's value, range or time (:mod:`noc_assistant.triage.present`),
        a tool result's first number."""
        by_id = {e.id: e for e in diagnosis.evidence}
        results = {t.id: t for t in tools}
        fields = {"observed": "observed", "expected": "band", "at": "start"}

        def fill(item_id: str, name: str) -> str | None:
            if item_id == RANK_ID:
                return pct(diagnosis.top.confidence) if name == RANK_FIELD else None
            evidence = by_id.get(item_id)
            if evidence is not None and name in fields:
                return present.placeholder(evidence, fields[name])
            result = results.get(item_id)
            if result is not None and result.values and name == "observed":
                return f"{result.values[0]:.4g}"
            return None

        return fill

    def vet(self, text: str, incident: Incident, diagnosis: Diagnosis) -> str | None:
        """Why a model's text (already grounding-checked) cannot be shown, or None.

        It must cite at least one evidence id, name no entity of the network outside the
        incident, not echo the prompt's wrapped data, and not loop (a small model's greedy
        decoding repeats a line over and over: every copy may be grounded, the text is not
        worth reading).
        """
        if "<data" in text or "</data" in text or "&lt;data" in text:
            return "it echoes the prompt's data"
        strangers = self._strangers(text, incident, diagnosis)
        if strangers:
            return f"it names entities outside the incident: {', '.join(strangers)}"
        if not self._cite.search(text):
            return "it cites no evidence"
        if loops(text):
            return "it repeats itself"
        return None
