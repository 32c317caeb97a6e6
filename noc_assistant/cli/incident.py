"""`noc incident ...`: incidents stored by the pipeline, with their evidence."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from noc_assistant.cli._console import console, err_console
from noc_assistant.cli._live import InventoryOpt, drafting_for_cli
from noc_assistant.errors import BadInputError
from noc_assistant.settings import get_settings
from noc_assistant.store import Store, open_store
from noc_assistant.triage import present

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from noc_assistant.models import Evidence, Finding, Hypothesis, Review
    from noc_assistant.triage.history import PastIncident

__all__ = ["app"]

app = typer.Typer(help="Incidents stored by the pipeline.", no_args_is_help=True)


def _utc(ts: float | None) -> str:
    return "" if ts is None else datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S")


JsonOpt = Annotated[bool, typer.Option("--json", help="The data as JSON (alone on stdout)")]


def _print_json(data: object) -> None:
    """JSON alone on stdout (no colours, no wrapping): what a script reads."""
    typer.echo(json.dumps(data, ensure_ascii=False, indent=2))


@app.command("list")
def list_incidents(
    state: Annotated[str | None, typer.Option(help="open or resolved")] = None,
    limit: Annotated[int, typer.Option(help="Most recent N.")] = 50,
    json_out: JsonOpt = False,
) -> None:
    """List incidents, newest first."""
    store = open_store(get_settings().db_url)
    reviews = store.reviews()
    if json_out:
        rows = []
        for inc in store.list_incidents(state=state, limit=limit):
            r = reviews.get(inc.id)
            top = inc.hypotheses[0] if inc.hypotheses else None
            rows.append(
                {
                    "id": inc.id,
                    "state": inc.state,
                    "opened_at": inc.opened_at,
                    "resolved_at": inc.resolved_at,
                    "title": inc.title,
                    "entities": inc.entities,
                    "kpis": inc.kpis,
                    "max_score": inc.max_score,
                    "top": top.model_dump() if top is not None else None,
                    "review": r.model_dump() if r is not None else None,
                }
            )
        _print_json(rows)
        return
    table = Table("id", "state", "opened (UTC)", "entities", "KPIs", "score", "review")
    for inc in store.list_incidents(state=state, limit=limit):
        r = reviews.get(inc.id)
        said = ""
        if r is not None and r.verdict:
            said = r.verdict + (f": {r.fault}" if r.fault else "")
        elif r is not None and r.acknowledged_by:
            said = f"taken by {r.acknowledged_by}"
        table.add_row(
            inc.id,
            inc.state,
            _utc(inc.opened_at),
            ", ".join(inc.entities),
            ", ".join(inc.kpis),
            f"{inc.max_score:.1f}",
            said,
        )
    console.print(table)


def _pct(confidence: float) -> str:
    return present.value("ratio", confidence)


def _values(e: Evidence) -> str:
    """An evidence item's values in its KPI's unit: a finding's as observed and band."""
    if e.kind == "finding" and len(e.values) >= 3:
        observed, low, high = e.values[:3]
        return f"{present.value(e.kpi, observed)} (expected {present.band(e.kpi, low, high)})"
    return " ".join(present.value(e.kpi or None, v) for v in e.values)


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
        _print_hypotheses(inc.hypotheses)
    else:
        console.print("hypotheses: none yet")
    diagnosis = store.get_diagnosis(inc.id)
    if diagnosis is not None and diagnosis.evidence:
        _print_evidence(diagnosis.evidence)
    _print_findings(store.findings_for(inc.id))


def _print_hypotheses(hypotheses: Sequence[Hypothesis]) -> None:
    """The verdict (the top hypothesis) and the ranked hypotheses, as a table."""
    top = hypotheses[0]
    if top.fault == "no_fault":
        console.print(
            f"verdict: [bold]no fault[/] (insufficient evidence, {_pct(top.confidence)}); "
            "the hypotheses ranked under it are candidates to check, not claims"
        )
    else:
        console.print(f"verdict: [bold]{top.fault}[/] on {top.entity} ({_pct(top.confidence)})")
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
    for rank, h in enumerate(hypotheses, start=1):
        hyp.add_row(
            str(rank),
            h.fault + (f" (partner {h.partner})" if h.partner else ""),
            h.entity,
            _pct(h.confidence),
            ", ".join(h.evidence_ids),
            ", ".join(h.refuted_by),
            ", ".join(h.references),
            "\n".join(h.checks),
        )
    console.print(hyp)


def _print_evidence(evidence: Sequence[Evidence]) -> None:
    """A diagnosis's evidence items, as a table."""
    ev = Table("id", "kind", "entity", "KPI", "from", "to", "values", "summary", title="Evidence")
    for e in evidence:
        ev.add_row(
            e.id,
            e.kind,
            e.entity,
            e.kpi,
            _utc(e.start),
            _utc(e.end),
            _values(e),
            e.summary,
        )
    console.print(ev)


def _print_findings(findings: Iterable[Finding]) -> None:
    """An incident's findings, as a table."""
    table = Table(
        "time (UTC)",
        "entity",
        "KPI",
        "observed",
        "expected",
        "severity (score)",
        "id",
        title="Findings",
    )
    for f in findings:
        table.add_row(
            _utc(f.ts),
            f.entity,
            f.kpi,
            present.value(f.kpi, f.observed),
            present.band(f.kpi, f.expected_low, f.expected_high),
            f"{present.severity(f.score)} ({f.score:.3g})",
            f.id
            + (f" (evidence, no page: under raised bar {f.held_by})" if f.held_by else "")
            + (" (evidence, no page)" if f.evidence_only and not f.held_by else ""),
        )
    console.print(table)


@app.command("report")
def report(
    incident_id: Annotated[str, typer.Argument(help="Incident id")],
    narrate: Annotated[
        bool, typer.Option(help="Let the LLM write the summary (kept only if grounded).")
    ] = False,
    inventory: InventoryOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Print an incident's root-cause report (Markdown, from the diagnosis); with ``--json``
    the report's parts: ``narration`` (the model's summary, null when it was not used),
    ``narration_withheld`` (why), ``narration_dropped`` (why each sentence left out was),
    ``summary``, ``body``, ``hypotheses``, ``evidence``."""
    store, drafter = drafting_for_cli(inventory)
    inc, diagnosis = store.diagnosed_incident(incident_id)
    from noc_assistant.triage.history import concurrent_in_store, similar_in_store

    review, seen = store.get_review(incident_id), similar_in_store(store, inc)
    near = drafter.network_topology.neighbours
    beside = concurrent_in_store(store, inc, near, now=time.time())
    r = drafter.report(inc, diagnosis, narrate=narrate, review=review, seen=seen, beside=beside)
    if json_out:
        _print_json(
            {
                "incident_id": r.incident_id,
                "title": r.title,
                "narration": r.summary if r.generated_by == "llm" else None,
                "narration_withheld": r.narration_withheld if narrate else None,
                "narration_dropped": r.narration_dropped,
                "summary": r.summary,
                "generated_by": r.generated_by,
                "body": r.body,
                "hypotheses": [h.model_dump() for h in r.hypotheses],
                "evidence": [e.model_dump() for e in r.evidence],
                "untrusted_flags": r.untrusted_flags,
            }
        )
        return
    console.print(r.body, markup=False, highlight=False, soft_wrap=True)
    if r.narration_withheld:
        err_console.print(f"narration withheld: {r.narration_withheld}", highlight=False)


@app.command("ask")
def ask(
    incident_id: Annotated[str, typer.Argument(help="Incident id")],
    question: Annotated[str, typer.Argument(help="Your question about the incident")],
    inventory: InventoryOpt = None,
    by: Annotated[
        str | None,
        typer.Option("--by", help="Your name: keep the question and answer in the incident's log"),
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Ask the triage assistant about an incident (answers come from its evidence, the
    look-ups the model makes and the earlier incidents like it; the incident's kept chat is
    the conversation so far). With ``--json``: ``answer``, ``source`` (``model`` or
    ``fallback``), ``withheld_sentences``, ``tool_calls`` (each with its result), ``note``."""
    from noc_assistant.triage.drafting import conversation
    from noc_assistant.triage.history import concurrent_in_store, similar_in_store

    store, drafter = drafting_for_cli(inventory)
    inc, diagnosis = store.diagnosed_incident(incident_id)
    kept = conversation(store.chat_for(incident_id))
    beside = concurrent_in_store(store, inc, drafter.network_topology.neighbours, now=time.time())
    answer = drafter.answer(
        inc,
        diagnosis,
        question,
        kept,
        similar_in_store(store, inc),
        findings=store.findings_for(incident_id),
        beside=beside,
    )
    if by is not None:
        store.save_chat(drafter.keep(incident_id, question, answer, by, time.time()))
    if json_out:
        _print_json(
            {
                "answer": answer.text,
                "source": "model" if answer.generated_by == "llm" else "fallback",
                "withheld_sentences": len(answer.removed),
                "tool_calls": list(answer.tool_calls),
                "cited": list(answer.cited),
                "note": answer.note,
                "untrusted_flags": list(answer.untrusted_flags),
            }
        )
        return
    console.print(answer.text, markup=False, highlight=False, soft_wrap=True)
    if answer.note:
        err_console.print(f"({answer.note})", highlight=False)


@app.command("chat")
def chat(incident_id: Annotated[str, typer.Argument(help="Incident id")]) -> None:
    """Print the incident's kept triage chat, oldest first."""
    store = open_store(get_settings().db_url)
    if store.get_incident(incident_id) is None:
        raise BadInputError(f"no incident {incident_id!r} in {store.path}")
    for turn in store.chat_for(incident_id):
        when = datetime.fromtimestamp(turn.at, UTC).strftime("%Y-%m-%d %H:%M UTC")
        console.print(
            f"{when}  {turn.asked_by}: {turn.question}\n{turn.answer}\n",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )


def _past_line(p: PastIncident) -> str:
    when = datetime.fromtimestamp(p.opened_at, UTC).strftime("%Y-%m-%d %H:%M UTC")
    top = f"{p.top.fault} on {p.top.entity}" if p.top else "-"
    verdict = (p.verdict or "not judged").replace("_", " ")
    if p.confirmed:
        verdict += f": {p.confirmed}"
    if p.verdict_by:
        verdict += f" ({p.verdict_by})"
    return f"{when}  {p.id}  [{', '.join(p.match)}]  {top}  → {verdict}"


@app.command("similar")
def similar_cmd(
    incident_id: Annotated[str, typer.Argument(help="Incident id")],
    days: Annotated[float, typer.Option(min=0.1, max=366, help="How far back to look")] = 90.0,
    json_out: Annotated[bool, typer.Option("--json", help="The data as JSON")] = False,
    inventory: InventoryOpt = None,
) -> None:
    """Earlier incidents like this one (same entity and KPI, or the same cause), newest first,
    with the NOC's verdict on each: has it happened before, and what was it then? Then those
    at the same time on the same or a neighbouring entity (the inventory's topology)."""
    from noc_assistant.triage.history import concurrent_in_store, similar_in_store

    store, drafter = drafting_for_cli(inventory)
    inc = store.get_incident(incident_id)
    if inc is None:
        raise BadInputError(f"no incident {incident_id!r} in {store.path}")
    seen = similar_in_store(store, inc, lookback_s=days * 86_400.0)
    topology = drafter.network_topology
    beside = concurrent_in_store(store, inc, topology.neighbours, now=time.time())
    if json_out:
        data = {"seen_before": seen.model_dump(), "concurrent": [p.model_dump() for p in beside]}
        console.print_json(data=data)
        return
    lines = [seen.hint or f"Nothing like {incident_id} in the last {days:g} days."]
    lines += [_past_line(p) for p in seen.similar]
    if seen.total > len(seen.similar):
        lines.append(f"… and {seen.total - len(seen.similar)} older")
    if beside:
        lines += ["", "At the same time:", *(_past_line(p) for p in beside)]
    console.print("\n".join(lines), markup=False, highlight=False, soft_wrap=True)


def _review(store: Store, incident_id: str) -> Review:
    review = store.review_of(incident_id)
    if review is None:
        raise BadInputError(f"no incident {incident_id!r} in {store.path}")
    return review


@app.command("handover")
def handover_cmd(
    hours: Annotated[float, typer.Option(min=0.1, help="Length of the shift that ends now")] = 8.0,
    until: Annotated[str | None, typer.Option(help="End of the shift (default: now)")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="The data as JSON")] = False,
) -> None:
    """The shift handover: open incidents (nobody's first), what the shift saw, maintenance
    now and planned, e-mails waiting, chats kept (Markdown, from the store alone)."""
    from noc_assistant.ingest.replay import parse_time
    from noc_assistant.triage.handover import handover, render

    try:
        end = parse_time(until, time.time(), "--until")
    except ValueError as exc:
        raise BadInputError(str(exc)) from None
    data = handover(open_store(get_settings().db_url), end - hours * 3600.0, end)
    if json_out:
        console.print_json(data=data)
    else:
        console.print(render(data), markup=False, highlight=False, soft_wrap=True)


@app.command("ack")
def ack(
    incident_id: Annotated[str, typer.Argument(help="Incident id")],
    by: Annotated[str, typer.Option("--by", help="Who takes it (recorded)")],
) -> None:
    """Acknowledge an incident: you take it (a later acknowledgement hands it over)."""
    store = open_store(get_settings().db_url)
    store.save_review(_review(store, incident_id).acknowledged(by, time.time()))
    console.print(f"{incident_id} taken by {by}", highlight=False)


@app.command("verdict")
def verdict(
    incident_id: Annotated[str, typer.Argument(help="Incident id")],
    by: Annotated[str, typer.Option("--by", help="Who judges it (recorded)")],
    verdict: Annotated[
        str,
        typer.Option(help="fault, no_fault (a false alarm) or maintenance"),
    ],
    fault: Annotated[
        str | None, typer.Option(help="The confirmed fault class (with --verdict fault)")
    ] = None,
    entity: Annotated[str | None, typer.Option(help="The confirmed root-cause entity")] = None,
    partner: Annotated[str | None, typer.Option(help="Roaming partner PLMN (MCC-MNC)")] = None,
    note: Annotated[str | None, typer.Option(help="What was found")] = None,
) -> None:
    """Record what the incident was; `noc eval live` scores production from the verdicts."""
    from noc_assistant.cli._live import load_pack_and_topology

    if verdict not in ("fault", "no_fault", "maintenance"):
        raise BadInputError(f"--verdict: {verdict!r} is not fault, no_fault or maintenance")
    settings = get_settings()
    known = set(load_pack_and_topology(settings, None)[0].faults) if fault is not None else None
    store = open_store(settings.db_url)
    store.save_review(
        _review(store, incident_id).judged(
            verdict,  # type: ignore[arg-type]
            by,
            time.time(),
            fault=fault,
            entity=entity,
            partner=partner,
            note=note,
            known_faults=known,
        )
    )
    cause = f": {fault} on {entity}" if fault else ""
    console.print(f"{incident_id} judged {verdict}{cause} by {by}", highlight=False)


@app.command("email")
def email(
    incident_id: Annotated[str, typer.Argument(help="Incident id")],
    inventory: InventoryOpt = None,
) -> None:
    """Draft an e-mail to the NOC of the roaming partner an incident implicates (stored as
    a draft: `noc email approve` / `noc email send`); the same as `noc email draft`."""
    from noc_assistant.cli.email import draft

    draft(incident_id, inventory)
