"""RCA evaluation: AC@1, AC@3, no-fault accuracy, evidence resolution and calibration.

Ground truth is the labels file of docs/FORMATS.md §2. Each labelled incident becomes one case,
scored on the diagnosis of the pipeline incident that best overlaps it: the one with findings on
the most labelled entities inside the labelled window, then the first to react, then entity
overlap; each ``no_fault`` window becomes one case that is right when every incident active in
it (a finding inside the window) is answered ``no_fault`` (or none was). An incident that merely
stays open across a window, with nothing new, says nothing about it. Without the run's findings,
time overlap alone decides. Scoring is deterministic: no judge, closed fault set.

>>> from noc_assistant.models import Hypothesis
>>> h = lambda f, e, c: Hypothesis(fault=f, entity=e, confidence=c)
>>> cases = [
...     RcaCase("a", "udm_timeout", "udm-1",
...             [h("udm_timeout", "udm-1", 0.8), h("no_fault", "", 0.2)]),
...     RcaCase("b", "n2_sctp_loss", "amf-1",
...             [h("registration_storm", "amf-1", 0.6), h("n2_sctp_loss", "amf-1", 0.3)]),
...     RcaCase("c", None, None, [h("no_fault", "", 0.9)]),
... ]
>>> s = score_rca(cases)
>>> s.ac1, s.ac3, s.noop_accuracy
(0.5, 1.0, 1.0)
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from knowledge.pack import Pack, load_pack
from knowledge.topology import plmn_digits
from noc_assistant.models import Diagnosis, Finding, Hypothesis, Incident

__all__ = [
    "Labels",
    "RcaCase",
    "RcaScores",
    "ReliabilityBin",
    "cases_from_run",
    "evaluate_replay",
    "evidence_resolution",
    "load_labels",
    "reliability_table",
    "report_keys",
    "score_rca",
]


# ---------------------------------------------------------------- labels (docs/FORMATS.md §2)


def _epoch(value: Any) -> float:
    if isinstance(value, int | float):
        return float(value)
    text = str(value).replace("Z", "+00:00")
    return datetime.fromisoformat(text).timestamp()


class _Window(BaseModel):
    model_config = ConfigDict(extra="allow")

    start: float
    end: float

    @field_validator("start", "end", mode="before")
    @classmethod
    def _ts(cls, value: Any) -> float:
        return _epoch(value)


class RootCause(BaseModel):
    model_config = ConfigDict(extra="allow")

    entity: str
    fault: str


class LabelIncident(_Window):
    id: str
    root_cause: RootCause
    affected: list[str] = Field(default_factory=list)
    partner: str | None = None


class LabelNoFault(_Window):
    id: str
    note: str = ""


class LabelMaintenance(_Window):
    entity: str


class Labels(BaseModel):
    model_config = ConfigDict(extra="allow")

    incidents: list[LabelIncident] = Field(default_factory=list)
    no_fault: list[LabelNoFault] = Field(default_factory=list)
    maintenance: list[LabelMaintenance] = Field(default_factory=list)


def load_labels(path: Path | str) -> Labels:
    """Read a labels JSON file (docs/FORMATS.md §2)."""
    return Labels.model_validate(json.loads(Path(path).read_text(encoding="utf-8")))


# ---------------------------------------------------------------- cases and scores


@dataclass
class RcaCase:
    """One scored question: a labelled incident (``fault``/``entity``) or a no-fault window."""

    case_id: str
    fault: str | None
    """True fault class; ``None`` for a no-fault window."""
    entity: str | None
    hypotheses: Sequence[Hypothesis]
    """The answer, best first (empty: the pipeline opened no incident for it)."""
    partner: str | None = None
    evidence_cited: int = 0
    evidence_resolved: int = 0

    @property
    def is_noop(self) -> bool:
        return self.fault is None

    def correct_at(self, k: int) -> bool:
        if self.is_noop:
            return not self.hypotheses or self.hypotheses[0].fault == "no_fault"
        return any(self._matches(h) for h in self.hypotheses[:k])

    def _matches(self, h: Hypothesis) -> bool:
        if h.fault != self.fault:
            return False
        if h.entity == self.entity:
            return True
        return bool(
            self.partner and h.partner and plmn_digits(h.partner) == plmn_digits(self.partner)
        )

    @property
    def top_confidence(self) -> float:
        return self.hypotheses[0].confidence if self.hypotheses else 1.0


@dataclass(frozen=True)
class ReliabilityBin:
    low: float
    high: float
    count: int
    mean_confidence: float
    accuracy: float


@dataclass
class RcaScores:
    cases: int
    fault_cases: int
    noop_cases: int
    ac1: float
    ac3: float
    noop_accuracy: float
    evidence_resolution_rate: float
    ece: float
    brier: float
    reliability: list[ReliabilityBin] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    """``case: expected -> answered`` for every case wrong at rank 1."""
    by_fault: dict[str, dict[str, float]] = field(default_factory=dict)
    """Per true fault class (``no_fault`` for the windows): cases, AC@1 and AC@3."""


def reliability_table(
    confidences: Sequence[float], correct: Sequence[bool], bins: int = 10
) -> list[ReliabilityBin]:
    """Bin rank-1 confidences and compare with how often rank 1 was right.

    >>> [b.count for b in reliability_table([0.05, 0.95, 0.9], [False, True, False], bins=2)]
    [1, 2]
    """
    out = []
    for b in range(bins):
        low, high = b / bins, (b + 1) / bins
        idx = [
            i for i, c in enumerate(confidences) if low <= c < high or (b == bins - 1 and c == 1.0)
        ]
        if not idx:
            continue
        out.append(
            ReliabilityBin(
                low=low,
                high=high,
                count=len(idx),
                mean_confidence=sum(confidences[i] for i in idx) / len(idx),
                accuracy=sum(1 for i in idx if correct[i]) / len(idx),
            )
        )
    return out


def score_rca(cases: Sequence[RcaCase], bins: int = 10) -> RcaScores:
    """AC@1 / AC@3 over labelled incidents, no-fault accuracy, resolution and calibration."""
    faults = [c for c in cases if not c.is_noop]
    noops = [c for c in cases if c.is_noop]

    def share(xs: Sequence[RcaCase], k: int) -> float:
        return sum(1 for c in xs if c.correct_at(k)) / len(xs) if xs else math.nan

    confidences = [c.top_confidence for c in cases]
    correct = [c.correct_at(1) for c in cases]
    table = reliability_table(confidences, correct, bins)
    n = len(cases)
    ece = sum(b.count * abs(b.accuracy - b.mean_confidence) for b in table) / n if n else math.nan
    brier = (
        sum((conf - float(ok)) ** 2 for conf, ok in zip(confidences, correct, strict=True)) / n
        if n
        else math.nan
    )
    cited = sum(c.evidence_cited for c in cases)
    resolved = sum(c.evidence_resolved for c in cases)
    failures = []
    for c in cases:
        if not c.correct_at(1):
            got = f"{c.hypotheses[0].fault} on {c.hypotheses[0].entity}" if c.hypotheses else "none"
            want = f"{c.fault} on {c.entity}" if not c.is_noop else "no_fault"
            failures.append(f"{c.case_id}: {want} -> {got}")
    by_fault: dict[str, dict[str, float]] = {}
    for name in sorted({c.fault or "no_fault" for c in cases}):
        group = [c for c in cases if (c.fault or "no_fault") == name]
        by_fault[name] = {"cases": len(group), "ac1": share(group, 1), "ac3": share(group, 3)}
    return RcaScores(
        cases=n,
        fault_cases=len(faults),
        noop_cases=len(noops),
        ac1=share(faults, 1),
        ac3=share(faults, 3),
        noop_accuracy=share(noops, 1),
        evidence_resolution_rate=resolved / cited if cited else math.nan,
        ece=ece,
        brier=brier,
        reliability=table,
        failures=failures,
        by_fault=by_fault,
    )


def report_keys(scores: RcaScores) -> dict[str, Any]:
    """The report.json keys of docs/FORMATS.md §5 this module owns, plus extras."""
    return {
        "rca_ac1": scores.ac1,
        "rca_ac3": scores.ac3,
        "rca_noop_accuracy": scores.noop_accuracy,
        "rca_evidence_resolution_rate": scores.evidence_resolution_rate,
        "rca_ece": scores.ece,
        "rca_brier": scores.brier,
        "rca_cases": {"fault": scores.fault_cases, "no_fault": scores.noop_cases},
        "rca_by_fault": scores.by_fault,
        "rca_failures": list(scores.failures),
        "rca_reliability": [
            {
                "bin": [b.low, b.high],
                "count": b.count,
                "mean_confidence": round(b.mean_confidence, 4),
                "accuracy": round(b.accuracy, 4),
            }
            for b in scores.reliability
        ],
    }


# ---------------------------------------------------------------- from a pipeline run


def evidence_resolution(diagnosis: Diagnosis, findings: Mapping[str, Finding]) -> tuple[int, int]:
    """(resolved, cited) evidence ids of a diagnosis.

    An id resolves when the diagnosis holds that evidence item and, for a finding, the finding
    exists in the run and its observed value is the first value the evidence reports.
    """
    cited = [e for h in diagnosis.hypotheses for e in (*h.evidence_ids, *h.refuted_by)]
    resolved = 0
    for evidence_id in cited:
        item = diagnosis.evidence_by_id(evidence_id)
        if item is None:
            continue
        if item.kind == "finding":
            finding = findings.get(item.finding_id or "")
            if (
                finding is None
                or not item.values
                or not math.isclose(item.values[0], finding.observed, rel_tol=1e-9, abs_tol=1e-12)
            ):
                continue
        resolved += 1
    return resolved, len(cited)


def _incident_window(incident: Incident) -> tuple[float, float]:
    return incident.opened_at, incident.resolved_at or incident.updated_at


def _active(
    incident: Incident,
    findings: Mapping[str, Finding],
    start: float,
    end: float,
    entities: set[str] | None = None,
) -> list[Finding] | None:
    """The incident's findings inside ``[start, end]`` (on ``entities``); ``None`` when the run's
    findings are unknown (then only the time overlap can be judged). Further readings of a
    series that alarmed before (``Finding.update``) are not the incident taking up a fault."""
    known = [findings[i] for i in incident.finding_ids if i in findings]
    if not known:
        return None
    return [
        f
        for f in known
        if start <= f.ts <= end and (entities is None or f.entity in entities) and not f.update
    ]


def cases_from_run(
    labels: Labels,
    incidents: Sequence[Incident],
    diagnoses: Mapping[str, Diagnosis],
    findings: Sequence[Finding] = (),
) -> list[RcaCase]:
    """Pair each labelled incident and no-fault window with the pipeline's diagnoses."""
    by_id = {f.id: f for f in findings}
    cases: list[RcaCase] = []
    for label in labels.incidents:
        involved = {*label.affected, label.root_cause.entity}
        best: tuple[tuple[int, float, int, float], Incident] | None = None
        for inc in incidents:
            start, end = _incident_window(inc)
            if end < label.start or start > label.end:
                continue
            overlap = len(involved & set(inc.entities))
            if overlap == 0:
                continue
            active = _active(inc, by_id, label.start, label.end, involved) or []
            first = min((f.ts for f in active), default=start)
            key = (len({f.entity for f in active}), -first, overlap, -start)
            if best is None or key > best[0]:
                best = (key, inc)
        hypotheses: Sequence[Hypothesis] = ()
        resolved = cited = 0
        if best is not None and best[1].id in diagnoses:
            diagnosis = diagnoses[best[1].id]
            hypotheses = diagnosis.hypotheses
            resolved, cited = evidence_resolution(diagnosis, by_id)
        cases.append(
            RcaCase(
                label.id,
                label.root_cause.fault,
                label.root_cause.entity,
                hypotheses,
                partner=label.partner,
                evidence_cited=cited,
                evidence_resolved=resolved,
            )
        )
    for window in labels.no_fault:
        answers: list[Hypothesis] = []
        resolved = cited = 0
        for inc in incidents:
            start, end = _incident_window(inc)
            if end < window.start or start > window.end or inc.id not in diagnoses:
                continue
            if _active(inc, by_id, window.start, window.end) == []:
                continue
            diagnosis = diagnoses[inc.id]
            answers.append(diagnosis.top)
            r, c = evidence_resolution(diagnosis, by_id)
            resolved, cited = resolved + r, cited + c
        # the window is answered by its worst incident: any fault claim makes it wrong
        answers.sort(key=lambda h: (h.fault == "no_fault", -h.confidence))
        cases.append(
            RcaCase(
                window.id, None, None, answers[:1], evidence_cited=cited, evidence_resolved=resolved
            )
        )
    return cases


def evaluate_replay(
    telemetry: Path | str,
    labels: Path | str | Labels,
    inventory: Path | str | None = None,
    pack: Pack | Path | str | None = None,
) -> RcaScores:
    """Run the pipeline on a replay file, diagnose every incident, score against the labels.

    Needs ``noc_assistant.stream.replay.run_replay(path, inventory=...)`` returning an object with
    ``incidents`` and ``findings``.
    """
    from noc_assistant.stream import replay

    loaded = pack if isinstance(pack, Pack) else load_pack(pack)
    label_set = labels if isinstance(labels, Labels) else load_labels(labels)
    inventory_path = Path(inventory) if inventory is not None else None
    pack_dir = loaded.directories[-1] if len(loaded.directories) > 1 else None
    result = replay.run_replay(Path(telemetry), inventory=inventory_path, pack_dir=pack_dir)
    return score_rca(cases_from_run(label_set, result.incidents, result.diagnoses, result.findings))
