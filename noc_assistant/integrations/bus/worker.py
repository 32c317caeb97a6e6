"""A detector worker on a durable JetStream consumer (see the package docstring): the
consumer feeds a :class:`Pipeline`; every ``checkpoint_every`` messages the pipeline is
snapshotted (:mod:`.state`) and only then is the consumer acknowledged up to that sequence
(ack-all). A worker that starts restores its snapshot and recreates its consumer at the next
sequence, so a restarted worker's alerts are those of a worker that never stopped."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Unpack

from nats.errors import TimeoutError as NatsTimeout

from knowledge.pack import Pack
from knowledge.topology import Topology
from noc_assistant.ingest import Quarantine
from noc_assistant.ingest.replay import parse_lines
from noc_assistant.stream.fanin import TickRecorder
from noc_assistant.stream.pipeline import (
    REPLAY_LATENESS_INTERVALS,
    FindingSink,
    IncidentSink,
    Pipeline,
)

from .admin import ensure_stream, partition_filter, subscribe
from .config import WorkerConfig, WorkerSettings
from .connection import connected
from .outbox import Outbox
from .state import SnapshotStore

__all__ = ["BusWorker", "WorkerStats", "detector_pipeline"]


@dataclass
class WorkerStats:
    messages: int = 0
    lines: int = 0
    quarantined: int = 0
    checkpoints: int = 0
    restored_seq: int = 0
    """The stream sequence of the snapshot the worker resumed from (0: it started afresh)."""
    last_seq: int = 0
    checkpoint_s: list[float] = field(default_factory=list)


@dataclass
class _Run:
    """One run's state: the pipeline, how far it has read, its snapshots and its outbox."""

    pipe: Pipeline
    store: SnapshotStore
    out: Outbox | None
    stats: WorkerStats
    last_seq: int
    since: int = 0
    """Messages read since the last snapshot."""
    last_msg: Any = None


def detector_pipeline(
    pack: Pack,
    topology: Topology | None,
    quarantine: Quarantine,
    on_incident: IncidentSink | None,
    *,
    correlate: bool,
) -> Callable[[], Pipeline]:
    """A telemetry worker's ``make_pipeline``: a replay's allowance for late lines; a worker
    of a slice (``correlate`` False) neither ranks root causes nor stores incidents, which
    the correlator does for the whole network."""

    def make() -> Pipeline:
        return Pipeline(
            pack=pack,
            topology=topology,
            quarantine=quarantine,
            on_incident=on_incident if correlate else None,
            lateness_intervals=REPLAY_LATENESS_INTERVALS,
            rca=correlate,
        )

    return make


class BusWorker:
    """A detector worker: its settings (a frozen :class:`WorkerConfig`, or its fields as
    keywords), what it needs to make or restore a pipeline, and its run state
    (:attr:`pipeline`, :attr:`stopping`).

    ``make_pipeline`` builds a fresh pipeline when there is no snapshot; ``pack`` and the sinks
    are re-attached to a restored one. ``tick`` is called after each fetch and each idle wait
    (renews alert leases). ``stop_after``: leave after that many messages without a snapshot
    or an acknowledgement, as a crash would (tests).
    """

    def __init__(
        self,
        config: WorkerConfig | None = None,
        /,
        *,
        key: bytes,
        pack: Pack,
        make_pipeline: Callable[[], Pipeline],
        on_finding: FindingSink | None = None,
        on_incident: IncidentSink | None = None,
        quarantine: Quarantine | None = None,
        tick: Callable[[], object] | None = None,
        stop_after: int | None = None,
        **settings: Unpack[WorkerSettings],
    ) -> None:
        if config is not None and settings:
            raise TypeError(f"a worker's config or its settings, not both: {sorted(settings)}")
        self.config = config if config is not None else WorkerConfig(**settings)
        self.key = key
        self.pack = pack
        self.make_pipeline = make_pipeline
        self.on_finding = on_finding
        self.on_incident = on_incident
        self.quarantine = quarantine if quarantine is not None else Quarantine()
        self.tick = tick
        self.stop_after = stop_after
        self.pipeline: Pipeline | None = None
        """The pipeline of the run (made or restored when it starts; None before)."""
        self.stopping = False
        """Set (:meth:`stop`, e.g. from a SIGTERM handler) to leave after the current batch
        with a snapshot of everything read."""

    def stop(self) -> None:
        self.stopping = True

    def run(self) -> WorkerStats:
        """Consume until idle or stopped (or ``stop_after``); the statistics of the run."""
        return asyncio.run(self.arun())

    async def arun(self) -> WorkerStats:
        cfg = self.config
        async with connected(cfg.url, f"reading {cfg.stream} as {cfg.durable}") as nc:
            run, sub = await self._start(nc.jetstream())
            if await self._read(sub, run):
                await self._finish(run)
        run.stats.last_seq = run.last_seq
        run.stats.quarantined = self.quarantine.count
        return run.stats

    async def _start(self, js: Any) -> tuple[_Run, Any]:
        """The stream, the pipeline (restored or fresh), the outbox, then the consumer."""
        cfg = self.config
        await ensure_stream(js, cfg.stream, cfg.prefix)
        subject = await self._subject(js)
        store = await SnapshotStore.open(js, cfg.durable)
        restored = await store.load(self.key, self.pack, self.on_finding, self.on_incident)
        pipe = restored.pipeline if restored is not None else self.make_pipeline()
        last_seq = restored.seq if restored is not None else 0
        self.pipeline = pipe
        self._resumed(pipe)
        out = await self._outbox(js, pipe)
        sub = await subscribe(
            js,
            cfg.stream,
            cfg.durable,
            subject,
            after=last_seq,
            max_ack_pending=cfg.max_ack_pending,
        )
        return _Run(pipe, store, out, WorkerStats(restored_seq=last_seq), last_seq), sub

    async def _read(self, sub: Any, run: _Run) -> bool:
        """Fetch and feed until idle or stopped; False when ``stop_after`` cut it short."""
        idle_s = self.config.idle_s
        idle_from = time.monotonic()
        while not self.stopping:
            if self.tick is not None:
                self.tick()
            try:
                msgs = await sub.fetch(self.config.fetch_batch, timeout=0.5)
            except (TimeoutError, NatsTimeout):  # nats-py raises either, by where it waited
                msgs = []
            if not msgs:  # (a fetch may also come back empty: idle all the same)
                if idle_s is not None and time.monotonic() - idle_from >= idle_s:
                    break
                continue
            idle_from = time.monotonic()
            for msg in msgs:
                if not await self._take(msg, run):
                    return False
        return True

    async def _take(self, msg: Any, run: _Run) -> bool:
        """Feed one message (and snapshot when it is time); False when ``stop_after`` says
        to leave as a crash would: no snapshot, no acknowledgement."""
        seq = msg.metadata.sequence.stream
        if seq <= run.last_seq:
            return True  # delivered again: already in the state
        if self.config.takes(msg.subject):
            run.stats.lines += self._feed(run.pipe, msg.subject, seq, msg.data)
        if run.out is not None:
            await run.out.send(seq)
        run.last_seq, run.last_msg = seq, msg
        run.stats.messages += 1
        run.since += 1
        if self.stop_after is not None and run.stats.messages >= self.stop_after:
            return False
        if run.since >= self.config.checkpoint_every:
            await self._checkpoint(run)
            await msg.ack()
            run.since = 0
        return True

    async def _finish(self, run: _Run) -> None:
        """Idle or stopped: end the feed if asked, then a snapshot of everything read."""
        finish = self.config.finish_on_idle
        if finish:
            run.pipe.finish()
            if run.out is not None:
                await run.out.send(run.last_seq, final=True)
        if run.out is not None:
            await run.out.confirm()
        if run.since or finish:
            await self._checkpoint(run)
            if run.last_msg is not None and run.since:  # (at a checkpoint boundary: acked)
                await run.last_msg.ack()

    def _resumed(self, pipe: Pipeline) -> None:
        """The state is made or restored (a subclass adjusts it to this run's settings)."""

    async def _subject(self, js: Any) -> str:
        """The consumer's filter: the partition's subjects (:func:`.partition_filter`), the
        subject filter, or every subject of the prefix."""
        cfg = self.config
        if cfg.partition is None:
            return cfg.filter_subject or f"{cfg.prefix}.>"
        return await partition_filter(js, cfg.stream, cfg.prefix, cfg.partition)

    async def _outbox(self, js: Any, pipe: Pipeline) -> Outbox | None:
        cfg = self.config
        if cfg.findings_stream is None:
            return None
        await ensure_stream(js, cfg.findings_stream, cfg.findings_prefix)
        recorder = TickRecorder()
        pipe.outbox = recorder  # a restored pipeline's own was empty when it was snapshotted
        return Outbox(js, cfg.findings_stream, cfg.findings_prefix, cfg.durable, recorder)

    def _feed(self, pipe: Pipeline, subject: str, seq: int, data: bytes) -> int:
        source = f"nats:{self.config.stream}#{seq} ({subject})"
        lines = data.splitlines()
        pipe.feed_all(point for _, _, point in parse_lines(lines, source, self.quarantine))
        return sum(1 for raw in lines if raw.strip())

    async def _checkpoint(self, run: _Run) -> None:
        """Snapshot the state as covering ``run.last_seq``, once the server holds every
        findings batch sent; incidents resolved before ``retain_s`` are dropped first."""
        if run.out is not None:
            await run.out.confirm()
        started = time.perf_counter()
        retain_s = self.config.retain_s
        if retain_s is not None and run.pipe.last_ts is not None:
            run.pipe.forget(run.pipe.last_ts - retain_s)
        await run.store.save(run.pipe, self.key, self.config.stream, run.last_seq)
        run.stats.checkpoints += 1
        run.stats.checkpoint_s.append(time.perf_counter() - started)
