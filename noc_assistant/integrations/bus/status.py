"""How far each consumer of the bus has got: what a stream holds, what each worker (or the
correlator) has read, what is left for it, and what its snapshot covers."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from nats.js.errors import NotFoundError

from .connection import connected
from .state import manifests

__all__ = ["ConsumerState", "StreamState", "probe", "status"]


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
    async with connected(url, "asking for the streams' state") as nc:
        js = nc.jetstream()
        snapshots = await manifests(js)
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
                    snapshot_seq=snapshots.get(c.name),
                )
                for c in sorted(await js.consumers_info(stream), key=lambda c: c.name)
            )
            out.append(
                StreamState(stream, True, info.state.messages, info.state.last_seq, consumers)
            )
        return out


def status(url: str, *streams: str) -> list[StreamState]:
    """What each stream holds and how far each consumer of it has got (read, left, covered by
    its snapshot): whether the workers keep up. :class:`~noc_assistant.errors.UnreachableError`
    naming the server when it cannot be reached, :class:`BusError` when it refuses."""
    return asyncio.run(_status(url, streams))


def probe(url: str, *streams: str) -> str:
    """Whether NATS at ``url`` answers with JetStream, and what each of ``streams`` holds
    (:func:`status`, in a line); the errors of :func:`status` otherwise."""
    said = [
        f"stream {s.name}: {s.messages:,} messages"
        if s.exists
        else f"stream {s.name} not made yet (the first publish makes it)"
        for s in status(url, *streams)
    ]
    return "connected; " + "; ".join(said)
