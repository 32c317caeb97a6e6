"""The telemetry bus at scale: NATS JetStream (DESIGN.md, "Real components").

The embedded default feeds the pipeline in process; a deployment that outgrows one process
puts telemetry on JetStream and runs detector workers beside it:

- **Stream** ``settings.nats_stream`` holds subjects ``<prefix>.<entity>`` (prefix
  ``settings.nats_subject_prefix``, default ``noc.telemetry``): a message is a batch of
  FORMATS §1 JSONL lines of one entity (one scrape, or up to ``batch`` lines). The entity in the
  subject lets a worker take a slice of the network: a subject filter (``noc.telemetry.upf-1``
  for one entity, ``noc.telemetry.>`` for all), or ``part`` = (k, n), the entities whose
  name hashes to k of n (:func:`in_part`), or ``entities``, shell patterns of entity names
  (``upf-*``, ``smf-*``: a region or an NF type, by the operator's naming); for the last two
  the worker reads every subject and feeds only its own, since a consumer of nats-server 2.9
  takes one filter. Or the server splits the network: with the subject mapping of
  :func:`partition_config` in its configuration, nats-server files an entity's telemetry under
  ``<prefix>.<k>.<entity>``, k a hash of the entity's name, and a worker given ``partition`` k
  is sent only those messages (the entity is always a subject's last token). A worker
  correlates within its slice, unless it sends its findings to the network-wide correlator
  (below).
  :func:`publish_replay` publishes a replay file this way, each message with a
  ``Nats-Msg-Id`` built from the file and its line span, so that a re-run within the stream's
  duplicate window (two minutes) adds nothing.
- **Worker** (:class:`BusWorker`): a durable pull consumer feeds a :class:`Pipeline`; every
  ``checkpoint_every`` messages the whole pipeline is snapshotted
  (:mod:`noc_assistant.stream.checkpoint`)
  into the object store ``noc-state`` under ``<durable>-<stream seq>``, a manifest
  ``{seq, object, sha256}`` is put in the key-value bucket ``noc-state`` under the durable's
  name, and only then is the consumer acknowledged up to that sequence (ack-all). A worker that
  starts finds the manifest, restores the snapshot and recreates its consumer at the next
  sequence: what a crash interrupted is read again from the stream, and what came before it is
  not read twice, so the restarted worker's alerts are those of a worker that never stopped
  (tested with a real nats-server). The sinks see the events between the last snapshot and
  a crash twice (at-least-once); the store's writes are upserts by id, so it holds them once.
- A line that is not a sample is quarantined (the message's subject and stream sequence, the
  line's number in the message, the reason and the raw text), never dropped.
- **Workers of slices, one correlator** (:mod:`noc_assistant.stream.fanin`). A worker given
  ``findings_stream`` correlates for nobody: after each telemetry message that ended
  evaluation ticks it publishes them (findings and clears) to ``<findings prefix>.<durable>``
  with the ``Nats-Msg-Id`` ``<durable>:<sequence>``, and waits for the server's
  acknowledgements before each snapshot, so a snapshot never covers a tick the stream lacks.
  :class:`CorrelatorWorker` is the same durable, snapshotted consumer on that stream: it merges
  the workers' ticks (the slowest worker's time is its clock) and correlates, ranks and stores
  for the whole network, as one worker over all the telemetry would have (tested). A worker
  restarted from its snapshot sends again what followed it; the correlator knows each
  worker's last sequence and takes nothing twice.

One module for the outside system: everything that speaks NATS is here.
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import hashlib
import json
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nats
import orjson
from nats.errors import Error as NatsError
from nats.errors import NoServersError
from nats.errors import TimeoutError as NatsTimeout
from nats.js import api
from nats.js.errors import (
    BucketNotFoundError,
    KeyNotFoundError,
    NoKeysError,
    NotFoundError,
    ObjectNotFoundError,
)

from knowledge.pack import Pack
from noc_assistant.errors import BadInputError, ConfigError
from noc_assistant.ingest import Quarantine
from noc_assistant.ingest.replay import jsonl_lines, parse_lines
from noc_assistant.stream.checkpoint import CheckpointError, restore, snapshot
from noc_assistant.stream.fanin import Batch, TickRecorder, decode_batch, encode_batch
from noc_assistant.stream.pipeline import FindingSink, IncidentSink, Pipeline

__all__ = [
    "FINDINGS_PREFIX",
    "FINDINGS_STREAM",
    "STATE_BUCKET",
    "SUBJECT_PREFIX",
    "BusError",
    "BusWorker",
    "ConsumerState",
    "CorrelatorWorker",
    "PublishStats",
    "StreamState",
    "WorkerStats",
    "entity_subject",
    "in_part",
    "partition_config",
    "probe",
    "publish_replay",
    "remove",
    "status",
]

SUBJECT_PREFIX = "noc.telemetry"
FINDINGS_STREAM = "NOC_FINDINGS"
FINDINGS_PREFIX = "noc.findings"
STATE_BUCKET = "noc-state"
_TOKEN = re.compile(r"[^A-Za-z0-9_-]")


class BusError(ConfigError):
    """The NATS server is unreachable or refused an operation (a setting to fix: exit 2)."""


def entity_subject(entity: str, prefix: str = SUBJECT_PREFIX) -> str:
    """The subject of an entity's telemetry (characters NATS reserves become ``_``).

    >>> entity_subject("upf-1")
    'noc.telemetry.upf-1'
    >>> entity_subject("10.0.0.7:9090", "lab.telemetry")
    'lab.telemetry.10_0_0_7_9090'
    >>> entity_subject("")
    'noc.telemetry._'
    """
    return f"{prefix}.{_TOKEN.sub('_', entity) or '_'}"


def subject_entity(subject: str) -> str:
    """The entity of a telemetry subject: its last token (:func:`entity_subject` makes the
    name one token), with or without a partition the server's mapping put before it.

    >>> subject_entity("noc.telemetry.upf-1"), subject_entity("noc.telemetry.3.upf-1")
    ('upf-1', 'upf-1')
    """
    return subject.rpartition(".")[2]


def in_part(subject: str, part: tuple[int, int]) -> bool:
    """Whether the entity of a telemetry subject is in part k of n (by the SHA-1 of its name:
    the same on every machine and release, and spread evenly over similar names).

    >>> [in_part(entity_subject(e), (0, 2)) for e in ("amf-1", "smf-1")]
    [False, True]
    >>> in_part("noc.telemetry.upf-1", (0, 1))
    True
    """
    k, n = part
    digest = hashlib.sha1(subject_entity(subject).encode()).digest()
    return int.from_bytes(digest[:8], "big") % n == k


def partition_config(n: int, prefix: str = SUBJECT_PREFIX) -> str:
    """The nats-server configuration that splits the telemetry into ``n`` partitions: each
    entity's subject ``<prefix>.<entity>`` is filed as ``<prefix>.<k>.<entity>``, k from the
    server's hash of the name, for workers given ``partition`` k. The publisher is unchanged.

    >>> print(partition_config(4))
    mappings = {
      "noc.telemetry.*": "noc.telemetry.{{partition(4,1)}}.{{wildcard(1)}}"
    }
    >>> partition_config(0)
    Traceback (most recent call last):
    ...
    ValueError: partitions: 0 is not a whole number of at least 1
    """
    if n < 1:
        raise ValueError(f"partitions: {n} is not a whole number of at least 1")
    target = f"{prefix}.{{{{partition({n},1)}}}}.{{{{wildcard(1)}}}}"
    return f'mappings = {{\n  "{prefix}.*": "{target}"\n}}'


async def _connect(url: str) -> Any:
    try:
        return await nats.connect(url, connect_timeout=5, max_reconnect_attempts=3)
    except (NoServersError, OSError, NatsError) as exc:
        raise BusError(f"{url}: cannot connect to NATS: {exc}") from None


@dataclass(frozen=True)
class ConsumerState:
    """A worker's (or the correlator's) durable consumer: how far it has read, what is left
    for it, and the stream sequence its last snapshot covers (what a restart re-reads
    from)."""

    durable: str
    delivered: int
    pending: int
    """Messages of its subjects not delivered yet: how far behind the stream it is."""
    unacknowledged: int
    snapshot_seq: int | None


@dataclass(frozen=True)
class StreamState:
    name: str
    exists: bool
    messages: int = 0
    last_seq: int = 0
    consumers: tuple[ConsumerState, ...] = ()


async def _status(url: str, streams: tuple[str, ...]) -> list[StreamState]:
    nc = await _connect(url)
    try:
        js = nc.jetstream()
        manifests: dict[str, int] = {}
        try:
            kv = await js.key_value(STATE_BUCKET)
            for name in await kv.keys():
                with contextlib.suppress(KeyNotFoundError, ValueError, KeyError, TypeError):
                    manifests[name] = int(json.loads((await kv.get(name)).value)["seq"])
        except (BucketNotFoundError, NotFoundError, NoKeysError):  # none, or empty
            pass
        out = []
        for stream in streams:
            try:
                info = await js.stream_info(stream)
            except NotFoundError:
                out.append(StreamState(stream, exists=False))
                continue
            consumers = tuple(
                ConsumerState(
                    durable=c.name,
                    delivered=c.delivered.stream_seq if c.delivered else 0,
                    pending=c.num_pending or 0,
                    unacknowledged=c.num_ack_pending or 0,
                    snapshot_seq=manifests.get(c.name),
                )
                for c in sorted(await js.consumers_info(stream), key=lambda c: c.name)
            )
            out.append(
                StreamState(stream, True, info.state.messages, info.state.last_seq, consumers)
            )
        return out
    except NatsError as exc:
        raise BusError(f"{url}: {exc}") from None
    finally:
        await nc.close()


def status(url: str, *streams: str) -> list[StreamState]:
    """What each stream holds and how far each consumer of it has got (read, left, covered by
    its snapshot): whether the workers keep up. :class:`BusError` naming the server when it
    cannot be asked."""
    return asyncio.run(_status(url, streams))


def probe(url: str, *streams: str) -> str:
    """Whether NATS at ``url`` answers with JetStream, and what each of ``streams`` holds
    (:func:`status`, in a line); :class:`BusError` naming the server otherwise."""
    said = [
        f"stream {s.name}: {s.messages:,} messages"
        if s.exists
        else f"stream {s.name} not made yet (the first publish makes it)"
        for s in status(url, *streams)
    ]
    return "connected; " + "; ".join(said)


async def _ensure_stream(js: Any, stream: str, prefix: str) -> None:
    try:
        await js.stream_info(stream)
    except NotFoundError:
        await js.add_stream(
            api.StreamConfig(
                name=stream,
                subjects=[f"{prefix}.>"],
                storage=api.StorageType.FILE,
                duplicate_window=120.0,
                # a week of telemetry: far more than a worker's snapshots lag behind, and a
                # bound on the disk (an operator's own stream keeps its own limits)
                max_age=7 * 86400.0,
            )
        )


@dataclass
class PublishStats:
    lines: int = 0
    messages: int = 0
    duplicates: int = 0
    quarantined: int = 0


def _batches(
    path: Path, batch: int, quarantine: Quarantine
) -> Iterator[tuple[str, int, int, bytes]]:
    """(entity, first line, last line, JSONL bytes): a file's lines grouped by entity, a group
    flushed when the time stamp moves on (one scrape) or it holds ``batch`` lines; every group
    of a time stamp is out before any line of a later one."""
    groups: dict[str, tuple[int, int, list[bytes]]] = {}
    current: float | None = None

    def flush() -> Iterator[tuple[str, int, int, bytes]]:
        for entity, (first, last, lines) in groups.items():
            yield entity, first, last, b"".join(lines)
        groups.clear()

    for lineno, raw, point in jsonl_lines(path, quarantine):
        if current is not None and point.ts != current:
            yield from flush()
        current = point.ts
        entity = point.instance
        first, _, lines = groups.get(entity, (lineno, lineno, []))
        lines.append(raw if raw.endswith(b"\n") else raw + b"\n")
        groups[entity] = (first, lineno, lines)
        if len(lines) >= batch:
            yield entity, first, lineno, b"".join(lines)
            del groups[entity]
    yield from flush()


async def _duplicates(pending: list[asyncio.Future[Any]]) -> int:
    """Wait for the server's acknowledgements; how many it found to be duplicates."""
    acks = await asyncio.gather(*pending)
    return sum(bool(ack.duplicate) for ack in acks)


async def _publish(
    url: str, stream: str, prefix: str, path: Path, batch: int, quarantine: Quarantine
) -> PublishStats:
    nc = await _connect(url)
    stats = PublishStats()
    try:
        js = nc.jetstream()
        await _ensure_stream(js, stream, prefix)
        pending: list[asyncio.Future[Any]] = []
        for entity, first, last, body in _batches(path, batch, quarantine):
            msg_id = f"{path.name}:{first}-{last}"
            pending.append(
                await js.publish_async(
                    entity_subject(entity, prefix),
                    body,
                    stream=stream,
                    headers={"Nats-Msg-Id": msg_id},
                )
            )
            stats.lines += body.count(b"\n")
            stats.messages += 1
            if len(pending) >= 256:
                stats.duplicates += await _duplicates(pending)
                pending = []
        stats.duplicates += await _duplicates(pending)
    except NatsError as exc:
        raise BusError(f"{url}: publishing to {stream}: {exc}") from None
    finally:
        await nc.drain()
    stats.quarantined = quarantine.count
    return stats


def publish_replay(
    path: Path,
    *,
    url: str,
    stream: str,
    prefix: str = SUBJECT_PREFIX,
    batch: int = 500,
    quarantine: Quarantine | None = None,
) -> PublishStats:
    """Publish a JSONL replay file to the stream (creating it if absent); bad lines go to
    ``quarantine`` with the file's line number and are not published."""
    q = quarantine if quarantine is not None else Quarantine()
    return asyncio.run(_publish(url, stream, prefix, path, batch, q))


async def _remove(url: str, stream: str, durable: str) -> None:
    nc = await _connect(url)
    try:
        js = nc.jetstream()
        with contextlib.suppress(NotFoundError):
            await js.delete_stream(stream)
        try:
            kv = await js.key_value(STATE_BUCKET)
            entry = await kv.get(durable)
        except (BucketNotFoundError, KeyNotFoundError):
            return
        await kv.purge(durable)
        with contextlib.suppress(ObjectNotFoundError, KeyError, ValueError):
            await (await js.object_store(STATE_BUCKET)).delete(json.loads(entry.value)["object"])
    except NatsError as exc:
        raise BusError(f"{url}: removing {stream}: {exc}") from None
    finally:
        await nc.close()


def remove(url: str, stream: str, durable: str) -> None:
    """Delete a stream and a worker's snapshot and manifest (tests, benchmarks, a reset)."""
    asyncio.run(_remove(url, stream, durable))


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
class BusWorker:
    """A detector worker on a durable JetStream consumer (see the module docstring).

    ``make_pipeline`` builds a fresh pipeline when there is no snapshot; ``pack`` and the sinks
    are re-attached to a restored one. ``idle_s``: stop after that long without a message
    (None: run until cancelled); ``finish_on_idle``: then treat the feed as ended (release the
    reorder buffer, resolve quiet incidents), as a replay does. ``stop_after``: leave after that
    many messages without a snapshot or an acknowledgement, as a crash would (tests).
    """

    url: str
    stream: str
    durable: str
    key: bytes
    pack: Pack
    make_pipeline: Callable[[], Pipeline]
    on_finding: FindingSink | None = None
    on_incident: IncidentSink | None = None
    quarantine: Quarantine = field(default_factory=Quarantine)
    prefix: str = SUBJECT_PREFIX
    filter_subject: str | None = None
    """Subjects this worker takes (default ``<prefix>.>``: the whole network)."""
    partition: int | None = None
    """The server's partition k (:func:`partition_config`): the subjects ``<prefix>.<k>.>``
    instead of ``filter_subject``. The worker refuses a stream that holds telemetry on
    subjects no partition covers (the mapping is missing on the server)."""
    part: tuple[int, int] | None = None
    """Of those, only the entities of part k of n (:func:`in_part`)."""
    entities: tuple[str, ...] = ()
    """Of those, only the entities whose name (as in the subject: :func:`entity_subject`)
    matches one of these shell patterns (none: every entity)."""
    checkpoint_every: int = 200
    fetch_batch: int = 64
    idle_s: float | None = None
    finish_on_idle: bool = False
    stop_after: int | None = None
    retain_s: float | None = 7 * 86400.0
    """Before each snapshot, incidents resolved longer ago than this (data time) are dropped
    from memory with their findings (:meth:`Pipeline.forget`): the sinks stored them, and a
    worker that runs for months keeps a bounded state. None keeps everything."""
    tick: Callable[[], None] | None = None
    """Called after each batch of messages and each idle wait (renews alert leases)."""
    findings_stream: str | None = None
    """Publish each tick's findings there for :class:`CorrelatorWorker` (None: correlate here)."""
    findings_prefix: str = FINDINGS_PREFIX
    pipeline: Pipeline | None = None
    stopping: bool = False
    """Set (:meth:`stop`, e.g. from a SIGTERM handler) to leave after the current batch with
    a snapshot of everything read."""

    def __post_init__(self) -> None:
        if self.partition is not None and self.filter_subject is not None:
            raise BusError(
                f"worker {self.durable}: a partition and a subject filter exclude each other "
                "(a partition is a subject filter)"
            )

    def stop(self) -> None:
        self.stopping = True

    def run(self) -> WorkerStats:
        """Consume until idle (or ``stop_after``); the statistics of the run."""
        return asyncio.run(self.arun())

    async def arun(self) -> WorkerStats:
        if not re.fullmatch(r"[A-Za-z0-9_-]+", self.durable):
            raise ConfigError(f"durable name {self.durable!r}: use letters, digits, _ and -")
        if self.part is not None and not 0 <= self.part[0] < self.part[1]:
            raise ConfigError(f"part {self.part[0]} of {self.part[1]}: k must be in 0…n-1")
        nc = await _connect(self.url)
        try:
            return await self._consume(nc)
        except NatsError as exc:
            raise BusError(f"{self.url}: {exc}") from None
        finally:
            await nc.close()

    async def _consume(self, nc: Any) -> WorkerStats:
        js = nc.jetstream()
        await _ensure_stream(js, self.stream, self.prefix)
        subject = await self._filter(js)
        kv = await js.create_key_value(bucket=STATE_BUCKET, history=1)
        obs = await js.create_object_store(STATE_BUCKET)
        stats = WorkerStats()
        pipe, last_seq, previous = await self._resume(kv, obs)
        self.pipeline = pipe
        self._resumed(pipe)
        out = await self._outbox(js, pipe)
        stats.restored_seq = last_seq
        # the snapshot is the truth: the consumer restarts at the message after it
        with contextlib.suppress(NotFoundError):
            await js.delete_consumer(self.stream, self.durable)
        start = (
            {"deliver_policy": api.DeliverPolicy.BY_START_SEQUENCE, "opt_start_seq": last_seq + 1}
            if last_seq
            else {"deliver_policy": api.DeliverPolicy.ALL}
        )
        config = api.ConsumerConfig(
            durable_name=self.durable,
            ack_policy=api.AckPolicy.ALL,
            ack_wait=600.0,
            max_ack_pending=max(1000, 4 * self.checkpoint_every),
            filter_subject=subject,
            **start,
        )
        sub = await js.pull_subscribe(
            subject, durable=self.durable, stream=self.stream, config=config
        )
        since = 0
        idle_from = time.monotonic()
        last_msg: Any = None
        while not self.stopping:
            if self.tick is not None:
                self.tick()
            try:
                msgs = await sub.fetch(self.fetch_batch, timeout=0.5)
            except (TimeoutError, NatsTimeout):  # nats-py raises either, by where it waited
                msgs = []
            if not msgs:  # (a fetch may also come back empty: idle all the same)
                if self.idle_s is not None and time.monotonic() - idle_from >= self.idle_s:
                    break
                continue
            idle_from = time.monotonic()
            for msg in msgs:
                seq = msg.metadata.sequence.stream
                if seq <= last_seq:
                    continue  # delivered again: already in the state
                if self._takes(msg.subject):
                    stats.lines += self._feed(pipe, msg.subject, seq, msg.data)
                if out is not None:
                    await out.send(seq)
                last_seq = seq
                last_msg = msg
                stats.messages += 1
                since += 1
                if self.stop_after is not None and stats.messages >= self.stop_after:
                    stats.last_seq = last_seq
                    stats.quarantined = self.quarantine.count
                    return stats  # as a crash would: no snapshot, no acknowledgement
                if since >= self.checkpoint_every:
                    if out is not None:
                        await out.confirm()
                    previous = await self._checkpoint(kv, obs, pipe, last_seq, previous, stats)
                    await last_msg.ack()
                    since = 0
        if self.finish_on_idle:
            pipe.finish()
            if out is not None:
                await out.send(last_seq, final=True)
        if out is not None:
            await out.confirm()
        if since or self.finish_on_idle:
            previous = await self._checkpoint(kv, obs, pipe, last_seq, previous, stats)
            if last_msg is not None and since:  # (at a checkpoint boundary: acked already)
                await last_msg.ack()
        stats.last_seq = last_seq
        stats.quarantined = self.quarantine.count
        return stats

    def _resumed(self, pipe: Pipeline) -> None:
        """The state is made or restored (a subclass adjusts it to this run's settings)."""

    def _takes(self, subject: str) -> bool:
        """Whether the message of ``subject`` is of this worker's slice."""
        if self.part is not None and not in_part(subject, self.part):
            return False
        name = subject_entity(subject)
        return not self.entities or any(fnmatch.fnmatchcase(name, p) for p in self.entities)

    async def _filter(self, js: Any) -> str:
        """The consumer's filter: the partition's subjects, once the stream is known to hold
        no telemetry outside every partition (which no partition's worker would read)."""
        if self.partition is None:
            return self.filter_subject or f"{self.prefix}.>"
        info = await js.stream_info(self.stream, subjects_filter=f"{self.prefix}.*")
        unmapped = sorted((info.state.subjects or {}).items())
        if unmapped:
            held = sum(count for _, count in unmapped)
            raise BusError(
                f"stream {self.stream} holds {held:,} messages on subjects outside every "
                f"partition ({unmapped[0][0]}, …): nats-server maps no partitions of "
                f"{self.prefix} (put the mapping `noc bus partitions N` prints in its "
                "configuration and publish again), and no --partition worker would read them"
            )
        return f"{self.prefix}.{self.partition}.>"

    async def _outbox(self, js: Any, pipe: Pipeline) -> _Outbox | None:
        if self.findings_stream is None:
            return None
        await _ensure_stream(js, self.findings_stream, self.findings_prefix)
        recorder = TickRecorder()
        pipe.outbox = recorder  # a restored pipeline's own was empty when it was snapshotted
        return _Outbox(js, self.findings_stream, self.findings_prefix, self.durable, recorder)

    def _feed(self, pipe: Pipeline, subject: str, seq: int, data: bytes) -> int:
        source = f"nats:{self.stream}#{seq} ({subject})"
        lines = data.splitlines()
        for _, _, point in parse_lines(lines, source, self.quarantine):
            pipe.feed(point)
        return sum(1 for raw in lines if raw.strip())

    async def _resume(self, kv: Any, obs: Any) -> tuple[Pipeline, int, str | None]:
        try:
            entry = await kv.get(self.durable)
        except KeyNotFoundError:
            return self.make_pipeline(), 0, None
        source = f"nats kv {STATE_BUCKET}/{self.durable}"
        try:
            manifest = json.loads(entry.value)
            name, seq, digest = manifest["object"], int(manifest["seq"]), manifest["sha256"]
        except (ValueError, KeyError, TypeError) as exc:
            raise CheckpointError(f"manifest is not usable: {exc}", source=source) from None
        try:
            blob = (await obs.get(name)).data
        except ObjectNotFoundError:
            raise CheckpointError(f"snapshot object {name!r} is missing", source=source) from None
        if hashlib.sha256(blob).hexdigest() != digest:
            raise CheckpointError(f"snapshot object {name!r} does not match", source=source)
        pipe, _meta = restore(
            blob,
            self.key,
            pack=self.pack,
            on_finding=self.on_finding,
            on_incident=self.on_incident,
            source=f"nats object {STATE_BUCKET}/{name}",
        )
        return pipe, seq, name

    async def _checkpoint(
        self,
        kv: Any,
        obs: Any,
        pipe: Pipeline,
        seq: int,
        previous: str | None,
        stats: WorkerStats,
    ) -> str:
        started = time.perf_counter()
        if self.retain_s is not None and pipe.last_ts is not None:
            pipe.forget(pipe.last_ts - self.retain_s)
        blob = snapshot(pipe, self.key, {"stream": self.stream, "seq": seq})
        name = f"{self.durable}-{seq}"
        await obs.put(name, blob)
        manifest = {"object": name, "seq": seq, "sha256": hashlib.sha256(blob).hexdigest()}
        await kv.put(self.durable, orjson.dumps(manifest))
        if previous is not None and previous != name:
            with contextlib.suppress(ObjectNotFoundError):
                await obs.delete(previous)
        stats.checkpoints += 1
        stats.checkpoint_s.append(time.perf_counter() - started)
        return name


class _Outbox:
    """A worker's ticks on their way to the findings stream (see the module docstring)."""

    def __init__(
        self, js: Any, stream: str, prefix: str, worker: str, recorder: TickRecorder
    ) -> None:
        self._js = js
        self._stream = stream
        self._subject = f"{prefix}.{worker}"
        self._worker = worker
        self._recorder = recorder
        self._pending: list[asyncio.Future[Any]] = []

    async def send(self, seq: int, *, final: bool = False) -> None:
        ticks = self._recorder.take()
        if not ticks and not final:
            return
        batch = Batch(self._worker, seq, int(final), ticks, final=final)
        msg_id = f"{self._worker}:{seq}" + (":final" if final else "")
        self._pending.append(
            await self._js.publish_async(
                self._subject,
                encode_batch(batch),
                stream=self._stream,
                headers={"Nats-Msg-Id": msg_id},
            )
        )
        if len(self._pending) >= 256:
            await self.confirm()

    async def confirm(self) -> None:
        """Wait until the server holds every batch sent (before a snapshot may cover them)."""
        pending, self._pending = self._pending, []
        await asyncio.gather(*pending)


@dataclass
class CorrelatorWorker(BusWorker):
    """The network-wide correlator over the workers' findings stream (module docstring):
    ``make_pipeline`` builds a pipeline with a :class:`~noc_assistant.stream.fanin.FanIn`; a batch
    that is not one is quarantined with its stream sequence. ``expect`` and ``retire`` apply
    to a restored state too (:meth:`FanIn.set_workers`): the workers of this run are the
    command line's, not the snapshot's."""

    expect: frozenset[str] = frozenset()
    retire: frozenset[str] = frozenset()

    def _resumed(self, pipe: Pipeline) -> None:
        if pipe.fan_in is None:
            raise ConfigError("the correlator's pipeline reads telemetry, not findings")
        pipe.fan_in.set_workers(self.expect, self.retire)
        pipe.release()  # what a retired worker held back

    def _feed(self, pipe: Pipeline, subject: str, seq: int, data: bytes) -> int:
        source = f"nats:{self.stream}#{seq} ({subject})"
        try:
            batch = decode_batch(data, source)
        except BadInputError as exc:
            self.quarantine.add(source, 1, str(exc), data.decode("utf-8", "replace"))
            return 0
        return pipe.take(batch)
