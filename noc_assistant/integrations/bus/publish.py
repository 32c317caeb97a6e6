"""Telemetry onto the bus: a JSONL replay file published as one message per entity and scrape
on ``<prefix>.<entity>``, each with a ``Nats-Msg-Id`` built from the file and its line span,
so that a re-run within the stream's duplicate window (two minutes) adds nothing."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from noc_assistant.ingest import Quarantine
from noc_assistant.ingest.replay import jsonl_lines

from .admin import ensure_stream
from .connection import connected
from .subjects import SUBJECT_PREFIX, entity_subject

__all__ = ["PublishStats", "publish_replay"]

_IN_FLIGHT = 256
"""Publications waiting for the server's acknowledgement at most."""


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
    stats = PublishStats()
    async with connected(url, f"publishing to {stream}", drain=True) as nc:
        js = nc.jetstream()
        await ensure_stream(js, stream, prefix)
        pending: list[asyncio.Future[Any]] = []
        for entity, first, last, body in _batches(path, batch, quarantine):
            pending.append(
                await js.publish_async(
                    entity_subject(entity, prefix),
                    body,
                    stream=stream,
                    headers={"Nats-Msg-Id": f"{path.name}:{first}-{last}"},
                )
            )
            stats.lines += body.count(b"\n")
            stats.messages += 1
            if len(pending) >= _IN_FLIGHT:
                stats.duplicates += await _duplicates(pending)
                pending = []
        stats.duplicates += await _duplicates(pending)
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
