"""``noc simulate --vary SEED``: a network drawn from a seeded distribution (``data/vary.yaml``).

The draw replaces the network options (size, core, serving engine, SBI metrics, zone, scrape
phases, weekend) and varies what the plain simulator keeps fixed: the noise family and its
tails, the daily, weekly and holiday shapes, sparse event counters (preemptions on quiet GPU
servers), benign flash crowds and mass re-registrations on every AMF at once (unlabelled),
unannounced counter resets, scrape jitter and missed scrapes. The fault catalogue is the same,
so ``faults="all"`` still puts every class in every day. The same ``(vary, seed)`` gives the same
files; without ``vary`` nothing changes.

>>> a, b = draw_vary(2000), draw_vary(2000)
>>> a == b, a == draw_vary(2001)
(True, False)
>>> a.noise_family in ("gaussian", "student_t", "laplace", "multiplicative")
True
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from importlib import resources
from typing import Any

import numpy as np
import numpy.typing as npt
import yaml

from detectors.clock import LocalClock
from noc_assistant.simulate.network import Network
from noc_assistant.simulate.schedule import (
    DAY_S,
    MARGIN_S,
    ResolvedEffect,
    RestartEvent,
    Schedule,
    _Grid,
    _overlaps,
)
from noc_assistant.simulate.traffic import Diurnal, TrafficShape

__all__ = ["VaryDraw", "draw_vary", "load_vary_spec", "scrape_effects", "vary_events"]

Bump = tuple[float, float, float]


def load_vary_spec() -> dict[str, Any]:
    """The distribution (``data/vary.yaml``)."""
    text = resources.files(__package__).joinpath("data/vary.yaml").read_text("utf-8")
    doc = yaml.safe_load(text)
    if not isinstance(doc, dict):
        raise ValueError("vary spec: expected a mapping at the top level")
    return doc


@dataclass(frozen=True)
class VaryDraw:
    """One network's draw (every field is fixed by ``vary_seed``)."""

    vary_seed: int
    scale: int
    core: str
    serving_engine: str
    sbi_metrics: bool
    tz: str | None
    scrape_phases: bool
    weekend: float
    noise_family: str
    noise_df: float
    noise_scale: float
    core_floor: float
    core_bumps: tuple[Bump, ...]
    gpu_floor: float
    gpu_bumps: tuple[Bump, ...]
    weekday: tuple[float, ...]
    holiday_offsets: tuple[int, ...]
    """Local days after the first that are holidays."""
    holiday_factor: float
    flash_crowds_per_day: int
    flash_crowd_minutes: tuple[float, float]
    flash_crowd_init_mult: tuple[float, float]
    flash_crowd_mob_mult: tuple[float, float]
    counter_resets_per_day: int
    sparse_preemptions_per_hour: float
    jitter_s: float
    missed_scrape_p: float
    outages_per_day: float
    outage_scrapes: tuple[int, int]

    def summary(self) -> dict[str, Any]:
        """The draw as plain JSON-able values."""
        return asdict(self)

    def shape(self, start: float) -> TrafficShape:
        """The traffic shape for a scenario starting at ``start`` (holidays on its local
        days)."""
        first = math.floor(LocalClock(self.tz).local_array(np.array([start]))[0] / DAY_S)
        return TrafficShape(
            core=Diurnal(self.core_floor, self.core_bumps),
            gpu=Diurnal(self.gpu_floor, self.gpu_bumps),
            weekday=self.weekday,
            holidays=tuple(first + d for d in self.holiday_offsets),
            holiday_factor=self.holiday_factor,
            noise_family=self.noise_family,
            noise_df=self.noise_df,
            noise_scale=self.noise_scale,
            sparse_preempt_per_s=self.sparse_preemptions_per_hour / 3600.0,
        )

    def config_update(self) -> dict[str, Any]:
        """The :class:`~noc_assistant.simulate.ScenarioConfig` fields the draw replaces."""
        return {
            "scale": self.scale,
            "core": self.core,
            "serving_engine": self.serving_engine,
            "sbi_metrics": self.sbi_metrics,
            "tz": self.tz,
            "scrape_phases": self.scrape_phases,
            "weekend": self.weekend,
        }


class _Draw:
    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng

    def choice(self, weights: Mapping[Any, float]) -> Any:
        keys = list(weights)
        p = np.asarray([float(weights[k]) for k in keys])
        return keys[int(self.rng.choice(len(keys), p=p / p.sum()))]

    def uniform(self, pair: Sequence[float]) -> float:
        return float(self.rng.uniform(float(pair[0]), float(pair[1])))

    def integer(self, pair: Sequence[int]) -> int:
        return int(self.rng.integers(int(pair[0]), int(pair[1]) + 1))

    def bump(self, spec: Mapping[str, Sequence[float]]) -> Bump:
        return (
            self.uniform(spec["hour"]),
            self.uniform(spec["width"]),
            self.uniform(spec["weight"]),
        )


def draw_vary(vary_seed: int, spec: Mapping[str, Any] | None = None) -> VaryDraw:
    """Draw one network's variations from ``spec`` (``data/vary.yaml`` by default)."""
    sp = spec or load_vary_spec()
    d = _Draw(np.random.default_rng([vary_seed, 36]))
    net, noise, di, cal, ev, sc = (
        sp[k] for k in ("network", "noise", "diurnal", "calendar", "events", "scrape")
    )
    tz = str(d.choice(net["tz"]))
    spread = d.uniform(cal["weekday_spread"])
    n_hol = int(d.choice(cal["holidays"]))
    return VaryDraw(
        vary_seed=vary_seed,
        scale=int(d.choice(net["scale"])),
        core=str(d.choice(net["core"])),
        serving_engine=str(d.choice(net["serving_engine"])),
        sbi_metrics=bool(d.choice(net["sbi_metrics"])),
        tz=None if tz == "UTC" else tz,
        scrape_phases=bool(d.choice(net["scrape_phases"])),
        weekend=round(d.uniform(cal["weekend"]), 3),
        noise_family=str(d.choice(noise["family"])),
        noise_df=round(d.uniform(noise["student_t_df"]), 2),
        noise_scale=round(d.uniform(noise["scale"]), 3),
        core_floor=d.uniform(di["core"]["floor"]),
        core_bumps=tuple(d.bump(di["core"][k]) for k in ("morning", "midday", "evening")),
        gpu_floor=d.uniform(di["gpu"]["floor"]),
        gpu_bumps=tuple(d.bump(di["gpu"][k]) for k in ("office", "evening")),
        weekday=tuple(
            [round(1.0 + spread * float(d.rng.uniform(-1, 1)), 3) for _ in range(5)] + [1.0, 1.0]
        ),
        holiday_offsets=tuple(sorted(int(x) for x in d.rng.choice(7, size=n_hol, replace=False))),
        holiday_factor=round(d.uniform(cal["holiday_factor"]), 3),
        flash_crowds_per_day=d.integer(ev["flash_crowds_per_day"]),
        flash_crowd_minutes=_pair(ev["flash_crowd_minutes"]),
        flash_crowd_init_mult=_pair(ev["flash_crowd_init_mult"]),
        flash_crowd_mob_mult=_pair(ev["flash_crowd_mob_mult"]),
        counter_resets_per_day=d.integer(ev["counter_resets_per_day"]),
        sparse_preemptions_per_hour=round(d.uniform(ev["sparse_preemptions_per_hour"]), 3),
        jitter_s=round(min(d.uniform(sc["jitter_s"]), 0.999), 3),
        missed_scrape_p=round(d.uniform(sc["missed_scrape_p"]), 5),
        outages_per_day=round(d.uniform(sc["outages_per_day"]), 3),
        outage_scrapes=(int(sc["outage_scrapes"][0]), int(sc["outage_scrapes"][1])),
    )


def _pair(v: Sequence[float]) -> tuple[float, float]:
    return (float(v[0]), float(v[1]))


# -- events -----------------------------------------------------------------------------------

#: what :func:`vary_events` adds to a schedule (``make_schedule(events=...)``)
EventHook = Callable[[_Grid, list[tuple[float, float]], Schedule, Network], None]


def vary_events(draw: VaryDraw, seed: int) -> EventHook:
    """The benign events of ``draw``, planned after the plain simulator's (so those stay where
    they are) and before the faults (which keep clear of them): per day, flash crowds and mass
    re-registrations on every AMF and MME at once (attempts × about 3, every ratio healthy;
    in ``Schedule.benign_events``, not in the labels) and unannounced counter resets (in the
    labels' ``restarts``, reason ``counter reset``)."""

    def hook(g: _Grid, busy: list[tuple[float, float]], sched: Schedule, net: Network) -> None:
        rng = np.random.default_rng([draw.vary_seed, seed, 505])
        regs = [e.id for e in net.entities if e.type in ("amf", "mme")]
        exporting = [e.id for e in net.entities if e.id in net.uptime_s]
        for d in range(math.ceil((g.end - g.t0) / DAY_S)):
            s0 = g.warm if d == 0 else g.t0 + d * DAY_S + MARGIN_S
            s1 = min(g.t0 + (d + 1) * DAY_S, g.end) - MARGIN_S
            if s1 - s0 < 3 * 3600:
                continue
            for _ in range(draw.flash_crowds_per_day):
                _flash_crowd(rng, draw, g, busy, sched, regs, (s0, s1))
            for _ in range(draw.counter_resets_per_day):
                _counter_reset(rng, g, busy, sched, exporting, (s0, s1))

    return hook


def _flash_crowd(
    rng: np.random.Generator,
    draw: VaryDraw,
    g: _Grid,
    busy: list[tuple[float, float]],
    sched: Schedule,
    regs: Sequence[str],
    span: tuple[float, float],
) -> None:
    dur = float(rng.uniform(*draw.flash_crowd_minutes)) * 60.0
    init = float(rng.uniform(*draw.flash_crowd_init_mult))
    mob = float(rng.uniform(*draw.flash_crowd_mob_mult))
    for _ in range(30):
        a = g.snap(float(rng.uniform(span[0], span[1] - dur)))
        b = g.snap(a + dur)
        if b <= a or _overlaps(a, b, busy, g.apart(MARGIN_S)):
            continue
        for ent in regs:
            sched.effects.append(ResolvedEffect(ent, "reg_init_mult", "mul", init, a, b, 120, 300))
            sched.effects.append(ResolvedEffect(ent, "reg_mob_mult", "mul", mob, a, b, 120, 300))
        busy.append((a, b))
        sched.benign_events.append((a, b, f"flash crowd: registrations x{init:.1f}, healthy"))
        return


def _counter_reset(
    rng: np.random.Generator,
    g: _Grid,
    busy: list[tuple[float, float]],
    sched: Schedule,
    exporting: Sequence[str],
    span: tuple[float, float],
) -> None:
    ent = str(rng.choice(list(exporting)))
    for _ in range(30):
        r = g.snap(float(rng.uniform(span[0] + 600, span[1] - 600)))
        if _overlaps(r - 300, r + 300, busy, g.apart(MARGIN_S)):
            continue
        scope = "engine" if ent.startswith("gpu") else "process"
        sched.restarts.append(RestartEvent(ent, scope, g.restart_ts(r), "counter reset"))
        busy.append((r - 300, r + 300))
        return


# -- scraping ---------------------------------------------------------------------------------


def scrape_effects(
    draw: VaryDraw,
    seed: int,
    chunk: int,
    n_ticks: int,
    interval_s: float,
    entity_of: Sequence[str],
) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.float64]]:
    """Per series and tick of one chunk: missed scrapes (``True``: no sample; the counters
    went on counting) and the stamp's jitter in seconds (whole milliseconds, below 1 s and
    half an interval, the same for every series of a target).

    >>> miss, jit = scrape_effects(draw_vary(1), 1, 0, 100, 60.0, ["a", "a", "b"])
    >>> miss.shape, bool((jit[0] == jit[1]).all()), float(jit.max()) < 1.0
    ((3, 100), True, True)
    """
    rng = np.random.default_rng([draw.vary_seed, seed, 606, chunk])
    entities = sorted(set(entity_of))
    n_ent = len(entities)
    missed = rng.random((n_ent, n_ticks)) < draw.missed_scrape_p
    days = n_ticks * interval_s / DAY_S
    for _ in range(int(rng.poisson(draw.outages_per_day * days))):
        e = int(rng.integers(n_ent))
        k = int(rng.integers(n_ticks))
        length = int(rng.integers(draw.outage_scrapes[0], draw.outage_scrapes[1] + 1))
        missed[e, k : k + length] = True
    cap = min(draw.jitter_s, 0.999, interval_s / 2)
    jitter = np.round(rng.random((n_ent, n_ticks)) * cap, 3)
    row = {e: i for i, e in enumerate(entities)}
    idx = np.asarray([row[e] for e in entity_of], dtype=np.int64)
    return missed[idx], jitter[idx]
