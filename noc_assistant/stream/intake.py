"""How points come into a :class:`~noc_assistant.stream.pipeline.Pipeline`: numbered at the
door, held and released in time order, stored, and the clock's ticks evaluated as they pass.

Every source goes through :meth:`Intake.feed_columns`: times, series numbers and values (NaN:
a gap) as arrays. Points (:meth:`Intake.feed_all`: a scrape, a bus message, a CSV replay) are
numbered at the door one by one and gathered into columns; a replay file read as columns
(:meth:`Intake.feed_chunks`) and the simulator's columns are numbered a series at a time. What
follows is what pushing each point in turn does: the buffer is released just after the point
with which the watermark passes the next tick (:func:`_release_at`), and a release's points up
to the next tick are stored together (:meth:`Intake._store`), each tick evaluated before the
first point past it is stored. Until the clock has settled
(:attr:`~noc_assistant.stream.clock.ScrapeClock.settled`), one point at a time, as the
interval and the ticks are still being learnt from them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np
from numpy.typing import NDArray

from detectors.params import liveness_grace_s
from knowledge.pack import Pack
from noc_assistant.ingest import Point, ReorderBuffer, SeriesStore
from noc_assistant.ingest.columnar import ColumnChunk
from noc_assistant.ingest.door import Labels, SeriesDoor
from noc_assistant.ingest.reorder import Released
from noc_assistant.ingest.rings import kernel
from noc_assistant.ingest.scrub import label_scrubber
from noc_assistant.ingest.series import SeriesState
from noc_assistant.stream.clock import ScrapeClock
from noc_assistant.stream.liveness import LivenessWatch

__all__ = ["FEED_CHUNK", "Intake"]

F64 = NDArray[np.float64]
I64 = NDArray[np.int64]

FEED_CHUNK = 1 << 16
"""Points :meth:`Intake.feed_all` gathers into columns before it pushes them."""


class Intake:
    """The pipeline's input (module doc): a part of :class:`Pipeline` by inheritance, as
    its state is the pipeline's own (snapshots keep it where it was)."""

    pack: Pack
    door: SeriesDoor
    buffer: ReorderBuffer
    clock: ScrapeClock
    store: SeriesStore
    liveness: LivenessWatch
    samples: int

    def _evaluate(self, at: float) -> None:
        raise NotImplementedError  # the pipeline's

    def feed(self, point: Point) -> None:
        """Push one point; evaluation happens as the data's clock advances. Subscriber
        identifiers in its label values are masked here, before anything keeps them
        (:mod:`noc_assistant.ingest.scrub`). One point goes straight to the buffer
        (:meth:`_push_one`): what :meth:`feed_columns` of it would do, without the arrays."""
        key = self.number(point.metric, point.labels, point.type)
        self.samples += 1
        value = point.value
        self._push_one(point.ts, key, math.nan if value is None else value)

    def feed_all(self, points: Iterable[Point]) -> None:
        """:meth:`feed` each of ``points``: each point's series is looked up once, at the
        door (:meth:`number`), and the points go on as columns of :data:`FEED_CHUNK`
        (:meth:`feed_columns`). A source that quarantines as it is read (a replay file's bad
        lines) may add its records before the pipeline's of points read before them: each
        source's records stay in their order."""
        scrub = label_scrubber(self.pack)
        door = self.door
        seen = door.seen
        times: list[float] = []
        keys: list[int] = []
        values: list[float] = []
        nan = math.nan
        for p in points:
            found = seen.get((p.metric, p.labels))
            if found is None:
                found = door.admit(p.metric, p.labels, scrub, p.type)
            times.append(p.ts)
            keys.append(found[1])
            value = p.value
            values.append(nan if value is None else value)
            if len(times) == FEED_CHUNK:
                self.feed_columns(*_columns(times, keys, values))
                times, keys, values = [], [], []
        if times:
            self.feed_columns(*_columns(times, keys, values))

    def number(self, metric: str, labels: Labels, type_: str) -> int:
        """The number at the door of a series as it comes (its labels masked there, once:
        :class:`SeriesDoor`), for :meth:`feed_columns`."""
        found = self.door.seen.get((metric, labels))
        if found is None:
            found = self.door.admit(metric, labels, label_scrubber(self.pack), type_)
        return found[1]

    def feed_chunks(self, chunks: Iterable[ColumnChunk]) -> None:
        """:meth:`feed_columns` of the chunks of a replay file read as columns
        (:func:`~noc_assistant.ingest.columnar.read_jsonl_columns`, the series of one
        table): each series of the table numbered at the door once."""
        keys = np.zeros(0, np.int64)
        for chunk in chunks:
            table = chunk.table
            if len(keys) < len(table):
                new = [self.number(*table[i]) for i in range(len(keys), len(table))]
                keys = np.concatenate([keys, np.array(new, np.int64)])
            self.feed_columns(chunk.ts, keys[chunk.series], chunk.value)

    def feed_columns(self, ts: F64, keys: I64, values: F64) -> None:
        """Push points as columns: their times, their series' numbers at the door
        (:meth:`SeriesDoor.admit`) and their values (NaN: a gap), in arrival order. What
        follows is what pushing each in turn does: the buffer released before the point
        with which the watermark passes the next tick (:func:`_release_at`). Until the clock
        has :attr:`ScrapeClock.settled`, one point at a time."""
        self.samples += len(ts)
        clock, buffer = self.clock, self.buffer
        i, n = 0, len(ts)
        while i < n:
            if not clock.settled:
                self._push_one(float(ts[i]), int(keys[i]), float(values[i]))
                i += 1
                continue
            assert clock.next_eval is not None
            j, fires = _release_at(ts, i, buffer, clock.next_eval)
            buffer.push_columns(ts[i:j], keys[i:j], values[i:j])
            if fires:
                self._apply(buffer.take_ready())
            i = j

    def _push_one(self, ts: float, key: int, value: float) -> None:
        """One point pushed, and the buffer released if the watermark passed the next tick."""
        clock, buffer = self.clock, self.buffer
        if clock.probing:
            clock.probe(ts, key)
        buffer.push_one(ts, key, value)
        nxt = clock.next_eval
        if (nxt is None or buffer.watermark >= nxt) and buffer.due():
            self._apply(buffer.take_ready())

    def _apply(self, released: Released) -> None:
        """Store the points released, evaluating each tick of the clock they pass: the
        points up to the next tick stored as columns once the clock has settled
        (:meth:`_store`), one at a time before (:meth:`_apply_one`)."""
        clock, liveness = self.clock, self.liveness
        feed_gap = liveness_grace_s(clock.interval_s or 0.0, on_clock=True)
        ts, keys, values = released
        i, n = 0, len(ts)
        while i < n:
            if not clock.settled:
                self._apply_one(float(ts[i]), int(keys[i]), float(values[i]), feed_gap)
                i += 1
                continue
            assert clock.next_eval is not None
            j = i + int(np.searchsorted(ts[i:], clock.next_eval, side="right"))
            # the point that passes the tick is heard before it (again after: the same)
            liveness.heard_all(ts[i : j + 1], clock.last_ts, feed_gap)
            if j > i:
                self._store(ts[i:j], keys[i:j], values[i:j])
                clock.stored(float(ts[j - 1]))
            if j < n:
                for at in clock.ticks_before(float(ts[j])):
                    self._evaluate(at)
            i = j

    def _apply_one(self, ts: float, key: int, value: float, feed_gap: float) -> None:
        clock = self.clock
        self.liveness.heard(ts, clock.last_ts, feed_gap)
        nxt = clock.next_eval
        if nxt is not None and ts > nxt:  # a tick passed (no generator made per point)
            for at in clock.ticks_before(ts):
                self._evaluate(at)
        state = self._state(key)
        clock.learn(ts, self.store.add_value(state, ts, None if value != value else value))

    def _state(self, key: int) -> SeriesState:
        """The store's state of the series numbered ``key`` at the door (made at its first
        point)."""
        sids = self.door.grow()
        sid = int(sids[key])
        if sid >= 0:
            return self.store.row(sid)
        metric, labels, type_ = self.door.names[key]
        state = self.store.state_of(Point(0.0, metric, labels, None, type_ or "gauge"))
        sids[key] = state.sid
        return state

    def _store(self, ts: F64, keys: I64, values: F64) -> None:
        """Store points sorted by time, none passing a tick (:meth:`SeriesStore.add_columns`);
        a series met for the first time made first, in the order of its first point."""
        sids = np.empty(len(keys), np.int64)
        if _gather(self.door.grow(), keys, sids):
            new = sids < 0
            fresh, first = np.unique(keys[new], return_index=True)
            for key in fresh[np.argsort(first)].tolist():
                self._state(key)
            sids = self.door.sids[keys]
        self.store.add_columns(sids, ts, values)


def _columns(times: list[float], keys: list[int], values: list[float]) -> tuple[F64, I64, F64]:
    return (
        np.array(times, np.float64),
        np.array(keys, np.int64),
        np.array(values, np.float64),
    )


def _release_at(ts: F64, i: int, buffer: ReorderBuffer, tick: float) -> tuple[int, bool]:
    """Pushing ``ts[i:]`` one at a time, where the buffer would first be released: the end
    of what to push before (exclusive), and whether it is (the watermark at or past
    ``tick`` with a point held at or before it), else ``len(ts)`` and False."""
    end = _fires_at(ts, i, buffer.max_ts, buffer.low, buffer.lateness_s, tick)
    return (end, True) if end >= 0 else (len(ts), False)


@kernel
def _gather(rows: I64, keys: I64, out: I64) -> int:
    """``rows`` at ``keys`` into ``out``; how many are -1 (a series not stored yet)."""
    missing = 0
    for p in range(len(keys)):
        out[p] = rows[keys[p]]
        missing += out[p] < 0
    return missing


@kernel
def _fires_at(ts: F64, i: int, top: float, low: float, lateness: float, tick: float) -> int:
    """:func:`_release_at`'s scan: one past the point after which the watermark (the newest
    time less ``lateness``) is at or past ``tick`` with a point held at or before it (``top``
    and ``low``: the newest and earliest times held before ``i``), else -1. A point without
    a time is quarantined as it is pushed: it moves neither."""
    for p in range(i, len(ts)):
        t = ts[p]
        if t > top:
            top = t
        if t < low:
            low = t
        mark = top - lateness
        if mark >= tick and low <= mark:
            return p + 1
    return -1
