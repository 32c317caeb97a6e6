"""``noc watch``: live detection on a real network, scraping exporters' ``/metrics`` directly."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from noc_assistant.cli._console import console, err_console
from noc_assistant.settings import get_settings

if TYPE_CHECKING:
    from knowledge.pack import Pack
    from noc_assistant.cli._live import IncidentOutput
    from noc_assistant.ingest.syslog import SyslogReceiver

__all__ = ["register"]


def watch(
    target: Annotated[
        list[str] | None,
        typer.Option(help="INSTANCE=URL of an exporter's /metrics (repeat for each target)."),
    ] = None,
    prometheus: Annotated[
        str | None, typer.Option(help="Or read what a Prometheus server scrapes (its URL).")
    ] = None,
    match: Annotated[
        list[str] | None, typer.Option(help="PromQL selectors to read (default: all series).")
    ] = None,
    backfill: Annotated[
        float, typer.Option(min=0, help="With --prometheus: first replay this many seconds.")
    ] = 0.0,
    lag: Annotated[
        float, typer.Option(min=0, help="With --prometheus: read up to this long before now.")
    ] = 5.0,
    interval: Annotated[float, typer.Option(min=0.05, help="Scrape interval, seconds.")] = 15.0,
    inventory: Annotated[Path | None, typer.Option(help="Network inventory (FORMATS §4).")] = None,
    serve: Annotated[bool, typer.Option(help="Serve the web console meanwhile.")] = True,
    checkpoint: Annotated[
        Path | None,
        typer.Option(help="Snapshot file: resumed on start, written every --checkpoint-every."),
    ] = None,
    checkpoint_every: Annotated[int, typer.Option(min=1, help="Scrapes between snapshots.")] = 240,
    duration: Annotated[
        float | None, typer.Option("--for", help="Stop after this many seconds (default: never).")
    ] = None,
    syslog: Annotated[
        str | None,
        typer.Option(
            help="HOST:PORT to receive NF logs on (syslog RFC 5424, UDP and TCP): lines that "
            "match the pack's log patterns are cited as evidence of an incident."
        ),
    ] = None,
    syslog_tls: Annotated[
        tuple[Path, Path] | None,
        typer.Option(help="CERT KEY: the syslog TCP listener speaks TLS (RFC 5425)."),
    ] = None,
) -> None:
    """Scrape the targets (or poll Prometheus) every interval, detect, store and show
    incidents as they happen. With ``--prometheus --backfill`` the detectors first learn from
    the stored history, instead of waiting out their probation."""
    from noc_assistant.api.alert_intake import QueuedAlerts
    from noc_assistant.api.events import Broadcaster
    from noc_assistant.cli._live import IncidentOutput, console_app, load_pack_and_topology
    from noc_assistant.cli.run import _serve, _utc
    from noc_assistant.errors import BadInputError
    from noc_assistant.ingest import Quarantine
    from noc_assistant.ingest.scrape import Scraper, parse_target
    from noc_assistant.integrations.prometheus import PrometheusError, PrometheusSource
    from noc_assistant.store import open_store
    from noc_assistant.stream.checkpoint import read_file, restore, snapshot, state_key, write_file
    from noc_assistant.stream.pipeline import Pipeline

    settings = get_settings()
    try:
        targets = [parse_target(t) for t in target or []]
    except ValueError as exc:
        raise BadInputError(str(exc)) from None
    if not targets and prometheus is None:
        raise BadInputError("nothing to watch: give --target INSTANCE=URL or --prometheus URL")
    key = state_key(settings) if checkpoint is not None else b""
    pack, topology = load_pack_and_topology(settings, inventory)
    store = open_store(settings.db_url)
    hub = Broadcaster()
    quarantine = Quarantine(path=settings.data_dir / "watch.quarantine.jsonl")
    pipe: Pipeline | None = None
    output = IncidentOutput(settings, store, lambda: pipe, hub)
    receiver = _syslog(output, pack, syslog, syslog_tls) if syslog else None
    alerts = QueuedAlerts()
    if checkpoint is not None and checkpoint.exists():
        pipe, meta = restore(
            read_file(checkpoint), key, pack=pack, on_incident=output, source=str(checkpoint)
        )
        taken = meta.get("at")
        when = _utc(taken) if isinstance(taken, float) else "?"
        console.print(f"resumed from {checkpoint} (taken {when})", highlight=False, soft_wrap=True)
    else:
        # a live feed arrives in order per target: hold points one interval, not a minute
        pipe = Pipeline(
            pack=pack,
            topology=topology,
            quarantine=quarantine,
            on_incident=output,
            lateness_s=min(60.0, interval),
        )
    scraper = (
        Scraper(targets, timeout_s=min(10.0, 0.8 * interval), quarantine=quarantine)
        if targets
        else None
    )
    source = (
        PrometheusSource(prometheus, match=match or ['{__name__=~".+"}']) if prometheus else None
    )
    if serve:
        app = console_app(store, hub, settings, pack, pipe.current_topology, alert_sink=alerts)
        _serve(app, settings.http_host, settings.http_port)
        console.print(f"console http://{settings.http_host}:{settings.http_port}")
    what = [f"{len(targets)} target(s)"] if targets else []
    what += [f"Prometheus {prometheus}"] if prometheus else []
    console.print(f"watching {' and '.join(what)} every {interval:g} s", highlight=False)

    def save() -> None:
        if checkpoint is not None and pipe is not None:
            write_file(checkpoint, snapshot(pipe, key, {"at": time.time()}))

    # Ctrl-C or a service manager's stop (SIGTERM): finish the round, snapshot and leave. A
    # flag, not an exception: raised at an arbitrary point, one was seen swallowed (the loop
    # went on) about once in ten stops
    stop = threading.Event()
    before = {
        sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGTERM, signal.SIGINT)
    }
    started = time.time()
    tick = started - started % interval + interval
    scrapes = 0
    down: set[str] = set()
    read_to = started - lag - backfill
    prom_error: str | None = None
    try:
        while not stop.is_set() and (duration is None or time.time() - started < duration):
            if stop.wait(max(0.0, tick - time.time())):
                break
            if source is not None:
                try:
                    for p in source.fetch(read_to, tick - lag):
                        pipe.feed(p)
                    read_to = tick - lag
                    prom_error = None
                except PrometheusError as exc:  # try again at the next tick, from read_to
                    if str(exc) != prom_error:
                        err_console.print(f"prometheus: {exc}", highlight=False)
                    prom_error = str(exc)
            if scraper is not None:
                result = scraper.scrape(tick)
                for p in result.points:
                    pipe.feed(p)
                for instance, why in result.failed.items():
                    if instance not in down:
                        err_console.print(f"scrape failed: {why}", highlight=False)
                down = set(result.failed)
            scrapes += 1
            if scrapes % checkpoint_every == 0:
                save()
            alerts.drain(pipe.add_finding, pipe.clear_series)  # Alertmanager's, via the console
            output.tick()
            tick += interval
            if tick < time.time():  # fell behind (a slow scrape): skip, do not burst
                tick = time.time() - time.time() % interval + interval
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
        save()
        if scraper is not None:
            scraper.close()
        if source is not None:
            source.close()
        if receiver is not None:
            receiver.stop()
    console.print(
        f"{scrapes} rounds, {pipe.samples:,} samples ({pipe.buffer.duplicates} repeated), "
        f"{len(pipe.correlator.incidents)} "
        f"incidents, {quarantine.count} lines quarantined",
        highlight=False,
    )
    if output.summary():
        console.print(output.summary(), highlight=False)


def register(app: typer.Typer) -> None:
    app.command("watch")(watch)


def _syslog(
    output: IncidentOutput, pack: Pack, where: str, tls: tuple[Path, Path] | None
) -> SyslogReceiver:
    """Start receiving NF logs on ``where`` (HOST:PORT) for ``output`` to cite."""
    import ssl

    from guardrails.masking import Masker
    from knowledge.logs import load_log_patterns
    from noc_assistant.errors import BadInputError
    from noc_assistant.ingest.syslog import LogWindow, SyslogReceiver
    from noc_assistant.triage.logs import LogEvidence

    host, _, port = where.rpartition(":")
    if not host or not port.isdigit():
        raise BadInputError(f"--syslog: {where!r} is not HOST:PORT")
    context = None
    if tls is not None:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        try:
            context.load_cert_chain(str(tls[0]), str(tls[1]))
        except (OSError, ssl.SSLError) as exc:
            raise BadInputError(f"--syslog-tls: {exc}") from None
    window = LogWindow(Masker.from_pack(pack))
    patterns = load_log_patterns(faults=pack.faults)
    output.logs = LogEvidence(window, patterns, pack.injection)
    try:
        receiver = SyslogReceiver(window, host, int(port), tls=context).start()
    except OSError as exc:
        raise BadInputError(f"--syslog {where}: cannot listen: {exc}") from None
    console.print(f"receiving syslog on {host}:{receiver.tcp_port} (UDP and TCP)", highlight=False)
    return receiver
