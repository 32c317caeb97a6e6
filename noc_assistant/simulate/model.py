"""Traffic model: turns time, knobs and seeded noise into per-tick series values.

Rates come from a diurnal profile (quiet night, day plateau, evening peak) times slow
per-series wobble; counters grow by integer Poisson-like increments. Noise uses *common random
numbers*: every random draw is keyed by (seed, chunk, name), so two scenarios with the same seed
differ only where their knobs differ.

Each ``_render_*`` method fills the series of one entity type. Counters are produced as
per-tick increments; :class:`Generator` accumulates them, resets them at restarts and blanks
gaps.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from detectors.clock import LocalClock
from noc_assistant.simulate.faults import AMF_SERVICES, KNOBS, SMF_SERVICES
from noc_assistant.simulate.network import Entity, GpuServer, Network, plmn_digits
from noc_assistant.simulate.schedule import GapWindow, ResolvedEffect, RestartEvent
from noc_assistant.simulate.series import (
    AMF_REG_CAUSES,
    ITL_LE,
    PROMPT_LE,
    SBI_LATENCY_LE,
    SBI_OK,
    SGLANG_ITL_LE,
    SGLANG_TTFT_LE,
    SNSSAI,
    TTFT_LE,
    SeriesDef,
    skey,
)

__all__ = ["CHUNK_TICKS", "Generator", "TrafficProfile"]

Arr = npt.NDArray[np.float64]
CHUNK_TICKS = 4096
#: longest step between the samples of a knob averaged over one tick's interval (:class:`Knobs`)
KNOB_STEP_S = 15.0


@dataclass(frozen=True)
class TrafficProfile:
    """Nominal rates at the traffic peak (per network function unless noted)."""

    reg_init_peak: float = 14.0  # initial registrations / s per AMF
    reg_mob_peak: float = 30.0
    paging_peak: float = 20.0
    ran_ue_peak: float = 9000.0
    gnb_per_amf: int = 40
    home_subscribers: float = 180_000.0  # registered per AMF
    roamers: tuple[float, ...] = (2500.0, 1400.0)  # registered per AMF, per partner
    reg_base_fail: float = 0.003
    pdu_peak: float = 9.0  # PDU session creations / s per SMF
    sessions_per_smf: float = 30_000.0
    s8_peak: tuple[float, ...] = (0.25, 0.15)  # S8 Create Session / s per SMF, per partner
    ul_bytes_peak: float = 45e6  # N3 uplink bytes / s per UPF
    dl_bytes_peak: float = 320e6
    ul_packet_bytes: float = 420.0
    # EPC (converged core), per MME
    attach_peak: float = 6.0  # attaches (and PDN connectivity requests) / s
    tau_peak: float = 18.0  # tracking-area updates / s
    enb_per_mme: int = 30
    enb_ue_peak: float = 6000.0  # UE contexts on S1
    mme_sessions: float = 110_000.0  # PDN sessions of attached UEs
    ue_context_s: float = 8.0  # how long an attaching UE holds an S1 context
    s6a_base_fail: float = 0.002  # AIR/ULR answered with an error (unknown subscriber, roaming)
    dns_base_fail: float = 5e-4
    hss_provisioned: float = 400_000.0  # IMSIs provisioned in the HSS
    sbi_median_s: tuple[tuple[str, float], ...] = (
        ("nausf-auth", 0.008),
        ("nudm-uecm", 0.006),
        ("nudm-sdm", 0.005),
        ("nnrf-disc", 0.003),
        ("npcf-smpolicycontrol", 0.005),
    )
    prompt_tokens: float = 1500.0
    output_tokens: float = 250.0
    prefix_hit: float = 0.45
    accept_len: float = 3.0  # mean accepted length, num_speculative_tokens = 4
    spec_k: int = 4
    step_s: float = 0.04  # decode step time at batch 1 (no spec)
    max_num_seqs: int = 256
    prefill_tok_s: float = 20_000.0
    boost_mhz: float = 1980.0
    fb_total_mib: float = 143_771.0


PROFILE = TrafficProfile()


def _gauss_wrap(h: Arr, mu: float, sigma: float) -> Arr:
    d = np.abs(h - mu)
    d = np.minimum(d, 24.0 - d)
    return np.asarray(np.exp(-0.5 * (d / sigma) ** 2), dtype=np.float64)


def core_diurnal(hour: Arr) -> Arr:
    """Subscriber activity, 1 = evening peak (about 20 h), about 0.12 at 4 h."""
    f = 0.1 + 0.42 * _gauss_wrap(hour, 12.5, 3.2) + 0.5 * _gauss_wrap(hour, 20.0, 1.8)
    f = f + 0.18 * _gauss_wrap(hour, 9.0, 1.3)
    return np.asarray(f / 0.86, dtype=np.float64)


def gpu_diurnal(hour: Arr) -> Arr:
    """Inference demand: office hours plus an evening shoulder."""
    f = 0.3 + 0.6 * _gauss_wrap(hour, 14.0, 3.5) + 0.15 * _gauss_wrap(hour, 20.0, 2.0)
    return np.asarray(f / 0.905, dtype=np.float64)


def _erf(x: Arr) -> Arr:
    # Abramowitz & Stegun 7.1.26, |error| < 1.5e-7
    s = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    y = 1.0 - (
        ((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t + 0.254829592
    ) * t * np.exp(-a * a)
    return np.asarray(s * y, dtype=np.float64)


def lognormal_cdf(x: float, median: Arr, sigma: float) -> Arr:
    """P(X <= x) for a log-normal with the given median and log-sd."""
    z = (math.log(x) - np.log(np.maximum(median, 1e-12))) / (sigma * math.sqrt(2.0))
    return np.asarray(0.5 * (1.0 + _erf(z)), dtype=np.float64)


def _crc(key: str) -> int:
    return zlib.crc32(key.encode())


class Noise:
    """Keyed random streams for one chunk (common random numbers across scenarios)."""

    def __init__(self, seed: int, chunk: int, n: int, t: Arr) -> None:
        self.seed = seed
        self.chunk = chunk
        self.n = n
        self.t = t

    def _rng(self, key: str) -> np.random.Generator:
        return np.random.default_rng([self.seed, 7, self.chunk, _crc(key)])

    def uniform(self, key: str) -> Arr:
        return self._rng(key).random(self.n)

    def normal(self, key: str) -> Arr:
        return self._rng(key + "#z").standard_normal(self.n)

    def wobble(self, key: str, amp: float = 0.04) -> Arr:
        """Smooth multiplicative noise around 1 (three slow sines, same for every chunk)."""
        rng = np.random.default_rng([self.seed, 9, _crc(key)])
        periods = rng.uniform([1800.0, 5400.0, 18000.0], [3600.0, 10800.0, 36000.0])
        phases = rng.uniform(0, 2 * np.pi, 3)
        w = np.zeros(self.n)
        for p, ph in zip(periods, phases, strict=True):
            w += np.sin(2 * np.pi * self.t / p + ph)
        return np.asarray(1.0 + amp * w / math.sqrt(1.5), dtype=np.float64)

    def poisson(self, key: str, lam: Arr) -> Arr:
        """Poisson counts with mean ``lam`` per tick, by inverse CDF from keyed uniforms
        (normal approximation above 15)."""
        lam = np.maximum(np.nan_to_num(lam), 0.0)
        u = self.uniform(key)
        small = lam < 15.0
        out = np.zeros(self.n)
        if small.any():
            lam_s = np.where(small, lam, 0.0)
            p = np.exp(-lam_s)
            cdf = p.copy()
            active = small & (u > cdf)
            k = 0
            while active.any() and k < 80:
                k += 1
                p = p * lam_s / k
                cdf = cdf + p
                out[active] += 1.0
                active &= u > cdf
        if not small.all():
            z = self.normal(key)
            big = np.round(lam + np.sqrt(lam) * z)
            out = np.where(small, out, np.maximum(big, 0.0))
        return out

    def sround(self, key: str, x: Arr) -> Arr:
        """Stochastic rounding to integers (unbiased)."""
        return np.floor(np.maximum(x, 0.0) + self.uniform(key))


class Knobs:
    """Combined knob values over one chunk.

    The value at tick ``t`` is the knob's mean over the interval ``(t − dt, t]``, sampled at
    the midpoints of slices of at most :data:`KNOB_STEP_S`: a counter's increase over the
    interval integrates its rate, and a PM gauge is the period's mean (TS 28.552's "mean"
    measurements). Up to 15 s (one slice) it is the knob at the tick, as before; sampled at
    the tick alone, a 15-min fault that began and ended between two 15-min periods' ticks
    left no trace in the data.

    >>> from noc_assistant.simulate.schedule import ResolvedEffect
    >>> fault = ResolvedEffect("amf-1", "reg_init_mult", "mul", 11.0, 900.0, 1500.0, 0.0, 0.0)
    >>> t = np.array([0.0, 900.0, 1800.0])
    >>> Knobs([fault], t, 900.0).get("amf-1", "reg_init_mult").round(2).tolist()
    [1.0, 1.0, 7.67]
    >>> Knobs([fault], t, 15.0).get("amf-1", "reg_init_mult").tolist()
    [1.0, 11.0, 1.0]

    ``shift`` moves an entity's intervals later by its scrape phase (seconds after the tick,
    ``noc simulate --scrape-phases``): a target scraped 300 s after the tick reports the
    interval that ends then, so the fault starting at 900 s shows in its first sample.

    >>> late = Knobs([fault], t, 900.0, shift={"amf-1": 300.0})
    >>> late.get("amf-1", "reg_init_mult").round(2).tolist()
    [1.0, 4.33, 4.33]
    """

    def __init__(
        self,
        effects: Iterable[ResolvedEffect],
        t: Arr,
        dt: float = 0.0,
        shift: Mapping[str, float] | None = None,
    ) -> None:
        self.n = len(t)
        self._v: dict[tuple[str, str], Arr] = {}
        shifts = shift or {}
        t0, t1 = float(t[0]), float(t[-1]) + max(shifts.values(), default=0.0)
        subs = max(1, math.ceil(dt / KNOB_STEP_S - 1e-9))
        for eff in effects:
            if eff.t1 <= t0 - dt or eff.t0 > t1:
                continue
            te = t + shifts.get(eff.entity, 0.0)
            if subs == 1:
                env = eff.envelope(te)
            else:  # midpoints of the slices: a fault that starts at a tick is not in its period
                offsets = (np.arange(subs) + 0.5) * (dt / subs)
                env = np.mean([eff.envelope(te - o) for o in offsets], axis=0)
            key = (eff.entity, eff.key)
            if eff.mode == "mul":
                factor = 1.0 + env * (eff.value - 1.0)
                self._v[key] = self._v.get(key, np.ones(self.n)) * factor
            else:
                self._v[key] = self._v.get(key, np.zeros(self.n)) + env * eff.value

    def get(self, entity: str, key: str) -> Arr:
        got = self._v.get((entity, key))
        if got is not None:
            return got
        mode = KNOBS[key.split(":", 1)[0]]
        return np.ones(self.n) if mode == "mul" else np.zeros(self.n)

    def frac(self, entity: str, key: str) -> Arr:
        return np.clip(self.get(entity, key), 0.0, 1.0)


@dataclass
class EngineState:
    queue: float = 0.0
    running: float = 0.0


@dataclass
class RunState:
    """What carries from one chunk to the next."""

    carry: dict[int, float] = field(default_factory=dict)
    engines: dict[str, EngineState] = field(default_factory=dict)


class _EngineOut(NamedTuple):
    """What a serving engine did over each tick, before an exporter names it (``running``,
    ``waiting`` and ``kv`` as its gauges read them)."""

    running: Arr
    waiting: Arr
    kv: Arr
    pre: Arr
    """preemptions (SGLang: retractions) per second"""
    fin: Arr
    """finished requests per second"""
    abort: Arr
    gen: Arr
    """generated tokens per second"""
    prompt: Arr
    """mean prompt tokens"""
    hit: Arr
    """prefix-cache hit ratio"""
    acc: Arr
    """mean accepted length of speculative decoding"""
    ttft: Arr
    itl: Arr


class _Chunk:
    def __init__(
        self,
        net: Network,
        seed: int,
        index: int,
        t: Arr,
        dt: float,
        knobs: Knobs,
        clock: LocalClock,
        weekend: float = 1.0,
    ) -> None:
        self.net = net
        self.index = index
        self.t = t
        self.dt = dt
        self.n = len(t)
        self.knobs = knobs
        self.noise = Noise(seed, index, self.n, t)
        wall = clock.local_array(t)  # the subscribers' day
        hour = (wall % 86400.0) / 3600.0
        self.core = core_diurnal(hour)
        self.gpu = gpu_diurnal(hour)
        if weekend != 1.0:
            # Saturday and Sunday (local): the day's traffic × ``weekend`` at noon, the nights
            # as on working days (no step at midnight)
            sat_sun = (np.floor(wall / 86400.0) + 3) % 7 >= 5  # 1970-01-01 was a Thursday
            factor = 1.0 - (1.0 - weekend) * sat_sun * np.sin(np.pi * hour / 24.0) ** 2
            self.core = self.core * factor
            self.gpu = self.gpu * factor
        self.out: dict[tuple[str, str], Arr] = {}
        self.shared: dict[str, Arr] = {}

    def put(self, entity: str, key: str, value: Arr) -> None:
        self.out[(entity, key)] = value

    def count(self, entity: str, key: str, rate_per_s: Arr) -> Arr:
        """Poisson increments for a counter series from a rate per second."""
        inc = self.noise.poisson(f"{entity}|{key}", rate_per_s * self.dt)
        self.put(entity, key, inc)
        return inc

    def gauge(self, entity: str, key: str, value: Arr, rel_noise: float = 0.0) -> None:
        if rel_noise > 0:
            value = value * (1.0 + rel_noise * self.noise.normal(f"{entity}|{key}"))
        self.put(entity, key, value)


def _sbi_keys(svc: str, code: str) -> str:
    method = SBI_OK[svc][0]
    return skey(
        "free5gc_sbi_outbound_request_total",
        target_service_name=svc,
        status_code=code,
        method=method,
    )


def _sbi_hist_key(svc: str, suffix: str, le: str | None = None) -> str:
    method, ok = SBI_OK[svc]
    metric = f"free5gc_sbi_outbound_request_duration_seconds_{suffix}"
    if le is not None:
        return skey(metric, le=le, method=method, target_service_name=svc, status_code=ok)
    return skey(metric, method=method, target_service_name=svc, status_code=ok)


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
    ) -> None:
        self.net = net
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

    def _raw(self, chunk: int, t: Arr, knobs: Knobs, state: RunState) -> _Chunk:
        c = _Chunk(self.net, self.seed, chunk, t, self.dt, knobs, self.clock, self.weekend)
        for e in self.net.by_type("amf"):
            self._amf(c, e)
        for e in self.net.by_type("smf"):
            self._smf(c, e)
        for e in self.net.by_type("upf"):
            self._upf(c, e)
        for e in self.net.by_type("pcf"):
            self._pcf(c, e)
        for e in self.net.by_type("mme"):
            self._mme(c, e)
        for e in self.net.by_type("hss"):
            self._hss(c, e)
        for srv in self.net.gpu_servers:
            eng = state.engines.setdefault(srv.id, EngineState())
            self._gpu(c, srv, eng)
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

    def _finish(self, c: _Chunk, state: RunState) -> Arr:
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

    # -- packet core --------------------------------------------------------------------------

    def _sbi_state(self, c: _Chunk, ent: str, services: Sequence[str]) -> dict[str, Arr]:
        """Failure share of each service call (not answered 2xx, or never sent)."""
        k = c.knobs
        err: dict[str, Arr] = {}
        for svc in services:
            e = (
                k.get(ent, f"sbi_timeout:{svc}")
                + k.get(ent, f"sbi_connerr:{svc}")
                + k.get(ent, f"sbi_unavail:{svc}")
                + k.get(ent, f"sbi_skip:{svc}")
            )
            err[svc] = np.clip(e, 0.0, 1.0)
        return err

    @staticmethod
    def _sbi_timeouts(c: _Chunk, ent: str, svc: str) -> Arr:
        """Share of ``svc`` calls answered 504: a producer that does not answer in time; an
        unavailable one times out too, but for the NRF, which answers 503."""
        k = c.knobs
        to = k.frac(ent, f"sbi_timeout:{svc}")
        if svc == "nnrf-disc":
            return to
        return np.clip(to + k.frac(ent, f"sbi_unavail:{svc}"), 0.0, 1.0)

    def _sbi_emit(self, c: _Chunk, ent: str, svc: str, rate: Arr, load: Arr) -> None:
        k = c.knobs
        skip = k.frac(ent, f"sbi_skip:{svc}")
        sent = rate * (1.0 - skip)
        to = self._sbi_timeouts(c, ent, svc)
        ce = k.frac(ent, f"sbi_connerr:{svc}")
        un = k.frac(ent, f"sbi_unavail:{svc}") if svc == "nnrf-disc" else np.zeros(c.n)
        ok_share = np.clip(1.0 - to - ce - un, 0.0, 1.0)
        ok = c.count(ent, _sbi_keys(svc, SBI_OK[svc][1]), sent * ok_share)
        c.count(ent, _sbi_keys(svc, "504"), sent * to)
        c.count(ent, _sbi_keys(svc, "0"), sent * ce)
        if svc == "nnrf-disc":
            c.count(ent, _sbi_keys(svc, "503"), sent * un)
        median = dict(self.p.sbi_median_s)[svc] * k.get(ent, f"sbi_latency_mult:{svc}")
        median = median * (1.0 + 0.15 * load) * c.noise.wobble(f"{ent}|lat|{svc}", 0.05)
        sigma = 0.45
        mean = median * math.exp(sigma * sigma / 2)
        c.put(ent, _sbi_hist_key(svc, "count"), ok)
        c.put(ent, _sbi_hist_key(svc, "bucket", "+Inf"), ok)
        below = np.minimum(
            c.noise.sround(
                f"{ent}|le|{svc}", ok * lognormal_cdf(float(SBI_LATENCY_LE), median, sigma)
            ),
            ok,
        )
        c.put(ent, _sbi_hist_key(svc, "bucket", SBI_LATENCY_LE), below)
        jitter = 1.0 + 0.1 * c.noise.normal(f"{ent}|lsum|{svc}")
        c.put(ent, _sbi_hist_key(svc, "sum"), ok * mean * np.maximum(jitter, 0.5))

    def _load_share(self, e: Entity) -> float:
        """``e``'s traffic relative to a typical NF of its type: its share of the type's
        traffic times their number (about 1 each; a larger network carries more traffic,
        not thinner NFs)."""
        return e.share * len(self.net.by_type(e.type))

    def _amf(self, c: _Chunk, e: Entity) -> None:
        p, k, nz, ent = self.p, c.knobs, c.noise, e.id
        up = 1.0 - k.frac(ent, "drain")
        gl = k.frac(ent, "gnb_loss")
        reach = (1.0 - gl) * up
        s2 = self._load_share(e)
        load = c.core * nz.wobble(f"{ent}|load")
        c.gauge(ent, "gnb", np.round(p.gnb_per_amf * reach))
        ran = p.ran_ue_peak * s2 * load * reach
        c.gauge(ent, "ran_ue", np.round(ran), 0.01)
        c.gauge(ent, "amf_session", np.round(ran * 0.92), 0.01)

        err = self._sbi_state(c, ent, AMF_SERVICES)
        cong = k.frac(ent, "congestion_reject")
        reg_calls = ("nausf-auth", "nudm-uecm", "nudm-sdm")  # what a registration waits for
        f_sbi = 1.0 - np.prod([1.0 - err[svc] for svc in reg_calls], axis=0)
        lam_init = p.reg_init_peak * s2 * load * k.get(ent, "reg_init_mult") * reach
        plmns = [
            (
                plmn_digits(self.net.home_plmn),
                1.0 - sum(x.share for x in self.net.partners),
                np.zeros(c.n),
            )
        ]
        plmns += [
            (plmn_digits(x.plmn), x.share, k.frac(ent, f"plmn_fail:{x.plmn}"))
            for x in self.net.partners
        ]
        fail_total = np.zeros(c.n)
        exp_fail = np.zeros(c.n)
        succ_rate = np.zeros(c.n)
        for digits, share, pf in plmns:
            lam = lam_init * share
            f = 1.0 - (1.0 - p.reg_base_fail) * (1.0 - cong) * (1.0 - f_sbi) * (1.0 - pf)
            req = c.count(ent, skey("fivegs_amffunction_rm_reginitreq", plmnid=digits), lam)
            fail = np.minimum(nz.poisson(f"{ent}|regfail|{digits}", lam * f * c.dt), req)
            c.put(ent, skey("fivegs_amffunction_rm_reginitsucc", plmnid=digits), req - fail)
            fail_total += fail
            exp_fail += lam * f
            succ_rate += lam * (1.0 - f)
        share22 = np.clip(
            lam_init * (p.reg_base_fail * 0.3 + cong) / np.maximum(exp_fail, 1e-9), 0.0, 1.0
        )
        c22 = np.minimum(nz.sround(f"{ent}|c22", fail_total * share22), fail_total)
        # an AUSF or UDM answer that timed out (504) is rejected with 5GMM cause #90, "payload
        # was not forwarded" (Open5GS gmm_cause_from_sbi); other failures with #111
        timeouts = 1.0 - np.prod(
            [1.0 - self._sbi_timeouts(c, ent, svc) for svc in reg_calls], axis=0
        )
        share90 = np.clip(
            lam_init
            * (p.reg_base_fail * 0.1 + (1.0 - cong) * timeouts)
            / np.maximum(exp_fail, 1e-9),
            0.0,
            1.0,
        )
        c90 = np.minimum(nz.sround(f"{ent}|c90", fail_total * share90), fail_total - c22)
        causes = {"22": c22, "90": c90, "111": fail_total - c22 - c90}
        for cause in AMF_REG_CAUSES:
            c.put(ent, skey("fivegs_amffunction_rm_reginitfail", cause=cause), causes[cause])
        c.shared[f"{ent}|reg_succ_rate"] = succ_rate

        lam_mob = p.reg_mob_peak * s2 * load * k.get(ent, "reg_mob_mult") * reach
        f_mob = 1.0 - (1.0 - 0.002) * (1.0 - 0.5 * cong) * (1.0 - err["nudm-sdm"])
        mob = c.count(ent, "fivegs_amffunction_rm_regmobreq", lam_mob)
        mob_fail = np.minimum(nz.poisson(f"{ent}|mobfail", lam_mob * f_mob * c.dt), mob)
        c.put(ent, "fivegs_amffunction_rm_regmobsucc", mob - mob_fail)

        lam_pg = p.paging_peak * s2 * load * up * (1.0 + 0.6 * gl)
        pg = c.count(ent, "fivegs_amffunction_mm_paging5greq", lam_pg)
        pg_ok = np.clip(0.985 * (1.0 - 0.95 * gl), 0.0, 1.0)
        pg_fail = np.minimum(nz.poisson(f"{ent}|pgfail", lam_pg * (1.0 - pg_ok) * c.dt), pg)
        c.put(ent, "fivegs_amffunction_mm_paging5gsucc", pg - pg_fail)

        lam_auth = lam_init * (1.0 - cong) * 1.02 + lam_mob * 0.05
        c.count(ent, "fivegs_amffunction_amf_authreq", lam_auth)
        c.count(ent, skey("fivegs_amffunction_amf_authfail", cause="20"), lam_auth * 0.0008)
        synch = 0.002 + k.get(ent, "auth_synch_fail")
        c.count(ent, skey("fivegs_amffunction_amf_authfail", cause="21"), lam_auth * synch)

        slow = (0.9 + 0.1 * c.core) * nz.wobble(f"{ent}|subs", 0.01)
        sub_keep = (1.0 - k.frac(ent, "sub_loss")) * up
        home = plmns[0][0]
        c.gauge(
            ent,
            skey("fivegs_amffunction_rm_registeredsubnbr", plmnid=home, snssai=SNSSAI),
            np.round(p.home_subscribers * self._load_share(e) * slow * sub_keep),
        )
        for j, x in enumerate(self.net.partners):
            keep = 1.0 - k.frac(ent, f"plmn_sub_loss:{x.plmn}")
            roam = p.roamers[j % len(p.roamers)] * self._load_share(e) * slow * sub_keep * keep
            c.gauge(
                ent,
                skey(
                    "fivegs_amffunction_rm_registeredsubnbr",
                    plmnid=plmn_digits(x.plmn),
                    snssai=SNSSAI,
                ),
                np.round(roam),
            )

        admitted = lam_init * (1.0 - cong)
        rates = {
            "nausf-auth": lam_auth,
            "nudm-uecm": admitted * (1.0 - err["nausf-auth"]),
            "nudm-sdm": admitted * (1.0 - err["nausf-auth"]) + 0.3 * lam_mob,
            "nnrf-disc": (0.3 + 0.002 * lam_init) * k.get(ent, "disc_rate_mult") * up,
        }
        for svc in AMF_SERVICES:
            self._sbi_emit(c, ent, svc, rates[svc], load)

    def _smf(self, c: _Chunk, e: Entity) -> None:
        p, k, nz, ent = self.p, c.knobs, c.noise, e.id
        up = 1.0 - k.frac(ent, "drain")
        s2 = self._load_share(e)
        load = c.core * nz.wobble(f"{ent}|load")
        lam_pdu = p.pdu_peak * s2 * load * up
        peers = self.net.smf_peers[ent]
        share_u = 1.0 / len(peers)
        lost = {u: k.frac(u, "n4_lost") for u in peers}
        f_n4 = sum((share_u * lost[u] for u in peers), np.zeros(c.n))
        err = self._sbi_state(c, ent, SMF_SERVICES)
        f_udm, f_pcf = err["nudm-sdm"], err["npcf-smpolicycontrol"]
        to_udm = np.clip(k.get(ent, "sbi_timeout:nudm-sdm"), 0, 1)
        to_pcf = np.clip(k.get(ent, "sbi_timeout:npcf-smpolicycontrol"), 0, 1)
        base403 = 0.001
        f_all = 1.0 - (1 - base403) * (1 - f_udm) * (1 - f_pcf) * (1 - f_n4)
        w504 = to_udm + (1 - f_udm) * to_pcf
        w403 = np.full(c.n, base403)
        w500 = np.maximum(f_all - w504 - w403, 0.0) + 1e-4
        req = c.count(
            ent,
            skey(
                "fivegs_smffunction_sm_pdusessioncreationreq",
                plmnid=plmn_digits(self.net.home_plmn),
                snssai=SNSSAI,
            ),
            lam_pdu,
        )
        fail = np.minimum(nz.poisson(f"{ent}|pdufail", lam_pdu * f_all * c.dt), req)
        c.put(
            ent,
            skey(
                "fivegs_smffunction_sm_pdusessioncreationsucc",
                plmnid=plmn_digits(self.net.home_plmn),
                snssai=SNSSAI,
            ),
            req - fail,
        )
        wsum = w504 + w403 + w500
        n504 = np.minimum(nz.sround(f"{ent}|c504", fail * w504 / wsum), fail)
        n403 = np.minimum(nz.sround(f"{ent}|c403", fail * w403 / wsum), fail - n504)
        for cause, v in (("403", n403), ("500", fail - n504 - n403), ("504", n504)):
            c.put(ent, skey("fivegs_smffunction_sm_pdusessioncreationfail", cause=cause), v)

        lam_n4 = lam_pdu * (1 - f_udm) * (1 - f_pcf)
        c.count(ent, "fivegs_smffunction_sm_n4sessionestabreq", lam_n4)
        c.count(ent, skey("fivegs_smffunction_sm_n4sessionestabfail", cause="72"), lam_n4 * f_n4)
        c.count(ent, skey("fivegs_smffunction_sm_n4sessionestabfail", cause="74"), lam_n4 * 3e-4)
        c.count(ent, skey("fivegs_smffunction_sm_n4sessionestabfail", cause="77"), lam_n4 * 1e-4)
        c.gauge(ent, "pfcp_peers_active", sum(((lost[u] < 0.5) * up for u in peers), np.zeros(c.n)))
        sessions = p.sessions_per_smf * s2 * (0.45 + 0.55 * c.core) * nz.wobble(f"{ent}|sess", 0.02)
        total = np.zeros(c.n)
        for u in peers:
            part = sessions * share_u * (1.0 - k.frac(u, "session_decay")) * up
            c.shared[f"{u}|sessions|{ent}"] = part
            c.shared[f"{u}|n4req|{ent}"] = lam_n4 * share_u * (1.0 - lost[u])
            total = total + part
        c.gauge(ent, "pfcp_sessions_active", np.round(total), 0.002)
        c.gauge(
            ent,
            skey(
                "fivegs_smffunction_sm_sessionnbr",
                plmnid=plmn_digits(self.net.home_plmn),
                snssai=SNSSAI,
            ),
            np.round(total * 0.985),
            0.002,
        )
        for j, x in enumerate(self.net.partners):
            rate = p.s8_peak[j % len(p.s8_peak)] * s2 * load * up
            rate = rate * (1.0 - k.frac(ent, f"s8_fail:{x.plmn}"))
            c.count(ent, skey("gtp_node_s5c_rx_createsession", addr=x.s8_peer), rate)
        c.shared[f"{ent}|pdu_rate"] = lam_pdu
        rates = {
            "nudm-sdm": lam_pdu,
            "npcf-smpolicycontrol": lam_pdu * (1 - f_udm),
            "nnrf-disc": (0.2 + 0.002 * lam_pdu) * k.get(ent, "disc_rate_mult") * up,
        }
        for svc in SMF_SERVICES:
            self._sbi_emit(c, ent, svc, rates[svc], load)
        ce = k.frac(ent, "sbi_connerr:npcf-smpolicycontrol")
        skip = k.frac(ent, "sbi_skip:npcf-smpolicycontrol")
        c.shared[f"{ent}|pcf_sm_rate"] = rates["npcf-smpolicycontrol"] * (1 - ce) * (1 - skip)

    def _upf(self, c: _Chunk, e: Entity) -> None:
        p, k, nz, ent = self.p, c.knobs, c.noise, e.id
        up = 1.0 - k.frac(ent, "drain")
        smfs = self.net.smfs_of_upf(ent)
        lost = k.frac(ent, "n4_lost")
        sessions = sum((c.shared[f"{ent}|sessions|{m}"] for m in smfs), np.zeros(c.n))
        c.gauge(ent, "fivegs_upffunction_upf_sessionnbr", np.round(sessions), 0.002)
        c.gauge(ent, "pfcp_peers_active", np.round(len(smfs) * (lost < 0.5) * up))
        n4 = sum((c.shared[f"{ent}|n4req|{m}"] for m in smfs), np.zeros(c.n))
        c.count(ent, "fivegs_upffunction_sm_n4sessionestabreq", n4)
        weight = len(smfs) / 1.333
        traffic = c.core**1.3 * nz.wobble(f"{ent}|bytes", 0.06) * weight * up
        drop = k.frac(ent, "gtpu_drop")
        ul = p.ul_bytes_peak * traffic
        jitter = 1.0 + 0.01 * nz.normal(f"{ent}|ul")
        c.put(
            ent,
            skey("node_network_receive_bytes_total", device="n3"),
            np.round(ul * (1 - drop) * jitter * c.dt),
        )
        dl = p.dl_bytes_peak * traffic * np.clip(1.0 - 1.8 * drop, 0.0, 1.0)
        c.put(
            ent,
            skey("node_network_transmit_bytes_total", device="n3"),
            np.round(dl * (1.0 + 0.01 * nz.normal(f"{ent}|dl")) * c.dt),
        )
        pkts = ul / p.ul_packet_bytes
        c.put(
            ent,
            skey("node_network_receive_packets_total", device="n3"),
            np.round(pkts * (1 - drop) * jitter * c.dt),
        )
        c.count(ent, skey("node_network_receive_drop_total", device="n3"), pkts * (drop + 2e-6))

    def _pcf(self, c: _Chunk, e: Entity) -> None:
        k, ent = c.knobs, e.id
        up = 1.0 - k.frac(ent, "drain")
        am = (
            sum((c.shared[f"{a.id}|reg_succ_rate"] for a in self.net.by_type("amf")), np.zeros(c.n))
            * up
        )
        sm = (
            sum((c.shared[f"{m.id}|pcf_sm_rate"] for m in self.net.by_type("smf")), np.zeros(c.n))
            * up
        )
        home = plmn_digits(self.net.home_plmn)
        for name, rate in (("am", am), ("sm", sm)):
            req = c.count(
                ent,
                skey(f"fivegs_pcffunction_pa_policy{name}assoreq", plmnid=home, snssai=SNSSAI),
                rate,
            )
            fail = np.minimum(c.noise.poisson(f"{ent}|{name}fail", rate * 5e-4 * c.dt), req)
            c.put(
                ent,
                skey(f"fivegs_pcffunction_pa_policy{name}assosucc", plmnid=home, snssai=SNSSAI),
                req - fail,
            )
        sessions = sum(
            (
                c.shared[f"{u}|sessions|{m}"]
                for m, peers in self.net.smf_peers.items()
                for u in peers
            ),
            np.zeros(c.n),
        )
        c.gauge(
            ent,
            skey("fivegs_pcffunction_pa_sessionnbr", plmnid=home, snssai=SNSSAI),
            np.round(sessions * 0.99 * up),
            0.002,
        )

    # -- EPC (converged core) -----------------------------------------------------------------

    def _s6a_fail(self, c: _Chunk) -> Arr:
        """Share of S6a requests the HSS answers with an error (one HSS, as in Open5GS)."""
        hss = self.net.by_type("hss")
        extra = sum((c.knobs.frac(h.id, "s6a_error") for h in hss), np.zeros(c.n))
        return np.asarray(np.clip(self.p.s6a_base_fail + extra, 0.0, 1.0), dtype=np.float64)

    def _mme(self, c: _Chunk, e: Entity) -> None:
        """S1 state, gateway-selection DNS lookups, and the S6a load it puts on the HSS.

        An attach (or PDN connectivity request) asks the HSS for authentication vectors (AIR)
        and registers the MME (ULR) and selects its SGW and PGW by DNS (TS 29.303); a
        tracking-area update does so now and then. Failed S6a requests are retried."""
        p, k, nz, ent = self.p, c.knobs, c.noise, e.id
        up = 1.0 - k.frac(ent, "drain")
        reach = (1.0 - k.frac(ent, "gnb_loss")) * up
        s2 = self._load_share(e)
        load = c.core * nz.wobble(f"{ent}|load")
        c.gauge(ent, "enb", np.round(p.enb_per_mme * reach))
        nominal = p.attach_peak * s2 * load * reach
        lam_att = nominal * k.get(ent, "reg_init_mult")
        lam_tau = p.tau_peak * s2 * load * k.get(ent, "reg_mob_mult") * reach
        fail = self._s6a_fail(c)
        keep = (1.0 - k.frac(ent, "sub_loss")) * reach
        ue = p.enb_ue_peak * s2 * load * keep * (1.0 - 0.3 * (fail - p.s6a_base_fail))
        ue = ue + p.ue_context_s * np.maximum(lam_att - nominal, 0.0)
        c.gauge(ent, "enb_ue", np.round(ue), 0.01)
        slow = (0.9 + 0.1 * c.core) * nz.wobble(f"{ent}|subs", 0.01)
        c.gauge(ent, "mme_session", np.round(p.mme_sessions * s2 * slow * keep), 0.002)
        lookups = lam_att + 0.05 * lam_tau
        queries = c.count(ent, "dns_query_total", lookups)
        f_dns = np.clip(p.dns_base_fail + k.get(ent, "dns_fail"), 0.0, 1.0)
        failed = np.minimum(nz.poisson(f"{ent}|dnsfail", lookups * f_dns * c.dt), queries)
        c.put(ent, "dns_query_failed", failed)
        retry = 1.0 + 1.5 * fail
        c.shared[f"{ent}|s6a_air"] = (lam_att + 0.02 * lam_tau) * retry
        c.shared[f"{ent}|s6a_ulr"] = (lam_att * (1.0 - fail) + 0.05 * lam_tau) * retry
        c.shared[f"{ent}|s6a_pur"] = 0.03 * lam_att * up

    def _hss(self, c: _Chunk, e: Entity) -> None:
        p, k, nz, ent = self.p, c.knobs, c.noise, e.id
        up = 1.0 - k.frac(ent, "drain")
        mmes = self.net.by_type("mme")
        fail = self._s6a_fail(c)
        for msg in ("air", "ulr"):
            rate = sum((c.shared[f"{m.id}|s6a_{msg}"] for m in mmes), np.zeros(c.n)) * up
            got = c.count(ent, f"s6a_rx_{msg}", rate)
            err = np.minimum(nz.poisson(f"{ent}|{msg}err", rate * fail * c.dt), got)
            c.put(ent, f"s6a_rx_{msg}_error", err)
        pur = sum((c.shared[f"{m.id}|s6a_pur"] for m in mmes), np.zeros(c.n)) * up
        c.count(ent, "s6a_rx_pur", pur)
        c.gauge(ent, "hss_imsi", np.full(c.n, round(p.hss_provisioned * len(mmes) / 2)))

    # -- GPU serving --------------------------------------------------------------------------

    def _gpu(self, c: _Chunk, srv: GpuServer, st: EngineState) -> None:
        p, k, nz, ent, n, dt = self.p, c.knobs, c.noise, srv.id, c.n, c.dt
        up = 1.0 - k.frac(ent, "drain")
        lam = (
            srv.peak_rps
            * (
                c.gpu * nz.wobble(f"{ent}|load", 0.06) * k.get(ent, "arrival_mult")
                + k.get(ent, "arrival_boost")
            )
            * up
            * np.maximum(1.0 + 0.05 * nz.normal(f"{ent}|arr"), 0.2)
        )
        prompt = p.prompt_tokens * k.get(ent, "prompt_len_mult") * nz.wobble(f"{ent}|P", 0.05)
        out_len = p.output_tokens * k.get(ent, "output_len_mult") * nz.wobble(f"{ent}|O", 0.05)
        hit = p.prefix_hit + (1.0 - p.prefix_hit) * k.frac(ent, "prefix_hit_gain")
        hit = np.clip(hit * nz.wobble(f"{ent}|hit", 0.04), 0.0, 0.98)
        acc = np.clip(
            p.accept_len * k.get(ent, "accept_len_mult") * nz.wobble(f"{ent}|acc", 0.03),
            1.0,
            p.spec_k + 1.0,
        )
        comp = k.frac(ent, "compressed")
        cap = srv.kv_tokens * k.get(ent, "kv_capacity_mult")
        hang = k.frac(ent, "hang") > 0.5
        down = k.frac(ent, "engine_down") > 0.5
        thermal = {g: k.frac(ent, f"thermal:{g}") for g in srv.gpus}
        clock = {
            g: p.boost_mhz * (1.0 - 0.38 * thermal[g]) * (1 + 0.002 * nz.normal(f"{ent}|clk|{g}"))
            for g in srv.gpus
        }
        cf = np.minimum.reduce([clock[g] / p.boost_mhz for g in srv.gpus])

        running = np.zeros(n)
        waiting = np.zeros(n)
        kv = np.zeros(n)
        ttft = np.zeros(n)
        itl = np.zeros(n)
        gen = np.zeros(n)
        fin = np.zeros(n)
        pre = np.zeros(n)
        abort = np.zeros(n)
        q, r_prev = st.queue, st.running
        give_up = 1.0 - math.exp(-dt / 90.0)  # share of the queue abandoning per tick
        for i in range(n):
            if down[i]:
                q, r_prev = 0.0, 0.0
                continue
            per_seq = prompt[i] + out_len[i] / 2.0
            ctxf = 1.0 + per_seq / 32000.0
            spec = 1.25 / acc[i] / cf[i] * ctxf
            if comp[i] > 0.5:
                a, b = p.step_s * 0.8 * spec, p.step_s * 0.8 * spec / 40.0
            else:
                a, b = p.step_s * spec, p.step_s * spec / 96.0
            prefill = prompt[i] * (1.0 - hit[i]) / (p.prefill_tok_s * cf[i])
            if hang[i]:
                running[i] = r_prev
                q += lam[i] * dt
                ab = q * give_up / dt
                q -= ab * dt
                waiting[i], abort[i] = q, ab
                kv[i] = min(r_prev * per_seq / cap[i], 1.0)
                itl[i] = a + b * r_prev
                continue
            r_max = min(float(p.max_num_seqs), 0.985 * cap[i] / per_seq)
            served_q = q * (1.0 - math.exp(-dt / 30.0))
            lam_eff = lam[i] + served_q / dt
            base = 0.02 + prefill + out_len[i] * a
            denom = 1.0 - lam_eff * out_len[i] * b
            r_dem = lam_eff * base / denom if denom > 1e-6 else float("inf")
            if r_dem <= r_max:
                r = r_dem
                q -= served_q
                mu = lam_eff
                pre_rate = 0.0
            else:
                r = r_max
                e2e = base + out_len[i] * b * r
                mu = r / e2e
                q = max(q + (lam[i] - mu) * dt, 0.0)
                kv_bound = r_max < p.max_num_seqs
                over = min(r_dem / r_max - 1.0, 3.0) if math.isfinite(r_dem) else 3.0
                pre_rate = r * 0.02 * (0.5 + over) if kv_bound else 0.0
            ab = q * give_up / dt
            q = max(q - ab * dt, 0.0)
            step = a + b * r
            running[i], waiting[i] = r, q
            kv[i] = min(r * per_seq / cap[i], 1.0)
            itl[i] = step
            gen[i] = r / step
            fin[i] = mu
            pre[i] = pre_rate
            abort[i] = ab
            ttft[i] = (
                0.02 + prefill + (q / mu if mu > 0 else 0.0) + (0.3 * pre_rate / max(mu, 1e-6))
            )
            r_prev = r
        st.queue, st.running = q, r_prev

        # what the engine's gauges read (either exporter): the state with its jitter
        eng = _EngineOut(
            np.round(running * (1 + 0.03 * nz.normal(f"{ent}|run"))),
            np.round(waiting * (1 + 0.05 * np.abs(nz.normal(f"{ent}|wait")))),
            np.clip(kv * (1 + 0.01 * nz.normal(f"{ent}|kv")), 0.0, 1.0),
            *(pre, fin, abort, gen, prompt, hit, acc, ttft, itl),
        )
        if srv.engine == "sglang":
            self._sglang(c, ent, eng, cap)
        else:
            self._vllm(c, ent, eng)

        util_eng = np.clip(running / 60.0 + 0.4 * np.minimum(fin * prompt / 40000.0, 1.0), 0.0, 1.0)
        for g in srv.gpus:
            gk = f"{ent}|{g}"
            u = np.where(down, 0.0, util_eng)
            util = np.where(hang, 100.0, np.clip(12.0 + 100.0 * u, 0.0, 100.0))
            util = np.where(down, 0.0, util)
            c.gauge(
                ent,
                f"DCGM_FI_DEV_GPU_UTIL@{g}",
                np.clip(util + 2.0 * nz.normal(gk + "util"), 0, 100),
            )
            ratio = clock[g] / p.boost_mhz
            power = (85.0 + 560.0 * u**0.9) * (0.55 + 0.45 * ratio)
            power = np.where(hang, 255.0, power)
            power = np.where(down, 72.0, power)
            power = np.minimum(power * (1 + 0.02 * nz.normal(gk + "pw")), 700.0)
            c.gauge(ent, f"DCGM_FI_DEV_POWER_USAGE@{g}", power)
            c.put(ent, f"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION@{g}", np.round(power * dt * 1000))
            temp = 30.0 + 0.06 * power + 45.0 * thermal[g] + 0.5 * nz.normal(gk + "t")
            c.gauge(ent, f"DCGM_FI_DEV_GPU_TEMP@{g}", temp)
            c.gauge(ent, f"DCGM_FI_DEV_MEMORY_TEMP@{g}", temp + 5.0 + 8.0 * thermal[g])
            c.gauge(ent, f"DCGM_FI_DEV_SM_CLOCK@{g}", np.where(down, 345.0, clock[g]))
            tensor = u * 0.55 * (1.0 - 0.4 * comp)
            tensor = np.where(hang, 0.01, tensor)
            c.gauge(
                ent,
                f"DCGM_FI_PROF_PIPE_TENSOR_ACTIVE@{g}",
                np.clip(tensor * (1 + 0.03 * nz.normal(gk + "ta")), 0, 1),
            )
            reasons = (
                np.where(thermal[g] > 0.25, 0x20, 0)
                | np.where(thermal[g] > 0.6, 0x40, 0)
                | np.where(power >= 695.0, 0x4, 0)
                | np.where(u < 0.02, 0x1, 0)
            )
            c.gauge(ent, f"DCGM_FI_DEV_CLOCKS_EVENT_REASONS@{g}", reasons.astype(np.float64))
            c.gauge(ent, f"DCGM_FI_DEV_XID_ERRORS@{g}", np.round(k.get(ent, f"xid:{g}")))
            fb = np.where(down, 420.0, p.fb_total_mib * 0.9)
            c.gauge(ent, f"DCGM_FI_DEV_FB_USED@{g}", fb + np.round(nz.normal(gk + "fb")))

    def _vllm(self, c: _Chunk, ent: str, e: _EngineOut) -> None:
        """A vLLM engine's series (``vllm:*``, research/telemetry.md §2.1)."""
        p = self.p
        c.gauge(ent, "vllm:num_requests_running", e.running)
        c.gauge(ent, "vllm:num_requests_waiting", e.waiting)
        c.gauge(ent, "vllm:kv_cache_usage_perc", e.kv)
        c.count(ent, "vllm:num_preemptions_total", e.pre)
        stop = c.count(
            ent, skey("vllm:request_success_total", finished_reason="stop"), e.fin * 0.93
        )
        length = c.count(
            ent, skey("vllm:request_success_total", finished_reason="length"), e.fin * 0.07
        )
        c.count(
            ent,
            skey("vllm:request_success_total", finished_reason="abort"),
            e.abort + e.fin * 0.002,
        )
        fin_n = stop + length
        prompt_rate = e.fin * e.prompt + e.pre * e.prompt * 0.5
        ptok = c.count(ent, "vllm:prompt_tokens_total", prompt_rate)
        gtok = c.count(ent, "vllm:generation_tokens_total", e.gen)
        c.put(ent, "vllm:prefix_cache_queries_total", ptok)
        c.put(ent, "vllm:prefix_cache_hits_total", np.round(ptok * e.hit))
        drafts = c.count(ent, "vllm:spec_decode_num_drafts_total", e.gen / e.acc)
        c.put(ent, "vllm:spec_decode_num_draft_tokens_total", drafts * p.spec_k)
        c.put(
            ent,
            "vllm:spec_decode_num_accepted_tokens_total",
            np.minimum(np.round(drafts * (e.acc - 1.0)), drafts * p.spec_k),
        )
        self._hist(
            c,
            ent,
            "vllm:time_to_first_token_seconds",
            TTFT_LE,
            fin_n,
            np.maximum(e.ttft, 0.005),
            0.6,
        )
        self._hist(
            c, ent, "vllm:inter_token_latency_seconds", ITL_LE, gtok, np.maximum(e.itl, 1e-4), 0.3
        )
        self._hist(
            c, ent, "vllm:request_prompt_tokens", PROMPT_LE, fin_n, np.maximum(e.prompt, 1.0), 0.9
        )

    def _sglang(self, c: _Chunk, ent: str, e: _EngineOut, cap: Arr) -> None:
        """An SGLang engine's series (``sglang:*``, research/telemetry.md §2.2): the same
        quantities under SGLang's names and kinds, e.g. KV pool usage is ``token_usage``,
        preemptions are retractions, and speculative decoding and the prefix cache report
        gauges (``spec_accept_length``, ``cache_hit_rate``) beside token counters."""
        p = self.p
        c.gauge(ent, "sglang:num_running_reqs", e.running)
        c.gauge(ent, "sglang:num_queue_reqs", e.waiting)
        c.gauge(ent, "sglang:token_usage", e.kv)
        c.gauge(ent, "sglang:num_used_tokens", np.round(e.kv * cap))
        c.gauge(ent, "sglang:max_total_num_tokens", np.round(cap))
        c.gauge(ent, "sglang:gen_throughput", e.gen, rel_noise=0.02)
        c.gauge(ent, "sglang:cache_hit_rate", e.hit)
        c.gauge(ent, "sglang:spec_accept_length", e.acc, rel_noise=0.01)
        c.gauge(ent, "sglang:spec_accept_rate", (e.acc - 1.0) / p.spec_k)
        c.count(ent, "sglang:num_retracted_requests_total", e.pre)
        fin_n = c.count(ent, "sglang:num_requests_total", e.fin)
        c.count(ent, "sglang:num_aborted_requests_total", e.abort + e.fin * 0.002)
        # the tokenizer counts a request's prompt once, when it finishes (vLLM counts the
        # prompt tokens each prefill computes, re-prefills after a preemption included)
        ptok = c.count(ent, "sglang:prompt_tokens_total", e.fin * e.prompt)
        gtok = c.count(ent, "sglang:generation_tokens_total", e.gen)
        c.put(ent, "sglang:cached_tokens_total", np.round(ptok * e.hit))
        self._hist(
            c,
            ent,
            "sglang:time_to_first_token_seconds",
            SGLANG_TTFT_LE,
            fin_n,
            np.maximum(e.ttft, 0.005),
            0.6,
        )
        self._hist(
            c,
            ent,
            "sglang:inter_token_latency_seconds",
            SGLANG_ITL_LE,
            gtok,
            np.maximum(e.itl, 1e-4),
            0.3,
        )

    def _hist(
        self,
        c: _Chunk,
        ent: str,
        metric: str,
        les: tuple[str, ...],
        count: Arr,
        median: Arr,
        sigma: float,
    ) -> None:
        c.put(ent, f"{metric}_count", count)
        mean = median * math.exp(sigma * sigma / 2)
        c.put(ent, f"{metric}_sum", count * mean)
        for le in les:
            if le == "+Inf":
                c.put(ent, skey(f"{metric}_bucket", le=le), count)
            else:
                share = lognormal_cdf(float(le), median, sigma)
                c.put(
                    ent,
                    skey(f"{metric}_bucket", le=le),
                    np.minimum(c.noise.sround(f"{ent}|{metric}|{le}", count * share), count),
                )


def _restart_hits(restart_scope: str, series_scope: str) -> bool:
    if restart_scope == "node":
        return True
    return restart_scope == series_scope
