"""The data's own clock: its scrape interval, inferred from the points, and the evaluation
ticks on it.

A :class:`~noc_assistant.stream.pipeline.Pipeline` owns one :class:`ScrapeClock`. Nothing is
configured: the interval is the median time between samples of the same series, and the
reorder buffer's lateness follows it (a replay file's lines may be out of order by a few
intervals, FORMATS §1, which at 5-min periods is a quarter of an hour).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterator

from noc_assistant.ingest import ReorderBuffer

__all__ = ["ScrapeClock"]


class ScrapeClock:
    """The scrape interval, the data's first and newest times, and the next evaluation tick.

    Points are held ``lateness_s``, or ``lateness_intervals`` scrape intervals once the
    interval is known if that is longer. With ``lateness_intervals``, nothing is released
    until the interval is guessed from the points pushed (:meth:`probe`).
    """

    def __init__(
        self, buffer: ReorderBuffer, lateness_s: float = 60.0, lateness_intervals: float = 0.0
    ) -> None:
        self.buffer = buffer
        self.interval_s: float | None = None
        self.first_ts: float | None = None
        self.last_ts: float | None = None
        """The newest sample time released so far."""
        self.next_eval: float | None = None
        """The next evaluation tick (None until the interval is known)."""
        self._deltas: list[float] = []
        self._lateness = (lateness_s, lateness_intervals)
        self._probe: dict[int, float] | None = {} if lateness_intervals > 0 else None
        self._probe_steps: list[float] = []
        if self._probe is not None:
            buffer.allow(math.inf)  # hold everything until the interval is guessed

    @property
    def probing(self) -> bool:
        """Whether the interval is still being guessed from the points pushed (:meth:`probe`)."""
        return self._probe is not None

    @property
    def settled(self) -> bool:
        """Whether nothing more is learned: the interval guessed and measured from every step
        kept, and the ticks started. From then on a stored point only moves
        :attr:`last_ts` (:meth:`stored`), and the buffer's lateness stays."""
        return self.next_eval is not None and self._probe is None and len(self._deltas) >= 256

    def stored(self, last: float) -> None:
        """Points up to ``last`` were stored, the clock :attr:`settled` (:meth:`learn` of
        each)."""
        if self.last_ts is None or last > self.last_ts:
            self.last_ts = last

    def probe(self, ts: float, key: int) -> None:
        """Before anything is released, guess the scrape interval from the points pushed (the
        median of the first eight steps between a series' samples) so that a replay holds its
        lines for ``lateness_intervals`` from the start, not a minute (lines of the first
        intervals may be out of order too); until then nothing is released, and the released
        data's interval takes over once it is known. Nothing to do once guessed."""
        probe = self._probe
        if probe is None:
            return
        last = probe.get(key)
        probe[key] = ts if last is None else max(last, ts)
        if last is not None and ts > last:
            self._probe_steps.append(ts - last)
            if len(self._probe_steps) >= 8:
                self._hold_for(statistics.median(self._probe_steps))
                self._probe = None
                self._probe_steps = []

    def ticks_before(self, ts: float) -> Iterator[float]:
        """The evaluation ticks due before a point at ``ts`` is stored, each advanced past
        once the caller has evaluated it; a long silence jumps instead of ticking through."""
        while self.next_eval is not None and ts > self.next_eval:
            yield self.next_eval
            assert self.interval_s is not None
            step = self.interval_s
            nxt = self.next_eval + step
            if ts - nxt > 10 * step:
                nxt = ts - (ts % step)
            self.next_eval = nxt

    def learn(self, ts: float, delta: float | None) -> None:
        """A point at ``ts`` was stored, ``delta`` after its series' previous sample (None for
        a series' first). The scrape interval is the median time between samples of the same
        series (scrapes of different exporters need not be aligned); ticks start once eight
        such steps are known."""
        if self.first_ts is None:
            self.first_ts = ts
        if delta is not None and delta > 0 and len(self._deltas) < 256:
            self._deltas.append(delta)
            if len(self._deltas) % 8 == 0 or len(self._deltas) < 8:
                self.interval_s = statistics.median(self._deltas)
                self._hold_for(self.interval_s)
        if self.last_ts is None or ts > self.last_ts:
            self.last_ts = ts
        if self.next_eval is None and self.interval_s is not None and len(self._deltas) >= 8:
            step = self.interval_s
            self.next_eval = ts - (ts % step) + step

    def passed(self, at: float) -> None:
        """A tick at ``at`` of another clock was taken (the network-wide correlator's)."""
        if self.first_ts is None:
            self.first_ts = at
        self.last_ts = at if self.last_ts is None else max(self.last_ts, at)

    def _hold_for(self, step: float) -> None:
        """Hold points ``lateness_s``, or ``lateness_intervals`` scrape intervals of ``step``
        if that is longer."""
        base, intervals = self._lateness
        wanted = max(base, intervals * step)
        if wanted != self.buffer.lateness_s:
            self.buffer.allow(wanted)
