"""Each series numbered once, as its points come in: one label lookup a point, not three.

A point's series is its metric and label set, a tuple of pairs that Python hashes anew at
every lookup (about 0.3 µs for a simulated series). A :class:`SeriesDoor` looks the point up
once, as it comes in: its labels masked (None: nothing to mask, :mod:`~noc_assistant.ingest.scrub`)
and its series number. From there on the series is its number: the reorder buffer holds and
releases numbers, times and values in arrays (:mod:`~noc_assistant.ingest.reorder`), and the
number finds the series' row in the store (:attr:`sids`). :attr:`names` says what each
number is (the metric, the masked labels and the type of its first point), for a quarantine
record and for the store's first sight of the series.

Series are numbered by their masked labels: two label sets that mask alike (two identifiers
of one kind in one label) are one series, as they were when every part keyed by the masked
labels.

>>> door = SeriesDoor()
>>> door.admit("m", (("imsi", "262011234567890"),), lambda labels: (("imsi", "<imsi>"),))
((('imsi', '<imsi>'),), 0)
>>> door.admit("m", (("instance", "amf-1"),), lambda labels: labels, "counter")
(None, 1)
>>> door.seen[("m", (("instance", "amf-1"),))], door.key_of("m", (("imsi", "<imsi>"),))
((None, 1), 0)
>>> door.names[1]
('m', (('instance', 'amf-1'),), 'counter')
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import NDArray

__all__ = ["SeriesDoor"]

Labels = tuple[tuple[str, str], ...]
Name = tuple[str, Labels, str | None]
"""What a series number is: metric, masked labels, the type of its first point (None: not
known, a series of a snapshot from before the door kept types, until its next point)."""


class SeriesDoor:
    """The series met so far: what each (metric, label set) as it came is, and the number of
    each masked series (module doc)."""

    def __init__(self) -> None:
        self.seen: dict[tuple[str, Labels], tuple[Labels | None, int]] = {}
        """(metric, labels as they came) → (labels masked, None if nothing was; number)"""
        self._keys: dict[tuple[str, Labels], int] = {}
        self.names: list[Name] = []
        """What each number is (module doc), by number."""
        self.sids = np.full(0, -1, np.int64)
        """Each series' row in the store, by number (-1 until its first point is stored; the
        pipeline fills it in)."""

    def __setstate__(self, state: dict[str, Any]) -> None:
        """A door of a snapshot from before it kept :attr:`names` and :attr:`sids` (each
        series' store state in a list) restores with them: the names from its keys (types
        unknown until the series' next point, :meth:`key_of`), the rows from the states."""
        self.__dict__.update(state)
        if "names" not in state:
            names: list[Name | None] = [None] * len(self._keys)
            for (metric, labels), key in self._keys.items():
                names[key] = (metric, labels, None)
            self.names = [n for n in names if n is not None]
            self.seen = {}  # met again: each series' type is noted at its next point
        if "sids" not in state:
            states = self.__dict__.pop("states", [])
            self.sids = np.array([-1 if st is None else st.sid for st in states], np.int64)
            self.grow()

    def admit(
        self,
        metric: str,
        labels: Labels,
        scrub: Callable[[Labels], Labels],
        type_: str = "gauge",
    ) -> tuple[Labels | None, int]:
        """A series met for the first time as it came: its labels masked by ``scrub`` (None
        when nothing was) and its number, kept in :attr:`seen`."""
        masked = scrub(labels)
        found = (None if masked is labels else masked, self.key_of(metric, masked, type_))
        self.seen[(metric, labels)] = found
        return found

    def key_of(self, metric: str, labels: Labels, type_: str | None = None) -> int:
        """The number of the series of masked ``labels`` (a new one at the end); ``type_``
        is noted for a new series, or one whose type was not known."""
        key = self._keys.get((metric, labels))
        if key is None:
            key = self._keys[(metric, labels)] = len(self.names)
            self.names.append((metric, labels, type_))
        elif type_ is not None and self.names[key][2] is None:
            self.names[key] = (metric, labels, type_)
        return key

    def grow(self) -> NDArray[np.int64]:
        """:attr:`sids` with a row for every number (-1 for the new ones)."""
        short = len(self.names) - len(self.sids)
        if short > 0:
            self.sids = np.concatenate([self.sids, np.full(max(short, len(self.sids)), -1)])
        return self.sids

    def __len__(self) -> int:
        return len(self.names)
