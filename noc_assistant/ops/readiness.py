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
  TCP connect (no notification is sent).

A part the settings leave out is ``not configured`` (SMTP, Alertmanager); the LLM and NATS
have defaults, so they are always asked (a NOC that uses neither reads their failure as
information, not as an error of the others). The failures name the part's address and its
answer; no secret is printed.

>>> Check("store", "sqlite:///x.db", "ok", "3 incidents", 0.01).line()
'ok             store         sqlite:///x.db  3 incidents (10 ms)'
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Literal

from noc_assistant.errors import NocError
from noc_assistant.settings import Settings

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


def check_all(settings: Settings) -> list[Check]:
    """Ask every part the settings name (see the module docstring)."""
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

    def pack() -> str:
        p = load_pack(settings.pack_dir)
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
    if settings.notify_routes is not None:  # each route's host answers (nothing is sent)
        from noc_assistant.integrations.notify import load_routes
        from noc_assistant.integrations.notify import probe as notify_probe

        try:
            routes = load_routes(settings.notify_routes)
        except NocError as exc:
            checks.append(Check("notify", str(settings.notify_routes), "failed", str(exc), 0.0))
            routes = ()
        for r in routes:
            checks.append(_timed(f"notify {r.name}", r.shown, partial(notify_probe, r)))
    return checks
