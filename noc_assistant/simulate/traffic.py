"""Traffic primitives of the simulator: the nominal rates, the daily shape, keyed noise,
knob values over a chunk of ticks, and the chunk the renderers fill.

Rates come from a diurnal profile (quiet night, day plateau, evening peak) times slow
per-series wobble; counters grow by integer Poisson-like increments. Noise uses *common random
numbers*: every random draw is keyed by (seed, chunk, name), so two scenarios with the same seed
differ only where their knobs differ.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from detectors.clock import LocalClock
from noc_assistant.simulate.faults import KNOBS
from noc_assistant.simulate.network import Network
from noc_assistant.simulate.schedule import ResolvedEffect

__all__ = [
    "DEFAULT_SHAPE",
    "KNOB_STEP_S",
    "PROFILE",
    "Arr",
    "Diurnal",
    "EngineState",
    "Knobs",
    "Noise",
    "RenderChunk",
    "RunState",
    "TrafficProfile",
    "TrafficShape",
    "core_diurnal",
    "gpu_diurnal",
    "lognormal_cdf",
]

Arr = npt.NDArray[np.float64]
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


@dataclass(frozen=True)
class Diurnal:
    """A daily shape: ``floor`` plus Gaussian bumps ``(hour, width_h, weight)`` on the 24-h
    circle, scaled so that its highest point is 1.

    >>> d = Diurnal(0.1, ((20.0, 1.8, 0.5), (12.5, 3.2, 0.4)))
    >>> round(float(d.at(np.array([20.0]))[0]), 2), float(d.at(np.array([4.0]))[0]) < 0.3
    (1.0, True)
    """

    floor: float
    bumps: tuple[tuple[float, float, float], ...]

    def _raw(self, hour: Arr) -> Arr:
        f = np.full(len(hour), self.floor)
        for mu, sigma, weight in self.bumps:
            f = f + weight * _gauss_wrap(hour, mu, sigma)
        return np.asarray(f, dtype=np.float64)

    def at(self, hour: Arr) -> Arr:
        peak = float(np.max(self._raw(np.arange(0.0, 24.0, 1.0 / 12.0))))
        return np.asarray(self._raw(hour) / peak, dtype=np.float64)


@dataclass(frozen=True)
class TrafficShape:
    """What ``noc simulate --vary`` draws about the traffic; the default is the plain
    simulator's (Gaussian noise, :func:`core_diurnal` and :func:`gpu_diurnal`, no calendar)."""

    core: Diurnal | None = None
    gpu: Diurnal | None = None
    weekday: tuple[float, ...] = ()
    """Monday-first factors of each local weekday's traffic at noon (the nights alike)."""
    holidays: tuple[int, ...] = ()
    """Local days (days since 1970-01-01 on the subscribers' clock) traffic is lower."""
    holiday_factor: float = 1.0
    noise_family: str = "gaussian"
    """``gaussian``, ``student_t``, ``laplace`` or ``multiplicative``."""
    noise_df: float = 4.0
    noise_scale: float = 1.0
    sparse_preempt_per_s: float = 0.0

    def calendar(self, wall: Arr, hour: Arr) -> Arr:
        """Weekday and holiday factors, 1 at midnight (no step between days)."""
        day = np.floor(wall / 86400.0)
        noon = np.sin(np.pi * hour / 24.0) ** 2
        factor = np.ones(len(wall))
        if self.weekday:
            dow = ((day + 3) % 7).astype(np.int64)  # 1970-01-01 was a Thursday
            wd = np.asarray(self.weekday, dtype=np.float64)[dow]
            factor = factor * (1.0 - (1.0 - wd) * noon)
        if self.holidays:
            hol = np.isin(day, np.asarray(self.holidays, dtype=np.float64))
            factor = factor * (1.0 - (1.0 - self.holiday_factor) * hol * noon)
        return np.asarray(factor, dtype=np.float64)


DEFAULT_SHAPE = TrafficShape()


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

    def __init__(
        self, seed: int, chunk: int, n: int, t: Arr, shape: TrafficShape | None = None
    ) -> None:
        self.seed = seed
        self.chunk = chunk
        self.n = n
        self.t = t
        self.shape = shape or DEFAULT_SHAPE

    def _rng(self, key: str) -> np.random.Generator:
        return np.random.default_rng([self.seed, 7, self.chunk, _crc(key)])

    def uniform(self, key: str) -> Arr:
        return self._rng(key).random(self.n)

    def _gauss(self, key: str) -> Arr:
        return self._rng(key + "#z").standard_normal(self.n)

    def normal(self, key: str) -> Arr:
        """Unit-variance noise of the network's family (:class:`TrafficShape`; Gaussian by
        default) times its scale."""
        sh = self.shape
        if sh.noise_family == "gaussian":
            z = self._gauss(key)
            return z if sh.noise_scale == 1.0 else z * sh.noise_scale
        rng = self._rng(key + "#z")
        if sh.noise_family == "student_t":
            df = max(sh.noise_df, 2.1)
            z = rng.standard_t(df, self.n) * math.sqrt((df - 2.0) / df)
        elif sh.noise_family == "laplace":
            z = rng.laplace(0.0, 1.0 / math.sqrt(2.0), self.n)
        else:  # multiplicative: a log-normal factor, skewed, centred and scaled to unit variance
            s2 = 0.36
            g = np.exp(0.6 * rng.standard_normal(self.n))
            z = (g - math.exp(s2 / 2)) / math.sqrt((math.exp(s2) - 1.0) * math.exp(s2))
        return np.asarray(z * sh.noise_scale, dtype=np.float64)

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
            z = self._gauss(key)
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


class RenderChunk:
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
        shape: TrafficShape | None = None,
    ) -> None:
        sh = shape or DEFAULT_SHAPE
        self.net = net
        self.index = index
        self.t = t
        self.dt = dt
        self.n = len(t)
        self.knobs = knobs
        self.noise = Noise(seed, index, self.n, t, sh)
        wall = clock.local_array(t)  # the subscribers' day
        hour = (wall % 86400.0) / 3600.0
        self.core = core_diurnal(hour) if sh.core is None else sh.core.at(hour)
        self.gpu = gpu_diurnal(hour) if sh.gpu is None else sh.gpu.at(hour)
        #: preemptions per second a quiet engine still sees now and then (0: none)
        self.sparse_preempt_per_s = sh.sparse_preempt_per_s
        if weekend != 1.0:
            # Saturday and Sunday (local): the day's traffic × ``weekend`` at noon, the nights
            # as on working days (no step at midnight)
            sat_sun = (np.floor(wall / 86400.0) + 3) % 7 >= 5  # 1970-01-01 was a Thursday
            factor = 1.0 - (1.0 - weekend) * sat_sun * np.sin(np.pi * hour / 24.0) ** 2
            self.core = self.core * factor
            self.gpu = self.gpu * factor
        if sh.weekday or sh.holidays:
            factor = sh.calendar(wall, hour)
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
