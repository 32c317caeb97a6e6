"""Put points in time order within an allowed lateness; drop exact repeats, keep the rest.

Points may arrive out of order by a few scrape intervals and may repeat (docs/FORMATS.md §1).
The buffer holds points until the watermark (newest timestamp seen − ``lateness_s``) passes
them, then releases them in time order. A repeat of an already released sample with the same
value is counted as a duplicate; a conflicting repeat or a point older than what was already
released for its series is quarantined with the reason — nothing disappears silently.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from collections.abc import Callable, Hashable, Iterator
from typing import Any, cast

from noc_assistant.ingest.point import Point
from noc_assistant.ingest.quarantine import Quarantine

__all__ = ["ReorderBuffer"]

_Item = tuple[float, int, Point, Hashable]
"""A held point: (time, arrival, point, its series' key)."""


class ReorderBuffer:
    """Time-ordering buffer.

    >>> buf = ReorderBuffer(lateness_s=30)
    >>> def pt(ts, v): return Point(ts, "m", (("instance", "a"),), v, "gauge")
    >>> for p in [pt(0, 1.0), pt(30, 3.0), pt(15, 2.0), pt(15, 2.0), pt(60, 4.0)]:
    ...     buf.push(p)
    >>> [p.ts for p in buf.pop_ready()]
    [0, 15, 30]
    >>> [p.ts for p in buf.drain()]
    [60]
    >>> buf.duplicates
    1
    """

    def __init__(self, lateness_s: float = 60.0, quarantine: Quarantine | None = None) -> None:
        self.lateness_s = lateness_s
        self.quarantine = quarantine if quarantine is not None else Quarantine()
        self._heap: list[_Item] = []
        self._run: deque[_Item] = deque()
        """Points pushed in time order (most of a feed): a queue, not the heap; the heap holds
        the rest. Both are ordered by (time, arrival), and a release merges them."""
        self._seq = itertools.count()
        self._released: dict[Hashable, list[Any]] = {}
        """Each series' last released [time, value] by its key, updated in place (one lookup
        a point)."""
        self.watermark = float("-inf")
        self.duplicates = 0
        self.late = 0
        self.max_ts = float("-inf")

    def allow(self, lateness_s: float) -> None:
        """Hold points for ``lateness_s`` from now on (the watermark moves back with it;
        what was released stays released)."""
        self.lateness_s = lateness_s
        self.watermark = self.max_ts - lateness_s

    def __setstate__(self, state: dict[str, Any]) -> None:
        """A snapshot of a version without :attr:`_run` restores with an empty one, one that
        kept each series' last release as a tuple with lists, and one whose held points had
        no key with their series' metric and labels as keys."""
        self.__dict__.update(state)
        if "_run" not in state:
            self._run = deque()
        self._released = {key: list(last) for key, last in self._released.items()}
        if any(len(item) == 3 for item in (*self._heap[:1], *itertools.islice(self._run, 1))):
            # held before points carried their series' key: keyed by metric and labels
            self.rekey(lambda metric, labels: (metric, labels))

    def push(self, point: Point, key: Hashable = None) -> None:
        """Hold ``point``; ``key``: its series' key (default: its metric and labels; the
        pipeline's :class:`~noc_assistant.ingest.door.SeriesDoor` numbers them, and a buffer
        takes one kind of key or the other)."""
        ts = point.ts
        if ts > self.max_ts:
            self.max_ts = ts
            self.watermark = ts - self.lateness_s
        run = self._run
        item = (ts, next(self._seq), point, (point.metric, point.labels) if key is None else key)
        if not run or run[-1][0] <= ts:
            run.append(item)
        else:
            heapq.heappush(self._heap, item)

    def due(self) -> bool:
        """Whether a point is held at or before the watermark (:meth:`pop_ready` has one)."""
        until = self.watermark
        run, heap = self._run, self._heap
        return bool(run and run[0][0] <= until) or bool(heap and heap[0][0] <= until)

    def pop_ready(self) -> Iterator[Point]:
        """Release, in time order, every point at or before the watermark."""
        return (point for point, _ in self._release(self.watermark))

    def drain(self) -> Iterator[Point]:
        """Release everything still held (end of input)."""
        return (point for point, _ in self._release(float("inf")))

    def release_ready(self) -> Iterator[tuple[Point, Hashable]]:
        """:meth:`pop_ready`, each point with its series' key."""
        return self._release(self.watermark)

    def release_all(self) -> Iterator[tuple[Point, Hashable]]:
        """:meth:`drain`, each point with its series' key."""
        return self._release(float("inf"))

    def rekey(self, key_of: Callable[[str, tuple[tuple[str, str], ...]], Hashable]) -> None:
        """Key every series by ``key_of(metric, labels)`` from now on (a buffer of a snapshot
        from before the pipeline numbered series, which keyed them by metric and labels)."""
        old = cast(dict[tuple[str, tuple[tuple[str, str], ...]], list[Any]], self._released)
        self._released = {key_of(metric, labels): last for (metric, labels), last in old.items()}
        held = [(ts, seq, p, key_of(p.metric, p.labels)) for ts, seq, p, *_ in self._heap]
        heapq.heapify(held)
        self._heap = held
        self._run = deque((ts, seq, p, key_of(p.metric, p.labels)) for ts, seq, p, *_ in self._run)

    def _next(self, until: float) -> _Item | None:
        """The held item first in (time, arrival) order if it is at or before ``until``."""
        heap, run = self._heap, self._run
        if run and (not heap or run[0] < heap[0]):  # (time, arrival): never the point
            return run.popleft() if run[0][0] <= until else None
        if heap and heap[0][0] <= until:
            return heapq.heappop(heap)
        return None

    def _release(self, until: float) -> Iterator[tuple[Point, Hashable]]:
        released, run, heap = self._released, self._run, self._heap
        while True:
            if heap:  # the general merge of the queue and the heap
                item = self._next(until)
                if item is None:
                    return
            elif run and run[0][0] <= until:  # in-order points alone: the queue's head
                item = run.popleft()
            else:
                return
            _, _, point, key = item
            ts, value = point.ts, point.value
            last = released.get(key)
            if last is None:
                released[key] = [ts, value]
            elif not ts <= last[0]:  # (as a NaN time always was: released)
                last[0], last[1] = ts, value
            else:
                self._refuse(point, last)
                continue
            yield point, key

    def _refuse(self, point: Point, last: list[Any]) -> None:
        """A point at or before its series' last release: a duplicate, or quarantined."""
        if point.ts == last[0] and _same(point.value, last[1]):
            self.duplicates += 1
            return
        self.late += 1
        reason = (
            "conflicting repeat of an already processed sample"
            if point.ts == last[0]
            else f"arrived later than the allowed lateness ({self.lateness_s:g} s)"
        )
        self.quarantine.add("stream", None, reason, repr(point))


def _same(a: float | None, b: float | None) -> bool:
    return a == b or (a is None and b is None)
