"""The generator: renders chunks of ticks into a (series × ticks) array.

The renderers fill one chunk per domain (:class:`~noc_assistant.simulate.core.PacketCore`,
:class:`~noc_assistant.simulate.gpu.GpuServing`) as per-tick increments for counters;
:class:`Generator` accumulates them, resets them at restarts and blanks gaps.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt

from detectors.clock import LocalClock
from noc_assistant.simulate.core import PacketCore
from noc_assistant.simulate.gpu import GpuServing
from noc_assistant.simulate.network import Network
from noc_assistant.simulate.schedule import GapWindow, ResolvedEffect, RestartEvent
from noc_assistant.simulate.series import SeriesDef
from noc_assistant.simulate.traffic import (
    PROFILE,
    Arr,
    Knobs,
    RenderChunk,
    RunState,
    TrafficProfile,
    TrafficShape,
)

__all__ = ["CHUNK_TICKS", "Generator", "RunState", "TrafficProfile"]

CHUNK_TICKS = 4096


class Generator:
    """Renders chunks of ticks into a (series × ticks) array."""

    def __init__(
        self,
        net: Network,
        series: Sequence[SeriesDef],
        *,
        seed: int,
        start: float,
        n_ticks: int,
        dt: float,
        effects: Sequence[ResolvedEffect],
        gaps: Sequence[GapWindow],
        restarts: Sequence[RestartEvent],
        profile: TrafficProfile = PROFILE,
        shift: Mapping[str, float] | None = None,
        tz: str | None = None,
        weekend: float = 1.0,
        shape: TrafficShape | None = None,
    ) -> None:
        self.net = net
        #: what ``--vary`` drew about the traffic (None: the plain simulator's)
        self.shape = shape
        #: the wall clock the traffic follows (UTC without ``tz``)
        self.clock = LocalClock(tz)
        #: Saturday and Sunday's traffic at noon relative to a working day's
        self.weekend = weekend
        #: per entity, seconds after the tick at which it is scraped (:class:`Knobs`)
        self.shift = dict(shift or {})
        self.series = list(series)
        self.seed = seed
        self.start = start
        self.n_ticks = n_ticks
        self.dt = dt
        self.effects = list(effects)
        self.gaps = list(gaps)
        self.restarts = sorted(restarts, key=lambda r: r.ts)
        self.p = profile
        self.index = {(s.entity, s.key): i for i, s in enumerate(self.series)}
        self._offsets: dict[int, float] | None = None
        self._core = PacketCore(net, profile)
        self._serving = GpuServing(net, profile)

    # -- public -------------------------------------------------------------------------------

    def n_chunks(self) -> int:
        return max(1, math.ceil(self.n_ticks / CHUNK_TICKS))

    def times(self, chunk: int) -> Arr:
        k0 = chunk * CHUNK_TICKS
        k1 = min(k0 + CHUNK_TICKS, self.n_ticks)
        return self.start + np.arange(k0, k1, dtype=np.float64) * self.dt

    def render(self, chunk: int, state: RunState) -> Arr:
        """Values of every series for the ticks of ``chunk`` (NaN = gap)."""
        t = self.times(chunk)
        if self._offsets is None:
            self._offsets = self._calibrate()
        c = self._raw(chunk, t, Knobs(self.effects, t, self.dt, self.shift), state)
        return self._finish(c, state)

    # -- assembly -----------------------------------------------------------------------------

    def _raw(self, chunk: int, t: Arr, knobs: Knobs, state: RunState) -> RenderChunk:
        c = RenderChunk(
            self.net, self.seed, chunk, t, self.dt, knobs, self.clock, self.weekend, self.shape
        )
        self._core.render(c)
        self._serving.render(c, state.engines)
        return c

    def _calibrate(self) -> dict[int, float]:
        """Counter values at the start: the process has been up for a while already."""
        n = min(self.n_ticks, 240)
        t = self.start + np.arange(n, dtype=np.float64) * self.dt
        c = self._raw(1_000_000, t, Knobs((), t), RunState())
        mean_day = 1.0 / max(float(np.mean(c.core)), 0.05) * 0.6
        offsets: dict[int, float] = {}
        for i, s in enumerate(self.series):
            if s.type == "gauge":
                continue
            inc = c.out.get((s.entity, s.key))
            if inc is None:
                continue
            ticks = self.net.uptime_s[s.entity] / self.dt
            offsets[i] = float(np.floor(np.mean(inc) * mean_day * ticks))
        return offsets

    def _finish(self, c: RenderChunk, state: RunState) -> Arr:
        n = c.n
        t = c.t
        values = np.empty((len(self.series), n))
        assert self._offsets is not None
        restarts = [r for r in self.restarts if t[0] - self.dt < r.ts <= t[-1]]
        for i, s in enumerate(self.series):
            if s.metric == "process_start_time_seconds":
                values[i] = self._process_start(s, t)
                continue
            arr = c.out.get((s.entity, s.key))
            if arr is None:
                raise KeyError(f"series not rendered: {s.entity} {s.key}")
            gap = self._gap_mask(s, t)
            if s.type == "gauge":
                v = np.round(arr, s.decimals) if s.decimals else np.round(arr)
                values[i] = np.where(gap, np.nan, v)
                continue
            inc = np.where(gap, 0.0, np.maximum(arr, 0.0))
            resets = [
                int(np.searchsorted(t, r.ts))
                for r in restarts
                if r.entity == s.entity and _restart_hits(r.scope, s.scope)
            ]
            carry = state.carry.get(i, self._offsets.get(i, 0.0))
            cum = np.empty(n)
            lo = 0
            base = carry
            for k in sorted(set(resets)):
                cum[lo:k] = base + np.cumsum(inc[lo:k])
                base = 0.0
                lo = k
            cum[lo:] = base + np.cumsum(inc[lo:])
            state.carry[i] = float(cum[-1])
            if s.type == "histogram_sum":
                cum = np.round(cum, s.decimals)
            values[i] = np.where(gap, np.nan, cum)
        return values

    def _gap_mask(self, s: SeriesDef, t: Arr) -> npt.NDArray[np.bool_]:
        mask = np.zeros(len(t), dtype=bool)
        for g in self.gaps:
            if g.entity == s.entity and (g.scope in ("node", s.scope)):
                mask |= (t >= g.t0) & (t < g.t1)
        return mask

    def _process_start(self, s: SeriesDef, t: Arr) -> Arr:
        first = float(round(self.start - self.net.uptime_s[s.entity]))
        out = np.full(len(t), first)
        for r in self.restarts:
            if r.entity == s.entity and _restart_hits(r.scope, s.scope):
                out[t >= r.ts] = r.ts
        return np.where(self._gap_mask(s, t), np.nan, out)


def _restart_hits(restart_scope: str, series_scope: str) -> bool:
    if restart_scope == "node":
        return True
    return restart_scope == series_scope
