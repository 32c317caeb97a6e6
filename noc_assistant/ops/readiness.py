"""``noc check``: whether every outside part the settings name answers, before the NOC relies
on it. Each part is asked by its own module, as it is used, and nothing is changed:

- the store (``NOC_DB_URL``): a read;
- the knowledge pack (``NOC_PACK_DIR`` over the default): loaded and cross-checked;
- the LLM (``NOC_LLM_BASE_URL``): its model list holds ``NOC_LLM_MODEL`` (no generation);
- SMTP (``NOC_SMTP_HOST``): a session as sending opens it (EHLO, STARTTLS, login), no mail;
- Alertmanager (``NOC_ALERTMANAGER_URL``): ready, and its version;
- NATS JetStream (``NOC_NATS_URL``): connected, and what ``NOC_NATS_STREAM`` and the
  findings stream of workers of slices (``NOC_NATS_FINDINGS_STREAM``) hold.
- each notification route of ``NOC_NOTIFY_ROUTES``: its URL parses and its host answers a
  TCP connect (no notification is sent: no page reaches PagerDuty, no line a chat);
- each roaming partner that takes TMF621 tickets (``tmf621_url`` of a partner in the
  inventory, ``NOC_DATA_DIR/inventory.json`` unless another is given, or in the overlay's
  ``operator.yaml``): ``GET {tmf621_url}/troubleTicket?limit=1`` with the partner's token
  (``NOC_TMF621_TOKEN_<MCCMNC>``), a read that creates no ticket. A partner with a URL but
  no token fails: every ticket to it would.

A part the settings leave out is ``not configured`` (SMTP, Alertmanager), or not listed (no
routes, no partner with a ``tmf621_url``); the LLM and NATS have defaults, so they are always
asked (a NOC that uses neither reads their failure as information, not as an error of the
others). The failures name the part's address
and its answer, and for a route or a partner the setting or file to correct; no secret is
printed. (Alerts in, from Alertmanager's webhook, and syslog in are received, not sent to:
nothing here to ask.)

>>> Check("store", "sqlite:///x.db", "ok", "3 incidents", 0.01).line()
'ok             store         sqlite:///x.db  3 incidents (10 ms)'
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from noc_assistant.errors import NocError
from noc_assistant.settings import Settings

if TYPE_CHECKING:
    from knowledge.pack import Pack

__all__ = ["Check", "check_all"]

Status = Literal["ok", "failed", "not configured"]


@dataclass(frozen=True)
class Check:
    """One part: its name, where it is, how it answered, and how long it took."""

    part: str
    target: str
    status: Status
    detail: str
    seconds: float

    def line(self) -> str:
        return (
            f"{self.status:<14} {self.part:<13} {self.target}  {self.detail}"
            f" ({1000 * self.seconds:.0f} ms)"
        )


def _timed(part: str, target: str, ask: Callable[[], str]) -> Check:
    started = time.perf_counter()
    try:
        detail = ask()
        status: Status = "ok"
    except (NocError, ValueError, OSError) as exc:  # PackError is a ValueError
        detail, status = str(exc).removeprefix(f"{target}: "), "failed"
    return Check(part, target, status, detail, time.perf_counter() - started)


def _hint(check: Check, hint: str) -> Check:
    """``check`` with what to correct appended to its detail, when it failed."""
    return replace(check, detail=f"{check.detail}; {hint}") if check.status == "failed" else check


def check_all(settings: Settings, inventory: Path | None = None) -> list[Check]:
    """Ask every part the settings name (see the module docstring); ``inventory``: the
    network inventory whose partners' TMF621 endpoints are asked (default:
    ``NOC_DATA_DIR/inventory.json`` where it exists)."""
    from knowledge.pack import describe, load_pack
    from noc_assistant.integrations.alertmanager import probe as alertmanager_probe
    from noc_assistant.integrations.bus import probe as nats_probe
    from noc_assistant.integrations.llm import LlmClient
    from noc_assistant.integrations.mail import Mailer
    from noc_assistant.store import open_store

    def store() -> str:
        s = open_store(settings.db_url)
        try:
            return f"{s.count('incidents'):,} incidents, {s.count('findings'):,} findings"
        finally:
            s.close()

    loaded: list[Pack] = []

    def pack() -> str:
        p = load_pack(settings.pack_dir)
        loaded.append(p)
        counts = describe(p)
        return f"{p.meta.name} {p.meta.version}: {counts['rules']} rules, {counts['kpis']} KPIs"

    db_shown = re.sub(r"//([^:/@]+):[^@]*@", r"//\1@", settings.db_url)  # no password
    checks = [
        _timed("store", db_shown, store),
        _timed("pack", str(settings.pack_dir or "default"), pack),
        _timed("llm", settings.llm_base_url, LlmClient.from_settings(settings).probe),
    ]
    mailer = Mailer.from_settings(settings)
    if mailer is None:
        checks.append(Check("smtp", "-", "not configured", "NOC_SMTP_HOST unset", 0.0))
    else:
        checks.append(_timed("smtp", mailer.server, mailer.probe))
    am = settings.alertmanager_url
    if am is None:
        checks.append(
            Check("alertmanager", "-", "not configured", "NOC_ALERTMANAGER_URL unset", 0.0)
        )
    else:
        checks.append(_timed("alertmanager", am, lambda: alertmanager_probe(am)))
    url, streams = settings.nats_url, (settings.nats_stream, settings.nats_findings_stream)
    checks.append(_timed("nats", url, lambda: nats_probe(url, *streams)))
    checks += _notify_routes(settings.notify_routes)
    if loaded:  # else the pack's own row says why, and its partners are unknown
        checks += _partners(settings, loaded[0], inventory)
    return checks


def _notify_routes(path: Path | None) -> list[Check]:
    """Each route's host answers a TCP connect (nothing is sent); none without routes."""
    if path is None:
        return []
    from noc_assistant.integrations.notify import load_routes
    from noc_assistant.integrations.notify import probe as notify_probe

    try:
        routes = load_routes(path)
    except NocError as exc:
        return [Check("notify", str(path), "failed", str(exc), 0.0)]
    return [
        _hint(
            _timed(f"notify {r.name}", r.shown, partial(notify_probe, r)),
            f"check the url of route {r.name} in NOC_NOTIFY_ROUTES ({path})",
        )
        for r in routes
    ]


def _partners(settings: Settings, pack: Pack, inventory: Path | None) -> list[Check]:
    """Each partner with a ``tmf621_url`` (inventory or overlay) answers a read of its ticket
    list with its token; a partner with a URL and no token fails unasked."""
    from knowledge.topology import Topology, plmn_digits
    from noc_assistant.integrations.tmf621 import partner_token, shown, token_variable
    from noc_assistant.integrations.tmf621 import probe as tmf621_probe
    from noc_assistant.inventory import load_topology

    if inventory is None and (settings.data_dir / "inventory.json").is_file():
        inventory = settings.data_dir / "inventory.json"
    try:
        topology = load_topology(inventory, pack) if inventory else Topology.infer({}, pack)
    except NocError as exc:  # an InventoryError names the file and field
        return [Check("inventory", str(inventory), "failed", str(exc), 0.0)]
    from_overlay = {plmn_digits(p.plmn) for p in pack.partners if p.tmf621_url}
    checks = []
    for link in topology.partners:
        if not link.tmf621_url:
            continue
        part, target = f"tmf621 {link.plmn}", shown(link.plmn, link.tmf621_url)
        variable = token_variable(link.plmn)
        source = (
            f"{settings.pack_dir}/operator.yaml"
            if plmn_digits(link.plmn) in from_overlay
            else str(inventory)
        )
        token = partner_token(link.plmn)
        if token is None:
            why = f"no token: set {variable} (its tmf621_url is in {source})"
            checks.append(Check(part, target, "failed", why, 0.0))
            continue
        ask = partial(tmf621_probe, link.plmn, link.tmf621_url, token)
        hint = f"check tmf621_url of partner {link.plmn} in {source}, and {variable}"
        checks.append(_hint(_timed(part, target, ask), hint))
    return checks
