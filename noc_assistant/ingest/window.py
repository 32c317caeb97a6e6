"""The timestamps a sample may carry: a window on the wall clock.

A timestamp far outside any time a network was measured is no time but damage (a unit error,
an exporter's placeholder, a hostile file): ``1e20`` read as seconds made the evaluator size
its per-hour windows for three billion years and ask for 24.7 PiB. Readers quarantine such a
sample with the reason (:class:`TimeWindow.check` raises the reader's line error) rather than
let one line decide the span of a run.

The window is a parameter: :data:`LIVE_WINDOW` (from 2000 to a day past the wall clock) for
what arrives now, :data:`REPLAY_WINDOW` for recordings and simulations, which may be written
ahead of the machine reading them (a scenario simulated for next week) but not by years.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

__all__ = ["EARLIEST", "LIVE_WINDOW", "REPLAY_WINDOW", "TimeWindow"]

EARLIEST = 946_684_800.0
"""2000-01-01T00:00:00Z: no telemetry this product reads is older."""


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class TimeWindow:
    """Timestamps from ``earliest`` to ``ahead_s`` past ``clock()`` (the wall clock).

    >>> w = TimeWindow(clock=lambda: 1_800_000_000.0)
    >>> w.contains(1_800_000_000.0 + 3600), w.contains(1e20), w.contains(0.0)
    (True, False, False)
    >>> w.check(1e20)
    Traceback (most recent call last):
    ...
    ValueError: ts 1e+20 is outside 2000-01-01T00:00:00Z … 2027-01-16T08:00:00Z (wall clock + 1 day)
    """

    earliest: float = EARLIEST
    ahead_s: float = 86_400.0
    clock: Callable[[], float] = field(default=time.time, compare=False, repr=False)

    def latest(self) -> float:
        """The latest timestamp allowed now."""
        return self.clock() + self.ahead_s

    def contains(self, ts: float) -> bool:
        """Whether ``ts`` (epoch seconds) lies in the window."""
        return self.earliest <= ts <= self.latest()

    def check(self, ts: float, error: type[ValueError] = ValueError) -> float:
        """``ts`` if it lies in the window, else ``error`` saying where the window is."""
        if not self.contains(ts):
            days = self.ahead_s / 86_400.0
            raise error(
                f"ts {ts!r} is outside {_iso(self.earliest)} … {_iso(self.latest())} "
                f"(wall clock + {days:g} day{'' if days == 1 else 's'})"
            )
        return ts


LIVE_WINDOW = TimeWindow()
"""What arrives now: from 2000 to a day past the wall clock."""

REPLAY_WINDOW = TimeWindow(ahead_s=366 * 86_400.0)
"""Recordings and simulations: from 2000 to a year past the wall clock (a scenario may be
simulated ahead of the machine that replays it)."""
