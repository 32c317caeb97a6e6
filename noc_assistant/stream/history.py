"""The recent values of every evaluated KPI series, in two arrays instead of a deque each.

A KPI series (its series id and entity) keeps its last ``length`` evaluations, (time,
value), for the console's plots and the tests. A deque of ``(float, float)`` tuples cost
about 110 bytes a value (54 KB a series at 480 values); a row of two float64 rings costs 16
(7.7 KB), and the values of one entity's evaluation are stored with one numpy assignment.

Reads look like the dict of lists they replace: ``history[key]`` is the series' values in
time order, and only series with a value are keys.

>>> h = KpiHistory(length=3)
>>> rows = np.array([h.row(("a", "amf-1")), h.row(("b", "amf-1"))])
>>> for t in (0.0, 15.0, 30.0, 45.0):
...     h.append(rows[:1], t, np.array([t / 15]))
>>> h[("a", "amf-1")]  # the oldest value went when the fourth came
[(15.0, 1.0), (30.0, 2.0), (45.0, 3.0)]
>>> ("b", "amf-1") in h, len(h), list(h)
(False, 1, [('a', 'amf-1')])
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
from numpy.typing import NDArray

from noc_assistant.ingest.rings import kernel

__all__ = ["KpiHistory"]

Key = tuple[str, str]
"""(series id, entity) of a KPI series (:func:`~noc_assistant.stream.correlate.series_id`)."""


@kernel
def _append(
    rows: NDArray[np.int64], ts: NDArray[np.float64], values: NDArray[np.float64],
    keep: NDArray[np.bool_], t_rows: NDArray[np.float64], v_rows: NDArray[np.float64],
    head: NDArray[np.int64], size: NDArray[np.int64], length: int,
) -> None:  # fmt: skip
    """:meth:`KpiHistory.append` into the rings ``t_rows``/``v_rows``."""
    for k in range(len(rows)):
        if not keep[k]:
            continue
        r = rows[k]
        at = head[r]
        t_rows[r, at] = ts[k]
        v_rows[r, at] = values[k]
        head[r] = (at + 1) % length
        size[r] = min(size[r] + 1, length)


class KpiHistory(Mapping[Key, list[tuple[float, float]]]):
    """Each KPI series' latest ``length`` (time, value), a ring per series (module doc)."""

    def __init__(self, length: int = 480) -> None:
        if length < 1:
            raise ValueError(f"a KPI history keeps at least one value, not {length}")
        self.length = length
        self._rows: dict[Key, int] = {}
        self._keys: list[Key] = []
        self.ts: NDArray[np.float64] = np.empty((0, length))
        self.vals: NDArray[np.float64] = np.empty((0, length))
        #: where each row writes next, and how many values it holds
        self.head = np.zeros(0, np.int64)
        self.size = np.zeros(0, np.int64)

    @classmethod
    def of(cls, old: Mapping[Key, Any], length: int) -> KpiHistory:
        """The history a snapshot kept as a dict of deques of (time, value), in arrays."""
        new = cls(length)
        for key, values in old.items():
            row = np.array([new.row(key)])
            for t, v in list(values)[-length:]:
                new.append(row, t, np.array([v], np.float64))
        return new

    def row(self, key: Key) -> int:
        """The row of ``key``, made on first use (it is no key of the mapping until it
        has a value)."""
        found = self._rows.get(key)
        if found is not None:
            return found
        n = len(self._keys)
        if n == len(self.head):
            self._grow(max(64, 2 * n))
        self._rows[key] = n
        self._keys.append(key)
        return n

    def _grow(self, rows: int) -> None:
        # np.zeros (calloc): the pages of rows not yet written take no memory, and a
        # snapshot holds no leftover bytes of freed memory
        for name in ("ts", "vals"):
            old = getattr(self, name)
            new = np.zeros((rows, self.length))
            new[: len(old)] = old
            setattr(self, name, new)
        extra = rows - len(self.head)
        self.head = np.concatenate([self.head, np.zeros(extra, np.int64)])
        self.size = np.concatenate([self.size, np.zeros(extra, np.int64)])

    def append(
        self,
        rows: NDArray[np.int64],
        ts: float | NDArray[np.float64],
        values: NDArray[np.float64],
        keep: NDArray[np.bool_] | None = None,
    ) -> None:
        """``values[k]`` at time ``ts`` (or ``ts[k]``) for row ``rows[k]`` (the rows
        distinct; where ``keep`` is given, only where it is true), the oldest value of a
        full row dropped."""
        if not len(rows):
            return
        times = np.full(len(rows), ts) if np.ndim(ts) == 0 else np.asarray(ts, np.float64)
        _append(
            rows, times, np.asarray(values, np.float64),
            np.ones(len(rows), np.bool_) if keep is None else keep,
            self.ts, self.vals, self.head, self.size, self.length,
        )  # fmt: skip

    def __getitem__(self, key: Key) -> list[tuple[float, float]]:
        row = self._rows.get(key)
        if row is None or not self.size[row]:
            raise KeyError(key)
        n, end = int(self.size[row]), int(self.head[row])
        order = (np.arange(end - n, end)) % self.length
        return list(zip(self.ts[row, order].tolist(), self.vals[row, order].tolist(), strict=True))

    def __contains__(self, key: object) -> bool:
        row = self._rows.get(key)  # type: ignore[call-overload]
        return row is not None and bool(self.size[row])

    def __iter__(self) -> Iterator[Key]:
        keys = self._keys
        return (keys[i] for i in np.flatnonzero(self.size[: len(keys)]).tolist())

    def __len__(self) -> int:
        return int(np.count_nonzero(self.size[: len(self._keys)]))

    @property
    def nbytes(self) -> int:
        """Bytes of the arrays (rows allocated ahead included)."""
        return self.ts.nbytes + self.vals.nbytes + self.head.nbytes + self.size.nbytes

    def __getstate__(self) -> dict[str, Any]:
        """The state with the arrays trimmed to the rows in use."""
        state = dict(self.__dict__)
        n = len(self._keys)
        for name in ("ts", "vals", "head", "size"):
            state[name] = state[name][:n].copy()
        return state
