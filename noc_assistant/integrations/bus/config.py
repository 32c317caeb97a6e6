"""What a worker is started with: a frozen :class:`WorkerConfig` (the correlator's,
:class:`CorrelatorConfig`, adds the workers it waits for), checked when it is made. The
worker's run state (its pipeline, whether it was asked to stop) is the worker's own
(:mod:`.worker`)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TypedDict

from noc_assistant.errors import ConfigError

from .connection import BusError
from .subjects import FINDINGS_PREFIX, SUBJECT_PREFIX, in_slice

__all__ = ["CorrelatorConfig", "WorkerConfig", "WorkerSettings"]

_DURABLE = re.compile(r"[A-Za-z0-9_-]+")


@dataclass(frozen=True, kw_only=True)
class WorkerConfig:
    """The settings of a detector worker on a durable JetStream consumer (see the package
    docstring)."""

    url: str
    stream: str
    durable: str
    """The consumer's name, and the name its snapshots are kept under."""
    prefix: str = SUBJECT_PREFIX
    filter_subject: str | None = None
    """Subjects this worker takes (default ``<prefix>.>``: the whole network)."""
    partition: int | None = None
    """The server's partition k (:func:`.partition_config`): the subjects ``<prefix>.<k>.>``
    instead of ``filter_subject``. The worker refuses a stream that holds telemetry on
    subjects no partition covers (the mapping is missing on the server)."""
    part: tuple[int, int] | None = None
    """Of those, only the entities of part k of n (:func:`.in_part`)."""
    entities: tuple[str, ...] = ()
    """Of those, only the entities whose name (as in the subject: :func:`.entity_subject`)
    matches one of these shell patterns (none: every entity)."""
    checkpoint_every: int = 200
    """Messages between snapshots."""
    fetch_batch: int = 64
    idle_s: float | None = None
    """Stop after this long without a message (None: run until stopped)."""
    finish_on_idle: bool = False
    """On stopping idle, treat the feed as ended (release the reorder buffer, resolve quiet
    incidents), as a replay does."""
    retain_s: float | None = 7 * 86400.0
    """Before each snapshot, incidents resolved longer ago than this (data time) are dropped
    from memory with their findings (:meth:`Pipeline.forget`): the sinks stored them, and a
    worker that runs for months keeps a bounded state. None keeps everything."""
    findings_stream: str | None = None
    """Publish each tick's findings there for the correlator (None: correlate here)."""
    findings_prefix: str = FINDINGS_PREFIX

    def __post_init__(self) -> None:
        if self.partition is not None and self.filter_subject is not None:
            raise BusError(
                f"worker {self.durable}: a partition and a subject filter exclude each other "
                "(a partition is a subject filter)"
            )
        if not _DURABLE.fullmatch(self.durable):
            raise ConfigError(f"durable name {self.durable!r}: use letters, digits, _ and -")
        if self.part is not None and not 0 <= self.part[0] < self.part[1]:
            raise ConfigError(f"part {self.part[0]} of {self.part[1]}: k must be in 0…n-1")
        if self.checkpoint_every < 1 or self.fetch_batch < 1:
            raise ConfigError("checkpoint_every and fetch_batch: at least 1")

    def takes(self, subject: str) -> bool:
        """Whether the message of ``subject`` is of this worker's slice (``part`` and
        ``entities``; the subject filter is the server's)."""
        return in_slice(subject, self.part, self.entities)

    @property
    def max_ack_pending(self) -> int:
        """Messages the consumer may hold unacknowledged: a snapshot's worth and more."""
        return max(1000, 4 * self.checkpoint_every)


@dataclass(frozen=True, kw_only=True)
class CorrelatorConfig(WorkerConfig):
    """The network-wide correlator's settings: a worker's, on the findings stream, and the
    workers of this run (they apply to a restored state too: :meth:`FanIn.set_workers`)."""

    expect: frozenset[str] = frozenset()
    """Workers to wait for before the correlator's clock moves."""
    retire: frozenset[str] = frozenset()
    """Workers gone for good: no longer waited for."""


class WorkerSettings(TypedDict, total=False):
    """The fields of :class:`WorkerConfig`, as keyword arguments of a worker
    (``url``, ``stream`` and ``durable`` are required there)."""

    url: str
    stream: str
    durable: str
    prefix: str
    filter_subject: str | None
    partition: int | None
    part: tuple[int, int] | None
    entities: tuple[str, ...]
    checkpoint_every: int
    fetch_batch: int
    idle_s: float | None
    finish_on_idle: bool
    retain_s: float | None
    findings_stream: str | None
    findings_prefix: str
