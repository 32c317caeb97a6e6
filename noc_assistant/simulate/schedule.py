"""When things happen: faults, benign events, maintenance, restarts — and the labels file.

Benign events (evening peak, a clean restart, a healthy request surge, nightly maintenance) are
drawn from the seed alone, so they sit at the same place whichever faults are chosen; faults are
then packed into what is left, never closer than :data:`FAULT_GAP_S` to each other, and quiet
periods are labelled in the remaining room. Times are snapped to the scrape grid; at long PM
periods (30 and 60 min) a fault lasts one period at least, and margins that would snap to
nothing are one period (a sample reports the period that ends at its stamp).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np

from detectors.clock import LocalClock
from noc_assistant.simulate.faults import (
    AMF_SERVICES,
    EPC_FAULTS,
    FAULTS,
    KNOBS,
    SERVICES_OF,
    SMF_SERVICES,
    Combine,
    Effect,
    FaultSpec,
    Shape,
)
from noc_assistant.simulate.network import Network
from noc_assistant.timefmt import rfc3339

__all__ = [
    "DAY_S",
    "FAULT_GAP_S",
    "MARGIN_S",
    "GapWindow",
    "IncidentPlan",
    "MaintenancePlan",
    "ResolvedEffect",
    "RestartEvent",
    "Schedule",
    "Window",
    "make_schedule",
    "rfc3339",
]

FAULT_GAP_S = 30 * 60.0
"""Minimum quiet time between two faults."""
WARMUP_S = 45 * 60.0
"""No fault and no labelled window in the first minutes (detectors need to learn), and in no
fewer than :data:`WARMUP_PERIODS` scrape periods."""
WARMUP_PERIODS = 3
MARGIN_S = 15 * 60.0
"""Distance kept between a fault and a benign window, maintenance or a day boundary."""
DAY_S = 86400.0


@dataclass(frozen=True)
class ResolvedEffect:
    """One knob on one entity over an absolute time range."""

    entity: str
    key: str
    mode: Combine
    value: float
    t0: float
    t1: float
    ramp_in: float
    ramp_out: float
    wave_period: float = 0.0
    wave_depth: float = 0.0

    def envelope(
        self, t: np.ndarray[Any, np.dtype[np.float64]]
    ) -> np.ndarray[Any, np.dtype[np.float64]]:
        """0 outside the range, ramps and plateau 1 inside (times ``t`` in epoch seconds)."""
        inside = (t >= self.t0) & (t < self.t1)
        up = np.clip((t - self.t0) / self.ramp_in, 0.0, 1.0) if self.ramp_in > 0 else 1.0
        down = np.clip((self.t1 - t) / self.ramp_out, 0.0, 1.0) if self.ramp_out > 0 else 1.0
        env = np.where(inside, up * down, 0.0)
        if self.wave_period > 0 and self.wave_depth > 0:
            phase = 2 * np.pi * (t - self.t0) / self.wave_period
            env = env * (1.0 - self.wave_depth * 0.5 * (1.0 - np.cos(phase)))
        return np.asarray(env, dtype=np.float64)


@dataclass(frozen=True)
class GapWindow:
    """Samples of ``entity`` in ``scope`` are missing for ``t0 <= t < t1``."""

    entity: str
    scope: str
    t0: float
    t1: float


@dataclass(frozen=True)
class RestartEvent:
    """A process restart: counters of ``scope`` reset at the first scrape after ``ts``."""

    entity: str
    scope: str
    ts: float
    reason: str


@dataclass(frozen=True)
class IncidentPlan:
    id: str
    fault: str
    root: str
    start: float
    end: float
    affected: tuple[str, ...]
    partner: str | None = None
    gpu: str | None = None


@dataclass(frozen=True)
class Window:
    id: str
    start: float
    end: float
    note: str


@dataclass(frozen=True)
class MaintenancePlan:
    entity: str
    start: float
    end: float


@dataclass
class Schedule:
    """Everything the generator injects, and the ground truth it implies."""

    incidents: list[IncidentPlan] = field(default_factory=list)
    no_fault: list[Window] = field(default_factory=list)
    maintenance: list[MaintenancePlan] = field(default_factory=list)
    effects: list[ResolvedEffect] = field(default_factory=list)
    gaps: list[GapWindow] = field(default_factory=list)
    restarts: list[RestartEvent] = field(default_factory=list)
    #: benign events left out of the labels (``noc simulate --vary``: flash crowds)
    benign_events: list[tuple[float, float, str]] = field(default_factory=list)

    def labels(self) -> dict[str, Any]:
        """The labels document (docs/FORMATS.md §2, plus the optional ``restarts`` list)."""
        return {
            "incidents": [
                {
                    "id": i.id,
                    "start": rfc3339(i.start),
                    "end": rfc3339(i.end),
                    "root_cause": {"entity": i.root, "fault": i.fault},
                    "affected": list(i.affected),
                    "partner": i.partner,
                }
                for i in self.incidents
            ],
            "no_fault": [
                {"id": w.id, "start": rfc3339(w.start), "end": rfc3339(w.end), "note": w.note}
                for w in self.no_fault
            ],
            "maintenance": [
                {"entity": m.entity, "start": rfc3339(m.start), "end": rfc3339(m.end)}
                for m in self.maintenance
            ],
            "restarts": [
                {"entity": r.entity, "ts": rfc3339(r.ts), "scope": r.scope, "reason": r.reason}
                for r in self.restarts
            ],
        }


class _Grid:
    """The scrape grid: snap times to ticks."""

    def __init__(self, t0: float, n_ticks: int, dt: float) -> None:
        self.t0 = t0
        self.n = n_ticks
        self.dt = dt
        self.end = t0 + n_ticks * dt
        #: the first time a fault or a labelled window may start
        self.warm = t0 + max(WARMUP_S, WARMUP_PERIODS * dt)

    def snap(self, t: float) -> float:
        k = min(max(round((t - self.t0) / self.dt), 0), self.n)
        return self.t0 + k * self.dt

    def span(self, seconds: float) -> float:
        """A fault's duration on the grid: whole ticks, at least one. At 30- and 60-min PM
        periods (TS 32.401 granularity periods) most faults of 10-45 min would snap to no
        tick at all: labelled, yet absent from the data. A fault that is in the data spans one
        period at least, and is labelled so.

        >>> _Grid(0.0, 100, 900.0).span(600.0), _Grid(0.0, 100, 3600.0).span(1200.0)
        (900.0, 3600.0)
        """
        return max(self.snap(self.t0 + seconds) - self.t0, self.dt)

    def apart(self, seconds: float) -> float:
        """A separation of ``seconds`` that survives snapping: one period where half a period
        or less would round to no tick at all (at 30- and 60-min PM periods a healthy window
        15 min after a fault began on the fault's last tick, and the fault's readings fell in
        it).

        >>> _Grid(0.0, 100, 900.0).apart(600.0), _Grid(0.0, 100, 1800.0).apart(600.0)
        (600.0, 1800.0)
        """
        return seconds if seconds > self.dt / 2 else self.dt

    def restart_ts(self, t: float) -> float:
        """A restart just before the tick at ``t`` (so that tick already shows the reset)."""
        return self.snap(t) - min(5.0, self.dt / 2)


def _overlaps(a0: float, a1: float, spans: Sequence[tuple[float, float]], margin: float) -> bool:
    return any(a0 < b1 + margin and b0 < a1 + margin for b0, b1 in spans)


def _free_intervals(
    lo: float, hi: float, busy: Sequence[tuple[float, float]], margin: float
) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    cur = lo
    for b0, b1 in sorted(busy):
        if b1 + margin <= cur:
            continue
        if b0 - margin > cur:
            out.append((cur, min(b0 - margin, hi)))
        cur = max(cur, b1 + margin)
        if cur >= hi:
            break
    if cur < hi:
        out.append((cur, hi))
    return [(a, b) for a, b in out if b > a]


def _pack(
    rng: np.random.Generator,
    durations: Sequence[float],
    intervals: Sequence[tuple[float, float]],
    gap: float,
) -> list[float | None]:
    """Start times for ``durations`` inside ``intervals`` with ``gap`` between items.

    Random first fit (larger items first), then random slack inside each interval. Items that
    do not fit get ``None``.
    """
    used = [0.0] * len(intervals)
    members: list[list[int]] = [[] for _ in intervals]
    order = sorted(range(len(durations)), key=lambda i: -durations[i])
    placed: list[float | None] = [None] * len(durations)
    for i in order:
        fits = []
        for j, (a, b) in enumerate(intervals):
            need = used[j] + durations[i] + (gap if members[j] else 0.0)
            if need <= b - a:
                fits.append(j)
        if not fits:
            continue
        room = np.array([intervals[j][1] - intervals[j][0] - used[j] for j in fits])
        j = fits[int(rng.choice(len(fits), p=room / room.sum()))]
        used[j] += durations[i] + (gap if members[j] else 0.0)
        members[j].append(i)
    for j, items in enumerate(members):
        if not items:
            continue
        a, b = intervals[j]
        items = [items[k] for k in rng.permutation(len(items))]
        slack = (b - a) - used[j]
        shares = rng.dirichlet(np.ones(len(items) + 1)) * slack
        cur = a
        for k, i in enumerate(items):
            cur += float(shares[k])
            placed[i] = cur
            cur += durations[i] + gap
    return placed


class _Planner:
    def __init__(
        self,
        network: Network,
        grid: _Grid,
        seed: int,
        fault_ids: Sequence[str],
        tz: str | None = None,
    ) -> None:
        self.net = network
        #: the wall clock of the evening peak and the nightly maintenance (UTC without ``tz``)
        self.clock = LocalClock(tz)
        self.grid = grid
        self.seed = seed
        self.fault_ids = list(fault_ids)
        self.sched = Schedule()
        self.busy: list[tuple[float, float]] = []  # benign windows and maintenance
        self.nf_benign: list[tuple[float, float, str]] = []

    # -- benign events ------------------------------------------------------------------------

    def benign(self) -> None:
        rng = np.random.default_rng([self.seed, 101])
        g = self.grid
        exporting = [e.id for e in self.net.entities if e.id in self.net.uptime_s]
        first_day = datetime.fromtimestamp(g.t0, UTC).replace(hour=0, minute=0, second=0)
        n_dates = int((g.end - first_day.timestamp()) // DAY_S) + 1
        for d in range(n_dates):
            midnight = first_day.timestamp() + d * DAY_S
            midnight -= self.clock.offset(midnight)  # the local day's (UTC without a zone)
            # evening peak (traffic model peaks around 19-21 h)
            ps = g.snap(midnight + 18.5 * 3600 + rng.uniform(0, 3600))
            pe = ps + 2 * 3600
            if ps >= g.warm and pe <= g.end:
                self._benign_window(ps, pe, "evening traffic peak, healthy")
            # nightly maintenance on one entity
            ent = str(rng.choice([x for x in exporting if not x.startswith("pcf")]))
            raw = midnight + 3600 + rng.uniform(0, 3 * 3600)
            raw_end = raw + rng.uniform(30, 60) * 60
            ms, me = g.snap(raw), g.snap(raw_end)
            if raw >= g.warm and raw_end <= g.end and not _overlaps(ms, me, self.busy, 0):
                self._maintenance(ent, ms, me)
        n_seg = math.ceil((g.end - g.t0) / DAY_S)
        for d in range(n_seg):
            s0 = g.warm if d == 0 else g.t0 + d * DAY_S + MARGIN_S
            s1 = min(g.t0 + (d + 1) * DAY_S, g.end) - MARGIN_S
            if s1 - s0 < 3 * 3600:
                continue
            # a clean restart
            ent = str(rng.choice(exporting))
            for _ in range(30):
                r = g.snap(rng.uniform(s0 + 600, s1 - 600))
                if not _overlaps(r - 600, r + 600, self.busy, g.apart(MARGIN_S)):
                    scope = "engine" if ent.startswith("gpu") else "process"
                    self.sched.restarts.append(
                        RestartEvent(ent, scope, g.restart_ts(r), "clean restart")
                    )
                    self._benign_window(
                        r - 600, r + 600, f"clean restart of {ent} (counters reset), healthy"
                    )
                    break
            # a healthy request surge on one inference server
            srv = str(rng.choice([s.id for s in self.net.gpu_servers]))
            dur = rng.uniform(30, 45) * 60
            boost = float(rng.uniform(0.3, 0.45))
            for _ in range(30):
                a = g.snap(rng.uniform(s0, s1 - dur))
                b = g.snap(a + dur)
                if not _overlaps(a, b, self.busy, g.apart(MARGIN_S)):
                    self.sched.effects.append(
                        ResolvedEffect(srv, "arrival_boost", "add", boost, a, b, 300, 300)
                    )
                    self._benign_window(a, b, f"request surge on {srv} within capacity, healthy")
                    break

    def _benign_window(self, a: float, b: float, note: str) -> None:
        self.busy.append((a, b))
        self.nf_benign.append((a, b, note))

    def _maintenance(self, ent: str, a: float, b: float) -> None:
        self.busy.append((a, b))
        self.sched.maintenance.append(MaintenancePlan(ent, a, b))
        self.sched.effects.append(ResolvedEffect(ent, "drain", "add", 1.0, a, b, 180, 180))
        mid = self.grid.snap((a + b) / 2)
        scope = "engine" if ent.startswith("gpu") else "process"
        # the restart's silence stays inside the declared window (at 15-min periods two
        # intervals before its middle began before a 45-min window opened)
        self.sched.gaps.append(GapWindow(ent, scope, max(a, mid - 2 * self.grid.dt), mid))
        self.sched.restarts.append(
            RestartEvent(ent, scope, self.grid.restart_ts(mid), "maintenance")
        )

    # -- faults -------------------------------------------------------------------------------

    def faults(self) -> list[tuple[float, float]]:
        rng = np.random.default_rng([self.seed, 202])
        g = self.grid
        n_seg = math.ceil((g.end - g.t0) / DAY_S)
        plans: list[tuple[float, str, float]] = []
        for d in range(n_seg):
            if not self.fault_ids:
                break
            seg0 = g.t0 + d * DAY_S
            seg1 = min(seg0 + DAY_S, g.end)
            s0 = g.warm if d == 0 else seg0 + FAULT_GAP_S / 2
            s1 = seg1 - (FAULT_GAP_S / 2 if seg1 < g.end else 5 * 60)
            ids = [self.fault_ids[k] for k in rng.permutation(len(self.fault_ids))]
            frac = (seg1 - seg0) / DAY_S
            if frac < 0.999:
                ids = ids[: max(1, math.ceil(len(ids) * frac))]
            durs = [g.span(rng.uniform(*FAULTS[f].duration_min) * 60) for f in ids]
            free = _free_intervals(s0, s1, self.busy, g.apart(MARGIN_S))
            starts = _pack(rng, durs, free, g.apart(FAULT_GAP_S))
            for f, start, dur in zip(ids, starts, durs, strict=True):
                if start is not None:
                    a = g.snap(start)
                    plans.append((a, f, a + dur))
        plans.sort()
        # a converged core: each incident of a class with an EPC form is in the EPC or the 5G
        # core, one chance in two, from a stream of its own (the incidents' times and classes
        # are the 5G core's; roots and sizes drawn after the first EPC one differ)
        epc = np.random.default_rng([self.seed, 404]) if self.net.by_type("mme") else None
        spans = []
        for n, (a, f, b) in enumerate(plans, 1):
            spec = FAULTS[f]
            if epc is not None and f in EPC_FAULTS and epc.random() < 0.5:
                spec = EPC_FAULTS[f]
            self._incident(rng, f"inc-{n:03d}", spec, a, b)
            spans.append((a, b))
        return spans

    def _incident(
        self, rng: np.random.Generator, inc_id: str, spec: FaultSpec, a: float, b: float
    ) -> None:
        cands = [e.id for e in self.net.entities if e.type in spec.root_types]
        root = str(rng.choice(cands))
        partner = (
            self.net.partners[int(rng.integers(len(self.net.partners)))] if spec.partner else None
        )
        gpu = None
        if spec.per_gpu:
            srv = self.net.server(root)
            gpu = srv.gpus[int(rng.integers(len(srv.gpus)))]
        dur = b - a
        affected = {root}
        for sel in spec.affected:
            affected.update(self._targets(sel, root))
        for eff in spec.effects:
            value = float(rng.uniform(*eff.value))
            for ent in self._targets(eff.target, root):
                for key in self._keys(eff, root, partner.plmn if partner else None, gpu):
                    self.sched.effects.append(self._resolve(eff.shape, ent, key, value, a, dur))
                affected.add(ent)
        for gp in spec.gaps:
            scope = f"gpu:{gpu}" if gp.scope == "gpu" else gp.scope
            self.sched.gaps.append(
                GapWindow(
                    root,
                    scope,
                    self.grid.snap(a + gp.start * dur),
                    self.grid.snap(a + gp.end * dur),
                )
            )
        for rs in spec.restarts:
            self.sched.restarts.append(
                RestartEvent(root, rs.scope, self.grid.restart_ts(a + rs.at * dur), spec.id)
            )
        order = {e.id: k for k, e in enumerate(self.net.entities)}
        self.sched.incidents.append(
            IncidentPlan(
                id=inc_id,
                fault=spec.id,
                root=root,
                start=a,
                end=b,
                affected=tuple(sorted(affected, key=order.__getitem__)),
                partner=partner.plmn if partner else None,
                gpu=gpu,
            )
        )

    def _resolve(
        self, shape: Shape, ent: str, key: str, value: float, a: float, dur: float
    ) -> ResolvedEffect:
        knob = key.split(":", 1)[0]
        return ResolvedEffect(
            entity=ent,
            key=key,
            mode=KNOBS[knob],
            value=value,
            t0=a + shape.start * dur,
            t1=a + shape.end * dur,
            ramp_in=shape.ramp_in_s,
            ramp_out=shape.ramp_out_s,
            wave_period=shape.wave_period_s,
            wave_depth=shape.wave_depth,
        )

    def _targets(self, selector: str, root: str) -> list[str]:
        net = self.net
        if selector == "root":
            return [root]
        if selector == "peer_smf":
            return net.smfs_of_upf(root)
        if selector == "consumers":
            services = SERVICES_OF.get(net.entity(root).type, ())
            out = []
            if any(s in AMF_SERVICES for s in services):
                out += [e.id for e in net.by_type("amf")]
            if any(s in SMF_SERVICES for s in services):
                out += [e.id for e in net.by_type("smf")]
            return out
        return [e.id for e in net.by_type(selector)]

    def _keys(self, eff: Effect, root: str, plmn: str | None, gpu: str | None) -> list[str]:
        all_services = sorted(set(AMF_SERVICES) | set(SMF_SERVICES))
        scope = eff.scope
        if not scope:
            return [eff.knob]
        if scope == "{gpu}":
            subs = [gpu or "0"]
        elif scope == "{plmn}":
            subs = [plmn or ""]
        elif scope == "{root_services}":
            subs = list(SERVICES_OF[self.net.entity(root).type])
        elif scope == "{other_services}":
            subs = [s for s in all_services if s != "nnrf-disc"]
        elif scope == "{all_services}":
            subs = all_services
        else:
            subs = [scope]
        return [f"{eff.knob}:{s}" for s in subs]

    # -- quiet periods ------------------------------------------------------------------------

    def quiet(self, fault_spans: list[tuple[float, float]]) -> None:
        rng = np.random.default_rng([self.seed, 303])
        g = self.grid
        n_inc = len(self.sched.incidents)
        n_seg = math.ceil((g.end - g.t0) / DAY_S)
        want = max(math.ceil(0.3 * n_inc), n_seg) - len(self.nf_benign)
        busy = self.busy + fault_spans
        windows: list[tuple[float, float, str]] = list(self.nf_benign)
        free = _free_intervals(g.warm, g.end - 5 * 60, busy, g.apart(10 * 60))
        free = [(a, b) for a, b in free if b - a >= 20 * 60]
        picks = rng.permutation(len(free))[: max(want, 0)]
        for k in sorted(int(x) for x in picks):
            a, b = free[k]
            length = min(b - a, rng.uniform(20, 40) * 60)
            s = g.snap(rng.uniform(a, b - length))
            windows.append((s, g.snap(s + length), "quiet period, healthy"))
        windows.sort()
        self.sched.no_fault = [
            Window(f"nf-{n:03d}", a, b, note) for n, (a, b, note) in enumerate(windows, 1)
        ]


def make_schedule(
    network: Network,
    *,
    start: float,
    n_ticks: int,
    interval_s: float,
    seed: int,
    fault_ids: Sequence[str],
    tz: str | None = None,
    events: Callable[[_Grid, list[tuple[float, float]], Schedule, Network], None] | None = None,
) -> Schedule:
    """Plan a scenario: benign events first (seed only; then ``events``, a hook that adds
    more, as ``noc simulate --vary`` does), then faults, then quiet windows (the evening peak
    and the nightly maintenance on ``tz``'s wall clock)."""
    planner = _Planner(network, _Grid(start, n_ticks, interval_s), seed, fault_ids, tz)
    planner.benign()
    if events is not None:
        events(planner.grid, planner.busy, planner.sched, network)
    spans = planner.faults()
    planner.quiet(spans)
    sched = planner.sched
    sched.maintenance.sort(key=lambda m: m.start)
    sched.restarts.sort(key=lambda r: r.ts)
    return sched
