"""`noc maintenance ...`: declare planned work so that nobody is paged for it (the running
`noc watch` or bus worker takes the window at its next round), list the windows, end one
early. A window is never deleted: what was muted when stays on record."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Annotated

import typer

from noc_assistant.cli._console import console, duration, err_console, utc
from noc_assistant.cli._live import InventoryOpt, network_entities
from noc_assistant.cli._spans import end_span, print_spans
from noc_assistant.settings import get_settings
from noc_assistant.store import Store, open_store

if TYPE_CHECKING:
    from noc_assistant.integrations.alertmanager import Silences

__all__ = ["app"]

app = typer.Typer(help="Planned maintenance: held pages.", no_args_is_help=True)


def _silences() -> Silences | None:
    """Alertmanager's silences, when ``NOC_ALERTMANAGER_URL`` is set."""
    from noc_assistant.integrations.alertmanager import Silences

    url = get_settings().alertmanager_url
    return Silences(url) if url else None


@app.command("add")
def add(
    entity: Annotated[str, typer.Argument(help="The entity under maintenance")],
    by: Annotated[str, typer.Option("--by", help="Who declares it (recorded)")],
    for_: Annotated[str | None, typer.Option("--for", help="How long: 90m, 2h, 1d")] = None,
    until: Annotated[str | None, typer.Option(help="Or until (RFC 3339 UTC)")] = None,
    start: Annotated[str | None, typer.Option(help="From (RFC 3339 UTC; default: now)")] = None,
    reason: Annotated[str | None, typer.Option(help="Why (the change ticket)")] = None,
    inventory: InventoryOpt = None,
) -> None:
    """Declare a maintenance window: the entity's pages (and its neighbours') are held. An
    entity outside the network's inventory is refused, as the API refuses it."""
    from noc_assistant.ops.maintenance import declare, new_window

    settings = get_settings()
    known = network_entities(settings, inventory)
    store = open_store(settings.db_url)
    window = new_window(
        entity,
        by,
        time.time(),
        start=start,
        end=until,
        duration_s=duration(for_) if for_ is not None else None,
        reason=reason,
        known=known,
    )
    window = declare(store, window, _silences())
    console.print(
        f"{window.id}: {entity} in maintenance {utc(window.start)} → {utc(window.end)}"
        + (f", silenced in Alertmanager ({window.silence_id})" if window.silence_id else ""),
        highlight=False,
    )
    if window.silence_error:
        err_console.print(f"no Alertmanager silence: {window.silence_error}", highlight=False)


@app.command("list")
def list_windows(
    all_: Annotated[bool, typer.Option("--all", help="Past windows too")] = False,
) -> None:
    """The windows not yet over (with --all, every one), by start."""
    print_spans(
        ("id", "entity", "from", "until", "by", "why"),
        Store.maintenance_windows,
        all_,
        lambda w: (w.id, w.entity, utc(w.start), utc(w.end), w.by, w.reason or ""),
    )


@app.command("end")
def end(
    window_id: Annotated[str, typer.Argument(help="Window id")],
    by: Annotated[str, typer.Option("--by", help="Who ends it (recorded)")],
) -> None:
    """End a window now (its pages are no longer held)."""
    from noc_assistant.ops.maintenance import end_early

    window, ended = end_span(
        window_id,
        by,
        "maintenance window",
        Store.get_maintenance,
        Store.save_maintenance,
        lambda w, who, at: end_early(w, who, at, _silences()),
    )
    if ended.silence_error and ended.silence_error != window.silence_error:
        err_console.print(f"Alertmanager: {ended.silence_error}", highlight=False)
