"""`noc incident ...`: incidents stored by the pipeline, with their evidence."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

import typer
from rich.table import Table

from noc_assistant.cli._console import console
from noc_assistant.errors import BadInputError
from noc_assistant.settings import get_settings
from noc_assistant.storage import open_store

__all__ = ["app"]

app = typer.Typer(help="Incidents stored by the pipeline.", no_args_is_help=True)


def _utc(ts: float | None) -> str:
    return "" if ts is None else datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S")


@app.command("list")
def list_incidents(
    state: Annotated[str | None, typer.Option(help="open or resolved")] = None,
    limit: Annotated[int, typer.Option(help="Most recent N.")] = 50,
) -> None:
    """List incidents, newest first."""
    store = open_store(get_settings().db_url)
    table = Table("id", "state", "opened (UTC)", "entities", "KPIs", "score")
    for inc in store.list_incidents(state=state, limit=limit):
        table.add_row(
            inc.id,
            inc.state,
            _utc(inc.opened_at),
            ", ".join(inc.entities),
            ", ".join(inc.kpis),
            f"{inc.max_score:.1f}",
        )
    console.print(table)


@app.command("show")
def show(
    incident_id: Annotated[str, typer.Argument(help="Incident id, e.g. inc-1a2b3c4d5e")],
) -> None:
    """Show one incident: its hypotheses, evidence and findings."""
    store = open_store(get_settings().db_url)
    inc = store.get_incident(incident_id)
    if inc is None:
        raise BadInputError(f"no incident {incident_id!r} in {store.path}")
    console.print(f"[bold]{inc.title}[/]  ({inc.id}, {inc.state})")
    console.print(
        f"opened {_utc(inc.opened_at)} UTC"
        + (f", resolved {_utc(inc.resolved_at)} UTC" if inc.resolved_at else "")
    )
    console.print(f"entities: {', '.join(inc.entities)}")
    if inc.hypotheses:
        top = inc.hypotheses[0]
        if top.fault == "no_fault":
            console.print(
                f"verdict: [bold]no fault[/] (insufficient evidence, {top.confidence:.2f}); "
                "the hypotheses ranked under it are candidates to check, not claims"
            )
        else:
            console.print(f"verdict: [bold]{top.fault}[/] on {top.entity} ({top.confidence:.2f})")
        hyp = Table(
            "#",
            "fault",
            "entity",
            "confidence",
            "evidence",
            "refuted by",
            "references",
            "checks",
            title="Hypotheses",
        )
        for rank, h in enumerate(inc.hypotheses, start=1):
            hyp.add_row(
                str(rank),
                h.fault + (f" (partner {h.partner})" if h.partner else ""),
                h.entity,
                f"{h.confidence:.2f}",
                ", ".join(h.evidence_ids),
                ", ".join(h.refuted_by),
                ", ".join(h.references),
                "\n".join(h.checks),
            )
        console.print(hyp)
    else:
        console.print("hypotheses: none yet")
    diagnosis = store.get_diagnosis(inc.id)
    if diagnosis is not None and diagnosis.evidence:
        ev = Table(
            "id", "kind", "entity", "KPI", "from", "to", "values", "summary", title="Evidence"
        )
        for e in diagnosis.evidence:
            ev.add_row(
                e.id,
                e.kind,
                e.entity,
                e.kpi,
                _utc(e.start),
                _utc(e.end),
                " ".join(f"{v:.4g}" for v in e.values),
                e.summary,
            )
        console.print(ev)
    table = Table(
        "time (UTC)", "entity", "KPI", "observed", "expected", "score", "id", title="Findings"
    )
    for f in store.findings_for(inc.id):
        table.add_row(
            _utc(f.ts),
            f.entity,
            f.kpi,
            f"{f.observed:.4g}",
            f"{f.expected_low:.4g} … {f.expected_high:.4g}",
            f"{f.score:.1f}",
            f.id,
        )
    console.print(table)
