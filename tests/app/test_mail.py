"""Approved partner-NOC e-mails reach a real SMTP server (aiosmtpd on loopback): envelope,
headers and UTF-8 body as sent; STARTTLS with the server's certificate checked; drafts not
approved, refused connections, logins, certificates and recipients are :class:`MailError`\\ s
that name the server and never the password."""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme
from aiosmtpd.smtp import SMTP, AuthResult, Envelope, LoginPassword, Session
from conftest import Inbox, serve_smtp

from noc_assistant.errors import UnreachableError
from noc_assistant.integrations.mail import Mailer, MailError
from noc_assistant.models import EmailDraft
from noc_assistant.settings import Settings

PASSWORD = "hunter2-s3cret"


def _authenticate(
    server: SMTP, session: Session, envelope: Envelope, mechanism: str, auth_data: object
) -> AuthResult:
    ok = isinstance(auth_data, LoginPassword) and auth_data == (b"noc", PASSWORD.encode())
    return AuthResult(success=ok, handled=False)  # handled=False: the server answers 535


@pytest.fixture()
def smtp_server_with_auth(free_port: int) -> Iterator[tuple[Inbox, int]]:
    """The same, requiring AUTH (user ``noc``, :data:`PASSWORD`; no TLS on loopback)."""
    yield from serve_smtp(
        free_port, authenticator=_authenticate, auth_required=True, auth_require_tls=False
    )


def _draft(status: str = "approved", to: list[str] | None = None) -> EmailDraft:
    return EmailDraft(
        id="em-1",
        incident_id="inc-7",
        to=to if to is not None else ["noc@partner.example", "oncall@partner.example"],
        subject="Roaming: PFCP association loss on upf-3 (Grüße)",
        body="Hello partner NOC,\n\nroaming sessions towards upf-3 fail since 10:02 UTC.\n\n"
        "Grüße aus dem NOC\n",
        partner_plmn="26201",
        status=status,
        approved_by="alice" if status == "approved" else None,
        created_at=1_795_910_400.0,
    )


def test_an_approved_draft_arrives_as_written(smtp_server: tuple[Inbox, int]) -> None:
    inbox, port = smtp_server
    mailer = Mailer("127.0.0.1", port, sender="noc@operator.example")
    delivery = mailer.send(_draft(), now=1_795_910_460.0)
    message_id = delivery.message_id
    assert delivery.refused == {}

    [envelope] = inbox.envelopes
    assert envelope.mail_from == "noc@operator.example"
    assert envelope.rcpt_tos == ["noc@partner.example", "oncall@partner.example"]
    [msg] = inbox.messages()
    assert msg["From"] == "noc@operator.example"
    assert msg["To"] == "noc@partner.example, oncall@partner.example"
    assert msg["Subject"] == "Roaming: PFCP association loss on upf-3 (Grüße)"
    assert msg["X-NOC-Incident"] == "inc-7" and msg["X-NOC-Draft"] == "em-1"
    assert msg["Date"] == "Sun, 29 Nov 2026 00:01:00 +0000"
    assert msg["Message-ID"] == message_id and message_id.endswith("@operator.example>")
    assert msg.get_content_type() == "text/plain" and msg.get_content_charset() == "utf-8"
    assert msg.get_content().replace("\r\n", "\n") == _draft().body  # CRLF on the wire
    assert (envelope.original_content or b"").isascii()  # 7-bit: any server takes it


def test_only_approved_drafts_with_recipients_are_sent(smtp_server: tuple[Inbox, int]) -> None:
    inbox, port = smtp_server
    mailer = Mailer("127.0.0.1", port)
    for status in ("draft", "sent", "rejected"):
        with pytest.raises(MailError, match=f"draft em-1 is {status}, not approved"):
            mailer.send(_draft(status))
    with pytest.raises(MailError, match="no recipient"):
        mailer.send(_draft(to=[]))
    assert inbox.envelopes == []


def test_a_closed_port_names_the_server_not_the_password(free_port: int) -> None:
    mailer = Mailer("127.0.0.1", free_port, username="noc", password=PASSWORD, timeout_s=5)
    with pytest.raises(MailError, match=rf"127\.0\.0\.1:{free_port}: cannot connect") as err:
        mailer.send(_draft())
    assert isinstance(err.value, UnreachableError)  # exit 2 at the CLI, with what to check
    assert PASSWORD not in str(err.value)
    assert PASSWORD not in repr(mailer)


@pytest.mark.filterwarnings("ignore:Requiring AUTH while not requiring TLS")
def test_login_and_a_wrong_password(smtp_server_with_auth: tuple[Inbox, int]) -> None:
    inbox, port = smtp_server_with_auth
    Mailer("127.0.0.1", port, username="noc", password=PASSWORD).send(_draft())
    assert len(inbox.envelopes) == 1

    wrong = "not-" + PASSWORD
    with pytest.raises(MailError, match=rf"127\.0\.0\.1:{port}: cannot send draft em-1: 535") as e:
        Mailer("127.0.0.1", port, username="noc", password=wrong).send(_draft())
    assert wrong not in str(e.value) and PASSWORD not in str(e.value)
    with pytest.raises(MailError, match="530"):  # no login at all
        Mailer("127.0.0.1", port).send(_draft())
    assert len(inbox.envelopes) == 1


def test_refused_recipients(smtp_server: tuple[Inbox, int]) -> None:
    inbox, port = smtp_server
    mailer = Mailer("127.0.0.1", port)
    # one refused, the other served: delivered, with the refusal reported, not an error
    delivery = mailer.send(_draft(to=["noc@partner.example", "x@refuse.example"]))
    assert delivery.refused == {"x@refuse.example": "550 5.1.1 no such mailbox"}
    assert inbox.envelopes[0].rcpt_tos == ["noc@partner.example"]  # the others got it
    assert inbox.messages()[0]["Message-ID"] == delivery.message_id
    with pytest.raises(MailError, match=r"cannot send draft em-1: x@refuse\.example"):
        mailer.send(_draft(to=["x@refuse.example"]))
    assert len(inbox.envelopes) == 1


@pytest.fixture()
def smtp_server_with_starttls(free_port: int, tmp_path: Path) -> Iterator[tuple[Inbox, int, Path]]:
    """A server that requires STARTTLS, its certificate for 127.0.0.1 signed by a test CA;
    its inbox, port and the CA's PEM file."""
    ca = trustme.CA()
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    pem = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(pem))
    for inbox, port in serve_smtp(free_port, tls_context=context, require_starttls=True):
        yield inbox, port, pem


def test_starttls_checks_the_servers_certificate(
    smtp_server_with_starttls: tuple[Inbox, int, Path],
) -> None:
    inbox, port, ca = smtp_server_with_starttls
    with pytest.raises(MailError, match="530"):  # the server requires TLS first
        Mailer("127.0.0.1", port).send(_draft())
    # a certificate no known authority signed is refused before anything is sent
    with pytest.raises(MailError, match=rf"127\.0\.0\.1:{port}: .*CERTIFICATE_VERIFY_FAILED"):
        Mailer("127.0.0.1", port, starttls=True).send(_draft())
    assert inbox.envelopes == []
    delivery = Mailer("127.0.0.1", port, starttls=True, ca_file=str(ca)).send(_draft())
    assert len(inbox.envelopes) == 1 and inbox.messages()[0]["Message-ID"] == delivery.message_id
    with pytest.raises(MailError, match="cannot use the CA file"):
        Mailer("127.0.0.1", port, starttls=True, ca_file=str(ca) + ".missing").send(_draft())


def test_header_injection_is_refused() -> None:
    draft = _draft().model_copy(update={"subject": "hi\r\nBcc: everyone@example.net"})
    with pytest.raises(MailError, match="draft em-1: cannot build the message"):
        Mailer("127.0.0.1").compose(draft)


def test_mailer_from_settings() -> None:
    assert Mailer.from_settings(Settings(_env_file=None, smtp_host=None)) is None
    settings = Settings(
        _env_file=None,
        smtp_host="mx.operator.example",
        smtp_port=587,
        smtp_sender="noc@operator.example",
        smtp_username="noc",
        smtp_password=PASSWORD,
        smtp_starttls=True,
        smtp_timeout_s=3.0,
    )
    assert Mailer.from_settings(settings) == Mailer(
        "mx.operator.example", 587, "noc@operator.example", "noc", PASSWORD, True, 3.0
    )
