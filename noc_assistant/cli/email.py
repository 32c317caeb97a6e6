"""`noc email ...`: partner-NOC e-mail drafts: draft (one open draft per incident and partner),
list, show (with its history), edit, approve, reject, send, and export as a ``.eml`` message
file. An e-mail is sent only once a named person has approved it, who neither asked for the
draft nor edited it (four eyes); every step is kept on the draft with who took it.

These commands work on the store directly (``NOC_DB_URL``): whoever runs them there has local
admin access, and ``--by`` names the person (the API records its authenticated user instead).
The four-eyes rule holds here too, on the names given."""

from __future__ import annotations

import re
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from noc_assistant.cli._console import console, err_console
from noc_assistant.cli._live import InventoryOpt, drafting_for_cli
from noc_assistant.errors import BadInputError, ConfigError
from noc_assistant.models import EmailDraft
from noc_assistant.settings import get_settings
from noc_assistant.store import Store, open_store

__all__ = ["app"]

app = typer.Typer(help="Partner-NOC e-mails: drafts, approval, sending.", no_args_is_help=True)


def _draft(store: Store, email_id: str) -> EmailDraft:
    draft = store.get_email(email_id)
    if draft is None:
        raise BadInputError(f"no e-mail {email_id!r} in {store.path}")
    return draft


def _print(d: EmailDraft, note: str) -> None:
    console.print(
        f"{d.id} ({d.status}{note}) to {', '.join(d.to)}\nSubject: {d.subject}\n\n{d.body}",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )


@app.command("draft")
def draft(
    incident_id: Annotated[str, typer.Argument(help="Incident id")],
    inventory: InventoryOpt = None,
    by: Annotated[
        str | None, typer.Option("--by", help="Who asks for it (recorded; may not approve it)")
    ] = None,
) -> None:
    """Draft an e-mail to the NOC of the roaming partner an incident implicates (stored as a
    draft: `noc email approve` / `noc email send`). Where one to that partner is still open
    (draft or approved), it is shown instead of writing a second one."""
    store, drafter = drafting_for_cli(inventory)
    inc, diagnosis = store.diagnosed_incident(incident_id)
    existing = store.list_emails(incident_id)
    d = drafter.partner_email(
        inc,
        diagnosis,
        store.findings_for(incident_id),
        time.time(),
        review=store.get_review(incident_id),
        existing=existing,
    )
    if any(e.id == d.id for e in existing):
        err_console.print(
            f"{d.id} to {d.partner_plmn} already exists for {incident_id} ({d.status}): "
            "no second draft",
            highlight=False,
        )
        _print(d, ", already exists")
        return
    d = d.drafted_by(by)
    store.save_email(d)
    _print(d, "")


@app.command("export")
def export_email(
    email_id: Annotated[str, typer.Argument(help="E-mail id")],
    out: Annotated[
        Path | None, typer.Option("--out", help="The .eml file to write ('-' or none: stdout)")
    ] = None,
) -> None:
    """Write an e-mail as a message file (RFC 5322, ``.eml``) to open in a mail client: from
    NOC_SMTP_SENDER, its subject and body masked again, whatever its status."""
    from guardrails import Masker
    from noc_assistant.cli._live import load_pack_and_topology
    from noc_assistant.integrations.mail import MailError, export

    settings = get_settings()
    d = _draft(open_store(settings.db_url), email_id)
    masker = Masker.from_pack(load_pack_and_topology(settings, None)[0])
    try:
        raw = export(d, settings.smtp_sender, masker, keep=[settings.operator_contact])
    except MailError as exc:
        raise BadInputError(str(exc)) from None
    if out is None or str(out) == "-":
        sys.stdout.buffer.write(raw)
        sys.stdout.flush()
        return
    try:
        out.write_bytes(raw)
    except OSError as exc:
        raise BadInputError(f"cannot write the message: {exc}", source=str(out)) from exc
    err_console.print(f"{email_id} ({d.status}) written to {out}", highlight=False)


@app.command("list")
def list_emails(
    incident: Annotated[str | None, typer.Option(help="Only this incident's")] = None,
) -> None:
    """List e-mail drafts, oldest first."""
    store = open_store(get_settings().db_url)
    table = Table("id", "incident", "status", "to", "subject", "approved by")
    for d in store.list_emails(incident):
        cells = (d.id, d.incident_id, d.status, ", ".join(d.to), d.subject, d.approved_by or "")
        table.add_row(*(escape(c) for c in cells))
    console.print(table)


def _when(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


@app.command("show")
def show(email_id: Annotated[str, typer.Argument(help="E-mail id")]) -> None:
    """Print one e-mail as it would be sent, then its history (who did what, when)."""
    d = _draft(open_store(get_settings().db_url), email_id)
    lines = [f"{d.id} ({d.status}) to {', '.join(d.to)}", f"Subject: {d.subject}", "", d.body]
    lines += [f"not delivered to {a}: {why}" for a, why in d.undelivered.items()]
    lines.append("History:")
    for e in d.history:
        who = f" by {e.by}" if e.by else ""
        lines.append(f"  {_when(e.at)}  {e.action}{who}" + (f": {e.detail}" if e.detail else ""))
    console.print("\n".join(lines), markup=False, highlight=False, soft_wrap=True)


@app.command("edit")
def edit(
    email_id: Annotated[str, typer.Argument(help="E-mail id")],
    by: Annotated[str, typer.Option("--by", help="Who edits it (recorded)")],
    subject: Annotated[str | None, typer.Option(help="New subject")] = None,
    body_file: Annotated[
        Path | None, typer.Option(help="File holding the new body ('-': standard input)")
    ] = None,
    to: Annotated[
        list[str] | None, typer.Option("--to", help="New recipients (repeat for each)")
    ] = None,
) -> None:
    """Rewrite a draft's subject, body or recipients (what was replaced stays in its
    history); subscriber identifiers in the new text are masked."""
    from guardrails import Masker
    from noc_assistant.cli._live import load_pack_and_topology
    from noc_assistant.integrations.mail import ADDRESS_PATTERN, masked

    settings = get_settings()
    if body_file is None:
        body = None
    elif str(body_file) == "-":
        body = sys.stdin.read()
    else:
        try:
            body = body_file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise BadInputError(f"cannot read the body: {exc}", source=str(body_file)) from exc
    if subject is None and body is None and not to:
        raise BadInputError("nothing to change: give --subject, --body-file or --to")
    for address in to or []:
        if not re.fullmatch(ADDRESS_PATTERN, address):
            raise BadInputError(f"--to: {address!r} is not one e-mail address")
    masker = Masker.from_pack(load_pack_and_topology(settings, None)[0])
    keep = [settings.operator_contact]  # our own contact under the signature, as written
    store = open_store(settings.db_url)
    d = _draft(store, email_id).edited(
        masked(masker, subject, keep) if subject is not None else None,
        masked(masker, body, keep) if body is not None else None,
        list(to) if to else None,
        by=by,
        at=time.time(),
    )
    store.save_email(d)
    console.print(f"{email_id} edited by {by}", highlight=False)


@app.command("approve")
def approve(
    email_id: Annotated[str, typer.Argument(help="E-mail id")],
    by: Annotated[str, typer.Option("--by", help="Who approves it (recorded)")],
    inventory: InventoryOpt = None,
) -> None:
    """Approve a draft for sending: not by whoever asked for it or edited it (four eyes;
    names compared without regard to case). Where the partner takes TMF621 tickets
    (``partners[].tmf621_url``), one is opened; if the partner cannot be told, the approval
    stands, a warning says so, and the ticket is opened at the incident's next event."""
    from noc_assistant.integrations.tmf621 import on_approval

    store, drafter = drafting_for_cli(inventory)
    d = _draft(store, email_id).approved(by, time.time())
    store.save_email(d)
    console.print(f"{email_id} approved by {by}", highlight=False)
    topology, masker = drafter.network_topology, drafter.masker
    warning = on_approval(store, d, topology, masker, [drafter.contact])
    if warning:
        err_console.print(f"warning: {warning}", markup=False, highlight=False)


@app.command("reject")
def reject(
    email_id: Annotated[str, typer.Argument(help="E-mail id")],
    by: Annotated[str, typer.Option("--by", help="Who rejects it (recorded)")],
    reason: Annotated[str | None, typer.Option(help="Why")] = None,
) -> None:
    """Reject a draft (or an approved e-mail not yet sent)."""
    store = open_store(get_settings().db_url)
    store.save_email(_draft(store, email_id).rejected(by, reason, at=time.time()))
    console.print(f"{email_id} rejected by {by}", highlight=False)


@app.command("send")
def send(
    email_id: Annotated[str, typer.Argument(help="E-mail id")],
    by: Annotated[str | None, typer.Option("--by", help="Who sends it (recorded)")] = None,
) -> None:
    """Send an approved e-mail through NOC_SMTP_HOST (a failed attempt is recorded on it)."""
    from noc_assistant.integrations.mail import Mailer, MailError

    settings = get_settings()
    mailer = Mailer.from_settings(settings)
    if mailer is None:
        raise ConfigError("sending is not configured: set NOC_SMTP_HOST")
    store = open_store(settings.db_url)
    d = _draft(store, email_id)
    d.ready_to_send()
    try:
        delivery = mailer.send(d)
    except MailError as exc:
        store.save_email(d.send_failed(str(exc), time.time(), by=by))
        raise
    store.save_email(d.sent(delivery.message_id, time.time(), by=by, undelivered=delivery.refused))
    got = [a for a in d.to if a not in delivery.refused]
    console.print(f"{email_id} sent to {', '.join(got)} as {delivery.message_id}", highlight=False)
    for address, why in delivery.refused.items():
        err_console.print(f"not delivered to {address}: {why}", highlight=False)
