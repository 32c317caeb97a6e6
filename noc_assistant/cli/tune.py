"""`noc tune ...`: raise the bar of a KPI that pages for nothing
(:mod:`noc_assistant.ops.raised_bars`).

``suggest`` reads the verdicts and proposes bars, with what each would have cost; ``add``
declares one (a person decides, with a reason); the running `noc watch` or bus worker takes it
at its next round; ``list`` and ``end`` as for maintenance. A bar is never deleted: what was
held when stays on record."""

from __future__ import annotations

import dataclasses
import time
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from noc_assistant.cli._console import console, duration, utc
from noc_assistant.cli._live import InventoryOpt
from noc_assistant.cli._spans import end_span, print_spans
from noc_assistant.models import Tuning
from noc_assistant.settings import get_settings
from noc_assistant.store import Store, open_store

__all__ = ["app"]

app = typer.Typer(help="Raised bars for KPIs that page for nothing.", no_args_is_help=True)


@app.command("suggest")
def suggest(
    days: Annotated[
        float, typer.Option(min=0.01, help="Verdicts on incidents of the last N days")
    ] = 30.0,
    min_false: Annotated[
        int, typer.Option(min=1, help="False pages (no_fault) a KPI must have opened")
    ] = 2,
    margin: Annotated[
        float, typer.Option(min=1.0, help="The bar as a multiple of the strongest false page")
    ] = 1.25,
    json_out: Annotated[bool, typer.Option("--json", help="JSON instead of a table")] = False,
) -> None:
    """The raised bars the verdicts argue for: per KPI and entity that opened false pages,
    the bar that would have held them, and the confirmed faults it would have held too."""
    from noc_assistant.ops.raised_bars import suggest as suggestions

    store = open_store(get_settings().db_url)
    now = time.time()
    found = suggestions(store, now - days * 86400.0, now, min_false=min_false, margin=margin)
    if json_out:
        console.print_json(data=[dataclasses.asdict(s) for s in found])
        return
    if not found:
        console.print(f"no KPI opened {min_false} or more false pages in {days:g} days")
        return
    table = Table("kpi", "entity", "false pages", "bar", "confirmed faults", "held by the bar")
    for s in found:
        held = ", ".join(s.would_hold) or "none"
        bar = f"{s.min_score:g}" + (f" (in force: {s.covered_by})" if s.covered_by else "")
        cells = (s.kpi, s.entity, ", ".join(s.false_pages), bar, str(len(s.confirmed)), held)
        table.add_row(*(escape(c) for c in cells))
    console.print(table)
    first = next((s for s in found if not s.covered_by), None)
    if first is not None:
        console.print(
            f"to declare one: noc tune add {first.kpi} --entity {first.entity} "
            f"--min-score {first.min_score:g} --by NAME --reason "
            f'"{len(first.false_pages)} false pages: {", ".join(first.false_pages[:3])}"',
            markup=False,
            highlight=False,
            soft_wrap=True,
        )


@app.command("add")
def add(
    kpi: Annotated[str, typer.Argument(help="The KPI id (knowledge pack kpis/)")],
    min_score: Annotated[
        float,
        typer.Option(help="The score a finding must reach to page (1 = the detectors' own bar)"),
    ],
    by: Annotated[str, typer.Option("--by", help="Who decides it (recorded)")],
    reason: Annotated[str, typer.Option(help="Why: the false pages, a ticket (required)")],
    entity: Annotated[str, typer.Option(help="An entity or a shell pattern (upf-*)")] = "*",
    for_: Annotated[str, typer.Option("--for", help="How long: 7d, 30d (at most 90d)")] = "30d",
    inventory: InventoryOpt = None,
) -> None:
    """Raise a KPI's bar on some entities: below it, its findings are kept as evidence and
    page nobody."""
    from noc_assistant.cli._live import load_pack_and_topology, network_entities
    from noc_assistant.ops.raised_bars import new_rule

    settings = get_settings()
    pack, _ = load_pack_and_topology(settings, None)
    rule = new_rule(
        kpi,
        by,
        time.time(),
        min_score=min_score,
        reason=reason,
        entity=entity,
        duration_s=duration(for_),
        kpis=set(pack.kpis),
        entities=network_entities(settings, inventory),
    )
    open_store(settings.db_url).save_tuning(rule)
    console.print(
        f"{rule.id}: {kpi} on {rule.entity} pages from score {rule.min_score:g}, "
        f"{utc(rule.start)} → {utc(rule.end)}",
        highlight=False,
    )


@app.command("list")
def list_rules(
    all_: Annotated[bool, typer.Option("--all", help="Past ones too")] = False,
) -> None:
    """The raised bars in force (with --all, every one), by start."""
    columns = ("id", "kpi", "entity", "bar", "from", "until", "by", "why")
    print_spans(columns, Store.tuning_rules, all_, _row)


def _row(t: Tuning) -> tuple[str, ...]:
    """A raised bar's cells in ``noc tune list`` (but its state)."""
    when = (utc(t.start), utc(t.end))
    return (t.id, t.kpi, t.entity, f"{t.min_score:g}", *when, t.by, t.reason or "")


@app.command("end")
def end(
    rule_id: Annotated[str, typer.Argument(help="Raised bar id (tn-…)")],
    by: Annotated[str, typer.Option("--by", help="Who ends it (recorded)")],
) -> None:
    """End a raised bar now: the KPI pages as the detectors decide again."""
    end_span(rule_id, by, "raised bar", Store.get_tuning, Store.save_tuning, Tuning.ended)
