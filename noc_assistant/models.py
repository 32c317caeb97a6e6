"""Domain models shared by every stage (pydantic v2).

Timestamps inside the application are epoch seconds (float, UTC); files use RFC 3339 as
docs/FORMATS.md says. Ids are short strings, unique within their kind.

>>> key = SeriesKey.of("fivegs_amffunction_rm_reginitreq", {"instance": "amf-2", "nf": "amf"})
>>> key.instance
'amf-2'
>>> str(key)
'fivegs_amffunction_rm_reginitreq{instance="amf-2",nf="amf"}'
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Collection, Mapping
from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field

from noc_assistant.errors import EmailStateError, FourEyesError, ReviewError

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


class _Model(BaseModel):
    """Base of the models: one pickled by an earlier version (a pipeline snapshot,
    :mod:`noc_assistant.stream.checkpoint`) that lacks a field added since gets its default, so an
    upgraded worker resumes from the state its previous version left.

    >>> import pickle
    >>> f = Finding(id="f", detector="d", kpi="k", entity="e", ts=0.0, score=2.0,
    ...             observed=1.0, expected_low=0.0, expected_high=0.5, direction="up")
    >>> state = f.__getstate__()
    >>> old = {k: v for k, v in state["__dict__"].items() if k != "held_by"}
    >>> g = Finding.__new__(Finding)
    >>> g.__setstate__({**state, "__dict__": old})
    >>> g.held_by is None, g == f
    (True, True)
    """

    def __setstate__(self, state: dict[Any, Any]) -> None:
        values = state.get("__dict__")
        if isinstance(values, dict):
            missing = {
                name: field.get_default(call_default_factory=True)
                for name, field in type(self).model_fields.items()
                if name not in values and not field.is_required()
            }
            if missing:
                state = {**state, "__dict__": {**values, **missing}}
        super().__setstate__(state)


class _Frozen(_Model):
    model_config = ConfigDict(frozen=True, extra="forbid")


class SeriesKey(_Frozen):
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


class Sample(_Model):
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


class Finding(_Frozen):
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


class Evidence(_Frozen):
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


class Hypothesis(_Frozen):
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


class Incident(_Model):
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


class Report(_Model):
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
    untrusted_flags: list[str] = Field(default_factory=list)
    """Phrases reading like instructions found in the incident's telemetry text (entity
    names, evidence): kept as data, never followed, reported so that a person sees them."""


class _Span(_Model):
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


Verdict = Literal["fault", "no_fault", "maintenance"]
"""An engineer's judgement of an incident: a real ``fault``, ``no_fault`` (nothing was wrong:
a false page) or planned ``maintenance`` (expected, neither)."""


class ReviewEvent(_Model):
    """One step of an incident's review, kept for the audit trail."""

    model_config = ConfigDict(extra="forbid")

    at: float
    by: str
    action: Literal["acknowledged", "judged"]
    detail: str | None = None


class Review(_Model):
    """What the NOC did with an incident: who took it (acknowledged) and what it was (the
    verdict, with the root cause they confirmed). Kept apart from the incident, which the
    pipeline rewrites as findings arrive.

    >>> r = Review(incident_id="inc-1").acknowledged("ana", at=60.0)
    >>> r = r.judged("fault", "bo", at=900.0, fault="upf_gtpu_drop", entity="upf-3")
    >>> r.verdict, r.root_cause, r.acknowledged_by, r.acknowledged_at
    ('fault', ('upf-3', 'upf_gtpu_drop'), 'ana', 60.0)
    >>> r.judged("no_fault", "cy", at=950.0).history[-1].detail
    'no_fault (was fault: upf_gtpu_drop on upf-3)'
    """

    model_config = ConfigDict(extra="forbid")

    incident_id: str
    acknowledged_by: str | None = None
    acknowledged_at: float | None = None
    """The first acknowledgement (time to acknowledge counts from the opening to it)."""
    verdict: Verdict | None = None
    verdict_by: str | None = None
    verdict_at: float | None = None
    fault: str | None = None
    """The confirmed fault class (with ``verdict`` ``fault``; None: not known yet)."""
    entity: str | None = None
    """The confirmed root-cause entity."""
    partner: str | None = None
    note: str | None = None
    history: list[ReviewEvent] = Field(default_factory=list)

    @property
    def root_cause(self) -> tuple[str, str] | None:
        return (self.entity, self.fault) if self.entity and self.fault else None

    def acknowledged(self, by: str, at: float) -> Review:
        """Taken by ``by``; a later acknowledgement (a hand-over) names the new owner and
        keeps the first time."""
        return self.model_copy(
            update={
                "acknowledged_by": by,
                "acknowledged_at": self.acknowledged_at if self.acknowledged_at else at,
                "history": [*self.history, ReviewEvent(at=at, by=by, action="acknowledged")],
            }
        )

    def judged(
        self,
        verdict: Verdict,
        by: str,
        at: float,
        *,
        fault: str | None = None,
        entity: str | None = None,
        partner: str | None = None,
        note: str | None = None,
        known_faults: Collection[str] | None = None,
    ) -> Review:
        """The verdict (a root cause only with ``fault``, one of ``known_faults`` when given:
        the pack's classes); judging an incident acknowledges it when nobody had. A changed
        verdict keeps the previous one in the history."""
        if (
            fault is not None
            and known_faults is not None
            and (fault == "no_fault" or fault not in known_faults)
        ):
            raise ReviewError(f"fault: {fault!r} is not a fault class of the knowledge pack")
        if verdict != "fault" and (fault or entity or partner):
            raise ReviewError("a root cause (fault, entity, partner) goes with the verdict 'fault'")
        if bool(fault) != bool(entity):
            raise ReviewError("a root cause needs both the fault class and the entity")
        detail = verdict + (f": {fault} on {entity}" if fault else "")
        if self.verdict is not None:
            was = self.verdict + (f": {self.fault} on {self.entity}" if self.fault else "")
            detail = f"{verdict} (was {was})"
        return self.model_copy(
            update={
                "verdict": verdict,
                "verdict_by": by,
                "verdict_at": at,
                "fault": fault,
                "entity": entity,
                "partner": partner,
                "note": note,
                "acknowledged_by": self.acknowledged_by or by,
                "acknowledged_at": self.acknowledged_at or at,
                "history": [
                    *self.history,
                    ReviewEvent(at=at, by=by, action="judged", detail=detail),
                ],
            }
        )


class ChatRecord(_Model):
    """One question of an incident's triage chat and the answer it got, kept in the incident's
    log so that the next shift reads what was asked (subscriber identifiers masked)."""

    model_config = ConfigDict(extra="forbid")

    id: str
    incident_id: str
    at: float
    asked_by: str
    question: str
    answer: str
    generated_by: Literal["llm", "template"]
    cited: list[str] = Field(default_factory=list)
    removed: list[str] = Field(default_factory=list)
    """Sentences of the model's answer withheld as unsupported (kept for review)."""
    note: str | None = None
    tool_calls: list[dict[str, Any]] = Field(default_factory=list)
    """The read-only look-ups the model made for this answer, each with its arguments and
    the result it read (:meth:`noc_assistant.triage.tools.ToolResult.log`)."""


EmailAction = Literal["drafted", "edited", "approved", "rejected", "sent", "send_failed"]


class EmailEvent(_Model):
    """One step of a partner e-mail's life, kept on the draft: who did what, when. An edit
    keeps the text it replaced, so every version that existed can be read back."""

    model_config = ConfigDict(extra="forbid")

    at: float
    action: EmailAction
    by: str | None = None
    """The person (None: the assistant drafted it, or a sender gave no name)."""
    detail: str | None = None
    """The reason of a rejection or a failed send, or the recipients a send did not reach."""
    previous_subject: str | None = None
    previous_body: str | None = None
    previous_to: list[str] | None = None


class EmailDraft(_Model):
    """A partner-NOC e-mail: drafted, then approved by a person, then sent.

    Each step returns a changed copy with the step appended to :attr:`history`, or raises
    :class:`~noc_assistant.errors.EmailStateError` where the state forbids it:

    >>> d = EmailDraft(id="em-1", incident_id="inc-7", to=["noc@partner.example"],
    ...                subject="Roaming", body="Text v1", created_at=0.0)
    >>> d = d.edited(body="Text v2", by="ana", at=5.0).approved("bo", at=9.0)
    >>> [(e.action, e.by, e.previous_body) for e in d.history]
    [('edited', 'ana', 'Text v1'), ('approved', 'bo', None)]
    >>> d.edited(body="v3", by="ana", at=10.0)
    Traceback (most recent call last):
    ...
    noc_assistant.errors.EmailStateError: e-mail em-1 is approved: cannot edit it
    >>> d = d.sent("<m1@op>", at=12.0, undelivered={"x@partner.example": "550 no such user"})
    >>> d.status, d.undelivered
    ('sent', {'x@partner.example': '550 no such user'})
    >>> d.history[-1].detail
    'not delivered to x@partner.example: 550 no such user'
    """

    model_config = ConfigDict(extra="forbid")

    id: str
    incident_id: str
    to: list[str]
    subject: str
    body: str
    partner_plmn: str | None = None
    status: Literal["draft", "approved", "sent", "rejected"] = "draft"
    approved_by: str | None = None
    created_at: float
    approved_at: float | None = None
    sent_at: float | None = None
    message_id: str | None = None
    """The SMTP ``Message-ID`` it was sent with."""
    rejected_reason: str | None = None
    undelivered: dict[str, str] = Field(default_factory=dict)
    """Recipients the server refused when it was sent (address → the server's reply); the
    others got it. Empty when every recipient got it."""
    history: list[EmailEvent] = Field(default_factory=list)
    """Every step since it was drafted, oldest first (the audit trail)."""

    # The steps of its life; each returns the changed copy, or raises EmailStateError.

    def _step(
        self, allowed: tuple[str, ...], what: str, event: EmailEvent | None, **changes: object
    ) -> EmailDraft:
        if self.status not in allowed:
            raise EmailStateError(f"e-mail {self.id} is {self.status}: cannot {what} it")
        if event is not None:
            changes["history"] = [*self.history, event]
        return self.model_copy(update=changes)

    def edited(
        self,
        subject: str | None = None,
        body: str | None = None,
        to: list[str] | None = None,
        *,
        by: str,
        at: float,
    ) -> EmailDraft:
        """A draft's subject, body or recipients rewritten by a named person; what was
        replaced is kept in the history. Nothing changed: the draft as it was, no entry."""
        changes: dict[str, object] = {
            k: v
            for k, v in (("subject", subject), ("body", body), ("to", to))
            if v is not None and v != getattr(self, k)
        }
        if not changes:
            return self._step(("draft",), "edit", None)
        event = EmailEvent(
            at=at,
            action="edited",
            by=by,
            previous_subject=self.subject if "subject" in changes else None,
            previous_body=self.body if "body" in changes else None,
            previous_to=list(self.to) if "to" in changes else None,
        )
        return self._step(("draft",), "edit", event, **changes)

    def authors(self) -> list[str]:
        """Who asked for it to be drafted and who edited it, first first: none of them may
        approve it (four eyes: the text a partner gets was read by someone who did not write
        or choose it)."""
        named = [e.by for e in self.history if e.action in ("drafted", "edited") and e.by]
        return list(dict.fromkeys(named))

    def drafted_by(self, by: str | None) -> EmailDraft:
        """The draft with the person who asked for it named on its ``drafted`` step."""
        history = [
            e.model_copy(update={"by": by}) if e.action == "drafted" else e for e in self.history
        ]
        return self.model_copy(update={"history": history})

    def approved(self, by: str, at: float) -> EmailDraft:
        """Approved by a named person (only a draft), who neither asked for it nor edited it
        (names compared without regard to case; :class:`~noc_assistant.errors.FourEyesError`):

        >>> d = EmailDraft(id="em-2", incident_id="i", to=["a@b.example"], subject="s",
        ...                body="b", created_at=0.0).edited(body="b2", by="eve", at=1.0)
        >>> d.approved("Eve", at=2.0)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        noc_assistant.errors.FourEyesError: e-mail em-2 may not be approved by eve, who drafted...
        >>> d.approved("bo", at=2.0).approved_by
        'bo'
        """
        authors = self.authors()
        if self.status == "draft" and by.casefold() in {a.casefold() for a in authors}:
            raise FourEyesError(
                f"e-mail {self.id} may not be approved by {', '.join(authors)}, who drafted"
                " or edited it (four eyes: someone else must approve it)"
            )
        event = EmailEvent(at=at, action="approved", by=by)
        return self._step(
            ("draft",), "approve", event, status="approved", approved_by=by, approved_at=at
        )

    def rejected(self, by: str, reason: str | None = None, *, at: float) -> EmailDraft:
        """Rejected (a draft, or an approved e-mail not yet sent), with who and why."""
        why = f"{by}: {reason}" if reason else by
        event = EmailEvent(at=at, action="rejected", by=by, detail=reason)
        return self._step(
            ("draft", "approved"), "reject", event, status="rejected", rejected_reason=why
        )

    def ready_to_send(self) -> None:
        """Raise :class:`EmailStateError` unless it is approved (check before sending)."""
        self._step(("approved",), "send", None)

    def sent(
        self,
        message_id: str,
        at: float,
        *,
        by: str | None = None,
        undelivered: Mapping[str, str] | None = None,
    ) -> EmailDraft:
        """Sent (only an approved e-mail, once); ``undelivered``: the recipients the server
        refused (the others got it; sending again would duplicate it for them)."""
        refused = dict(undelivered or {})
        detail = (
            "not delivered to " + "; ".join(f"{a}: {why}" for a, why in refused.items())
            if refused
            else None
        )
        event = EmailEvent(at=at, action="sent", by=by, detail=detail)
        return self._step(
            ("approved",),
            "send",
            event,
            status="sent",
            sent_at=at,
            message_id=message_id,
            undelivered=refused,
        )

    def send_failed(self, reason: str, at: float, *, by: str | None = None) -> EmailDraft:
        """A send that reached nobody: it stays approved (it may be sent again), and the
        attempt and its reason are kept in the history."""
        event = EmailEvent(at=at, action="send_failed", by=by, detail=reason)
        return self._step(("approved",), "record a failed send of", event)
