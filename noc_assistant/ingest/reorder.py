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
from collections.abc import Iterator

from noc_assistant.ingest.point import Point
from noc_assistant.ingest.quarantine import Quarantine

__all__ = ["ReorderBuffer"]

_Key = tuple[str, tuple[tuple[str, str], ...]]


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
        self._heap: list[tuple[float, int, Point]] = []
        self._seq = itertools.count()
        self._released: dict[_Key, tuple[float, float | None]] = {}
        self.watermark = float("-inf")
        self.duplicates = 0
        self.late = 0
        self.max_ts = float("-inf")

    def allow(self, lateness_s: float) -> None:
        """Hold points for ``lateness_s`` from now on (the watermark moves back with it;
        what was released stays released)."""
        self.lateness_s = lateness_s
        self.watermark = self.max_ts - lateness_s

    def push(self, point: Point) -> None:
        if point.ts > self.max_ts:
            self.max_ts = point.ts
            self.watermark = self.max_ts - self.lateness_s
        heapq.heappush(self._heap, (point.ts, next(self._seq), point))

    def pop_ready(self) -> Iterator[Point]:
        """Release, in time order, every point at or before the watermark."""
        return self._release(self.watermark)

    def drain(self) -> Iterator[Point]:
        """Release everything still held (end of input)."""
        return self._release(float("inf"))

    def _release(self, until: float) -> Iterator[Point]:
        heap = self._heap
        while heap and heap[0][0] <= until:
            point = heapq.heappop(heap)[2]
            key = (point.metric, point.labels)
            last = self._released.get(key)
            if last is not None and point.ts <= last[0]:
                if point.ts == last[0] and _same(point.value, last[1]):
                    self.duplicates += 1
                    continue
                self.late += 1
                reason = (
                    "conflicting repeat of an already processed sample"
                    if point.ts == last[0]
                    else f"arrived later than the allowed lateness ({self.lateness_s:g} s)"
                )
                self.quarantine.add("stream", None, reason, repr(point))
                continue
            self._released[key] = (point.ts, point.value)
            yield point


def _same(a: float | None, b: float | None) -> bool:
    return a == b or (a is None and b is None)
