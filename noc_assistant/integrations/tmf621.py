"""Trouble tickets at a roaming partner's NOC over TMF621 (Trouble Ticket Management API v5),
beside the partner e-mail and under the same approval; the only module that speaks TMF621.

Where
    A partner takes tickets when its link has a ``tmf621_url`` (inventory
    ``partners[].tmf621_url``: the API base, ``https://tt.partner.example/tmf-api/
    troubleTicket/v5``; :class:`knowledge.topology.PartnerLink`). The bearer token is read
    from the environment when it is used, never stored: ``NOC_TMF621_TOKEN_<MCCMNC>``, the
    PLMN's digits (``NOC_TMF621_TOKEN_26201`` for 262-01). Errors and the store name the
    endpoint as ``partner 262-01 TMF621 (scheme://host:port/path)``, never the token.

What
    On approval of a partner e-mail (:func:`on_approval`: the API's approve endpoint, ``noc
    email approve``) a ``TroubleTicket`` is created (``POST {base}/troubleTicket``) from the
    incident, its diagnosis and the approved e-mail (:func:`ticket_payload`):

    * ``description``: the e-mail's subject and body, masked again with the pack's masker (a
      ticket leaves the assistant's control as surely as a sent e-mail); ``name`` the subject;
    * ``severity``: ``critical`` when the top hypothesis is at least
      :data:`CRITICAL_CONFIDENCE` sure (the bar of the notifications' ``critical``), else
      ``major``: a partner is only ever told about a fault our rules rank first, so never
      less than major;
    * ``ticketType``: ``networkIncident``: TMF621 leaves the types to the parties; this one
      says it is about the network, not a customer's complaint or a request;
    * ``externalIdentifier``: our incident id, owner ``noc-assistant``;
    * ``relatedEntity``: the partner's PLMN (role ``partnerNetwork``) and our SEPP towards it
      (role ``ourSepp``);
    * ``note``: who approved it, and when.

    Then, for each incident event a live command sees (:meth:`Tickets.on_incident`, hooked
    into ``IncidentOutput``): ``escalated``, ``reopened``, or ``updated`` with a new finding
    adds a note (GET the ticket, append, PATCH the whole ``note`` list: merge-patch replaces
    arrays), at most one per :data:`NOTE_EVERY_S` per ticket; ``resolved`` PATCHes status
    ``resolved`` with a ``statusChangeReason`` and ``resolutionDate``.

Failures
    A partner that cannot be reached does not undo the approval: the row is kept
    (:class:`~noc_assistant.store.tickets.TicketBook`, status ``unsent``, the error with it),
    the caller shows the warning, and the creation is retried at the incident's next event
    (no sooner than ``retry_after_s`` after the last try, so a partner that times out does
    not hold up every event). A resolution that fails is owed (``wanted``) and retried
    likewise. Errors: :class:`TicketUnreachableError` (refused, timed out, 5xx, 408, 429),
    :class:`TicketConfigError` (no token, the token refused: 401, 403),
    :class:`TicketRejectedError` (any other 4xx, or an answer without a ticket id).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlsplit

import httpx

from noc_assistant.errors import BadInputError, ConfigError, NocError, UnreachableError
from noc_assistant.integrations.mail import masked
from noc_assistant.models import Diagnosis, EmailDraft, Finding, Incident
from noc_assistant.store.tickets import TicketBook, TicketRow
from noc_assistant.timefmt import rfc3339

if TYPE_CHECKING:
    from guardrails.masking import Masker
    from knowledge.topology import PartnerLink, Topology
    from noc_assistant.settings import Settings
    from noc_assistant.store import Store

__all__ = [
    "CRITICAL_CONFIDENCE",
    "NOTE_EVERY_S",
    "TICKET_TYPE",
    "TicketClient",
    "TicketConfigError",
    "TicketRejectedError",
    "TicketUnreachableError",
    "Tickets",
    "note_payload",
    "on_approval",
    "partner_token",
    "probe",
    "ticket_payload",
    "token_variable",
]

CRITICAL_CONFIDENCE = 0.6
"""A top hypothesis at least this sure makes a ``critical`` ticket, a less sure one ``major``
(the bar of :data:`noc_assistant.integrations.notify.CRITICAL_CONFIDENCE`)."""
TICKET_TYPE = "networkIncident"
"""The ``ticketType`` of our tickets (module docstring)."""
OWNER = "noc-assistant"
NOTE_EVERY_S = 600.0
"""At most one note per ticket in this many seconds (wall clock)."""
NOTE_EVENTS = ("escalated", "reopened", "updated")
_FINAL = frozenset({"resolved", "closed", "cancelled", "rejected"})
_RETRY_STATUS = frozenset({408, 425, 429})
MERGE_PATCH = "application/merge-patch+json"


class TicketUnreachableError(UnreachableError):
    """A partner's TMF621 endpoint refused the connection, timed out or failed (5xx)."""


class TicketConfigError(ConfigError):
    """No token for a partner's TMF621 endpoint, or the endpoint refused it (401, 403)."""


class TicketRejectedError(BadInputError):
    """A partner's TMF621 endpoint refused a request (a 4xx other than 401/403) or answered
    without what it should have (a ticket without an id)."""


def token_variable(plmn: str) -> str:
    """The environment variable holding the bearer token of a partner's TMF621 endpoint.

    >>> token_variable("262-01")
    'NOC_TMF621_TOKEN_26201'
    """
    return "NOC_TMF621_TOKEN_" + "".join(c for c in plmn if c.isdigit())


def partner_token(plmn: str, env: Mapping[str, str] | None = None) -> str | None:
    """The bearer token of a partner's TMF621 endpoint, read from ``env`` (default: the
    process environment) at each use; None when unset or blank."""
    token = (os.environ if env is None else env).get(token_variable(plmn), "").strip()
    return token or None


def shown(plmn: str, base_url: str) -> str:
    """The endpoint for messages: no user, password or query (a token may hide there).

    >>> shown("262-01", "https://u:p@tt.example/tmf-api/troubleTicket/v5?key=x")
    'partner 262-01 TMF621 (https://tt.example:443/tmf-api/troubleTicket/v5)'
    """
    parts = urlsplit(base_url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return f"partner {plmn} TMF621 ({parts.scheme}://{parts.hostname}:{port}{parts.path})"


class TicketClient:
    """One partner's TMF621 endpoint: create a ticket, add a note, set its status. ``name``
    is how errors name it (:func:`shown`); the token goes only into the header."""

    def __init__(
        self,
        base_url: str,
        token: str,
        timeout_s: float = 10.0,
        *,
        name: str | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.name = name or shown("?", base_url)
        self._client = httpx.Client(
            timeout=timeout_s,
            follow_redirects=False,
            transport=transport,
            headers={"Authorization": f"Bearer {token}", "User-Agent": OWNER},
        )
        self.timeout_s = timeout_s

    def __enter__(self) -> TicketClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        self._client.close()

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        url = f"{self.base_url}/troubleTicket{path}"
        headers = {"Content-Type": MERGE_PATCH} if method == "PATCH" else {}
        try:
            resp = self._client.request(method, url, json=body, headers=headers)
        except httpx.TimeoutException:
            raise TicketUnreachableError(
                f"{self.name}: no answer in {self.timeout_s:g} s"
            ) from None
        except httpx.HTTPError as exc:  # refused, reset, name not resolved …
            raise TicketUnreachableError(
                f"{self.name}: cannot connect: {type(exc).__name__}"
            ) from None
        why = f"{method} {path or '/'}: HTTP {resp.status_code} {resp.reason_phrase}".rstrip()
        if resp.status_code in (401, 403):
            raise TicketConfigError(f"{self.name}: {why}: check the token")
        if resp.status_code in _RETRY_STATUS or resp.status_code >= 500:
            raise TicketUnreachableError(f"{self.name}: {why}")
        if not 200 <= resp.status_code < 300:
            raise TicketRejectedError(f"{self.name}: {why}: {resp.text[:300]}")
        try:
            return resp.json() if resp.content else {}
        except ValueError:
            raise TicketRejectedError(f"{self.name}: {why}: not JSON") from None

    def probe(self) -> str:
        """``GET /troubleTicket?limit=1``: a read of the ticket list (TMF630 paging) that
        creates and changes nothing; what it answered, or this client's errors."""
        got = self._call("GET", "?limit=1")
        if not isinstance(got, list):
            raise TicketRejectedError(f"{self.name}: GET ?limit=1: not a list of tickets")
        return f"GET troubleTicket?limit=1: {len(got)} ticket(s) listed, nothing created"

    def create(self, payload: dict[str, Any]) -> dict[str, Any]:
        """``POST /troubleTicket``: the ticket the partner made (with its ``id``)."""
        got = self._call("POST", "", payload)
        if not isinstance(got, dict) or not isinstance(got.get("id"), str) or not got["id"]:
            raise TicketRejectedError(f"{self.name}: created a ticket without an id")
        return got

    def get(self, ticket_id: str) -> dict[str, Any]:
        got = self._call("GET", f"/{ticket_id}")
        if not isinstance(got, dict):
            raise TicketRejectedError(f"{self.name}: ticket {ticket_id} is not an object")
        return got

    def add_note(self, ticket_id: str, note: dict[str, Any]) -> dict[str, Any]:
        """Append ``note`` to the ticket's notes: GET, append, PATCH the whole list (a merge
        patch replaces an array)."""
        notes = self.get(ticket_id).get("note") or []
        notes = [n for n in notes if isinstance(n, dict)] + [note]
        return dict(self._call("PATCH", f"/{ticket_id}", {"note": notes}))

    def set_status(
        self, ticket_id: str, status: str, reason: str, at: float | None = None
    ) -> dict[str, Any]:
        """PATCH the ticket's status with why; a resolution with its ``resolutionDate``."""
        body: dict[str, Any] = {"status": status, "statusChangeReason": reason}
        if status == "resolved":
            body["resolutionDate"] = rfc3339(time.time() if at is None else at)
        return dict(self._call("PATCH", f"/{ticket_id}", body))


def probe(plmn: str, base_url: str, token: str, timeout_s: float = 5.0) -> str:
    """Whether partner ``plmn``'s TMF621 endpoint at ``base_url`` answers a read with this
    token (:meth:`TicketClient.probe`, ``noc check``); its errors name the endpoint, never
    the token."""
    with TicketClient(base_url, token, timeout_s, name=shown(plmn, base_url)) as client:
        return client.probe()


# -- payloads ---------------------------------------------------------------------------------


def severity_of(diagnosis: Diagnosis) -> str:
    """``critical`` or ``major`` (module docstring)."""
    return "critical" if diagnosis.top.confidence >= CRITICAL_CONFIDENCE else "major"


def ticket_payload(
    incident: Incident,
    diagnosis: Diagnosis,
    email: EmailDraft,
    link: PartnerLink,
    masker: Masker,
    keep: Iterable[str] = (),
) -> dict[str, Any]:
    """The ``TroubleTicket_Create`` body for the approved ``email`` (module docstring);
    ``keep``: our own contact, which the masker would take for a subscriber's number."""
    keep = list(keep)
    subject = masked(masker, email.subject, keep)
    body = masked(masker, email.body, keep)
    approver = email.approved_by or "?"
    at = email.approved_at if email.approved_at is not None else email.created_at
    related = [_related("partnerNetwork", link.plmn, link.name or f"PLMN {link.plmn}", "PLMN")]
    if link.sepp:
        related.append(_related("ourSepp", link.sepp, link.sepp, "SEPP"))
    return {
        "@type": "TroubleTicket",
        "name": subject[:200],
        "description": f"{subject}\n\n{body}".strip(),
        "severity": severity_of(diagnosis),
        "ticketType": TICKET_TYPE,
        "externalIdentifier": [
            {
                "id": incident.id,
                "owner": OWNER,
                "externalIdentifierType": "incident",
                "@type": "ExternalIdentifier",
            }
        ],
        "relatedEntity": related,
        "note": [
            {
                "id": f"{incident.id}-approval",
                "author": approver,
                "date": rfc3339(at),
                "text": masked(
                    masker, f"Approved for the partner NOC by {approver} (e-mail {email.id}).", keep
                ),
                "@type": "Note",
            }
        ],
    }


def _related(role: str, entity_id: str, name: str, kind: str) -> dict[str, Any]:
    entity = {"id": entity_id, "name": name, "@referredType": kind, "@type": "EntityRef"}
    return {"role": role, "entity": entity, "@type": "RelatedEntity"}


def note_payload(
    kind: str, incident: Incident, finding: Finding | None, at: float, masker: Masker
) -> dict[str, Any]:
    """The ``Note`` an incident event adds: what happened, the new finding, masked."""
    text = f"Our incident {incident.id} {kind}"
    if incident.title:
        text += f" ({incident.title})"
    if finding is not None:
        text += (
            f": {finding.kpi} {finding.direction} on {finding.entity}, observed "
            f"{finding.observed:g} (expected {finding.expected_low:g}..{finding.expected_high:g})"
            f" at {rfc3339(finding.ts)}"
        )
    text += f"; {len(incident.finding_ids)} finding(s) so far."
    return {
        "id": f"{incident.id}-{kind}-{int(at)}",
        "author": OWNER,
        "date": rfc3339(at),
        "text": masker.mask(text).text,
        "@type": "Note",
    }


# -- the tickets of incidents -------------------------------------------------------------------


class IncidentEvent(Protocol):
    """What :meth:`Tickets.on_incident` reads of an incident event (the correlator's
    :class:`~noc_assistant.stream.correlate.IncidentEvent`, a layer above this one)."""

    @property
    def kind(self) -> str: ...
    @property
    def incident(self) -> Incident: ...
    @property
    def finding(self) -> Finding | None: ...


class Tickets:
    """Partner tickets of incidents (module docstring): rows in ``book``, the partners'
    endpoints reached with tokens of ``env`` (default: the process environment, read at each
    use), texts masked by ``masker`` (or the one ``masker`` makes, at first need)."""

    def __init__(
        self,
        book: TicketBook,
        masker: Masker | Callable[[], Masker],
        *,
        keep: Iterable[str] = (),
        timeout_s: float = 10.0,
        note_every_s: float = NOTE_EVERY_S,
        retry_after_s: float = 30.0,
        clock: Callable[[], float] = time.time,
        env: Mapping[str, str] | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.book = book
        self._masker: Masker | None = None
        self._make_masker: Callable[[], Masker] | None = None
        if hasattr(masker, "mask"):
            self._masker = masker  # type: ignore[assignment]
        else:
            self._make_masker = masker
        self.keep = list(keep)
        self.timeout_s, self.note_every_s, self.retry_after_s = (
            timeout_s,
            note_every_s,
            retry_after_s,
        )
        self.clock = clock
        self.env = env
        self.transport = transport
        self.last_error: str | None = None
        self._lock = threading.Lock()

    @classmethod
    def from_settings(cls, settings: Settings, store: Store) -> Tickets:
        """The tickets of ``store``, masked with the pack of the settings (loaded at first
        need: most incidents have no ticket), our contact kept as written."""

        def masker() -> Masker:
            from guardrails.masking import Masker
            from knowledge.pack import load_pack

            return Masker.from_pack(load_pack(settings.pack_dir))

        return cls(TicketBook(store), masker, keep=[settings.operator_contact])

    @property
    def masker(self) -> Masker:
        """The masker, made at first need where a maker was given."""
        if self._masker is None:
            self._masker = self._make_masker() if self._make_masker is not None else None
        if self._masker is None:
            raise ConfigError("tickets: no masker")
        return self._masker

    def client(self, row: TicketRow) -> TicketClient:
        """The client of ``row``'s partner endpoint; :class:`TicketConfigError` without a
        token in the environment."""
        plmn = f"{row.plmn[:3]}-{row.plmn[3:]}"
        name = shown(plmn, row.base_url)
        token = partner_token(row.plmn, self.env)
        if token is None:
            raise TicketConfigError(f"{name}: no token: set {token_variable(row.plmn)}")
        return TicketClient(
            row.base_url, token, self.timeout_s, name=name, transport=self.transport
        )

    # -- approval ---------------------------------------------------------------------------

    def approved(self, email: EmailDraft, topology: Topology) -> str | None:
        """Open the ticket of an approved partner e-mail where its partner takes tickets;
        a warning (the approval stands) when the partner could not be told, else None."""
        if email.status != "approved" or not email.partner_plmn:
            return None
        link = topology.partner_for_plmn(email.partner_plmn)
        if link is None or not link.tmf621_url:
            return None
        with self._lock:
            row = self.book.get(email.incident_id, link.plmn)
            if row is None:
                incident, diagnosis = self.book.store.diagnosed_incident(email.incident_id)
                payload = ticket_payload(incident, diagnosis, email, link, self.masker, self.keep)
                now = self.clock()
                row = TicketRow(
                    email.incident_id, link.plmn, link.tmf621_url, payload, created_at=now
                )
                self.book.add(row)
            if row.ticket_id is not None:
                return None  # the incident's ticket at that partner exists already
            row = self._create(row, force=True)
        return None if row.ticket_id else f"ticket not created (retried later): {row.last_error}"

    def _create(self, row: TicketRow, *, force: bool = False) -> TicketRow:
        """Create ``row``'s ticket (unless tried less than ``retry_after_s`` ago); the row as
        stored after the attempt."""
        now = self.clock()
        if not force and now - row.tried_at < self.retry_after_s:
            return row
        try:
            with self.client(row) as c:
                got = c.create(row.payload)
        except NocError as exc:
            row = _failed(row, exc, now)
            self.last_error = row.last_error
        else:
            status = str(got.get("status") or "acknowledged")
            href = got.get("href") if isinstance(got.get("href"), str) else None
            row = _tried(row, now).created(str(got["id"]), href, status, now)
        self.book.save(row)
        return row

    # -- incident events --------------------------------------------------------------------

    def on_incident(self, event: IncidentEvent) -> list[str]:
        """An incident sink: bring the incident's tickets up to date with ``event`` (module
        docstring); the warnings of what failed (never raises a partner's or the store's
        error: a live pipeline goes on)."""
        warnings: list[str] = []
        try:
            rows = self.book.for_incident(event.incident.id)
        except NocError as exc:
            return [f"tickets of {event.incident.id} not read: {exc}"]
        for row in rows:
            with self._lock:
                try:
                    after = self._update(row, event)
                except NocError as exc:  # the store
                    after = _failed(row, exc, self.clock())
            if after.last_error and after.last_error != row.last_error:
                warnings.append(f"ticket of {row.incident_id}: {after.last_error}")
        return warnings

    def _update(self, row: TicketRow, event: IncidentEvent) -> TicketRow:
        if event.kind in ("resolved", "reopened"):  # what the partner is owed changes
            row = replace(row, wanted="resolved" if event.kind == "resolved" else None)
        if row.ticket_id is None:
            row = self._create(row)
            if row.ticket_id is None:
                self.book.save(row)  # the resolution owed, if any
                return row
        if event.kind == "resolved" or row.wanted == "resolved":
            return self._resolve(row, event.incident)
        if event.kind not in NOTE_EVENTS or (event.kind == "updated" and event.finding is None):
            return row
        now = self.clock()
        if row.status in _FINAL and event.kind != "reopened":
            return row
        if now - row.noted_at < self.note_every_s:
            return row  # rate-limited: the next note says where the incident stands then
        note = note_payload(event.kind, event.incident, event.finding, now, self.masker)
        try:
            with self.client(row) as c:
                c.add_note(row.ticket_id or "", note)
        except NocError as exc:
            row = _failed(row, exc, now)
        else:
            row = _tried(row, now, noted=True)
        self.book.save(row)
        return row

    def _resolve(self, row: TicketRow, incident: Incident) -> TicketRow:
        if row.status in _FINAL:
            return row
        now = self.clock()
        at = incident.resolved_at if incident.resolved_at is not None else now
        reason = f"Our incident {incident.id} resolved: its KPIs are back in their normal band."
        try:
            with self.client(row) as c:
                got = c.set_status(row.ticket_id or "", "resolved", reason, at)
        except NocError as exc:
            row = replace(_failed(row, exc, now), wanted="resolved")
        else:
            status = str(got.get("status") or "resolved")
            row = replace(_tried(row, now), status=status, wanted=None)
        self.book.save(row)
        return row


def _tried(row: TicketRow, at: float, *, noted: bool = False) -> TicketRow:
    noted_at = at if noted else row.noted_at
    return replace(row, tried_at=at, updated_at=at, noted_at=noted_at, last_error=None)


def _failed(row: TicketRow, exc: Exception, at: float) -> TicketRow:
    return replace(row, tried_at=at, last_error=str(exc))


def on_approval(
    store: Store,
    email: EmailDraft,
    topology: Topology,
    masker: Masker,
    keep: Iterable[str] = (),
) -> str | None:
    """The approval hook (API and CLI): open the partner ticket of ``email`` when its
    partner takes tickets; a warning when it could not (the approval stands), else None."""
    try:
        return Tickets(TicketBook(store), masker, keep=keep).approved(email, topology)
    except NocError as exc:  # the store, or an incident gone: the approval stands
        return f"ticket not created: {exc}"
