"""Declaring planned maintenance: the rules a window must follow, whoever declares it (the
console, `noc maintenance add`). The correlator holds the pages of an entity in a window
(:class:`noc_assistant.stream.correlate.MaintenanceWindow`); the store keeps the declarations
(:class:`noc_assistant.models.Maintenance`); with an Alertmanager configured, each window is
also a silence there (:class:`noc_assistant.integrations.alertmanager.Silences`), created when it is
declared and expired when it is ended early. Alertmanager down or refusing costs the silence,
never the window: the reason is kept on it (``silence_error``)."""

from __future__ import annotations

import secrets

from noc_assistant.errors import MaintenanceError
from noc_assistant.ingest.replay import parse_time
from noc_assistant.integrations.alertmanager import AlertmanagerError, Silences
from noc_assistant.models import Maintenance
from noc_assistant.store import Store

__all__ = ["MAX_WINDOW_S", "declare", "end_early", "new_window"]

MAX_WINDOW_S = 14 * 86400.0
"""The longest window one declaration may hold: a mute of weeks is a decommissioning, not
maintenance, and a typo in a date must not silence an entity for a year."""


def new_window(
    entity: str,
    by: str,
    now: float,
    *,
    start: str | None = None,
    end: str | None = None,
    duration_s: float | None = None,
    reason: str | None = None,
    known: set[str] | None = None,
) -> Maintenance:
    """A maintenance window as declared (:class:`MaintenanceError` naming the field when it does not
    hold: no end or two, an end before the start, longer than :data:`MAX_WINDOW_S`, an entity
    outside ``known``).

    >>> w = new_window("smf-1", "ana", 0.0, duration_s=3600, reason="SW upgrade")
    >>> w.entity, w.start, w.end
    ('smf-1', 0.0, 3600.0)
    >>> new_window("smf-1", "ana", 0.0, end="1970-01-01T00:00:00Z", duration_s=60)
    Traceback (most recent call last):
    ...
    noc_assistant.errors.MaintenanceError: give end or duration_s, not both
    """
    try:
        begin = parse_time(start, now, "start")
    except ValueError as exc:
        raise MaintenanceError(str(exc)) from None
    if (end is None) == (duration_s is None):
        raise MaintenanceError("give end or duration_s, not both" if end else "end: missing")
    try:
        finish = parse_time(end, 0.0, "end") if end is not None else begin + (duration_s or 0.0)
    except ValueError as exc:
        raise MaintenanceError(str(exc)) from None
    if finish <= begin:
        raise MaintenanceError("end: the window ends before it starts")
    if finish - begin > MAX_WINDOW_S:
        raise MaintenanceError(f"end: a window may last {MAX_WINDOW_S / 86400:g} days at most")
    if known and entity not in known:
        raise MaintenanceError(f"entity: {entity!r} is not in the network")
    return Maintenance(
        id=f"mw-{secrets.token_hex(5)}",
        entity=entity,
        start=begin,
        end=finish,
        by=by,
        reason=reason,
        created_at=now,
    )


def declare(store: Store, window: Maintenance, silences: Silences | None = None) -> Maintenance:
    """Keep ``window`` (and silence its entity in Alertmanager, when there is one); the window
    as kept."""
    if silences is not None:
        try:
            window = window.model_copy(update={"silence_id": silences.silence(window)})
        except AlertmanagerError as exc:
            window = window.model_copy(update={"silence_error": str(exc)})
    store.save_maintenance(window)
    return window


def end_early(
    window: Maintenance, by: str, at: float, silences: Silences | None = None
) -> Maintenance:
    """``window`` ended by ``by`` at ``at``, its silence expired (the caller keeps it)."""
    ended = window.ended(by, at)
    if ended is not window and window.silence_id and silences is not None:
        try:
            silences.expire(window.silence_id)
        except AlertmanagerError as exc:
            ended = ended.model_copy(update={"silence_error": f"not expired: {exc}"})
    return ended
