"""Turning a normalised score stream into alarms: minimum duration, burst and hysteresis."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["Alerter", "Transition"]

Transition = Literal["open", "close"] | None


@dataclass(eq=False)
class Alerter:
    """Open after ``min_duration`` consecutive scores ≥ ``threshold`` (or at once on a score
    ≥ ``burst · threshold``); close after ``clear_after`` consecutive scores below
    ``release · threshold``; after a close, no alarm opens for ``refractory`` scores (NAB and a
    pager both count every repeat page of one episode as a false alarm).

    One noisy point never pages unless it is far beyond the bar, and an alarm does not flap
    on a score that hovers around the threshold.

    >>> al = Alerter(threshold=5.0, min_duration=2, clear_after=2)
    >>> [al.update(s) for s in [6, 1, 6, 7, 9, 4, 1, 1]]
    [None, None, None, 'open', None, None, None, 'close']
    >>> Alerter(threshold=1.0, min_duration=3, burst=2.0).update(2.5)
    'open'
    >>> al = Alerter(threshold=1.0, min_duration=1, clear_after=1, refractory=2)
    >>> [al.update(s) for s in [2, 0, 2, 2, 2]]
    ['open', 'close', None, None, 'open']
    """

    threshold: float = 1.0
    min_duration: int = 2
    clear_after: int = 4
    release: float = 0.5
    burst: float = float("inf")
    refractory: int = 0

    def __post_init__(self) -> None:
        self.firing_ = False
        self.run_ = 0
        self.cool_ = 0

    def update(self, score: float) -> Transition:
        """Feed one score; return ``"open"`` or ``"close"`` on a transition, else ``None``."""
        if not self.firing_:
            if self.cool_ > 0:
                self.cool_ -= 1
                return None
            self.run_ = self.run_ + 1 if score >= self.threshold else 0
            if self.run_ >= self.min_duration or score >= self.burst * self.threshold:
                self.firing_, self.run_ = True, 0
                return "open"
            return None
        self.run_ = self.run_ + 1 if score < self.threshold * self.release else 0
        if self.run_ >= self.clear_after:
            self.firing_, self.run_, self.cool_ = False, 0, self.refractory
            return "close"
        return None
