"""``noc watch``: live detection on a real network, scraping exporters' ``/metrics`` directly."""

from __future__ import annotations

import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from noc_assistant.cli._console import console, err_console
from noc_assistant.settings import get_settings

if TYPE_CHECKING:
    from knowledge.pack import Pack
    from noc_assistant.api.alert_intake import QueuedAlerts
    from noc_assistant.cli._live import IncidentOutput
    from noc_assistant.ingest import Quarantine
    from noc_assistant.ingest.scrape import Scraper, Target
    from noc_assistant.ingest.syslog import SyslogReceiver
    from noc_assistant.integrations.prometheus import PrometheusSource
    from noc_assistant.settings import Settings
    from noc_assistant.stream.pipeline import Pipeline

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
    settings = get_settings()
    config = _WatchConfig(
        targets=_targets(target, prometheus),
        prometheus=prometheus,
        match=tuple(match or ()),
        backfill=backfill,
        lag=lag,
        interval=interval,
        inventory=inventory,
        serve=serve,
        checkpoint=checkpoint,
        checkpoint_every=checkpoint_every,
        duration=duration,
        syslog=syslog,
        syslog_tls=syslog_tls,
    )
    watching = _start(config, settings)
    scrapes = _run(config, watching)
    pipe = watching.pipe
    console.print(
        f"{scrapes} rounds, {pipe.samples:,} samples ({pipe.buffer.duplicates} repeated), "
        f"{len(pipe.correlator.incidents)} "
        f"incidents, {watching.quarantine.count} lines quarantined",
        highlight=False,
    )
    if watching.output.summary():
        console.print(watching.output.summary(), highlight=False)


@dataclass(frozen=True)
class _WatchConfig:
    """The options of ``noc watch``, checked (see :func:`watch` for each)."""

    targets: tuple[Target, ...]
    prometheus: str | None
    match: tuple[str, ...]
    backfill: float
    lag: float
    interval: float
    inventory: Path | None
    serve: bool
    checkpoint: Path | None
    checkpoint_every: int
    duration: float | None
    syslog: str | None
    syslog_tls: tuple[Path, Path] | None


def _targets(given: list[str] | None, prometheus: str | None) -> tuple[Target, ...]:
    """The ``--target`` options read; :class:`BadInputError` for one that is not
    ``INSTANCE=URL``, or for nothing to watch (no target and no Prometheus)."""
    from noc_assistant.errors import BadInputError
    from noc_assistant.ingest.scrape import parse_target

    try:
        targets = tuple(parse_target(t) for t in given or [])
    except ValueError as exc:
        raise BadInputError(str(exc)) from None
    if not targets and prometheus is None:
        raise BadInputError("nothing to watch: give --target INSTANCE=URL or --prometheus URL")
    return targets


@dataclass
class _Watching:
    """What a watch runs: the pipeline, its sources and where its incidents go."""

    pipe: Pipeline
    output: IncidentOutput
    quarantine: Quarantine
    alerts: QueuedAlerts
    scraper: Scraper | None
    source: PrometheusSource | None
    receiver: SyslogReceiver | None
    key: bytes

    def save(self, checkpoint: Path | None) -> None:
        """Write the pipeline's snapshot to ``checkpoint`` (None: nowhere)."""
        from noc_assistant.stream.checkpoint import snapshot, write_file

        if checkpoint is not None:
            write_file(checkpoint, snapshot(self.pipe, self.key, {"at": time.time()}))

    def close(self) -> None:
        """Stop reading: the scraper, the Prometheus source and the syslog receiver."""
        if self.scraper is not None:
            self.scraper.close()
        if self.source is not None:
            self.source.close()
        if self.receiver is not None:
            self.receiver.stop()


def _start(config: _WatchConfig, settings: Settings) -> _Watching:
    """Open the store, resume the pipeline from the checkpoint (or start one), set up the
    sources and, with ``serve``, the console."""
    from noc_assistant.api.alert_intake import QueuedAlerts
    from noc_assistant.api.events import Broadcaster
    from noc_assistant.cli._live import IncidentOutput, console_app, load_pack_and_topology
    from noc_assistant.cli.demo import _serve, _utc
    from noc_assistant.ingest import Quarantine
    from noc_assistant.ingest.scrape import Scraper
    from noc_assistant.integrations.prometheus import PrometheusSource
    from noc_assistant.store import open_store
    from noc_assistant.stream.checkpoint import read_file, restore, state_key
    from noc_assistant.stream.pipeline import Pipeline

    checkpoint, interval, prometheus = config.checkpoint, config.interval, config.prometheus
    key = state_key(settings) if checkpoint is not None else b""
    pack, topology = load_pack_and_topology(settings, config.inventory)
    store = open_store(settings.db_url)
    hub = Broadcaster()
    quarantine = Quarantine(path=settings.data_dir / "watch.quarantine.jsonl")
    pipe: Pipeline | None = None
    output = IncidentOutput(settings, store, lambda: pipe, hub)
    receiver = _syslog(output, pack, config.syslog, config.syslog_tls) if config.syslog else None
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
    targets = config.targets
    scraper = (
        Scraper(targets, timeout_s=min(10.0, 0.8 * interval), quarantine=quarantine)
        if targets
        else None
    )
    match = list(config.match) or ['{__name__=~".+"}']
    source = PrometheusSource(prometheus, match=match) if prometheus else None
    if config.serve:
        app = console_app(store, hub, settings, pack, pipe.current_topology, alert_sink=alerts)
        _serve(app, settings.http_host, settings.http_port)
        console.print(f"console http://{settings.http_host}:{settings.http_port}")
    what = [f"{len(targets)} target(s)"] if targets else []
    what += [f"Prometheus {prometheus}"] if prometheus else []
    console.print(f"watching {' and '.join(what)} every {interval:g} s", highlight=False)
    return _Watching(pipe, output, quarantine, alerts, scraper, source, receiver, key)


def _run(config: _WatchConfig, w: _Watching) -> int:
    """Read every interval until stopped (Ctrl-C, SIGTERM) or ``duration`` is over, then
    shut down: snapshot and close the sources. The number of rounds."""
    # Ctrl-C or a service manager's stop (SIGTERM): finish the round, snapshot and leave. A
    # flag, not an exception: raised at an arbitrary point, one was seen swallowed (the loop
    # went on) about once in ten stops
    stop = threading.Event()
    before = {
        sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGTERM, signal.SIGINT)
    }
    interval, lag, duration = config.interval, config.lag, config.duration
    started = time.time()
    tick = started - started % interval + interval
    scrapes = 0
    down: set[str] = set()
    read_to = started - lag - config.backfill
    prom_error: str | None = None
    try:
        while not stop.is_set() and (duration is None or time.time() - started < duration):
            if stop.wait(max(0.0, tick - time.time())):
                break
            if w.source is not None:
                read_to, prom_error = _poll(w.source, w.pipe, read_to, tick - lag, prom_error)
            if w.scraper is not None:
                down = _scrape(w.scraper, w.pipe, tick, down)
            scrapes += 1
            if scrapes % config.checkpoint_every == 0:
                w.save(config.checkpoint)
            # Alertmanager's, via the console
            w.alerts.drain(w.pipe.add_finding, w.pipe.clear_series)
            w.output.tick()
            tick += interval
            if tick < time.time():  # fell behind (a slow scrape): skip, do not burst
                tick = time.time() - time.time() % interval + interval
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
        w.save(config.checkpoint)
        w.close()
    return scrapes


def _poll(
    source: PrometheusSource, pipe: Pipeline, read_to: float, until: float, error: str | None
) -> tuple[float, str | None]:
    """Feed what Prometheus holds from ``read_to`` to ``until``; the next ``read_to`` and the
    last error (said once, not every round: the next tick tries again from ``read_to``)."""
    from noc_assistant.integrations.prometheus import PrometheusError

    try:
        pipe.feed_all(source.fetch(read_to, until))
        return until, None
    except PrometheusError as exc:
        if str(exc) != error:
            err_console.print(f"prometheus: {exc}", highlight=False)
        return read_to, str(exc)


def _scrape(scraper: Scraper, pipe: Pipeline, tick: float, down: set[str]) -> set[str]:
    """Scrape every target at ``tick`` and feed its points; the targets now down (a failure is
    said when a target goes down, not every round)."""
    result = scraper.scrape(tick)
    pipe.feed_all(result.points)
    for instance, why in result.failed.items():
        if instance not in down:
            err_console.print(f"scrape failed: {why}", highlight=False)
    return set(result.failed)


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
