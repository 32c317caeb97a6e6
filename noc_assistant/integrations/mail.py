"""Sending approved partner-NOC e-mails over SMTP; the only module that speaks SMTP.

A :class:`~noc_assistant.models.EmailDraft` is written by the assistant, approved by a person,
and only then handed to :meth:`Mailer.send`, which refuses anything not approved. The message
is plain UTF-8 text from the configured sender (``NOC_SMTP_SENDER``) with two headers that tie
it back to its origin: ``X-NOC-Incident`` (the incident) and ``X-NOC-Draft`` (the draft).
``send`` returns a :class:`Delivery`: the ``Message-ID`` it used and the recipients the server
refused while it accepted the others, for the caller to store on the draft (a partial delivery
is not an error: the message went out, and sending it again would duplicate it).

Sending is configured by the ``NOC_SMTP_*`` settings; without ``NOC_SMTP_HOST`` there is no
mailer at all:

>>> from noc_assistant.settings import Settings
>>> Mailer.from_settings(Settings(smtp_host=None)) is None
True
>>> Mailer.from_settings(Settings(smtp_host="mx.example.net", smtp_port=587))
Mailer(host='mx.example.net', port=587, sender='noc-assistant@localhost', username=None, \
starttls=False, timeout_s=10.0, ca_file=None)

Every failure that leaves the message undelivered (refused connection, timeout, TLS, login,
every recipient refused) is a :class:`MailError` naming the server as ``host:port`` and the
reason, never the password.

There is one way to build the message: :func:`compose`, which :meth:`Mailer.compose` (and so
:meth:`Mailer.send`) and :func:`export` (the ``.eml`` file a person attaches or sends from
their own mail client) share. An export's subject and body go through the pack's masker again
(:func:`masked`): a file leaves the assistant's control as surely as a sent message does.
"""

from __future__ import annotations

import email.errors
import re
import smtplib
import ssl
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from email.message import EmailMessage
from email.utils import formatdate, make_msgid
from typing import TYPE_CHECKING

from noc_assistant.errors import NocError, UnreachableError
from noc_assistant.models import EmailDraft

if TYPE_CHECKING:
    from guardrails.masking import Masker
    from noc_assistant.settings import Settings

__all__ = [
    "ADDRESS_PATTERN",
    "EML_MEDIA_TYPE",
    "Delivery",
    "MailError",
    "Mailer",
    "SmtpUnreachableError",
    "compose",
    "export",
    "masked",
]

ADDRESS_PATTERN = r"^[^@\s,;<>\"]+@[^@\s,;<>\"]+\.[^@\s,;<>\"]+$"
"""One recipient as an engineer may set it: a bare address (no display name, no list)."""
EML_MEDIA_TYPE = "message/rfc822"
"""The media type of an exported message (a ``.eml`` file)."""


class MailError(NocError):
    """An e-mail that could not be built or sent (or a draft not fit to be sent)."""


class SmtpUnreachableError(MailError, UnreachableError):
    """The SMTP server refused the connection or did not answer in time."""


@dataclass(frozen=True)
class Delivery:
    """A message the server accepted: its ``Message-ID``, and the recipients it refused
    (address → the server's reply), if it accepted the message for the others."""

    message_id: str
    refused: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Mailer:
    """An SMTP server to send approved drafts through, and the address they come from.

    ``password`` (with ``username``: SMTP AUTH) is kept out of the ``repr`` and of every
    message. ``starttls`` switches the connection to TLS before logging in, checking the
    server's certificate and name against the system's certificate authorities, or those of
    ``ca_file`` (PEM).
    """

    host: str
    port: int = 25
    sender: str = "noc-assistant@localhost"
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    starttls: bool = False
    timeout_s: float = 10.0
    ca_file: str | None = None

    @classmethod
    def from_settings(cls, settings: Settings) -> Mailer | None:
        """The mailer the ``NOC_SMTP_*`` settings describe; None without ``smtp_host``."""
        if not settings.smtp_host:
            return None
        password = settings.smtp_password
        return cls(
            host=settings.smtp_host,
            port=settings.smtp_port,
            sender=settings.smtp_sender,
            username=settings.smtp_username,
            password=password.get_secret_value() if password is not None else None,
            starttls=settings.smtp_starttls,
            timeout_s=settings.smtp_timeout_s,
            ca_file=str(settings.smtp_ca_file) if settings.smtp_ca_file else None,
        )

    @property
    def server(self) -> str:
        """``host:port``, as messages name the server."""
        return f"{self.host}:{self.port}"

    def compose(self, draft: EmailDraft, now: float | None = None) -> EmailMessage:
        """The message ``send`` would send for ``draft`` at ``now``: :func:`compose` from
        this mailer's sender. It does not check the draft's status.

        >>> draft = EmailDraft(id="em-1", incident_id="inc-7", to=["noc@partner.example"],
        ...                    subject="Roaming degradation", body="Grüße\\n", created_at=0.0)
        >>> msg = Mailer("mx.example.net", sender="noc@op.example").compose(draft, now=0.0)
        >>> msg["From"], msg["To"], msg["X-NOC-Incident"], msg["X-NOC-Draft"]
        ('noc@op.example', 'noc@partner.example', 'inc-7', 'em-1')
        """
        return compose(draft, self.sender, now)

    def _session(self, doing: str) -> smtplib.SMTP:
        """A session as sending uses it: connected, switched to TLS (certificate and name
        checked) and logged in. :class:`MailError` (``doing``: what failed, for the message)
        otherwise."""
        tls = self._tls() if self.starttls else None
        try:
            smtp = smtplib.SMTP(self.host, self.port, timeout=self.timeout_s)
        except (smtplib.SMTPException, OSError) as exc:
            raise SmtpUnreachableError(
                f"SMTP server {self.server}: cannot connect: {self._reason(exc)}"
            ) from exc
        try:
            smtp.ehlo()
            if tls is not None:
                smtp.starttls(context=tls)
                smtp.ehlo()
            if self.username is not None:
                smtp.login(self.username, self.password or "")
        except (smtplib.SMTPException, OSError) as exc:
            smtp.close()  # no QUIT: the connection may be what failed
            raise MailError(f"{self.server}: {doing}: {self._reason(exc)}") from exc
        return smtp

    @staticmethod
    def _quit(smtp: smtplib.SMTP) -> None:
        try:
            smtp.quit()
        except (smtplib.SMTPException, OSError):  # what was asked is done already
            smtp.close()

    def probe(self) -> str:
        """Whether the server takes a session as sending would open it (connect, EHLO,
        STARTTLS with the certificate checked, login), without sending; what it said, or
        :class:`MailError` naming the server."""
        smtp = self._session("session refused")
        try:
            code, _ = smtp.noop()
        except (smtplib.SMTPException, OSError) as exc:
            smtp.close()
            raise MailError(f"{self.server}: {self._reason(exc)}") from exc
        self._quit(smtp)
        steps = ["EHLO", *(["STARTTLS"] if self.starttls else [])]
        steps += ["login"] if self.username else []
        return f"{' + '.join(steps)} accepted ({code})"

    def send(self, draft: EmailDraft, now: float | None = None) -> Delivery:
        """Send an approved draft; return its :class:`Delivery` (the ``Message-ID`` it went
        out with, and any recipients refused while the others got it).

        Raises :class:`MailError` for a draft that is not approved or has no recipient, and
        when the server cannot be reached or refuses the message, the login or every
        recipient: then nobody got it.
        """
        if draft.status != "approved":
            raise MailError(f"draft {draft.id} is {draft.status}, not approved: not sent")
        if not draft.to or not all(address.strip() for address in draft.to):
            raise MailError(f"draft {draft.id} has no recipient (or an empty one): not sent")
        msg = self.compose(draft, now)
        message_id = str(msg["Message-ID"])
        smtp = self._session(f"cannot send draft {draft.id}")
        try:
            refused = smtp.send_message(msg)
        except (smtplib.SMTPException, OSError) as exc:
            smtp.close()  # no QUIT: the connection may be what failed
            raise MailError(
                f"{self.server}: cannot send draft {draft.id}: {self._reason(exc)}"
            ) from exc
        self._quit(smtp)  # the server has the message already
        return Delivery(
            message_id,
            {
                address: self._reason(smtplib.SMTPResponseException(code, text))
                for address, (code, text) in refused.items()
            },
        )

    def _tls(self) -> ssl.SSLContext:
        """The TLS context of STARTTLS: certificate and host name checked."""
        try:
            return ssl.create_default_context(cafile=self.ca_file)
        except (OSError, ssl.SSLError) as exc:
            raise MailError(
                f"{self.server}: cannot use the CA file {self.ca_file}: {self._reason(exc)}"
            ) from exc

    def _reason(self, exc: BaseException) -> str:
        """A short, readable reason for ``exc``, with the password (if ever echoed) masked."""
        if isinstance(exc, smtplib.SMTPRecipientsRefused):
            reason = ", ".join(
                f"{address} ({code} {_text(text)})"
                for address, (code, text) in exc.recipients.items()
            )
        elif isinstance(exc, smtplib.SMTPResponseException):
            reason = f"{exc.smtp_code} {_text(exc.smtp_error)}"
        else:
            reason = str(exc) or type(exc).__name__
        if self.password:
            reason = reason.replace(self.password, "***")
        return reason


def compose(draft: EmailDraft, sender: str, now: float | None = None) -> EmailMessage:
    """The message of ``draft`` from ``sender`` at ``now`` (epoch seconds; default: the
    current time), with a fresh ``Message-ID`` in the sender's domain and the headers that tie
    it to its incident and draft; plain UTF-8 text. It does not check the draft's status.

    >>> draft = EmailDraft(id="em-1", incident_id="inc-7", to=["noc@partner.example"],
    ...                    subject="Roaming degradation", body="Grüße\\n", created_at=0.0)
    >>> msg = compose(draft, "noc@op.example", now=0.0)
    >>> msg["From"], msg["To"], msg["X-NOC-Incident"], msg["X-NOC-Draft"]
    ('noc@op.example', 'noc@partner.example', 'inc-7', 'em-1')
    >>> msg["Date"]
    'Thu, 01 Jan 1970 00:00:00 +0000'
    >>> msg["Message-ID"].endswith("@op.example>"), msg.get_content()
    (True, 'Grüße\\n')
    """
    domain = sender.rpartition("@")[2] or "localhost"
    msg = EmailMessage()
    try:
        msg["From"] = sender
        msg["To"] = ", ".join(draft.to)
        msg["Subject"] = draft.subject
        msg["Date"] = formatdate(time.time() if now is None else now, usegmt=True)
        msg["Message-ID"] = make_msgid(domain=domain)
        msg["X-NOC-Incident"] = draft.incident_id
        msg["X-NOC-Draft"] = draft.id
        # quoted-printable: 7-bit safe on a server without 8BITMIME, still readable
        cte = None if draft.body.isascii() else "quoted-printable"
        msg.set_content(draft.body, subtype="plain", charset="utf-8", cte=cte)
    except (ValueError, email.errors.MessageError) as exc:  # line breaks in a header, …
        raise MailError(f"draft {draft.id}: cannot build the message: {exc}") from exc
    return msg


def masked(masker: Masker, text: str, keep: Iterable[str] = ()) -> str:
    """``text`` through ``masker``, except exact occurrences of the strings of ``keep``: our
    own contact under a partner e-mail's signature (``NOC_OPERATOR_CONTACT``) is a phone
    number the masker would take for a subscriber's, and it is ours to give.

    >>> from knowledge.pack import load_pack
    >>> from guardrails.masking import Masker
    >>> m = Masker.from_pack(load_pack())
    >>> masked(m, "UE msisdn-4915112345678; call us: +49 30 1234567", ["+49 30 1234567"])
    'UE <msisdn-masked>; call us: +49 30 1234567'
    >>> masked(m, "call +49 30 1234567")
    'call <msisdn-masked>'
    """
    kept = sorted({k for k in keep if k.strip()}, key=len, reverse=True)
    if not kept:
        return masker.mask(text).text
    pieces = re.split("(" + "|".join(re.escape(k) for k in kept) + ")", text)
    return "".join(p if i % 2 else masker.mask(p).text for i, p in enumerate(pieces))


def export(
    draft: EmailDraft,
    sender: str,
    masker: Masker,
    keep: Iterable[str] = (),
    now: float | None = None,
) -> bytes:
    """``draft`` as an RFC 5322 message (a ``.eml`` file, :data:`EML_MEDIA_TYPE`), built by
    :func:`compose`; its subject and body masked again (:func:`masked`, ``keep``: our own
    contact), whatever its status: a person may send it from their own client.

    >>> from knowledge.pack import load_pack
    >>> from guardrails.masking import Masker
    >>> draft = EmailDraft(id="em-1", incident_id="inc-7", to=["noc@partner.example"],
    ...                    subject="Roaming", body="UE imsi-262011234567890 fails\\n",
    ...                    created_at=0.0)
    >>> raw = export(draft, "noc@op.example", Masker.from_pack(load_pack()), now=0.0)
    >>> b"From: noc@op.example" in raw, b"imsi-26201<masked> fails" in raw
    (True, True)
    """
    keep = tuple(keep)
    clean = draft.model_copy(
        update={
            "subject": masked(masker, draft.subject, keep),
            "body": masked(masker, draft.body, keep),
        }
    )
    return compose(clean, sender, now).as_bytes()


def _text(reply: bytes | str) -> str:
    """A server's reply as one line of text."""
    text = reply.decode("utf-8", "replace") if isinstance(reply, bytes) else reply
    return " ".join(text.split())
