"""Streams, consumers and partitions on the server: the stream a publisher or worker needs
(made if absent), a worker's durable consumer (recreated at the sequence after its snapshot),
the check that a partitioned stream holds nothing outside its partitions, and removal (tests,
benchmarks, a reset)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from nats.js import api
from nats.js.errors import NotFoundError

from .connection import BusError, connected
from .state import forget

__all__ = ["ensure_stream", "partition_filter", "remove", "subscribe"]

_WEEK_S = 7 * 86400.0


async def ensure_stream(js: Any, stream: str, prefix: str) -> None:
    """Make ``stream`` on the subjects ``<prefix>.>`` unless it exists (an operator's own
    stream keeps its own limits)."""
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
                # bound on the disk
                max_age=_WEEK_S,
            )
        )


async def subscribe(
    js: Any, stream: str, durable: str, subject: str, *, after: int, max_ack_pending: int
) -> Any:
    """The durable pull consumer of ``subject``, made afresh to deliver what follows stream
    sequence ``after`` (0: everything): the snapshot is the truth, not the consumer's own
    position."""
    with contextlib.suppress(NotFoundError):
        await js.delete_consumer(stream, durable)
    start = (
        {"deliver_policy": api.DeliverPolicy.BY_START_SEQUENCE, "opt_start_seq": after + 1}
        if after
        else {"deliver_policy": api.DeliverPolicy.ALL}
    )
    config = api.ConsumerConfig(
        durable_name=durable,
        ack_policy=api.AckPolicy.ALL,
        ack_wait=600.0,
        max_ack_pending=max_ack_pending,
        filter_subject=subject,
        **start,
    )
    return await js.pull_subscribe(subject, durable=durable, stream=stream, config=config)


async def partition_filter(js: Any, stream: str, prefix: str, partition: int) -> str:
    """The subjects of the server's partition ``partition`` (``<prefix>.<k>.>``), once the
    stream is known to hold no telemetry outside every partition (which no partition's
    worker would read): :class:`BusError` otherwise."""
    info = await js.stream_info(stream, subjects_filter=f"{prefix}.*")
    unmapped = sorted((info.state.subjects or {}).items())
    if unmapped:
        held = sum(count for _, count in unmapped)
        raise BusError(
            f"stream {stream} holds {held:,} messages on subjects outside every "
            f"partition ({unmapped[0][0]}, …): nats-server maps no partitions of "
            f"{prefix} (put the mapping `noc bus partitions N` prints in its "
            "configuration and publish again), and no --partition worker would read them"
        )
    return f"{prefix}.{partition}.>"


async def _remove(url: str, stream: str, durable: str) -> None:
    async with connected(url, f"removing {stream}") as nc:
        js = nc.jetstream()
        with contextlib.suppress(NotFoundError):
            await js.delete_stream(stream)
        await forget(js, durable)


def remove(url: str, stream: str, durable: str) -> None:
    """Delete a stream and a worker's snapshot and manifest (tests, benchmarks, a reset)."""
    asyncio.run(_remove(url, stream, durable))
