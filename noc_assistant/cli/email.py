"""`noc email ...`: partner-NOC e-mail drafts (`noc incident email ID` writes one): list,
approve, reject, send. An e-mail is sent only once a named person has approved it."""

from __future__ import annotations

import time
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from noc_assistant.cli._console import console
from noc_assistant.errors import BadInputError, ConfigError
from noc_assistant.models import EmailDraft
from noc_assistant.settings import get_settings
from noc_assistant.storage import Store, open_store

__all__ = ["app"]

app = typer.Typer(help="Partner-NOC e-mails: drafts, approval, sending.", no_args_is_help=True)


def _draft(store: Store, email_id: str) -> EmailDraft:
    draft = store.get_email(email_id)
    if draft is None:
        raise BadInputError(f"no e-mail {email_id!r} in {store.path}")
    return draft


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


@app.command("show")
def show(email_id: Annotated[str, typer.Argument(help="E-mail id")]) -> None:
    """Print one e-mail as it would be sent."""
    d = _draft(open_store(get_settings().db_url), email_id)
    console.print(
        f"{d.id} ({d.status}) to {', '.join(d.to)}\nSubject: {d.subject}\n\n{d.body}",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )


@app.command("approve")
def approve(
    email_id: Annotated[str, typer.Argument(help="E-mail id")],
    by: Annotated[str, typer.Option("--by", help="Who approves it (recorded)")],
) -> None:
    """Approve a draft for sending."""
    store = open_store(get_settings().db_url)
    store.save_email(_draft(store, email_id).approved(by, time.time()))
    console.print(f"{email_id} approved by {by}", highlight=False)


@app.command("reject")
def reject(
    email_id: Annotated[str, typer.Argument(help="E-mail id")],
    by: Annotated[str, typer.Option("--by", help="Who rejects it (recorded)")],
    reason: Annotated[str | None, typer.Option(help="Why")] = None,
) -> None:
    """Reject a draft (or an approved e-mail not yet sent)."""
    store = open_store(get_settings().db_url)
    store.save_email(_draft(store, email_id).rejected(by, reason))
    console.print(f"{email_id} rejected by {by}", highlight=False)


@app.command("send")
def send(email_id: Annotated[str, typer.Argument(help="E-mail id")]) -> None:
    """Send an approved e-mail through NOC_SMTP_HOST."""
    from noc_assistant.mail import Mailer

    settings = get_settings()
    mailer = Mailer.from_settings(settings)
    if mailer is None:
        raise ConfigError("sending is not configured: set NOC_SMTP_HOST")
    store = open_store(settings.db_url)
    d = _draft(store, email_id)
    d.ready_to_send()
    message_id = mailer.send(d)
    store.save_email(d.sent(message_id, time.time()))
    console.print(f"{email_id} sent to {', '.join(d.to)} as {message_id}", highlight=False)
