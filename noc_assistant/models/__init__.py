"""Domain models shared by every stage (pydantic v2).

Timestamps inside the application are epoch seconds (float, UTC); files use RFC 3339 as
docs/FORMATS.md says. Ids are short strings, unique within their kind.

The models of telemetry, findings and incidents, and the declarations the streaming core reads
(maintenance, raised bars), are defined here: pipeline snapshots
(:mod:`noc_assistant.stream.checkpoint`) name them by this module. The NOC's workflow records
(reviews, the triage chat, partner e-mails) are in :mod:`.records`, the shared base in
:mod:`.base`; every name is importable from here.

>>> key = SeriesKey.of("fivegs_amffunction_rm_reginitreq", {"instance": "amf-2", "nf": "amf"})
>>> key.instance
'amf-2'
>>> str(key)
'fivegs_amffunction_rm_reginitreq{instance="amf-2",nf="amf"}'
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Mapping
from typing import Literal, Self

from pydantic import BaseModel, ConfigDict, Field

from noc_assistant.models.base import FrozenModel, Model
from noc_assistant.models.records import (
    ChatRecord,
    EmailAction,
    EmailDraft,
    EmailEvent,
    Review,
    ReviewEvent,
    Verdict,
)

__all__ = [
    "ChatRecord",
    "Direction",
    "EmailAction",
    "EmailDraft",
    "EmailEvent",
    "Evidence",
    "Finding",
    "Hypothesis",
    "Incident",
    "IncidentState",
    "Maintenance",
    "MetricType",
    "Report",
    "Review",
    "ReviewEvent",
    "Sample",
    "SeriesKey",
    "Tuning",
    "Verdict",
]

MetricType = Literal["counter", "gauge", "histogram_bucket", "histogram_sum", "histogram_count"]
Direction = Literal["up", "down", "both"]
IncidentState = Literal["open", "resolved"]


class SeriesKey(FrozenModel):
    """Identity of one time series: metric name plus its sorted label pairs."""

    metric: str
    labels: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, metric: str, labels: Mapping[str, str] | None = None) -> SeriesKey:
        """Build a key from a metric name and a label mapping (order does not matter)."""
        return cls(metric=metric, labels=tuple(sorted((labels or {}).items())))

    @property
    def label_map(self) -> dict[str, str]:
        return dict(self.labels)

    @property
    def instance(self) -> str:
        """The entity this series belongs to (the ``instance`` label, ``""`` if absent)."""
        for name, value in self.labels:
            if name == "instance":
                return value
        return ""

    def __str__(self) -> str:
        inner = ",".join(f'{k}="{v}"' for k, v in self.labels)
        return f"{self.metric}{{{inner}}}"


class Sample(Model):
    """One telemetry sample (docs/FORMATS.md §1). ``value`` None or NaN is a gap, never zero."""

    model_config = ConfigDict(extra="forbid")

    ts: float
    metric: str
    labels: dict[str, str] = Field(default_factory=dict)
    value: float | None
    type: MetricType = "gauge"

    @property
    def is_gap(self) -> bool:
        return self.value is None or math.isnan(self.value)

    @property
    def key(self) -> SeriesKey:
        return SeriesKey.of(self.metric, self.labels)


#: detector name of a finding that its entity stopped answering (the pack's ``up()`` KPIs)
LIVENESS_DETECTOR = "liveness"


class Finding(FrozenModel):
    """One detector's verdict that a KPI of an entity looks anomalous at one time."""

    id: str
    detector: str
    kpi: str
    """Id of the derived KPI (knowledge pack ``kpis/``) or the raw metric scored."""
    entity: str
    entity_type: str = ""
    ts: float
    score: float
    """Detector score, higher = more anomalous."""
    observed: float
    expected_low: float
    expected_high: float
    direction: Direction
    """Which way the observation left the expected range."""
    series: str = ""
    """The series (or KPI expression) the value came from, for evidence."""
    labels: tuple[tuple[str, str], ...] = ()
    """Extra labels that scope the finding (``plmnid``, ``cause``, ``gpu`` …)."""
    update: bool = False
    """A further reading of a series already alarming the same way in an open incident (it
    scored twice the last one reported): evidence for the diagnosis, not a new symptom. A
    reading that turned the other way is a new symptom, and not marked."""
    evidence_only: bool = False
    """A sign too weak to page on its own (one missed scrape of an exporter at PM periods,
    routine for a flaky one): it joins an incident as evidence for the diagnosis, one that is
    open or opens within the correlation window, and never opens one."""
    held_by: str | None = None
    """The raised bar (:class:`Tuning` id) that made it evidence-only: it scored below the bar
    the NOC set for its KPI on this entity after false pages."""


class Evidence(FrozenModel):
    """A fact a hypothesis rests on: a finding, or a KPI value over a time range."""

    id: str
    kind: Literal["finding", "kpi", "absence", "inventory", "log"] = "finding"
    finding_id: str | None = None
    entity: str
    kpi: str = ""
    start: float
    end: float
    values: tuple[float, ...] = ()
    summary: str = ""


class Hypothesis(FrozenModel):
    """A candidate root cause: a fault class on an entity, with its evidence and references."""

    fault: str
    entity: str
    confidence: float = Field(ge=0.0, le=1.0)
    rule_id: str = ""
    evidence_ids: tuple[str, ...] = ()
    references: tuple[str, ...] = ()
    checks: tuple[str, ...] = ()
    refuted_by: tuple[str, ...] = ()
    partner: str | None = None
    """Partner PLMN (``MCC-MNC``) when a roaming partner is involved."""


class Diagnosis(BaseModel):
    """The RCA answer for one incident: hypotheses best first, and every evidence item cited."""

    model_config = ConfigDict(extra="forbid")

    incident_id: str
    verdict: Literal["fault", "no_fault"]
    hypotheses: list[Hypothesis] = Field(min_length=1)
    evidence: list[Evidence] = Field(default_factory=list)
    pack: str = ""
    """``name@version`` of the knowledge pack that produced it."""

    @property
    def top(self) -> Hypothesis:
        return self.hypotheses[0]

    @property
    def evidence_ids(self) -> set[str]:
        return {e.id for e in self.evidence}

    def evidence_by_id(self, evidence_id: str) -> Evidence | None:
        for e in self.evidence:
            if e.id == evidence_id:
                return e
        return None


class Incident(Model):
    """Findings grouped into one alert: the unit an engineer is paged for."""

    model_config = ConfigDict(extra="forbid")

    id: str
    fingerprint: str
    state: IncidentState = "open"
    opened_at: float
    updated_at: float
    resolved_at: float | None = None
    reopened_at: list[float] = Field(default_factory=list)
    """When it reopened: a finding of one of its KPIs came within the flap window after it
    resolved. Each reopening pages again (the console's REOPENED line)."""
    escalated_at: list[float] = Field(default_factory=list)
    """When a finding at least twice as strong as any the on-call was last told of joined it
    while open (``Correlator.escalate_factor``). Each escalation pages again (ESCALATED)."""
    entities: list[str] = Field(default_factory=list)
    finding_ids: list[str] = Field(default_factory=list)
    kpis: list[str] = Field(default_factory=list)
    max_score: float = 0.0
    title: str = ""
    hypotheses: list[Hypothesis] = Field(default_factory=list)
    severity: Literal["page", "info"] = "page"
    """``page``: the on-call is paged. ``info``: a notice, shown in the console and the API and
    sent to Alertmanager with ``severity="info"``, paging nobody: its own diagnosis is a
    confident ``no_fault`` and none of its findings is a service symptom (only more load or
    resource use: a busy hour, a mass registration on every AMF at once). A notice whose
    diagnosis turns into a fault, or that a service symptom joins, becomes a page then (an
    escalation: ``escalated_at``); a page never turns back into a notice
    (:func:`noc_assistant.triage.rca.severity`). Older stored incidents read as pages."""
    noticed_at: float | None = None
    """Set when the incident opened as a notice (its opening time): its first page, if it
    ever became one, is then its promotion (the first of ``escalated_at``), not its opening."""


class Report(Model):
    """A root-cause report for one incident."""

    model_config = ConfigDict(extra="forbid")

    incident_id: str
    title: str
    summary: str
    hypotheses: list[Hypothesis] = Field(default_factory=list)
    evidence: list[Evidence] = Field(default_factory=list)
    body: str = ""
    generated_by: Literal["template", "llm"] = "template"
    """Who wrote ``summary``: the template, or the LLM (its narration passed the grounding
    check). ``body`` is always the template's."""
    narration_withheld: str | None = None
    """Why an LLM narration was asked for and not used (unreachable, or ungrounded claims)."""
    narration_dropped: list[str] = Field(default_factory=list)
    """Why each sentence the model wrote and the narration left out was dropped (it repeated
    itself or an earlier one, named a date in words, or cited a value its evidence lacks)."""
    untrusted_flags: list[str] = Field(default_factory=list)
    """Phrases reading like instructions found in the incident's telemetry text (entity
    names, evidence): kept as data, never followed, reported so that a person sees them."""


class _Span(Model):
    """A declaration in force from ``start`` to ``end``, on record with who made it and why;
    never deleted: ending it early moves ``end`` and keeps the plan (``planned_end``)."""

    model_config = ConfigDict(extra="forbid")

    id: str
    start: float
    end: float
    by: str
    reason: str | None = None
    created_at: float
    ended_by: str | None = None
    """Who ended it before its planned end (``end`` is then when they did)."""
    planned_end: float | None = None

    def active(self, at: float) -> bool:
        return self.start <= at <= self.end

    def ended(self, by: str, at: float) -> Self:
        """Ended early by ``by`` at ``at`` (one already over stays as it was)."""
        if at >= self.end:
            return self
        return self.model_copy(
            update={"end": max(at, self.start), "ended_by": by, "planned_end": self.end}
        )


class Maintenance(_Span):
    """Planned work on an entity: its findings (and its topology neighbours') page nobody from
    ``start`` to ``end``; they are kept, and a silence that outlasts the window pages then.

    >>> m = Maintenance(id="mw-1", entity="smf-1", start=0.0, end=7200.0, by="ana",
    ...                 created_at=0.0).ended("bo", at=1800.0)
    >>> m.end, m.ended_by, m.active(1799.0), m.active(1800.5)
    (1800.0, 'bo', True, False)
    """

    entity: str
    silence_id: str | None = None
    """The Alertmanager silence that mutes the entity's other alerts for the window."""
    silence_error: str | None = None
    """Why there is no silence (Alertmanager refused or was down); the hold itself stands."""


class Tuning(_Span):
    """A raised bar, the NOC's answer to a KPI that pages for nothing on some entities: from
    ``start`` to ``end``, a finding of ``kpi`` on an entity that ``entity`` (a shell pattern)
    matches pages only when its score (the detectors' ratio to their own bar, 1 at the bar)
    reaches ``min_score``; below it, the finding is kept as evidence for an incident that
    something else opens (``Finding.evidence_only``). A silent target still pages.

    >>> t = Tuning(id="tn-1", kpi="amf-registration-success", entity="amf-*", min_score=3.0,
    ...            start=0.0, end=86400.0, by="ana", reason="3 false pages", created_at=0.0)
    >>> t.holds("amf-registration-success", "amf-2", score=2.5, at=60.0)
    True
    >>> t.holds("amf-registration-success", "amf-2", score=3.0, at=60.0)
    False
    >>> t.holds("amf-registration-success", "smf-1", score=1.5, at=60.0)
    False
    """

    kpi: str
    entity: str = "*"
    min_score: float

    def holds(self, kpi: str, entity: str, score: float, at: float) -> bool:
        """Whether a finding of ``kpi`` on ``entity`` scoring ``score`` at ``at`` is held."""
        return (
            kpi == self.kpi
            and score < self.min_score
            and self.active(at)
            and fnmatch.fnmatchcase(entity, self.entity)
        )
