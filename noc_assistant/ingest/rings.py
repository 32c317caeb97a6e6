"""The numbers of every series in arrays: its latest value and a ring of counter increments.

:class:`~noc_assistant.ingest.series.SeriesStore` keeps each series' labels in Python and its
numbers here, one row per series: the time and value of its latest sample, the counter value
it last saw, how often that counter reset, and a ring of its recent increments (previous
sample time, sample time, increase, whether it was a reset). A point is stored in two steps:
the store notes it (:meth:`Rings.note`, a few list appends) and the rings take every noted
point in one compiled pass before anything reads them (:meth:`Rings.flush`). So storing a
point costs no numpy call, and the KPI formulas of a tick read arrays
(:mod:`noc_assistant.stream.kpi_program`).

The functions here are the one definition of a series' increase and lateness: the store's
Python reads and the compiled KPI programs call the same ones.

>>> rings = Rings(horizon_s=900.0)
>>> i = rings.new_series()
>>> for t, v in ((0.0, 5.0), (15.0, 8.0), (30.0, 2.0)):  # a reset at 30 s
...     rings.note(i, t, v)
>>> rings.flush()
>>> rings.increase(i, 0.0, 30.0), int(rings.resets[i]), float(rings.last_value[i])
(5.0, 1, 2.0)
>>> rings.increase(i, 20.0, 30.0)  # two thirds of a reset's step: unknown
nan
>>> rings.increase(i, 30.0, 45.0) is None  # nothing after 30 s
True
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, TypeVar, cast

import numba
import numpy as np
from numpy.typing import NDArray

__all__ = ["Rings", "kernel", "ring_increase", "ring_late"]

F64 = NDArray[np.float64]

_F = TypeVar("_F", bound=Callable[..., Any])


def kernel(f: _F) -> _F:
    """A compiled function over the rings (numba, cached on disk)."""
    return cast(_F, numba.njit(cache=True, nogil=True)(f))


#: the arrays of :class:`Rings`, one row per series
_ARRAYS = (
    "last_ts", "last_value", "has_value", "resets", "r_prev", "r_ts", "r_inc", "r_reset",
    "head", "size",
)  # fmt: skip

#: a ring's first capacity; it doubles for every series when one needs more
_FIRST_CAPACITY = 8


@kernel
def ring_increase(
    r_prev: F64, r_ts: F64, r_inc: F64, r_reset: Any, head: Any, size: Any,
    i: int, start: float, end: float,
) -> tuple[float, int]:  # fmt: skip
    """Increase of series ``i`` over ``(start, end]`` and how it is known: 1 a value, 0 no
    sample there (None), 2 unknown (a reset the window holds part of: NaN).

    An increment between two samples far apart (after a gap) is spread evenly over the time
    between them, so the first sample after a gap is not read as a burst. A reset's cannot
    be: the counter restarted at some unknown time between the two samples, so a window that
    holds only part of it has an unknown increase, not a part of the new value. The newest
    increments are summed first, as they always were.
    """
    cap = r_ts.shape[1]
    total = 0.0
    seen = False
    h = head[i]
    for k in range(size[i] - 1, -1, -1):
        j = (h + k) % cap
        ts = r_ts[i, j]
        if ts <= start:
            break
        if ts <= end:
            inc = r_inc[i, j]
            prev = r_prev[i, j]
            if prev < start < ts:  # only the part of the step inside the window
                if r_reset[i, j]:
                    return math.nan, 2
                inc *= (ts - start) / (ts - prev)
            total += inc
            seen = True
    return total, 1 if seen else 0


@kernel
def ring_late(last_ts: F64, size: Any, i: int, at: float, since: float, grace: float) -> bool:
    """Whether series ``i`` missed its entity's latest scrape: it has increments, nothing
    new since ``since`` (the entity's previous evaluation) though the entity answered at
    ``at``, and it is not silent for longer than ``grace`` either (then it is just silent).
    Its increase over a window ending at ``at`` lacks the last interval, which a ratio
    against a series that was scraped reads as a drop; the next sample spreads the increment
    over the gap, so the window is whole again one scrape later."""
    t = last_ts[i]
    return bool(size[i] > 0 and t <= since and at - t <= grace)


@kernel
def _take(
    sids: Any, ts: F64, values: F64, start: int, horizon: float, last_ts: F64,
    last_value: F64, has_value: Any, resets: Any, r_prev: F64, r_ts: F64, r_inc: F64,
    r_reset: Any, head: Any, size: Any,
) -> int:  # fmt: skip
    """Store the noted points from ``start`` on, in order; the position of the first one
    whose ring is full (the caller grows the rings and goes on from there), or the count."""
    cap = r_ts.shape[1]
    for p in range(start, len(sids)):
        i = sids[p]
        t = ts[p]
        v = values[p]
        if has_value[i]:
            if size[i] == cap:
                return p
            j = (head[i] + size[i]) % cap
            r_prev[i, j] = last_ts[i]
            r_ts[i, j] = t
            if v >= last_value[i]:
                r_inc[i, j] = v - last_value[i]
                r_reset[i, j] = False
            else:  # the counter restarted from zero, so all of ``v`` is new
                resets[i] += 1
                r_inc[i, j] = v
                r_reset[i, j] = True
            size[i] += 1
        has_value[i] = True
        last_value[i] = v
        last_ts[i] = t
        cutoff = t - horizon
        while size[i] > 0 and r_ts[i, head[i]] <= cutoff:
            head[i] = (head[i] + 1) % cap
            size[i] -= 1
    return len(sids)


class Rings:
    """The numbers of the series of one store, one row per series (module docstring).

    A series' latest value is its counter value too: every series keeps increments, whether
    or not its exporter declared it a counter (a gauge's are never read)."""

    def __init__(self, horizon_s: float = 900.0) -> None:
        self.horizon_s = horizon_s
        self.n = 0
        self.last_ts = np.full(0, -np.inf)
        """time of each series' latest sample with a value (-inf: none yet)"""
        self.last_value = np.zeros(0)
        self.has_value = np.zeros(0, np.bool_)
        self.resets = np.zeros(0, np.int64)
        self.r_prev = np.zeros((0, _FIRST_CAPACITY))
        self.r_ts = np.zeros((0, _FIRST_CAPACITY))
        self.r_inc = np.zeros((0, _FIRST_CAPACITY))
        self.r_reset = np.zeros((0, _FIRST_CAPACITY), np.bool_)
        self.head = np.zeros(0, np.int64)
        self.size = np.zeros(0, np.int64)
        self._sids: list[int] = []
        self._ts: list[float] = []
        self._values: list[float] = []
        self._chunks: list[tuple[NDArray[np.int64], F64, F64]] = []
        """Samples noted as columns (:meth:`note_many`), the lists' before them."""

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Rings of a snapshot from before they took columns restore with none noted."""
        self.__dict__.update(state)
        self.__dict__.setdefault("_chunks", [])

    @property
    def capacity(self) -> int:
        """Increments a ring holds before every ring doubles."""
        return int(self.r_ts.shape[1])

    @property
    def nbytes(self) -> int:
        """Bytes of the arrays (rows allocated ahead included)."""
        return sum(getattr(self, name).nbytes for name in _ARRAYS)

    def new_series(self) -> int:
        """A row for a new series (no sample yet); its index."""
        if self.n == len(self.last_ts):
            self._grow_rows(max(64, 2 * self.n))
        self.n += 1
        return self.n - 1

    def _grow_rows(self, rows: int) -> None:
        extra = rows - len(self.last_ts)
        cap = self.capacity
        self.last_ts = np.concatenate([self.last_ts, np.full(extra, -np.inf)])
        self.last_value = np.concatenate([self.last_value, np.zeros(extra)])
        self.has_value = np.concatenate([self.has_value, np.zeros(extra, np.bool_)])
        self.resets = np.concatenate([self.resets, np.zeros(extra, np.int64)])
        for name in ("r_prev", "r_ts", "r_inc"):
            setattr(self, name, np.concatenate([getattr(self, name), np.zeros((extra, cap))]))
        self.r_reset = np.concatenate([self.r_reset, np.zeros((extra, cap), np.bool_)])
        self.head = np.concatenate([self.head, np.zeros(extra, np.int64)])
        self.size = np.concatenate([self.size, np.zeros(extra, np.int64)])

    def _grow_rings(self) -> None:
        """Double every ring's capacity, each ring unrolled to start at 0."""
        cap = self.capacity
        rows = len(self.last_ts)
        order = (self.head[:, None] + np.arange(cap)[None, :]) % cap
        take = np.arange(rows)[:, None]
        for name in ("r_prev", "r_ts", "r_inc", "r_reset"):
            old = getattr(self, name)
            new = np.zeros((rows, 2 * cap), old.dtype)
            new[:, :cap] = old[take, order]
            setattr(self, name, new)
        self.head[:] = 0

    def note(self, sid: int, ts: float, value: float) -> None:
        """A sample with a value of series ``sid``, stored at the next :meth:`flush`."""
        self._sids.append(sid)
        self._ts.append(ts)
        self._values.append(value)

    def note_many(self, sids: NDArray[np.int64], ts: F64, values: F64) -> None:
        """:meth:`note` of each sample of three columns, in their order."""
        self._columns()
        self._chunks.append((sids, ts, values))

    def _columns(self) -> None:
        """The samples noted one at a time as a chunk after the others."""
        if self._sids:
            self._chunks.append(
                (
                    np.array(self._sids, np.int64),
                    np.array(self._ts, np.float64),
                    np.array(self._values, np.float64),
                )
            )
            self._sids, self._ts, self._values = [], [], []

    def flush(self) -> None:
        """Store every noted sample, in the order noted."""
        self._columns()
        chunks = self._chunks
        if not chunks:
            return
        if len(chunks) == 1:
            sids, ts, values = chunks[0]
        else:
            sids, ts, values = (np.concatenate(c) for c in zip(*chunks, strict=True))
        self._chunks = []
        done = 0
        while done < len(sids):
            done = _take(
                sids, ts, values, done, self.horizon_s, self.last_ts, self.last_value,
                self.has_value, self.resets, self.r_prev, self.r_ts, self.r_inc, self.r_reset,
                self.head, self.size,
            )  # fmt: skip
            if done < len(sids):
                self._grow_rings()

    def __getstate__(self) -> dict[str, Any]:
        """The state with every noted sample stored (the arrays trimmed to the series)."""
        self.flush()
        state = dict(self.__dict__)
        for name in _ARRAYS:
            state[name] = state[name][: self.n].copy()
        return state

    # -- reads (flushed first) ---------------------------------------------------------

    def increase(self, sid: int, start: float, end: float) -> float | None:
        """Increase of series ``sid`` over ``(start, end]``: None without a sample there, NaN
        where a reset is partly inside (:func:`ring_increase`)."""
        self.flush()
        value, known = ring_increase(
            self.r_prev, self.r_ts, self.r_inc, self.r_reset, self.head, self.size,
            sid, start, end,
        )  # fmt: skip
        return None if known == 0 else float(value)

    def late(self, sid: int, at: float, since: float, grace: float) -> bool:
        """Whether series ``sid`` missed its entity's latest scrape (:func:`ring_late`)."""
        self.flush()
        return bool(ring_late(self.last_ts, self.size, sid, at, since, grace))

    def latest(self, sid: int) -> tuple[float, float | None]:
        """(time, value) of series ``sid``'s latest sample with a value; (-inf, None) if none."""
        self.flush()
        if not self.has_value[sid]:
            return -math.inf, None
        return float(self.last_ts[sid]), float(self.last_value[sid])
