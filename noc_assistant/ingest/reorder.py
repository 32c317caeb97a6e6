"""Put points in time order within an allowed lateness; drop exact repeats, keep the rest.

Points may arrive out of order by a few scrape intervals and may repeat (docs/FORMATS.md §1).
The buffer holds points until the watermark (newest timestamp seen − ``lateness_s``) passes
them, then releases them in time order. A repeat of an already released sample with the same
value is counted as a duplicate; a conflicting repeat or a point older than what was already
released for its series is quarantined with the reason — nothing disappears silently.

A held point is three numbers: its time, its series' number
(:class:`~noc_assistant.ingest.door.SeriesDoor`) and its value (NaN: a gap, as every reader
makes a missing sample). They are held in arrays in arrival order, and a release is one
compiled pass (:func:`_release`): the points at or before the watermark sorted by time
(stably, so in arrival order within a time), each taken if it is newer than its series' last
release, which is kept by number. So a chunk of a replay file is pushed as its columns
(:meth:`ReorderBuffer.push_columns`), and one point at a time costs three list appends
(:meth:`ReorderBuffer.push_one`).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import NDArray

from noc_assistant.ingest.door import SeriesDoor
from noc_assistant.ingest.point import Point
from noc_assistant.ingest.quarantine import Quarantine
from noc_assistant.ingest.rings import kernel

__all__ = ["Released", "ReorderBuffer"]

F64 = NDArray[np.float64]
I64 = NDArray[np.int64]

_PLACEHOLDER = ("", (), None)
"""The name of a number a restored buffer met only in its releases (its door names it)."""


#: why a point was refused (:func:`_release`)
_REPEAT, _CONFLICT, _LATE = 0, 1, 2


@kernel
def _release(
    ts: F64, key: I64, value: F64, until: float, last_ts: F64, last_val: F64, out_ts: F64,
    out_key: I64, out_val: F64, refused: I64, kinds: Any, rest_ts: F64, rest_key: I64,
    rest_val: F64,
) -> tuple[int, int, int, float]:  # fmt: skip
    """Release the held points (arrival order) at or before ``until``: sorted by time, stably
    (so by arrival within a time), each taken into ``out_*`` if it is newer than its series'
    last release (``last_ts``/``last_val`` by number, moved on), else its position in
    ``refused`` with why in ``kinds``; the points still held into ``rest_*``, in arrival
    order. Returns how many were taken, refused and kept, and the earliest time kept (inf:
    none); taken -1 and nothing done if a series' number is past ``last_ts``."""
    for i in range(len(key)):
        if key[i] >= len(last_ts):
            return -1, 0, 0, math.inf
    ready = np.flatnonzero(ts <= until)
    order = ready[np.argsort(ts[ready], kind="mergesort")]
    taken = 0
    n_refused = 0
    for p in order:
        k = key[p]
        t = ts[p]
        v = value[p]
        last = last_ts[k]
        if t > last:
            last_ts[k] = t
            last_val[k] = v
            out_ts[taken] = t
            out_key[taken] = k
            out_val[taken] = v
            taken += 1
            continue
        kind = _LATE
        if t == last:
            w = last_val[k]
            kind = _REPEAT if v == w or (v != v and w != w) else _CONFLICT
        refused[n_refused] = p
        kinds[n_refused] = kind
        n_refused += 1
    n_rest = 0
    low = math.inf
    for i in range(len(ts)):
        if not ts[i] <= until:
            rest_ts[n_rest] = ts[i]
            rest_key[n_rest] = key[i]
            rest_val[n_rest] = value[i]
            low = min(low, ts[i])
            n_rest += 1
    return taken, n_refused, n_rest, low


@kernel
def _span(ts: F64) -> tuple[int, float, float]:
    """How many of ``ts`` are NaN, and the earliest and latest of the others (inf and -inf:
    none)."""
    nan = 0
    low, top = math.inf, -math.inf
    for t in ts:
        if t != t:
            nan += 1
        else:
            low = min(low, t)
            top = max(top, t)
    return nan, low, top


class Released(NamedTuple):
    """Points released, in (time, arrival) order: times, series numbers, values (NaN: gap)."""

    ts: F64
    key: I64
    value: F64


_NONE = Released(np.zeros(0), np.zeros(0, np.int64), np.zeros(0))


class ReorderBuffer:
    """Time-ordering buffer (module doc); ``door`` numbers and names its series (its own if
    None: a point pushed without a number is numbered by its metric and labels).

    >>> buf = ReorderBuffer(lateness_s=30)
    >>> def pt(ts, v): return Point(ts, "m", (("instance", "a"),), v, "gauge")
    >>> for p in [pt(0, 1.0), pt(30, 3.0), pt(15, 2.0), pt(15, 2.0), pt(60, 4.0)]:
    ...     buf.push(p)
    >>> [p.ts for p in buf.pop_ready()]
    [0.0, 15.0, 30.0]
    >>> [p.ts for p in buf.drain()]
    [60.0]
    >>> buf.duplicates
    1
    """

    def __init__(
        self,
        lateness_s: float = 60.0,
        quarantine: Quarantine | None = None,
        door: SeriesDoor | None = None,
    ) -> None:
        self.lateness_s = lateness_s
        self.quarantine = quarantine if quarantine is not None else Quarantine()
        self.door = door if door is not None else SeriesDoor()
        self._ts: list[float] = []
        self._key: list[int] = []
        self._val: list[float] = []
        """Points pushed one at a time since the last release (:meth:`push_one`)."""
        self._blocks: list[Released] = []
        """The rest of what is held, in arrival order (before the lists)."""
        self._low = math.inf
        """The earliest time held (inf: nothing)."""
        self._last_ts = np.full(0, -np.inf)
        self._last_val = np.zeros(0)
        """Each series' last released time and value, by number (-inf: none yet)."""
        self.watermark = float("-inf")
        self.duplicates = 0
        self.late = 0
        self.max_ts = float("-inf")

    def __setstate__(self, state: dict[str, Any]) -> None:
        """A buffer of a snapshot from before it held arrays (a heap and a queue of
        (time, arrival, point[, key]), each series' last release in a dict) restores as this
        one: held in arrival order, numbered by its own door. A key that was a number names
        a series of the pipeline's door: :meth:`rekey` with that door goes on."""
        if "_heap" not in state:
            self.__dict__.update(state)
            return
        items = sorted([*state.pop("_heap"), *state.pop("_run", ())], key=lambda it: it[1])
        released: dict[Any, Any] = state.pop("_released")
        state.pop("_seq", None)
        self.__dict__.update(state)
        door = self.door = SeriesDoor()

        def number(key: Any, metric: str, labels: Any, type_: str | None) -> int:
            if isinstance(key, int):  # the pipeline door's number: named at that number
                while len(door.names) <= key:
                    door.names.append(_PLACEHOLDER)
                if door.names[key] == _PLACEHOLDER and metric:
                    door.names[key] = (metric, labels, type_)
                return key
            return door.key_of(metric, labels, type_)

        keys = [
            number(it[3] if len(it) > 3 else None, it[2].metric, it[2].labels, it[2].type)
            for it in items
        ]
        last: dict[int, Any] = {}
        for key, pair in released.items():
            if isinstance(key, int):
                last[number(key, "", (), None)] = pair
            else:
                metric, labels = key
                last[number(None, metric, labels, None)] = pair
        self._ts = [float(it[0]) for it in items]
        self._key = keys
        self._val = [math.nan if it[2].value is None else float(it[2].value) for it in items]
        self._blocks = []
        self._low = min(self._ts, default=math.inf)
        self._last_ts = np.full(len(door.names), -np.inf)
        self._last_val = np.zeros(len(door.names))
        for key, (ts, value) in last.items():
            self._last_ts[key] = ts
            self._last_val[key] = math.nan if value is None else value

    def allow(self, lateness_s: float) -> None:
        """Hold points for ``lateness_s`` from now on (the watermark moves back with it;
        what was released stays released)."""
        self.lateness_s = lateness_s
        self.watermark = self.max_ts - lateness_s

    # -- in ----------------------------------------------------------------------------------

    def push(self, point: Point, key: int | None = None) -> None:
        """Hold ``point``; ``key``: its series' number at this buffer's door (None: numbered
        here by its metric and labels)."""
        if key is None:
            key = self.door.key_of(point.metric, point.labels, point.type)
        value = point.value
        self.push_one(point.ts, key, math.nan if value is None else value)

    def push_one(self, ts: float, key: int, value: float) -> None:
        """Hold one point of series ``key`` (``value`` NaN: a gap)."""
        if ts > self.max_ts:
            self.max_ts = ts
            self.watermark = ts - self.lateness_s
        elif ts != ts:
            self._timeless(key, value)
            return
        if ts < self._low:
            self._low = ts
        self._ts.append(ts)
        self._key.append(key)
        self._val.append(value)

    def push_columns(self, ts: F64, key: I64, value: F64) -> None:
        """Hold the points of three columns, in their order (:meth:`push_one` each)."""
        if not len(ts):
            return
        timeless, low, top = _span(ts)
        if timeless:
            keep = ~np.isnan(ts)
            for k, v in zip(key[~keep].tolist(), value[~keep].tolist(), strict=True):
                self._timeless(k, v)
            ts, key, value = ts[keep], key[keep], value[keep]
            if not len(ts):
                return
        self._settle()
        self._blocks.append(Released(ts, key, value))
        if top > self.max_ts:
            self.max_ts = top
            self.watermark = top - self.lateness_s
        self._low = min(self._low, low)

    def _timeless(self, key: int, value: float) -> None:
        self.late += 1
        point = self._point(math.nan, key, value)
        self.quarantine.add("stream", None, "a sample without a time", repr(point))

    def _settle(self) -> None:
        """The points pushed one at a time as a block after the others."""
        if self._ts:
            block = Released(
                np.array(self._ts, np.float64),
                np.array(self._key, np.int64),
                np.array(self._val, np.float64),
            )
            self._blocks.append(block)
            self._ts, self._key, self._val = [], [], []

    # -- out ---------------------------------------------------------------------------------

    @property
    def low(self) -> float:
        """The earliest time held (inf: nothing)."""
        return self._low

    def due(self) -> bool:
        """Whether a point is held at or before the watermark (:meth:`take_ready` has one)."""
        return self._low <= self.watermark

    def held(self) -> int:
        """How many points are held."""
        return len(self._ts) + sum(len(b.ts) for b in self._blocks)

    def take_ready(self) -> Released:
        """Release every point at or before the watermark (:meth:`take`)."""
        return self.take(self.watermark)

    def take_all(self) -> Released:
        """Release everything still held (end of input)."""
        return self.take(math.inf)

    def pop_ready(self) -> Iterator[Point]:
        """:meth:`take_ready`, as points (their labels as the door names them)."""
        return self.points(self.take_ready())

    def drain(self) -> Iterator[Point]:
        """:meth:`take_all`, as points."""
        return self.points(self.take_all())

    def points(self, released: Released) -> Iterator[Point]:
        """The points of ``released``."""
        rows = zip(
            released.ts.tolist(), released.key.tolist(), released.value.tolist(), strict=True
        )
        return (self._point(ts, key, value) for ts, key, value in rows)

    def _point(self, ts: float, key: int, value: float) -> Point:
        metric, labels, type_ = self.door.names[key]
        return Point(ts, metric, labels, None if value != value else value, type_ or "gauge")

    def take(self, until: float) -> Released:
        """Release, in (time, arrival) order, every point held at or before ``until``: each
        newer than its series' last release, the rest counted as duplicates or quarantined
        (:meth:`_refuse`)."""
        if self._low > until:
            return _NONE
        self._settle()
        blocks = self._blocks
        if not blocks:
            return _NONE
        held = (
            blocks[0]
            if len(blocks) == 1
            else Released(*map(np.concatenate, zip(*blocks, strict=True)))
        )
        n = len(held.ts)
        out_ts, out_key, out_val = np.empty(n), np.empty(n, np.int64), np.empty(n)
        rest_ts, rest_key, rest_val = np.empty(n), np.empty(n, np.int64), np.empty(n)
        refused, kinds = np.empty(n, np.int64), np.empty(n, np.int8)
        while True:
            taken, n_refused, n_rest, low = _release(
                held.ts, held.key, held.value, until, self._last_ts, self._last_val,
                out_ts, out_key, out_val, refused, kinds, rest_ts, rest_key, rest_val,
            )  # fmt: skip
            if taken >= 0:
                break
            self._room(int(held.key.max()) + 1)  # a series new to the buffer
        self._low = low
        self._blocks = (
            [Released(rest_ts[:n_rest], rest_key[:n_rest], rest_val[:n_rest])] if n_rest else []
        )
        if n_refused:
            self._refuse(held, refused[:n_refused], kinds[:n_refused])
        return Released(out_ts[:taken], out_key[:taken], out_val[:taken])

    def _refuse(self, held: Released, at: I64, kinds: NDArray[np.int8]) -> None:
        """Count the repeats of what was released (same time and value, a gap repeating a
        gap) and quarantine the rest refused (``kinds``: :data:`_REPEAT`, :data:`_CONFLICT`,
        :data:`_LATE`), in release order."""
        self.duplicates += int(np.count_nonzero(kinds == _REPEAT))
        for p, kind in zip(at.tolist(), kinds.tolist(), strict=True):
            if kind == _REPEAT:
                continue
            self.late += 1
            reason = (
                "conflicting repeat of an already processed sample"
                if kind == _CONFLICT
                else f"arrived later than the allowed lateness ({self.lateness_s:g} s)"
            )
            point = self._point(float(held.ts[p]), int(held.key[p]), float(held.value[p]))
            self.quarantine.add("stream", None, reason, repr(point))

    def _room(self, keys: int) -> None:
        """Each series' last release kept for numbers below ``keys``."""
        short = keys - len(self._last_ts)
        if short > 0:
            extra = max(short, len(self._last_ts))
            self._last_ts = np.concatenate([self._last_ts, np.full(extra, -np.inf)])
            self._last_val = np.concatenate([self._last_val, np.zeros(extra)])

    def rekey(self, door: SeriesDoor) -> None:
        """Number every series by ``door`` from now on (a restored buffer that numbered them
        by its own door: :meth:`__setstate__`); its names and types go to ``door``."""
        mapping = np.array(
            [
                key if name == _PLACEHOLDER else door.key_of(*name)
                for key, name in enumerate(self.door.names)
            ],
            np.int64,
        )
        self._settle()
        self._blocks = [Released(b.ts, mapping[b.key], b.value) for b in self._blocks]
        old_ts, old_val = self._last_ts[: len(mapping)], self._last_val[: len(mapping)]
        self._last_ts = np.full(len(door.names), -np.inf)
        self._last_val = np.zeros(len(door.names))
        self._last_ts[mapping[: len(old_ts)]] = old_ts
        self._last_val[mapping[: len(old_val)]] = old_val
        self.door = door
