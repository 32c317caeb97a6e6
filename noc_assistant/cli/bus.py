"""``noc bus``: telemetry on NATS JetStream (``publish``) and a detector worker (``worker``)."""

from __future__ import annotations

import signal
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
    from noc_assistant.bus import BusWorker
    from noc_assistant.checkpoint import state_key
    from noc_assistant.cli._live import IncidentOutput, load_pack_and_topology
    from noc_assistant.ingest import Quarantine
    from noc_assistant.pipeline import REPLAY_LATENESS_INTERVALS, Pipeline
    from noc_assistant.storage import open_store

    settings = get_settings()
    key = state_key(settings)
    pack, topology = load_pack_and_topology(settings, inventory)
    store = open_store(settings.db_url)
    quarantine = Quarantine(path=settings.data_dir / f"bus-{durable}.quarantine.jsonl")
    on_incident = IncidentOutput(settings, store, lambda: bus.pipeline)

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
    bus.tick = on_incident.tick
    # a service manager's stop (SIGTERM) or Ctrl-C: finish the batch, snapshot, leave
    before = {
        sig: signal.signal(sig, lambda *_: bus.stop()) for sig in (signal.SIGTERM, signal.SIGINT)
    }
    try:
        stats = bus.run()
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
    resumed = f"resumed after #{stats.restored_seq}" if stats.restored_seq else "started afresh"
    console.print(
        f"worker {durable}: {resumed}, {stats.messages:,} messages ({stats.lines:,} lines) to "
        f"#{stats.last_seq}, {stats.checkpoints} snapshots, {stats.quarantined} quarantined",
        highlight=False,
    )
    if on_incident.summary():
        console.print(on_incident.summary(), highlight=False)
