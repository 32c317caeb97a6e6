"""Reports, triage chat and partner-NOC e-mails over HTTP (mounted by :func:`create_app`).

Reading (no credentials): an incident's root-cause report, the e-mail drafts with their
history, the incident's kept chat, a chat answer that is not kept (it changes nothing). With a
read token (``NOC_API_READ_TOKEN``) the report, the kept chat and chat answers need it or the
write token (401). Chat answers and narrated reports call the model: each caller (token, else
address) may ask for ``NOC_CHAT_RATE_PER_MIN`` a minute (429 with ``Retry-After`` beyond), and
at most ``NOC_CHAT_MAX_CONCURRENT`` run at once, in worker threads, never on the event loop
(others wait their turn without holding a thread).
Writing needs ``Authorization: Bearer <NOC_API_TOKEN>``: a chat turn kept in the incident's
log (``keep``, with the asker's name), drafting an e-mail, editing, approving, rejecting and
sending it. Without a configured token the write endpoints answer 503 (disabled), with a wrong
or missing one 401.

An e-mail moves ``draft`` → ``approved`` (a named person) → ``sent``, or to ``rejected``; only
an approved draft is sent, once: sending holds a lock from the status check to the store. An
incident has at most one open e-mail (draft or approved) per partner: asking for another
returns it (200, not 201). ``GET /api/emails/{id}.eml`` gives an e-mail as a message file for a
mail client, masked again. Each
step, with who took it, and each failed send with the server's reason, is kept on the draft
(``history``); an edit keeps the text it replaced. Recipients the server refused while it took
the others are kept as ``undelivered``.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Annotated, Any, Literal, TypeVar

from fastapi import APIRouter, Header, HTTPException, Request, Response
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, ConfigDict, Field, model_validator

from noc_assistant.api.deps import (
    RateLimiter,
    StoreDep,
    Writer,
    caller_key,
    locked_step,
    require_reader,
    require_writer,
)
from noc_assistant.errors import EmailStateError, NotFoundError
from noc_assistant.integrations.llm import Message
from noc_assistant.integrations.mail import (
    ADDRESS_PATTERN,
    EML_MEDIA_TYPE,
    Mailer,
    MailError,
    export,
    masked,
)
from noc_assistant.models import ChatRecord, Diagnosis, EmailDraft, Incident, Report
from noc_assistant.settings import get_settings
from noc_assistant.store import Store
from noc_assistant.triage.drafting import Drafter, DraftingError, conversation
from noc_assistant.triage.history import concurrent_in_store, similar_in_store

__all__ = ["ChatRequest", "drafts_router"]

AuthHeader = Annotated[str | None, Header()]
T = TypeVar("T")
KEPT_HISTORY = 10
"""Kept turns given to the model as the conversation so far when a request brings none."""


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
    """Keep the question and its answer in the incident's log (needs the write token)."""
    asked_by: str | None = Field(default=None, min_length=1, max_length=200)

    @model_validator(mode="after")
    def _named_when_kept(self) -> ChatRequest:
        if self.keep and not self.asked_by:
            raise ValueError("asked_by: a kept question needs the asker's name")
        return self


class Approval(BaseModel):
    model_config = ConfigDict(extra="forbid")

    approver: str = Field(min_length=1, max_length=200)
    reason: str | None = Field(default=None, max_length=2000)


class Edit(BaseModel):
    model_config = ConfigDict(extra="forbid")

    editor: str = Field(min_length=1, max_length=200)
    to: list[Annotated[str, Field(pattern=ADDRESS_PATTERN, max_length=254)]] | None = Field(
        default=None, min_length=1, max_length=10
    )
    subject: str | None = Field(default=None, min_length=1, max_length=300)
    body: str | None = Field(default=None, min_length=1, max_length=20000)


class Sender(BaseModel):
    model_config = ConfigDict(extra="forbid")

    by: str | None = Field(default=None, min_length=1, max_length=200)


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
    router = APIRouter()
    send_lock = threading.Lock()
    draft_lock = threading.Lock()
    settings = get_settings()
    limiter = RateLimiter(rate_per_min or settings.chat_rate_per_min)
    model_slots = asyncio.Semaphore(max_concurrent or settings.chat_max_concurrent)

    async def call_model(request: Request, authorization: str | None, fn: Callable[[], T]) -> T:
        """Run ``fn`` (which calls the model) in a worker thread, within the caller's rate
        and the concurrency bound (a wait for a slot holds no thread)."""
        limiter.take(caller_key(request, authorization), "model calls")
        async with model_slots:
            return await run_in_threadpool(fn)

    def need_drafter() -> Drafter:
        if drafter is None:
            raise HTTPException(503, "drafting is not configured (no knowledge pack loaded)")
        return drafter

    def incident_and_diagnosis(s: Store, incident_id: str) -> tuple[Incident, Diagnosis]:
        try:
            return s.diagnosed_incident(incident_id)
        except NotFoundError as exc:  # the store's message names its path: not for clients
            if exc.ready:
                raise HTTPException(404, f"incident {incident_id} not found") from None
            raise HTTPException(409, f"incident {incident_id} has no diagnosis yet") from None

    def email_or_404(s: Store, email_id: str) -> EmailDraft:
        draft = s.get_email(email_id)
        if draft is None:
            raise HTTPException(404, f"e-mail {email_id} not found")
        return draft

    @router.get("/api/incidents/{incident_id}/report")
    async def report(
        s: StoreDep,
        request: Request,
        incident_id: str,
        narrate: bool = False,
        authorization: AuthHeader = None,
    ) -> Report:
        require_reader(request, authorization)
        d = need_drafter()

        def write() -> Report:
            inc, diagnosis = incident_and_diagnosis(s, incident_id)
            review, seen = s.get_review(incident_id), similar_in_store(s, inc)
            near = d.network_topology.neighbours
            beside = concurrent_in_store(s, inc, near, now=clock())
            return d.report(
                inc, diagnosis, narrate=narrate, review=review, seen=seen, beside=beside
            )

        if narrate:  # the model writes the narration
            return await call_model(request, authorization, write)
        return await run_in_threadpool(write)

    @router.get("/api/incidents/{incident_id}/chat")
    def kept_chat(
        s: StoreDep, request: Request, incident_id: str, authorization: AuthHeader = None
    ) -> list[ChatRecord]:
        require_reader(request, authorization)
        if s.get_incident(incident_id) is None:
            raise HTTPException(404, f"incident {incident_id} not found")
        return s.chat_for(incident_id)

    @router.post("/api/incidents/{incident_id}/chat")
    async def chat(
        s: StoreDep,
        request: Request,
        incident_id: str,
        req: ChatRequest,
        authorization: AuthHeader = None,
    ) -> dict[str, Any]:
        if req.keep:
            require_writer(request, authorization)
        else:
            require_reader(request, authorization)
        d = need_drafter()

        def answer_it() -> dict[str, Any]:
            inc, diagnosis = incident_and_diagnosis(s, incident_id)
            history: list[Message] = [{"role": t.role, "content": t.content} for t in req.history]
            if not history:  # the conversation so far: the incident's kept log
                history = conversation(s.chat_for(incident_id), KEPT_HISTORY)
            beside = concurrent_in_store(s, inc, d.network_topology.neighbours, now=clock())
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
            if req.keep:
                record = d.keep(incident_id, req.question, answer, req.asked_by or "", clock())
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

        return await call_model(request, authorization, answer_it)

    @router.post("/api/incidents/{incident_id}/emails", status_code=201)
    def draft_email(s: StoreDep, _: Writer, response: Response, incident_id: str) -> EmailDraft:
        """Draft the e-mail to the implicated partner (201), or return the one still open
        for the incident and partner (200: draft or approved; a rejected or sent one does
        not count), so that a second click does not write a second e-mail."""
        d = need_drafter()
        inc, diagnosis = incident_and_diagnosis(s, incident_id)
        with draft_lock:  # two requests at once: one drafts, the other finds it
            existing = s.list_emails(incident_id)
            try:
                draft = d.partner_email(
                    inc,
                    diagnosis,
                    s.findings_for(incident_id),
                    now=clock(),
                    review=s.get_review(incident_id),
                    existing=existing,
                )
            except DraftingError as exc:
                raise HTTPException(409, str(exc)) from None
            if any(e.id == draft.id for e in existing):
                response.status_code = 200
                return draft
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
        d = need_drafter()
        draft = email_or_404(s, email_id)
        sender = mailer.sender if mailer is not None else get_settings().smtp_sender
        try:
            raw = export(draft, sender, d.masker, keep=[d.contact], now=clock())
        except MailError as exc:
            raise HTTPException(422, str(exc)) from None
        return Response(
            raw,
            media_type=EML_MEDIA_TYPE,
            headers={"Content-Disposition": f'attachment; filename="{draft.id}.eml"'},
        )

    @router.get("/api/emails/{email_id}")
    def get_email(s: StoreDep, email_id: str) -> EmailDraft:
        return email_or_404(s, email_id)

    def step(s: Store, email_id: str, change: Callable[[EmailDraft], EmailDraft]) -> EmailDraft:
        """Apply one step of an e-mail's life under the lock (409 if its state forbids it)."""
        return locked_step(
            send_lock, lambda: email_or_404(s, email_id), change, s.save_email, EmailStateError, 409
        )

    @router.put("/api/emails/{email_id}")
    def edit_email(s: StoreDep, _: Writer, email_id: str, edit: Edit) -> EmailDraft:
        d = need_drafter()
        keep = [d.contact]  # our own contact under the signature stays as written
        subject = masked(d.masker, edit.subject, keep) if edit.subject is not None else None
        body = masked(d.masker, edit.body, keep) if edit.body is not None else None
        return step(
            s, email_id, lambda m: m.edited(subject, body, edit.to, by=edit.editor, at=clock())
        )

    @router.post("/api/emails/{email_id}/approve")
    def approve(s: StoreDep, _: Writer, email_id: str, who: Approval) -> EmailDraft:
        return step(s, email_id, lambda m: m.approved(who.approver, clock()))

    @router.post("/api/emails/{email_id}/reject")
    def reject(s: StoreDep, _: Writer, email_id: str, who: Approval) -> EmailDraft:
        return step(s, email_id, lambda m: m.rejected(who.approver, who.reason, at=clock()))

    @router.post("/api/emails/{email_id}/send")
    def send(s: StoreDep, _: Writer, email_id: str, who: Sender | None = None) -> EmailDraft:
        if mailer is None:
            raise HTTPException(503, "sending is not configured: set NOC_SMTP_HOST")
        by = who.by if who is not None else None

        def deliver(draft: EmailDraft) -> EmailDraft:
            draft.ready_to_send()
            try:
                delivery = mailer.send(draft, now=clock())
            except MailError as exc:  # nobody got it: kept approved, the attempt recorded
                s.save_email(draft.send_failed(str(exc), clock(), by=by))
                raise HTTPException(502, str(exc)) from None
            return draft.sent(delivery.message_id, clock(), by=by, undelivered=delivery.refused)

        return step(s, email_id, deliver)

    return router
