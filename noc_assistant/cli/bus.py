"""``noc bus``: telemetry on NATS JetStream (``publish``) and a detector worker (``worker``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from noc_assistant.cli._console import console
from noc_assistant.settings import get_settings

__all__ = ["app"]

app = typer.Typer(
    help="Telemetry on NATS JetStream: publish replay files, run detector workers.",
    no_args_is_help=True,
)


@app.command("publish")
def publish(
    telemetry: Annotated[Path, typer.Option(help="JSONL replay file (FORMATS §1).")],
    batch: Annotated[int, typer.Option(min=1, help="Most lines in one message.")] = 500,
) -> None:
    """Publish a replay file to the stream, one message per entity and scrape."""
    from noc_assistant.bus import publish_replay
    from noc_assistant.ingest import Quarantine

    settings = get_settings()
    qpath = telemetry.with_name(telemetry.name + ".quarantine.jsonl")
    quarantine = Quarantine(path=qpath)
    stats = publish_replay(
        telemetry,
        url=settings.nats_url,
        stream=settings.nats_stream,
        prefix=settings.nats_subject_prefix,
        batch=batch,
        quarantine=quarantine,
    )
    console.print(
        f"published {stats.lines:,} lines in {stats.messages:,} messages to "
        f"{settings.nats_stream} ({stats.duplicates:,} already there)"
        + (f"; {stats.quarantined:,} lines quarantined to {qpath}" if stats.quarantined else ""),
        highlight=False,
    )


@app.command("worker")
def worker(
    durable: Annotated[str, typer.Option(help="Durable consumer (and snapshot) name.")] = "noc",
    subject: Annotated[
        str | None, typer.Option(help="Subject filter (default: every entity's telemetry).")
    ] = None,
    inventory: Annotated[Path | None, typer.Option(help="Network inventory (FORMATS §4).")] = None,
    checkpoint_every: Annotated[
        int, typer.Option(min=1, help="Messages between snapshots of the detectors' state.")
    ] = 200,
    idle: Annotated[
        float | None, typer.Option(help="Stop after this many seconds without a message.")
    ] = None,
    retain_days: Annotated[
        float, typer.Option(min=0, help="Resolved incidents stay in memory this long.")
    ] = 7.0,
    finish: Annotated[
        bool, typer.Option(help="On stopping idle, treat the feed as ended (resolve incidents).")
    ] = False,
) -> None:
    """Consume telemetry from the stream, detect, store incidents; resumes from its snapshot."""
    from knowledge.pack import PackError, load_pack
    from noc_assistant.alertmanager import AlertmanagerSink
    from noc_assistant.bus import BusWorker
    from noc_assistant.checkpoint import state_key
    from noc_assistant.correlate import IncidentEvent
    from noc_assistant.errors import ConfigError
    from noc_assistant.ingest import Quarantine
    from noc_assistant.inventory import load_topology
    from noc_assistant.pipeline import REPLAY_LATENESS_INTERVALS, Pipeline
    from noc_assistant.storage import open_store

    settings = get_settings()
    key = state_key(settings)
    try:
        pack = load_pack(settings.pack_dir)
    except PackError as exc:
        raise ConfigError(str(exc)) from None
    topology = load_topology(inventory, pack) if inventory is not None else None
    store = open_store(settings.db_url)
    quarantine = Quarantine(path=settings.data_dir / f"bus-{durable}.quarantine.jsonl")

    sink = (
        AlertmanagerSink(settings.alertmanager_url, console_url=settings.console_url)
        if settings.alertmanager_url
        else None
    )

    def on_incident(event: IncidentEvent) -> None:
        inc = event.incident
        if sink is not None:
            sink.on_incident(event)
        store.save_incident(inc)
        pipe = bus.pipeline
        diagnosis = pipe.diagnoses.get(inc.id) if pipe is not None else None
        if diagnosis is not None:
            store.save_diagnosis(diagnosis)
        if event.finding is not None:
            store.save_findings([event.finding], incident_id=inc.id)
        if event.kind in ("opened", "resolved"):
            word = "[red]ALERT[/]" if event.kind == "opened" else "[green]RESOLVED[/]"
            console.print(f"{word} {', '.join(inc.entities)}  [dim]{inc.id}[/]", highlight=False)

    def make_pipeline() -> Pipeline:
        return Pipeline(
            pack=pack,
            topology=topology,
            quarantine=quarantine,
            on_incident=on_incident,
            lateness_intervals=REPLAY_LATENESS_INTERVALS,
        )

    bus = BusWorker(
        url=settings.nats_url,
        stream=settings.nats_stream,
        durable=durable,
        key=key,
        pack=pack,
        make_pipeline=make_pipeline,
        on_incident=on_incident,
        quarantine=quarantine,
        prefix=settings.nats_subject_prefix,
        filter_subject=subject,
        checkpoint_every=checkpoint_every,
        idle_s=idle,
        finish_on_idle=finish,
        retain_s=retain_days * 86400.0,
    )
    if sink is not None:
        alerts = sink
        tracked = False

        def tick() -> None:
            nonlocal tracked
            if not tracked and bus.pipeline is not None:
                # a restored worker's open incidents: Alertmanager may have let them lapse
                incidents = bus.pipeline.correlator.incidents.values()
                alerts.track([i for i in incidents if i.state == "open"])
                tracked = True
            alerts.refresh()

        bus.tick = tick
    stats = bus.run()
    resumed = f"resumed after #{stats.restored_seq}" if stats.restored_seq else "started afresh"
    console.print(
        f"worker {durable}: {resumed}, {stats.messages:,} messages ({stats.lines:,} lines) to "
        f"#{stats.last_seq}, {stats.checkpoints} snapshots, {stats.quarantined} quarantined",
        highlight=False,
    )
    if sink is not None:
        console.print(
            f"alertmanager {sink.url}: {sink.sent} alerts sent, {sink.pending} waiting"
            + (f" ({sink.last_error})" if sink.last_error else ""),
            highlight=False,
        )
