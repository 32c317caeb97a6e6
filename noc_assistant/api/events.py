"""A small in-process publish/subscribe hub for the live alert feed (SSE)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

__all__ = ["Broadcaster"]

_Queue = asyncio.Queue[dict[str, Any]]


class Broadcaster:
    """Fan events out to every connected SSE client; safe to publish from any thread."""

    def __init__(self, backlog: int = 200) -> None:
        self._subscribers: list[tuple[asyncio.AbstractEventLoop, _Queue]] = []
        self._lock = threading.Lock()
        self.recent: list[dict[str, Any]] = []
        self._backlog = backlog

    def subscribe(self) -> asyncio.Queue[dict[str, Any]]:
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(maxsize=1000)
        with self._lock:
            self._subscribers.append((asyncio.get_running_loop(), queue))
        return queue

    def unsubscribe(self, queue: asyncio.Queue[dict[str, Any]]) -> None:
        with self._lock:
            self._subscribers = [(lp, q) for lp, q in self._subscribers if q is not queue]

    def publish(self, event: dict[str, Any]) -> None:
        with self._lock:
            self.recent = [*self.recent[-(self._backlog - 1) :], event]
            subscribers = list(self._subscribers)
        for loop, queue in subscribers:
            try:
                loop.call_soon_threadsafe(_put, queue, event)
            except RuntimeError:  # loop closed: the client is gone
                self.unsubscribe(queue)


def _put(queue: asyncio.Queue[dict[str, Any]], event: dict[str, Any]) -> None:
    if not queue.full():
        queue.put_nowait(event)
