"""The bus's names: stream subjects of entities, the slices of the network a worker takes, and
the nats-server mapping that splits the telemetry into partitions. Pure functions, no NATS."""

from __future__ import annotations

import fnmatch
import hashlib
import re

__all__ = [
    "FINDINGS_PREFIX",
    "FINDINGS_STREAM",
    "STATE_BUCKET",
    "SUBJECT_PREFIX",
    "entity_subject",
    "in_part",
    "in_slice",
    "partition_config",
    "subject_entity",
]

SUBJECT_PREFIX = "noc.telemetry"
FINDINGS_STREAM = "NOC_FINDINGS"
FINDINGS_PREFIX = "noc.findings"
STATE_BUCKET = "noc-state"
_TOKEN = re.compile(r"[^A-Za-z0-9_-]")


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


def in_slice(subject: str, part: tuple[int, int] | None, entities: tuple[str, ...]) -> bool:
    """Whether the entity of a telemetry subject is in part k of n (None: any) and matches one
    of the shell patterns ``entities`` (none: any).

    >>> in_slice("noc.telemetry.upf-2", None, ("upf-*",)), in_slice("x.amf-1", None, ("upf-*",))
    (True, False)
    """
    if part is not None and not in_part(subject, part):
        return False
    name = subject_entity(subject)
    return not entities or any(fnmatch.fnmatchcase(name, p) for p in entities)


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
