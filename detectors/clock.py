"""The network's wall clock: UTC timestamps read as local time, daylight saving included.

Traffic follows the subscribers' day: the busy hour, the night trough and the weekend are
local, and where the clocks change twice a year the whole daily pattern moves by an hour in
UTC. The profiles of :mod:`detectors.seasonal` place their bins on a :class:`LocalClock`'s
time, so a change of clocks moves nothing.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import numpy as np
from numpy.typing import NDArray

__all__ = ["SLOT_S", "LocalClock", "zone"]

#: a zone's offset is looked up once per slot of this many seconds: every zone's offset
#: changes on a quarter hour of UTC (its offsets are whole quarter hours, its changes on one)
SLOT_S = 900.0
#: offsets remembered before the cache starts afresh (a year of slots is 35,040)
_CACHE_MAX = 65536

F64 = NDArray[np.float64]


def zone(name: str) -> ZoneInfo:
    """The IANA time zone ``name``; a clear :class:`ValueError` for a name it does not know.

    >>> zone("Europe/Berlin").key
    'Europe/Berlin'
    >>> zone("Europe/Berlyn")
    Traceback (most recent call last):
    ...
    ValueError: tz: unknown time zone 'Europe/Berlyn' (an IANA name such as 'Europe/Berlin')
    """
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, TypeError) as exc:
        raise ValueError(
            f"tz: unknown time zone {name!r} (an IANA name such as 'Europe/Berlin')"
        ) from exc


class LocalClock:
    """UTC epoch seconds to local wall-clock seconds (``t`` plus the offset east of UTC in
    force at ``t``): of the IANA zone ``tz`` (daylight saving included), or a fixed
    ``utc_offset`` in seconds where ``tz`` is None.

    >>> berlin = LocalClock("Europe/Berlin")
    >>> change = 1743296400.0                 # 2025-03-30 01:00 UTC: 02:00 CET becomes 03:00
    >>> berlin.offset(change - 1), berlin.offset(change)
    (3600.0, 7200.0)
    >>> (berlin.local(change) - berlin.local(change - 60)) / 60   # minutes on the wall clock
    61.0
    >>> LocalClock(utc_offset=19800.0).local(0.0)             # India, no daylight saving
    19800.0
    >>> berlin.local_array(np.array([change - 1, np.nan, change])) - [change - 1, 0, change]
    array([3600.,   nan, 7200.])
    """

    def __init__(self, tz: str | None = None, utc_offset: float = 0.0) -> None:
        if not math.isfinite(utc_offset) or abs(utc_offset) > 18 * 3600.0:
            raise ValueError(f"utc_offset: {utc_offset} s is not an offset from UTC (±18 h)")
        self.tz = tz
        self.utc_offset = float(utc_offset)
        self._zone = None if tz is None else zone(tz)
        self._cache: dict[int, float] = {}

    @property
    def fixed(self) -> bool:
        """Whether the offset never changes (no zone)."""
        return self._zone is None

    def _slot_offset(self, slot: int) -> float:
        off = self._cache.get(slot)
        if off is None:
            assert self._zone is not None
            at = datetime.fromtimestamp(slot * SLOT_S, UTC).astimezone(self._zone)
            delta = at.utcoffset()
            off = 0.0 if delta is None else delta.total_seconds()
            if len(self._cache) >= _CACHE_MAX:
                self._cache.clear()
            self._cache[slot] = off
        return off

    def offset(self, t: float) -> float:
        """Seconds east of UTC at ``t`` (UTC epoch seconds)."""
        if self._zone is None:
            return self.utc_offset
        return self._slot_offset(math.floor(t / SLOT_S))

    def local(self, t: float) -> float:
        """Local wall-clock time of ``t``, in seconds since the epoch of that wall clock."""
        return t + self.offset(t)

    def local_array(self, t: F64) -> F64:
        """:meth:`local` of every element (NaN stays NaN; UTC itself: ``t`` as it is)."""
        t = np.asarray(t, np.float64)
        if self._zone is None:
            return t if self.utc_offset == 0.0 else t + self.utc_offset
        out = np.full(t.shape, np.nan)
        ok = np.isfinite(t)
        if not ok.any():
            return out
        slots = np.floor(t[ok] / SLOT_S).astype(np.int64)
        if slots.size == 1 or slots.min() == slots.max():
            out[ok] = t[ok] + self._slot_offset(int(slots.flat[0]))
            return out
        uniq, inv = np.unique(slots, return_inverse=True)
        offs = np.array([self._slot_offset(int(s)) for s in uniq.tolist()])
        out[ok] = t[ok] + offs[inv]
        return out
