"""Connecting to NATS, and what its failures mean: a server that cannot be reached (or stops
answering) is an :class:`~noc_assistant.errors.UnreachableError` naming the address and what
to check; a server that refuses an operation is a :class:`BusError` (a setting to fix)."""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator
from typing import Any

import nats
from nats.errors import ConnectionClosedError, NoRespondersError, NoServersError
from nats.errors import Error as NatsError
from nats.errors import TimeoutError as NatsTimeout

from noc_assistant.errors import ConfigError, UnreachableError

__all__ = ["BusError", "connected", "failure", "shown"]

_CHECK = (
    "check that nats-server runs there with JetStream enabled (nats-server -js) and that "
    "NOC_NATS_URL names it"
)


class BusError(ConfigError):
    """The NATS server refused an operation, or the bus is set up wrong (a setting to fix:
    exit 2). A server that cannot be reached is an :class:`UnreachableError` instead."""


def shown(url: str) -> str:
    """The URL without its password, for messages.

    >>> shown("nats://noc:secret@nats-1:4222")
    'nats://noc@nats-1:4222'
    """
    return re.sub(r"//([^:/@]+):[^@]*@", r"//\1@", url)


def failure(url: str, what: str, exc: Exception) -> UnreachableError | BusError:
    """The typed error of a NATS failure while doing ``what`` (empty: while connecting)."""
    said = str(exc) or type(exc).__name__
    if isinstance(exc, NoServersError | OSError | NatsTimeout | ConnectionClosedError):
        lost = f"lost NATS while {what}" if what else "cannot connect to NATS"
        return UnreachableError(f"{shown(url)}: {lost} ({said}): {_CHECK}")
    doing = f"{shown(url)}: {what}" if what else shown(url)
    if isinstance(exc, NoRespondersError):  # a JetStream request nobody answers
        return BusError(f"{doing}: no JetStream answers ({said}): {_CHECK}")
    return BusError(f"{doing}: {said}")


async def _connect(url: str) -> Any:
    try:
        return await nats.connect(url, connect_timeout=5, max_reconnect_attempts=3)
    except (NoServersError, OSError, NatsError) as exc:
        raise failure(url, "", exc) from None


@contextlib.asynccontextmanager
async def connected(url: str, what: str = "", *, drain: bool = False) -> AsyncIterator[Any]:
    """A connection to NATS at ``url``, closed (or drained: what was published is flushed)
    on leaving; a NATS failure inside is raised as :func:`failure` types it."""
    nc = await _connect(url)
    try:
        yield nc
    except NatsError as exc:
        raise failure(url, what, exc) from None
    finally:
        await (nc.drain() if drain else nc.close())
