"""``noc bus``: telemetry on NATS JetStream (``publish``), a detector worker (``worker``), and
the network-wide correlator over workers of slices (``correlate``)."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from noc_assistant.cli._console import console, err_console
from noc_assistant.settings import get_settings

if TYPE_CHECKING:
    from knowledge.pack import Pack
    from knowledge.topology import Topology
    from noc_assistant.cli._live import IncidentOutput
    from noc_assistant.ingest import Quarantine
    from noc_assistant.integrations.bus import BusWorker
    from noc_assistant.settings import Settings

__all__ = ["app"]

# the options the worker and the correlator share
CheckpointEvery = Annotated[
    int, typer.Option(min=1, help="Messages between snapshots of the state.")
]
Idle = Annotated[float | None, typer.Option(help="Stop after this many seconds without a message.")]
RetainDays = Annotated[
    float, typer.Option(min=0, help="Resolved incidents stay in memory this long.")
]
Finish = Annotated[
    bool, typer.Option(help="On stopping idle, treat the feed as ended (resolve incidents).")
]
# the worker's slice of the network
Subject = Annotated[
    str | None, typer.Option(help="Subject filter (default: every entity's telemetry).")
]
Part = Annotated[
    str | None,
    typer.Option(
        help="K/N: only the entities in part K of N (0-based; the same split on every "
        "worker): N workers with --part 0/N … N-1/N share the network."
    ),
]
Entities = Annotated[
    str,
    typer.Option(
        help="Comma-separated shell patterns of the entities this worker takes "
        "('upf-*,smf-*'; default: all)."
    ),
]
Partition = Annotated[
    int | None,
    typer.Option(
        min=0,
        help="K: only the server's partition K (the subject mapping `noc bus partitions "
        "N` prints, in nats-server's configuration): the server sends this worker its "
        "entities only.",
    ),
]
Findings = Annotated[
    bool,
    typer.Option(
        "--findings",
        help="A worker of a slice: send each tick's findings to `noc bus correlate` "
        "instead of correlating and storing incidents here.",
    ),
]
# the correlator's workers
Expect = Annotated[
    str,
    typer.Option(
        help="Comma-separated durable names of the workers to wait for before the "
        "correlator's clock moves (default: each worker counts from its first batch)."
    ),
]
Retire = Annotated[
    str,
    typer.Option(
        help="Comma-separated workers gone for good (scaled away): the correlator no "
        "longer waits for them."
    ),
]
LagIntervals = Annotated[
    float,
    typer.Option(
        min=1,
        help="Say so when a worker's last tick is this many scrape intervals behind the "
        "most advanced one (the correlator waits for the slowest worker).",
    ),
]

app = typer.Typer(
    help="Telemetry on NATS JetStream: publish replay files, run detector workers and the "
    "correlator of workers of slices.",
    no_args_is_help=True,
)


@app.command("publish")
def publish(
    telemetry: Annotated[Path, typer.Option(help="JSONL replay file (FORMATS §1).")],
    batch: Annotated[int, typer.Option(min=1, help="Most lines in one message.")] = 500,
) -> None:
    """Publish a replay file to the stream, one message per entity and scrape."""
    from noc_assistant.ingest import Quarantine
    from noc_assistant.integrations.bus import publish_replay

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
    subject: Subject = None,
    part: Part = None,
    entities: Entities = "",
    partition: Partition = None,
    inventory: Annotated[Path | None, typer.Option(help="Network inventory (FORMATS §4).")] = None,
    checkpoint_every: CheckpointEvery = 200,
    idle: Idle = None,
    retain_days: RetainDays = 7.0,
    finish: Finish = False,
    findings: Findings = False,
) -> None:
    """Consume telemetry from the stream, detect, store incidents; resumes from its snapshot.

    With ``--findings`` (one worker per slice of the network, each with its own
    ``--partition``, ``--part``, ``--entities`` or ``--subject``, and its own ``--durable``)
    the incidents are made by ``noc bus correlate`` from every worker's findings, so an
    incident that spans slices is one incident."""
    from noc_assistant.integrations.bus import BusWorker, WorkerConfig, detector_pipeline

    share = _part(part)
    settings, key, pack, topology, quarantine, on_incident = _live(durable, inventory)
    config = WorkerConfig(
        url=settings.nats_url,
        stream=settings.nats_stream,
        durable=durable,
        prefix=settings.nats_subject_prefix,
        filter_subject=subject,
        partition=partition,
        part=share,
        entities=tuple(sorted(_names(entities))),
        checkpoint_every=checkpoint_every,
        idle_s=idle,
        finish_on_idle=finish,
        retain_s=retain_days * 86400.0,
        findings_stream=settings.nats_findings_stream if findings else None,
        findings_prefix=settings.nats_findings_prefix,
    )
    sink = None if findings else on_incident
    bus = BusWorker(
        config,
        key=key,
        pack=pack,
        make_pipeline=detector_pipeline(pack, topology, quarantine, sink, correlate=not findings),
        on_incident=sink,
        quarantine=quarantine,
        # a worker of a slice still needs the maintenance windows (a silence in one is no page)
        tick=on_incident.refresh_maintenance if findings else on_incident.tick,
    )
    _run(bus, durable, "worker", on_incident)


@app.command("partitions")
def partitions(
    n: Annotated[int, typer.Argument(min=1, help="How many partitions (worker processes).")],
) -> None:
    """Print the nats-server configuration that splits the telemetry into N partitions.

    Put it in the server's configuration (inside the account's block where accounts are
    configured) and reload it, before telemetry is published; then start one ``noc bus worker
    --findings --partition K`` per K in 0 … N-1 and one ``noc bus correlate``. The server
    sends each worker only its own entities. N cannot change while the stream holds
    telemetry: an entity would move to another worker without its detectors' state."""
    from noc_assistant.integrations.bus import partition_config

    settings = get_settings()
    text = partition_config(n, settings.nats_subject_prefix)
    console.print(text, markup=False, highlight=False, soft_wrap=True)


@app.command("correlate")
def correlate(
    inventory: Annotated[
        Path, typer.Option(help="Network inventory (FORMATS §4): the whole network's topology.")
    ],
    expect: Expect = "",
    retire: Retire = "",
    durable: Annotated[
        str, typer.Option(help="Durable consumer (and snapshot) name.")
    ] = "noc-correlate",
    checkpoint_every: CheckpointEvery = 200,
    idle: Idle = None,
    retain_days: RetainDays = 7.0,
    finish: Finish = False,
    lag_intervals: LagIntervals = 10.0,
) -> None:
    """Correlate, rank and store incidents for the whole network from the findings of the
    workers of slices (``noc bus worker --findings``); resumes from its snapshot.

    The inventory is required: without one a worker infers the topology from the telemetry it
    sees, and the correlator sees none."""
    from noc_assistant.integrations.bus import (
        CorrelatorConfig,
        CorrelatorWorker,
        LagWatch,
        correlator_pipeline,
    )

    settings, key, pack, topology, quarantine, on_incident = _live(durable, inventory)
    config = CorrelatorConfig(
        url=settings.nats_url,
        stream=settings.nats_findings_stream,
        durable=durable,
        prefix=settings.nats_findings_prefix,
        checkpoint_every=checkpoint_every,
        idle_s=idle,
        finish_on_idle=finish,
        retain_s=retain_days * 86400.0,
        expect=_names(expect),
        retire=_names(retire),
    )
    watch = LagWatch(lag_intervals)

    def tick() -> None:
        on_incident.tick()
        waits, caught_up = watch.check(bus.pipeline)
        for line in waits:
            err_console.print(line, highlight=False)
        for line in caught_up:
            console.print(line, highlight=False)

    bus = CorrelatorWorker(
        config,
        key=key,
        pack=pack,
        make_pipeline=correlator_pipeline(pack, topology, quarantine, on_incident),
        on_incident=on_incident,
        quarantine=quarantine,
        tick=tick,
    )
    _run(bus, durable, "correlator", on_incident)


@app.command("status")
def status(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """How far each worker and the correlator have read their stream, what is left for them,
    and where their snapshots stand (a restart re-reads from there)."""
    import dataclasses
    import json

    from noc_assistant.integrations.bus import status as bus_status

    settings = get_settings()
    streams = bus_status(settings.nats_url, settings.nats_stream, settings.nats_findings_stream)
    if as_json:
        console.print_json(json.dumps([dataclasses.asdict(s) for s in streams]))
        return
    for st in streams:
        if not st.exists:
            console.print(f"stream {st.name}: not made yet", highlight=False)
            continue
        console.print(
            f"stream {st.name}: {st.messages:,} messages, last #{st.last_seq:,}", highlight=False
        )
        for c in st.consumers:
            snap = f"snapshot #{c.snapshot_seq:,}" if c.snapshot_seq is not None else "no snapshot"
            console.print(
                f"  {c.durable}: read to #{c.delivered:,}, {c.pending:,} left, "
                f"{c.unacknowledged:,} unacknowledged, {snap}",
                highlight=False,
            )


def _live(
    durable: str, inventory: Path | None
) -> tuple[Settings, bytes, Pack, Topology | None, Quarantine, IncidentOutput]:
    """What a worker and the correlator both need: settings, the snapshot key, the pack and
    topology, the quarantine file, and the incident sink (its pipeline is the worker's)."""
    from noc_assistant.cli._live import IncidentOutput, load_pack_and_topology
    from noc_assistant.ingest import Quarantine
    from noc_assistant.store import open_store
    from noc_assistant.stream.checkpoint import state_key

    settings = get_settings()
    key = state_key(settings)
    pack, topology = load_pack_and_topology(settings, inventory)
    quarantine = Quarantine(path=settings.data_dir / f"bus-{durable}.quarantine.jsonl")
    output = IncidentOutput(settings, open_store(settings.db_url), lambda: None)
    return settings, key, pack, topology, quarantine, output


def _run(bus: BusWorker, durable: str, what: str, output: IncidentOutput) -> None:
    """Run until idle or stopped; what it read, and the alerts it sent."""
    output.pipeline = lambda: bus.pipeline
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
    read = "lines" if what == "worker" else "findings"
    console.print(
        f"{what} {durable}: {resumed}, {stats.messages:,} messages ({stats.lines:,} {read}) to "
        f"#{stats.last_seq}, {stats.checkpoints} snapshots, {stats.quarantined} quarantined",
        highlight=False,
    )
    if output.summary():
        console.print(output.summary(), highlight=False)


def _part(text: str | None) -> tuple[int, int] | None:
    """``--part K/N`` as (K, N); a usage error (exit 2) that shows the form otherwise."""
    if text is None:
        return None
    k, _, n = text.partition("/")
    if not (k.strip().isdigit() and n.strip().isdigit()) or not 0 <= int(k) < int(n):
        raise typer.BadParameter(f"{text!r}: K/N with 0 <= K < N, e.g. 0/4", param_hint="--part")
    return int(k), int(n)


def _names(text: str) -> frozenset[str]:
    return frozenset(w.strip() for w in text.split(",") if w.strip())
