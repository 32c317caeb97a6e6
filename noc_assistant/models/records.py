"""The NOC's workflow records around an incident: its review (who took it, what it was), its
triage chat, and the partner e-mails drafted for it.

They are re-exported by :mod:`noc_assistant.models`; unlike the streaming models there, no
pipeline snapshot holds them.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any, Literal

from pydantic import ConfigDict, Field

from noc_assistant.errors import EmailStateError, FourEyesError, ReviewError
from noc_assistant.models.base import Model

__all__ = [
    "ChatRecord",
    "EmailAction",
    "EmailDraft",
    "EmailEvent",
    "Review",
    "ReviewEvent",
    "Verdict",
]


Verdict = Literal["fault", "no_fault", "maintenance"]
"""An engineer's judgement of an incident: a real ``fault``, ``no_fault`` (nothing was wrong:
a false page) or planned ``maintenance`` (expected, neither)."""


class ReviewEvent(Model):
    """One step of an incident's review, kept for the audit trail."""

    model_config = ConfigDict(extra="forbid")

    at: float
    by: str
    action: Literal["acknowledged", "judged"]
    detail: str | None = None


class Review(Model):
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


class ChatRecord(Model):
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


class EmailEvent(Model):
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


class EmailDraft(Model):
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
