"""The telemetry bus at scale: NATS JetStream (docs/ARCHITECTURE.md, "Data flow").

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
- **Worker** (:class:`BusWorker`, started with a frozen :class:`WorkerConfig`): a durable
  pull consumer feeds a :class:`Pipeline`; every ``checkpoint_every`` messages the whole
  pipeline is snapshotted (:mod:`noc_assistant.stream.checkpoint`)
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
- A server that cannot be reached is an :class:`~noc_assistant.errors.UnreachableError`
  naming its address and what to check; one that refuses an operation, or a worker set up
  wrong, is a :class:`BusError` (both exit 2).

Everything that speaks NATS is in this package: :mod:`.subjects` (names and slices, no
NATS), :mod:`.connection` (connecting, typed failures), :mod:`.admin` (streams, consumers,
partitions, removal), :mod:`.state` (snapshots in the object store and their manifests),
:mod:`.status`, :mod:`.publish`, :mod:`.config` (the frozen worker settings),
:mod:`.worker`, :mod:`.outbox` (a worker's findings to the correlator) and
:mod:`.correlator`.
"""

from __future__ import annotations

from .admin import remove
from .config import CorrelatorConfig, WorkerConfig, WorkerSettings
from .connection import BusError
from .correlator import CorrelatorWorker, LagWatch, correlator_pipeline
from .publish import PublishStats, publish_replay
from .status import ConsumerState, StreamState, probe, status
from .subjects import (
    FINDINGS_PREFIX,
    FINDINGS_STREAM,
    STATE_BUCKET,
    SUBJECT_PREFIX,
    entity_subject,
    in_part,
    in_slice,
    partition_config,
    subject_entity,
)
from .worker import BusWorker, WorkerStats, detector_pipeline

__all__ = [
    "FINDINGS_PREFIX",
    "FINDINGS_STREAM",
    "STATE_BUCKET",
    "SUBJECT_PREFIX",
    "BusError",
    "BusWorker",
    "ConsumerState",
    "CorrelatorConfig",
    "CorrelatorWorker",
    "LagWatch",
    "PublishStats",
    "StreamState",
    "WorkerConfig",
    "WorkerSettings",
    "WorkerStats",
    "correlator_pipeline",
    "detector_pipeline",
    "entity_subject",
    "in_part",
    "in_slice",
    "partition_config",
    "probe",
    "publish_replay",
    "remove",
    "status",
    "subject_entity",
]
