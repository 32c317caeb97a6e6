"""Reports, triage chat and partner-NOC e-mails over HTTP (mounted by :func:`create_app`).

Reading: an incident's root-cause report, the e-mail drafts with their history, the
incident's kept chat, a chat answer that is not kept (it changes nothing). Once any user exists
or a read token (``NOC_API_READ_TOKEN``) is set, the report, the kept chat and chat answers
need a valid token of any role (401; :func:`noc_assistant.api.deps.require_reader`). Chat
answers and narrated reports call the model: each caller (user or token, else address) may
ask for ``NOC_CHAT_RATE_PER_MIN`` a minute (429 with ``Retry-After`` beyond), and at most
``NOC_CHAT_MAX_CONCURRENT`` run at once, in worker threads, never on the event loop (others
wait their turn without holding a thread).

Writing needs a bearer token of a role (:mod:`noc_assistant.api.deps`): an ``operator`` keeps
a chat turn in the incident's log (``keep``), drafts an e-mail, edits and rejects it; an
``approver`` approves and sends it. No token or an unknown one answers 401, a lower role 403;
with neither ``NOC_API_TOKEN`` nor any user the writes are disabled (503). A named user is
recorded as who acted (a name in the body is ignored); with the shared ``NOC_API_TOKEN`` the
body's name (``approver``, ``editor``, ``asked_by``, ``by``) is.

An e-mail moves ``draft`` → ``approved`` (a named person) → ``sent``, or to ``rejected``; only
an approved draft is sent, once: sending holds a lock from the status check to the store.
Four eyes: whoever asked for the draft or edited it may not approve it (403,
:meth:`noc_assistant.models.EmailDraft.approved`). An incident has at most one open e-mail
(draft or approved) per partner: asking for another returns it (200, not 201).
``GET /api/emails/{id}.eml`` gives an e-mail as a message file for a mail client, masked
again. Each step, with who took it, and each failed send with the server's reason, is kept on
the draft (``history``); an edit keeps the text it replaced. Recipients the server refused
while it took the others are kept as ``undelivered``.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, TypeVar

from fastapi import APIRouter, HTTPException, Request, Response
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, ConfigDict, Field

from noc_assistant.api.deps import (
    Approver,
    AuthHeader,
    Operator,
    RateLimiter,
    StoreDep,
    Viewer,
    acting,
    caller_key,
    locked_step,
    need,
)
from noc_assistant.errors import EmailStateError, FourEyesError, NotFoundError
from noc_assistant.integrations.llm import Message
from noc_assistant.integrations.mail import (
    ADDRESS_PATTERN,
    EML_MEDIA_TYPE,
    Mailer,
    MailError,
    export,
    masked,
)
from noc_assistant.integrations.tmf621 import on_approval
from noc_assistant.models import ChatRecord, Diagnosis, EmailDraft, Incident, Report
from noc_assistant.settings import get_settings
from noc_assistant.store import Store
from noc_assistant.triage.drafting import Drafter, DraftingError, conversation
from noc_assistant.triage.history import concurrent_in_store, similar_in_store

__all__ = ["ChatRequest", "drafts_router"]

T = TypeVar("T")
KEPT_HISTORY = 10
"""Kept turns given to the model as the conversation so far when a request brings none."""
Name = Annotated[str, Field(min_length=1, max_length=200)]


class ChatTurn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: Literal["user", "assistant"]
    content: str = Field(max_length=8000)


class ChatRequest(BaseModel):
    """A question about one incident, with the conversation so far (oldest first)."""

    model_config = ConfigDict(extra="forbid")

    question: str = Field(min_length=1, max_length=2000)
    history: list[ChatTurn] = Field(default_factory=list, max_length=20)
    keep: bool = False
    """Keep the question and its answer in the incident's log (an operator's token)."""
    asked_by: Name | None = None
    """Who asked (needed with the shared token; a named user is recorded as itself)."""


class Approval(BaseModel):
    model_config = ConfigDict(extra="forbid")

    approver: Name | None = None
    reason: str | None = Field(default=None, max_length=2000)


class Edit(BaseModel):
    model_config = ConfigDict(extra="forbid")

    editor: Name | None = None
    to: list[Annotated[str, Field(pattern=ADDRESS_PATTERN, max_length=254)]] | None = Field(
        default=None, min_length=1, max_length=10
    )
    subject: str | None = Field(default=None, min_length=1, max_length=300)
    body: str | None = Field(default=None, min_length=1, max_length=20000)


class Sender(BaseModel):
    model_config = ConfigDict(extra="forbid")

    by: Name | None = None


@dataclass
class _Drafting:
    """What the endpoints share: the drafter, mailer and clock, the model's rate limit and
    concurrency bound, and the locks of drafting and of an e-mail's steps."""

    drafter: Drafter | None
    mailer: Mailer | None
    clock: Callable[[], float]
    limiter: RateLimiter
    model_slots: asyncio.Semaphore
    send_lock: threading.Lock = field(default_factory=threading.Lock)
    draft_lock: threading.Lock = field(default_factory=threading.Lock)

    async def call_model(
        self, request: Request, authorization: str | None, fn: Callable[[], T]
    ) -> T:
        """Run ``fn`` (which calls the model) in a worker thread, within the caller's rate
        and the concurrency bound (a wait for a slot holds no thread)."""
        self.limiter.take(caller_key(request, authorization), "model calls")
        async with self.model_slots:
            return await run_in_threadpool(fn)

    def need_drafter(self) -> Drafter:
        if self.drafter is None:
            raise HTTPException(503, "drafting is not configured (no knowledge pack loaded)")
        return self.drafter

    @staticmethod
    def incident_and_diagnosis(s: Store, incident_id: str) -> tuple[Incident, Diagnosis]:
        try:
            return s.diagnosed_incident(incident_id)
        except NotFoundError as exc:  # the store's message names its path: not for clients
            if exc.ready:
                raise HTTPException(404, f"incident {incident_id} not found") from None
            raise HTTPException(409, f"incident {incident_id} has no diagnosis yet") from None

    @staticmethod
    def email_or_404(s: Store, email_id: str) -> EmailDraft:
        draft = s.get_email(email_id)
        if draft is None:
            raise HTTPException(404, f"e-mail {email_id} not found")
        return draft

    def step(
        self, s: Store, email_id: str, change: Callable[[EmailDraft], EmailDraft]
    ) -> EmailDraft:
        """Apply one step of an e-mail's life under the lock (409 if its state forbids it,
        403 if the person may not take it: four eyes)."""

        def checked(draft: EmailDraft) -> EmailDraft:
            try:
                return change(draft)
            except FourEyesError as exc:
                raise HTTPException(403, str(exc)) from None

        def load() -> EmailDraft:
            return self.email_or_404(s, email_id)

        return locked_step(self.send_lock, load, checked, s.save_email, EmailStateError, 409)

    def answer(
        self, s: Store, incident_id: str, req: ChatRequest, asker: str | None
    ) -> dict[str, Any]:
        """A chat answer (kept in the incident's log, asked by ``asker``, when not None)."""
        d = self.need_drafter()
        inc, diagnosis = self.incident_and_diagnosis(s, incident_id)
        history: list[Message] = [{"role": t.role, "content": t.content} for t in req.history]
        if not history:  # the conversation so far: the incident's kept log
            history = conversation(s.chat_for(incident_id), KEPT_HISTORY)
        beside = concurrent_in_store(s, inc, d.network_topology.neighbours, now=self.clock())
        answer = d.answer(
            inc,
            diagnosis,
            req.question,
            history,
            similar_in_store(s, inc),
            findings=s.findings_for(incident_id),
            beside=beside,
        )
        kept = None
        if asker is not None:
            record = d.keep(incident_id, req.question, answer, asker, self.clock())
            s.save_chat(record)
            kept = record.id
        return {
            "answer": answer.text,
            "generated_by": answer.generated_by,
            "cited": list(answer.cited),
            "removed": list(answer.removed),
            "note": answer.note,
            "tool_calls": list(answer.tool_calls),
            "untrusted_flags": list(answer.untrusted_flags),
            "kept": kept,
        }


def drafts_router(
    drafter: Drafter | None,
    mailer: Mailer | None,
    clock: Callable[[], float] = time.time,
    *,
    rate_per_min: int | None = None,
    max_concurrent: int | None = None,
) -> APIRouter:
    """The endpoints, around the application's drafter and mailer (the store and the write
    token are the application's: ``app.state.store``, ``app.state.api_token``).

    ``rate_per_min`` and ``max_concurrent`` bound the model calls (default:
    ``NOC_CHAT_RATE_PER_MIN``, ``NOC_CHAT_MAX_CONCURRENT``)."""
    settings = get_settings()
    ctx = _Drafting(
        drafter,
        mailer,
        clock,
        RateLimiter(rate_per_min or settings.chat_rate_per_min),
        asyncio.Semaphore(max_concurrent or settings.chat_max_concurrent),
    )
    router = APIRouter()
    _reading_routes(router, ctx)
    _email_routes(router, ctx)
    _email_step_routes(router, ctx)
    return router


def _reading_routes(router: APIRouter, ctx: _Drafting) -> None:
    """The report, the kept chat, and chat answers (kept with an operator's token)."""

    @router.get("/api/incidents/{incident_id}/report")
    async def report(
        s: StoreDep,
        request: Request,
        _: Viewer,
        incident_id: str,
        narrate: bool = False,
        authorization: AuthHeader = None,
    ) -> Report:
        d = ctx.need_drafter()

        def write() -> Report:
            inc, diagnosis = ctx.incident_and_diagnosis(s, incident_id)
            review, seen = s.get_review(incident_id), similar_in_store(s, inc)
            near = d.network_topology.neighbours
            beside = concurrent_in_store(s, inc, near, now=ctx.clock())
            return d.report(
                inc, diagnosis, narrate=narrate, review=review, seen=seen, beside=beside
            )

        if narrate:  # the model writes the narration
            return await ctx.call_model(request, authorization, write)
        return await run_in_threadpool(write)

    @router.get("/api/incidents/{incident_id}/chat")
    def kept_chat(s: StoreDep, _: Viewer, incident_id: str) -> list[ChatRecord]:
        if s.get_incident(incident_id) is None:
            raise HTTPException(404, f"incident {incident_id} not found")
        return s.chat_for(incident_id)

    @router.post("/api/incidents/{incident_id}/chat")
    async def chat(
        s: StoreDep,
        request: Request,
        _: Viewer,
        incident_id: str,
        req: ChatRequest,
        authorization: AuthHeader = None,
    ) -> dict[str, Any]:
        asker = None
        if req.keep:  # a write: an operator, and who asked
            caller = need("operator")(request, authorization)
            asker = acting(caller, req.asked_by, "asked_by")
        return await ctx.call_model(
            request, authorization, lambda: ctx.answer(s, incident_id, req, asker)
        )


def _email_routes(router: APIRouter, ctx: _Drafting) -> None:
    """Drafting an e-mail (an operator), listing, reading and exporting them."""

    @router.post("/api/incidents/{incident_id}/emails", status_code=201)
    def draft_email(
        s: StoreDep, caller: Operator, response: Response, incident_id: str
    ) -> EmailDraft:
        """Draft the e-mail to the implicated partner (201), or return the one still open
        for the incident and partner (200: draft or approved; a rejected or sent one does
        not count), so that a second click does not write a second e-mail. A named user is
        recorded as who asked for it (and may not approve it)."""
        d = ctx.need_drafter()
        inc, diagnosis = ctx.incident_and_diagnosis(s, incident_id)
        with ctx.draft_lock:  # two requests at once: one drafts, the other finds it
            existing = s.list_emails(incident_id)
            try:
                draft = d.partner_email(
                    inc,
                    diagnosis,
                    s.findings_for(incident_id),
                    now=ctx.clock(),
                    review=s.get_review(incident_id),
                    existing=existing,
                )
            except DraftingError as exc:
                raise HTTPException(409, str(exc)) from None
            if any(e.id == draft.id for e in existing):
                response.status_code = 200
                return draft
            draft = draft.drafted_by(acting(caller, None, "by", required=False))
            s.save_email(draft)
        return draft

    @router.get("/api/emails")
    def list_emails(s: StoreDep, incident_id: str | None = None) -> list[EmailDraft]:
        return s.list_emails(incident_id)

    # before /api/emails/{email_id}, which would take "mail-1.eml" for an id
    @router.get("/api/emails/{email_id}.eml", response_class=Response)
    def export_email(s: StoreDep, email_id: str) -> Response:
        """The e-mail as an RFC 5322 message (``.eml``) to open in a mail client, from the
        configured sender, its subject and body masked again
        (:func:`noc_assistant.integrations.mail.export`)."""
        d = ctx.need_drafter()
        draft = ctx.email_or_404(s, email_id)
        sender = ctx.mailer.sender if ctx.mailer is not None else get_settings().smtp_sender
        try:
            raw = export(draft, sender, d.masker, keep=[d.contact], now=ctx.clock())
        except MailError as exc:
            raise HTTPException(422, str(exc)) from None
        return Response(
            raw,
            media_type=EML_MEDIA_TYPE,
            headers={"Content-Disposition": f'attachment; filename="{draft.id}.eml"'},
        )

    @router.get("/api/emails/{email_id}")
    def get_email(s: StoreDep, email_id: str) -> EmailDraft:
        return ctx.email_or_404(s, email_id)


def _email_step_routes(router: APIRouter, ctx: _Drafting) -> None:
    """Editing and rejecting (an operator), approving and sending (an approver)."""

    @router.put("/api/emails/{email_id}")
    def edit_email(s: StoreDep, caller: Operator, email_id: str, edit: Edit) -> EmailDraft:
        d = ctx.need_drafter()
        editor = acting(caller, edit.editor, "editor") or ""
        keep = [d.contact]  # our own contact under the signature stays as written
        subject = masked(d.masker, edit.subject, keep) if edit.subject is not None else None
        body = masked(d.masker, edit.body, keep) if edit.body is not None else None
        return ctx.step(
            s, email_id, lambda m: m.edited(subject, body, edit.to, by=editor, at=ctx.clock())
        )

    @router.post("/api/emails/{email_id}/approve")
    def approve(
        s: StoreDep, caller: Approver, email_id: str, who: Approval, response: Response
    ) -> EmailDraft:
        """Approve a draft; where its partner takes TMF621 tickets, open one (a partner that
        cannot be told leaves the approval standing: a ``Warning`` header says so, and the
        ticket is opened at the incident's next event)."""
        approver = acting(caller, who.approver, "approver") or ""
        draft = ctx.step(s, email_id, lambda m: m.approved(approver, ctx.clock()))
        if ctx.drafter is not None:
            d = ctx.drafter
            warning = on_approval(s, draft, d.network_topology, d.masker, [d.contact])
            if warning:
                text = warning.encode("latin-1", "replace").decode("latin-1").replace('"', "'")
                response.headers["Warning"] = f'199 noc-assistant "{" ".join(text.split())}"'
        return draft

    @router.post("/api/emails/{email_id}/reject")
    def reject(s: StoreDep, caller: Operator, email_id: str, who: Approval) -> EmailDraft:
        by = acting(caller, who.approver, "approver") or ""
        return ctx.step(s, email_id, lambda m: m.rejected(by, who.reason, at=ctx.clock()))

    @router.post("/api/emails/{email_id}/send")
    def send(s: StoreDep, caller: Approver, email_id: str, who: Sender | None = None) -> EmailDraft:
        mailer = ctx.mailer
        if mailer is None:
            raise HTTPException(503, "sending is not configured: set NOC_SMTP_HOST")
        by = acting(caller, who.by if who is not None else None, "by", required=False)

        def deliver(draft: EmailDraft) -> EmailDraft:
            draft.ready_to_send()
            try:
                delivery = mailer.send(draft, now=ctx.clock())
            except MailError as exc:  # nobody got it: kept approved, the attempt recorded
                s.save_email(draft.send_failed(str(exc), ctx.clock(), by=by))
                raise HTTPException(502, str(exc)) from None
            return draft.sent(delivery.message_id, ctx.clock(), by=by, undelivered=delivery.refused)

        return ctx.step(s, email_id, deliver)
