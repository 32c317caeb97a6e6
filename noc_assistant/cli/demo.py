"""Top-level commands: ``noc demo`` (the main job of ``make run``) and ``noc check``."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import numpy as np
import typer
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from noc_assistant.cli._console import console
from noc_assistant.ingest.replay import parse_ts
from noc_assistant.models import Finding, Incident, Maintenance
from noc_assistant.settings import get_settings
from noc_assistant.stream.correlate import IncidentEvent, MaintenanceWindow

if TYPE_CHECKING:
    from knowledge.pack import Pack
    from knowledge.topology import Topology
    from noc_assistant.api.events import Broadcaster
    from noc_assistant.settings import Settings
    from noc_assistant.simulate import Scenario
    from noc_assistant.store import Store
    from noc_assistant.stream.pipeline import Pipeline

__all__ = ["register"]


def _utc(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S")


def _maintenance(labels: dict[str, Any]) -> list[MaintenanceWindow]:
    return [
        MaintenanceWindow(m["entity"], parse_ts(m["start"]), parse_ts(m["end"]))
        for m in labels.get("maintenance", [])
    ]


def _declared(labels: dict[str, Any], at: float) -> list[Maintenance]:
    """The scenario's planned work as declared windows, so that the console, the handover and
    ``noc maintenance list`` show what held the pages back (as a NOC would have declared it)."""
    return [
        Maintenance(
            id=f"mw-demo-{i}",
            entity=m["entity"],
            start=parse_ts(m["start"]),
            end=parse_ts(m["end"]),
            by="noc demo",
            reason="planned work in the simulated scenario",
            created_at=at,
        )
        for i, m in enumerate(labels.get("maintenance", []), 1)
    ]


def _serve(app: Any, host: str, port: int) -> threading.Thread:
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, name="web", daemon=True)
    thread.start()
    return thread


def _configured_store() -> bool:
    """Whether the store is the user's (``NOC_DB_URL`` set), not the demo's own file."""
    import os

    return "NOC_DB_URL" in os.environ or "db_url" in get_settings().model_fields_set


def demo(
    days: Annotated[float, typer.Option(help="Simulated days to stream.")] = 1.0,
    faults: Annotated[
        str, typer.Option(help="'all', 'none' or comma-separated fault ids.")
    ] = "all",
    seed: Annotated[int, typer.Option(help="Simulator seed.")] = 7,
    serve: Annotated[bool, typer.Option(help="Serve the web console while streaming.")] = True,
    hold: Annotated[
        bool, typer.Option(help="Keep serving the console after the day ends (Ctrl-C stops).")
    ] = True,
    start: Annotated[
        str | None,
        typer.Option(
            help="Start of the simulated time (RFC 3339 UTC). Default: the simulated days end "
            "at the last full hour, so the console's handover and weekly report show them."
        ),
    ] = None,
) -> None:
    """Simulate a network day with faults, stream it through detection and show live alerts."""
    from knowledge.pack import load_pack
    from noc_assistant.api.events import Broadcaster
    from noc_assistant.cli._live import console_app
    from noc_assistant.inventory import topology_from_dict
    from noc_assistant.store import open_store

    settings = get_settings()
    store = open_store(settings.db_url)
    if not _configured_store():
        store.clear()  # the demo's own file: only what earlier demos wrote
    hub = Broadcaster()
    scenario = _demo_scenario(settings, store, days, faults, seed, start)
    url = f"http://{settings.http_host}:{settings.http_port}"
    pack = load_pack()
    topology = topology_from_dict(scenario.inventory, pack)
    if serve:
        app = console_app(store, hub, settings, pack, topology)
        _serve(app, settings.http_host, settings.http_port)
        console.print(f"  console    [link={url}]{url}[/link]")
    pipe = _demo_pipeline(store, hub, pack, topology, scenario.labels)
    elapsed = _stream_scenario(pipe, scenario, days)
    store.save_findings(pipe.correlator.suppressed)
    _print_summary(pipe, scenario, elapsed)
    if serve and hold:
        console.print(f"Console at {url} — press Ctrl-C to stop.")
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            console.print("stopped")


def _demo_scenario(
    settings: Settings, store: Store, days: float, faults: str, seed: int, start: str | None
) -> Scenario:
    """Build the demo's scenario, write its files and declare its planned work in ``store``."""
    from noc_assistant.errors import BadInputError
    from noc_assistant.ingest.replay import parse_time
    from noc_assistant.simulate import ScenarioConfig, build_scenario, write_scenario

    hour = time.time() // 3600 * 3600
    try:
        begin = parse_time(start, hour - round(days * 86400), "--start")
    except ValueError as exc:
        raise BadInputError(str(exc)) from None
    config = ScenarioConfig(
        days=days, faults=faults, seed=seed, start=datetime.fromtimestamp(begin, UTC)
    )
    scenario = build_scenario(config)
    paths = write_scenario(scenario, settings.data_dir)
    for window in _declared(scenario.labels, begin):
        store.save_maintenance(window)
    console.print(
        f"[bold]noc demo[/]: {days:g} simulated day(s), faults={faults}, seed={seed}\n"
        f"  telemetry  {paths['telemetry']}\n  labels     {paths['labels']}\n"
        f"  inventory  {paths['inventory']}\n  database   {store.path}"
    )
    return scenario


def _demo_pipeline(
    store: Store, hub: Broadcaster, pack: Pack, topology: Topology, labels: dict[str, Any]
) -> Pipeline:
    """The demo's pipeline: each incident event stored, published to the console and printed;
    the scenario's planned work held back."""
    from noc_assistant.stream.pipeline import Pipeline

    pending: list[Finding] = []

    def on_finding(finding: Finding) -> None:
        pending.append(finding)

    def on_incident(event: IncidentEvent) -> None:
        inc = event.incident
        store.save_incident(inc)
        diagnosis = pipe.diagnoses.get(inc.id)
        if diagnosis is not None:
            store.save_diagnosis(diagnosis)
        if event.finding is not None:
            store.save_findings([event.finding], incident_id=inc.id)
        hub.publish({"kind": event.kind, "incident": inc.id, "state": inc.state})
        _print_event(event)

    pipe = Pipeline(pack=pack, topology=topology, on_finding=on_finding, on_incident=on_incident)
    pipe.correlator.maintenance.extend(_maintenance(labels))
    return pipe


def _print_event(event: IncidentEvent) -> None:
    """One line for an incident that opened, resolved, reopened or escalated."""
    inc = event.incident
    if event.kind == "opened":
        f = event.finding
        detail = (
            f"{f.kpi} {f.direction}: observed {f.observed:.4g}, "
            f"expected {f.expected_low:.4g}…{f.expected_high:.4g}"
            if f
            else ""
        )
        word = "[blue]NOTICE[/]" if inc.severity == "info" else "[red]ALERT[/]"
        _line(f"{word} {_utc(inc.opened_at)}  [bold]{', '.join(inc.entities)}[/]  {detail}", inc)
    elif event.kind == "resolved":
        top = inc.hypotheses[0] if inc.hypotheses else None
        verdict = f"  → {top.fault} on {top.entity} ({top.confidence:.0%})" if top else ""
        at = _utc(inc.resolved_at or inc.updated_at)
        _line(f"[green]RESOLVED[/] {at}  {', '.join(inc.entities)}{verdict}", inc)
    elif event.kind in ("reopened", "escalated"):
        f = event.finding
        why = f"  {f.kpi} {f.direction} (score {f.score:.3g})" if f else ""
        at = _utc(inc.updated_at)
        _line(f"[yellow]{event.kind.upper()}[/] {at}  {', '.join(inc.entities)}{why}", inc)


def _line(text: str, inc: Incident) -> None:
    """One event line, the incident's id after it."""
    console.print(f"{text}  [dim]{inc.id}[/]", highlight=False, soft_wrap=True)


def _stream_scenario(pipe: Pipeline, scenario: Scenario, days: float) -> float:
    """Feed the scenario's samples through ``pipe`` behind a progress bar; the wall time (s)."""
    started = time.perf_counter()
    span = days * 86400.0
    t0: float | None = None
    with Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        TextColumn("{task.percentage:>3.0f}%"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as progress:
        task = progress.add_task("simulated day", total=span)

        keys = np.array(
            [pipe.number(s.metric, s.point_labels, s.type) for s in scenario.series], np.int64
        )
        last = 0.0
        for cols in scenario.iter_columns():
            pipe.feed_columns(cols.ts, keys[cols.series], cols.value)
            if not len(cols.ts):
                continue
            if t0 is None:
                t0 = float(cols.ts[0])
            now = float(cols.ts[-1])
            if now - last >= 900:
                last = now
                progress.update(task, completed=now - t0, description=f"sim {_utc(now)}")
        pipe.finish()
        progress.update(task, completed=span)
    return time.perf_counter() - started


def _print_summary(pipe: Pipeline, scenario: Scenario, elapsed: float) -> None:
    """The demo's closing table: samples, findings, incidents, what was held back."""
    table = Table(title="Demo summary", show_header=False)
    incidents = list(pipe.correlator.incidents.values())
    table.add_row("samples streamed", f"{pipe.samples:,}")
    table.add_row("wall time", f"{elapsed:.1f} s ({pipe.samples / elapsed:,.0f} samples/s)")
    table.add_row("findings", str(len(pipe.findings)))
    table.add_row("incidents (alerts)", str(len(incidents)))
    table.add_row("labelled fault incidents", str(len(scenario.labels.get("incidents", []))))
    table.add_row("suppressed (maintenance)", str(len(pipe.correlator.suppressed)))
    table.add_row(
        "quarantined / duplicate samples", f"{pipe.quarantine.count} / {pipe.buffer.duplicates}"
    )
    console.print(table)


def check(
    inventory: Annotated[
        Path | None,
        typer.Option(
            help="Network inventory whose TMF621 partners are asked (docs/FORMATS.md §4); default: "
            "NOC_DATA_DIR/inventory.json"
        ),
    ] = None,
) -> None:
    """Ask every outside part the settings name whether it answers (store, pack, LLM, SMTP,
    Alertmanager, NATS, each notification route, each partner's TMF621 endpoint), sending
    and changing nothing; exit 2 if one configured fails."""
    from rich.markup import escape

    from noc_assistant.ops.readiness import check_all

    checks = check_all(get_settings(), inventory)
    for c in checks:
        style = {"ok": "green", "failed": "red"}.get(c.status, "dim")
        console.print(f"[{style}]{escape(c.line())}[/]", highlight=False, soft_wrap=True)
    if any(c.status == "failed" for c in checks):
        raise typer.Exit(2)


def register(app: typer.Typer) -> None:
    """Add the top-level commands to ``app``."""
    app.command("demo")(demo)
    app.command("check")(check)
