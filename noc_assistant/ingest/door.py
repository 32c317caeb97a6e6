"""Each series numbered once, as its points come in: one label lookup a point, not three.

A point's series is its metric and label set, a tuple of pairs that Python hashes anew at
every lookup (about 0.3 µs for a simulated series). The pipeline looked each point's labels up
three times: to mask subscriber identifiers (:mod:`~noc_assistant.ingest.scrub`), in the
reorder buffer (its series' last release) and in the series store. A :class:`SeriesDoor`
looks the point up once, as it comes in: its labels masked (None: nothing to mask) and its
series number, which the reorder buffer keys its releases by and which finds the series'
state in the store (:attr:`states`).

Series are numbered by their masked labels: two label sets that mask alike (two identifiers
of one kind in one label) are one series, as they were when every part keyed by the masked
labels.

>>> door = SeriesDoor()
>>> door.admit("m", (("imsi", "262011234567890"),), lambda labels: (("imsi", "<imsi>"),))
((('imsi', '<imsi>'),), 0)
>>> door.admit("m", (("instance", "amf-1"),), lambda labels: labels)
(None, 1)
>>> door.seen[("m", (("instance", "amf-1"),))], door.key_of("m", (("imsi", "<imsi>"),))
((None, 1), 0)
"""

from __future__ import annotations

from collections.abc import Callable

from noc_assistant.ingest.series import SeriesState

__all__ = ["SeriesDoor"]

Labels = tuple[tuple[str, str], ...]


class SeriesDoor:
    """The series met so far: what each (metric, label set) as it came is, and the number of
    each masked series (module doc)."""

    def __init__(self) -> None:
        self.seen: dict[tuple[str, Labels], tuple[Labels | None, int]] = {}
        """(metric, labels as they came) → (labels masked, None if nothing was; number)"""
        self._keys: dict[tuple[str, Labels], int] = {}
        self.states: list[SeriesState | None] = []
        """Each series' state in the store, by number (None until its first point is
        stored; the pipeline fills it in)."""

    def admit(
        self, metric: str, labels: Labels, scrub: Callable[[Labels], Labels]
    ) -> tuple[Labels | None, int]:
        """A series met for the first time as it came: its labels masked by ``scrub`` (None
        when nothing was) and its number, kept in :attr:`seen`."""
        masked = scrub(labels)
        found = (None if masked is labels else masked, self.key_of(metric, masked))
        self.seen[(metric, labels)] = found
        return found

    def key_of(self, metric: str, labels: Labels) -> int:
        """The number of the series of masked ``labels`` (a new one at the end)."""
        key = self._keys.get((metric, labels))
        if key is None:
            key = self._keys[(metric, labels)] = len(self.states)
            self.states.append(None)
        return key

    def __len__(self) -> int:
        return len(self.states)
