"""The streaming pipeline: points → series store → derived KPIs → monitors → correlator.

One :class:`Pipeline` serves every source: the simulator in ``noc demo``, a replay file in
``noc eval run``, a live scrape. Points are pushed with :meth:`Pipeline.feed`; KPIs are evaluated
on a clock of the data's own scrape interval (inferred, not configured), each entity at its own
latest scrape (targets are scraped at their own phases: a KPI window ends on the entity's
sample, and an alarm is stamped with the scrape that showed it), and every alarm transition
becomes a :class:`~noc_assistant.models.Finding` or a clear, which the
:class:`~noc_assistant.stream.correlate.Correlator` turns into incident events.

An entity that sends nothing has no scrape to evaluate: the pack's liveness KPIs (``up()``) are
judged on the clock instead, for every entity that has answered a few scrapes. Once it has
sent nothing for its grace (:func:`detectors.params.liveness_grace_s` of its own interval)
while the feed runs, a finding of detector ``liveness`` opens; its next sample clears it. A
silence of the whole feed (the collector, not the targets) is no finding: the grace counts
from the end of any such gap. One missed scrape is routine (``present()`` forgives it too), but
at PM periods it may be all a short outage shows: it becomes an evidence-only finding, which
joins an incident and never opens one.
"""

from __future__ import annotations

import ast
import hashlib
import math
import statistics
import time
from collections import deque
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Protocol

from detectors import MonitorBank, MonitorEvent, Observation
from detectors.params import (
    kpi_window_s,
    liveness_grace_s,
    monitor_alpha,
    monitor_min_duration,
    monitor_settle,
)
from knowledge.formula import LIVENESS, Formula
from knowledge.kpis import KpiDef
from knowledge.pack import Pack, PackError, load_pack
from knowledge.topology import PartnerLink, Topology, guess_type, plmn_digits
from noc_assistant.errors import ConfigError
from noc_assistant.ingest import Point, Quarantine, ReorderBuffer, SeriesStore, read_replay
from noc_assistant.ingest.point import canonical_metric
from noc_assistant.ingest.scrub import scrub_point
from noc_assistant.inventory import load_topology
from noc_assistant.models import LIVENESS_DETECTOR, Finding, Incident
from noc_assistant.settings import get_settings
from noc_assistant.stream.correlate import Correlator, IncidentEvent, MaintenanceWindow, series_id
from noc_assistant.stream.fanin import Batch, Clear, FanIn, Seen
from noc_assistant.triage.rca import Diagnosis, diagnose

__all__ = ["Outbox", "Pipeline", "ReplayResult", "run_replay"]

FindingSink = Callable[[Finding], None]
IncidentSink = Callable[[IncidentEvent], None]


class Outbox(Protocol):
    """What a detector worker of a slice sends to the network-wide correlator
    (:mod:`noc_assistant.stream.fanin`): each tick's findings and clears, then the tick."""

    def finding(self, finding: Finding, reading: bool, phase: int) -> None: ...

    def clear(self, series: str, entity: str, ts: float, phase: int) -> None: ...

    def tick(self, at: float, step: float) -> None: ...


_GPU_PREFIXES = ("vllm_", "sglang_", "DCGM_")


@lru_cache(maxsize=1024)
def stored_names(formula: Formula) -> frozenset[str]:
    """The names under which the series a formula reads are stored: each metric's canonical
    name and, for a histogram's mean, its ``_count`` series as sent without a ``type``
    (FORMATS' default is a gauge, so the parts keep their own names; ``hist_mean`` reads them
    so too).

    >>> from knowledge.formula import parse_formula
    >>> sorted(stored_names(parse_formula('hist_mean("vllm:e2e_request_latency_seconds")')))
    ['vllm_e2e_request_latency_seconds', 'vllm_e2e_request_latency_seconds_count']
    """
    names: set[str] = set()
    for sel in formula.selectors:
        if sel.fn == LIVENESS:
            continue
        names.add(canonical_metric(sel.metric, "counter"))
        if sel.fn == "hist_mean":
            names.add(canonical_metric(sel.metric + "_count"))
    return frozenset(names)


@lru_cache(maxsize=1024)
def count_unit(formula: str) -> str | None:
    """``"rate"`` or ``"increase"`` when a formula is a number of a counter's events: that
    selector alone, summed (``+``) or chosen (``first``), so its value is a whole count (or one
    over the window); None otherwise (a ratio, a scaled value, a gauge, rates mixed with
    increases). Its series' alarms pass a count gate (:class:`detectors.counts.CountGate`).

    >>> count_unit('first(rate("a"), rate("b"))'), count_unit('increase("a") + increase("b")')
    ('rate', 'increase')
    >>> count_unit('increase("a") / 1000'), count_unit('rate("a") + increase("b")')
    (None, None)
    """
    fns: set[str] = set()

    def walk(node: ast.expr) -> bool:
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            return walk(node.left) and walk(node.right)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id == "first":
                return all(walk(a) for a in node.args)
            if node.func.id in ("rate", "increase"):
                fns.add(node.func.id)
                return True
        return False

    if not walk(ast.parse(formula, mode="eval").body) or len(fns) != 1:
        return None
    return fns.pop()


def own_metrics(kpis: Iterable[KpiDef], types: Iterable[str]) -> dict[str, frozenset[str]]:
    """Per type of ``types``, the metrics its KPIs read and no other type's of them does (an
    SMF's and a UPF's KPIs both read ``pfcp_peers_active``: it belongs to neither).

    >>> from knowledge.pack import load_pack
    >>> own = own_metrics(load_pack().kpis.values(), ["smf", "upf"])
    >>> "pfcp_peers_active" in own["smf"] | own["upf"]
    False
    >>> "fivegs_upffunction_upf_sessionnbr" in own["upf"]
    True
    """
    read: dict[str, set[str]] = {t: set() for t in types}
    for k in kpis:
        for t in read.keys() & set(k.entity_types):
            read[t].update(stored_names(k.parsed))
    return {
        t: frozenset(names - set().union(*(read[o] for o in read if o != t)))
        for t, names in read.items()
    }


@dataclass
class ReplayResult:
    """What a replay produced."""

    incidents: list[Incident]
    findings: list[Finding]
    diagnoses: dict[str, Diagnosis]
    suppressed: list[Finding]
    samples: int
    quarantined: int
    duplicates: int
    elapsed_s: float
    interval_s: float
    first_ts: float
    last_ts: float
    entities: list[str]
    quarantine: Quarantine = field(repr=False, default_factory=Quarantine)
    #: entity → its scrape times (:attr:`SeriesStore.scrape_log`)
    scrapes: dict[str, list[float]] = field(repr=False, default_factory=dict)

    @property
    def samples_per_s(self) -> float:
        return self.samples / self.elapsed_s if self.elapsed_s > 0 else 0.0


class Pipeline:
    """Streaming detection over any source of points (see module docstring).

    Within a tick the correlator takes the detectors' events in a fixed order, whatever order
    the entities first appeared in: missed-scrape evidence, then the monitors' openings and
    clears, then liveness, each phase by entity name. So a network-wide correlator over
    workers of slices (:mod:`noc_assistant.stream.fanin`) can put them in the same order.
    """

    # defaults for snapshots of versions that did not have them
    outbox: Outbox | None = None
    fan_in: FanIn | None = None
    _phase = 0

    def __init__(
        self,
        *,
        pack: Pack | None = None,
        topology: Topology | None = None,
        correlator: Correlator | None = None,
        quarantine: Quarantine | None = None,
        lateness_s: float = 60.0,
        lateness_intervals: float = 0.0,
        on_finding: FindingSink | None = None,
        on_incident: IncidentSink | None = None,
        history: int = 480,
        rca: bool = True,
        outbox: Outbox | None = None,
        fan_in: FanIn | None = None,
    ) -> None:
        settings = get_settings()
        self.pack = pack if pack is not None else load_pack()
        self.kpis = self.pack.kpis
        self.topology = topology
        self._types = dict(topology.types) if topology is not None else {}
        self._inferred: Topology | None = None
        self._inferred_plmns: set[str] = set()
        self._plmn_counts: dict[tuple[str, str], float] = {}
        """Without an inventory: (PLMN id, entity) → its latest per-PLMN count (registered
        subscribers), which tells the home PLMN from the roaming partners"""
        self._role_metrics: dict[str, dict[str, frozenset[str]]] = {}
        self._own_by_type: dict[str, frozenset[str]] | None = None
        self._guessed: dict[str, tuple[int, str]] = {}
        self.correlator = correlator or Correlator(
            window_s=settings.correlation_window_s,
            resolve_after_s=settings.resolve_after_s,
            related=self._related,
            scope=self._scope,
            aftermath=self._aftermath,
        )
        self.rca = rca
        self.outbox = outbox
        """A worker of a slice: each tick's findings and clears go here too (``--findings``)."""
        self.fan_in = fan_in
        """The network-wide correlator: findings come from the workers' ticks
        (:meth:`take`), not from telemetry of its own."""
        #: the network's wall clock and weekend for the detectors' profiles (settings; a site
        #: of the inventory may name its own zone: ``Topology.zone_of``)
        self._local = {
            "tz": settings.local_tz,
            "utc_offset": 3600.0 * settings.local_utc_offset_h,
            "weekend": settings.weekend_days,
        }
        self.diagnoses: dict[str, Diagnosis] = {}
        self._by_id: dict[str, Finding] = {}
        self.quarantine = quarantine if quarantine is not None else Quarantine()
        self.buffer = ReorderBuffer(lateness_s=lateness_s, quarantine=self.quarantine)
        self._lateness = (lateness_s, lateness_intervals)
        """Points are held ``lateness_s``, or ``lateness_intervals`` scrape intervals once the
        interval is known if that is longer: a replay file's lines may be out of order by a
        few intervals (FORMATS §1), which at 5-min periods is a quarter of an hour."""
        self._probe: dict[tuple[str, tuple[tuple[str, str], ...]], float] | None = (
            {} if lateness_intervals > 0 else None
        )
        self._probe_steps: list[float] = []
        if self._probe is not None:
            self.buffer.allow(math.inf)  # hold everything until the interval is guessed
        self.store = SeriesStore()
        self.on_finding = on_finding
        self.on_incident = on_incident
        self.monitors: MonitorBank | None = None
        """Every KPI series' monitor, keyed (series id, entity), on the compiled bank; made at
        the first evaluation, once the scrape interval is known (PM periods page on one
        sample: :func:`detectors.params.monitor_min_duration`)."""
        self.kpi_history: dict[tuple[str, str], deque[tuple[float, float]]] = {}
        """(series id, entity) → recent (time, value) of every evaluated KPI series."""
        self.first_ts: float | None = None
        self._history = history
        self.findings: list[Finding] = []
        self.samples = 0
        self.interval_s: float | None = None
        self._deltas: list[float] = []
        self._last_ts: float | None = None
        self._next_eval: float | None = None
        self._applicable: dict[str, tuple[int, list[KpiDef]]] = {}
        self._evaluated: dict[str, float] = {}
        """entity → the time its KPIs were last evaluated at (its latest scrape then)"""
        self._groups: dict[tuple[str, str], tuple[int, list[tuple[tuple[str, str], ...]]]] = {}
        self._live_kpis = [k for k in self.kpis.values() if k.parsed.liveness]
        self._down: dict[tuple[str, str], bool] = {}
        """(liveness KPI id, entity) of the entities found down and not answering yet → whether
        that finding fell in a maintenance window (it pages when the window ends)"""
        self._alive_since: float | None = None
        """Start of the feed's current run without a silence of its own (grace counts from it)"""

    # -- topology ---------------------------------------------------------------------------

    def current_topology(self) -> Topology:
        """The inventory's topology, or one inferred from telemetry labels without one."""
        if self.topology is not None:
            return self.topology
        entities = [e for e in self.store.entities if e]
        plmns = {p for p, _ in self._plmn_counts}
        known = self._inferred
        if known is None or set(known.types) != set(entities) or plmns != self._inferred_plmns:
            topo = Topology.infer({e: self.entity_type(e) for e in entities}, self.pack)
            self._inferred_plmns = plmns
            if len(plmns) > 1:
                # without an inventory, the PLMN with the most subscribers is home and the
                # others are roaming partners (inbound roamers are a small share anywhere)
                totals: dict[str, float] = {}
                for (plmn, _), count in self._plmn_counts.items():
                    totals[plmn] = totals.get(plmn, 0.0) + count
                home = max(sorted(totals), key=lambda p: totals[p])
                topo.home_plmns = (home,)
                topo.partners = tuple(
                    PartnerLink(plmn=f"{p[:3]}-{p[3:]}") for p in sorted(plmns - {home})
                )
            self._inferred = known = topo
        return known

    def _related(self, a: str, b: str) -> bool:
        return self.current_topology().related(a, b)

    def _scope(self, finding: Finding) -> str | None:
        kpi = self.kpis.get(finding.kpi)
        if kpi is not None and kpi.target_nf:
            return f"nf:{kpi.target_nf}"
        # findings about one PLMN (a roaming partner's subscribers) on any AMF share one cause
        plmn = dict(finding.labels).get("plmnid")
        return f"plmn:{plmn}" if plmn else None

    def _aftermath(self, finding: Finding, incident: Incident) -> bool:
        """Whether ``finding`` is what the leading hypothesis of ``incident`` expects to come
        after its anchor (a support condition of its rule with ``order: after``), on an
        entity the condition's scope allows: the incident's own entities for ``anchor`` and
        ``root``, also their topology neighbours for ``related``, anywhere for ``any``."""
        top = incident.hypotheses[0] if incident.hypotheses else None
        rule = self.pack.rules.get(top.rule_id) if top is not None and top.rule_id else None
        if rule is None:
            return False
        for cond in rule.support:
            if (
                cond.order != "after"
                or finding.kpi not in cond.kpis
                or cond.direction not in ("both", finding.direction)
            ):
                continue
            if cond.scope == "any" or finding.entity in incident.entities:
                return True
            if cond.scope == "related" and any(
                self._related(finding.entity, e) for e in incident.entities
            ):
                return True
        return False

    # -- input -----------------------------------------------------------------------------

    def feed(self, point: Point) -> None:
        """Push one point; evaluation happens as the data's clock advances. Subscriber
        identifiers in its label values are masked here, before anything keeps them
        (:mod:`noc_assistant.ingest.scrub`)."""
        point = scrub_point(self.pack, point)
        self.samples += 1
        if self._probe is not None:
            self._probe_interval(point)
        self.buffer.push(point)
        if self.buffer.watermark >= (self._next_eval or float("-inf")):
            self._apply(self.buffer.pop_ready())

    def _probe_interval(self, point: Point) -> None:
        """Before anything is released, guess the scrape interval from the points pushed (the
        median of the first eight steps between a series' samples) so that a replay holds its
        lines for ``lateness_intervals`` from the start, not a minute (lines of the first
        intervals may be out of order too); until then nothing is released, and the released
        data's interval takes over once it is known."""
        probe = self._probe
        assert probe is not None
        key = (point.metric, point.labels)
        last = probe.get(key)
        probe[key] = point.ts if last is None else max(last, point.ts)
        if last is not None and point.ts > last:
            self._probe_steps.append(point.ts - last)
            if len(self._probe_steps) >= 8:
                self._hold_for(statistics.median(self._probe_steps))
                self._probe = None
                self._probe_steps = []

    def feed_all(self, points: Iterable[Point]) -> None:
        for p in points:
            self.feed(p)

    def finish(self) -> None:
        """End of input: release the buffer, evaluate the last tick, resolve quiet incidents.
        The network-wide correlator takes every tick it holds, then resolves."""
        if self.fan_in is not None:
            self._take_ready(everything=True)
            if self._last_ts is not None:
                self._resolve_all(self._last_ts)
            return
        self._apply(self.buffer.drain())
        if self._next_eval is not None and self._last_ts is not None:
            self._evaluate(self._next_eval)
            self._resolve_all(self._last_ts)

    def _resolve_all(self, last_ts: float) -> None:
        for ev in self.correlator.close_all(last_ts + (self.interval_s or 0.0)):
            self._emit(ev)

    def replay(self, points: Iterable[Point]) -> Pipeline:
        """Feed ``points`` to the end of input (:meth:`finish`); the pipeline itself."""
        self.feed_all(points)
        self.finish()
        return self

    # -- clock -----------------------------------------------------------------------------

    def _learn_interval(self, ts: float, delta: float | None) -> None:
        """The scrape interval is the median time between samples of the same series (scrapes
        of different exporters need not be aligned)."""
        if delta is not None and delta > 0 and len(self._deltas) < 256:
            self._deltas.append(delta)
            if len(self._deltas) % 8 == 0 or len(self._deltas) < 8:
                self.interval_s = statistics.median(self._deltas)
                self._hold_for(self.interval_s)
        if self._last_ts is None or ts > self._last_ts:
            self._last_ts = ts

    def _hold_for(self, step: float) -> None:
        """Hold points ``lateness_s``, or ``lateness_intervals`` scrape intervals of ``step``
        if that is longer."""
        base, intervals = self._lateness
        wanted = max(base, intervals * step)
        if wanted != self.buffer.lateness_s:
            self.buffer.allow(wanted)

    def _apply(self, points: Iterable[Point]) -> None:
        store = self.store
        feed_gap = liveness_grace_s(self.interval_s or 0.0, on_clock=True)
        for p in points:
            if self._last_ts is None or p.ts - self._last_ts > feed_gap:
                self._alive_since = p.ts  # the feed itself was silent (or starts)
            if self._next_eval is not None:
                while p.ts > self._next_eval:
                    self._evaluate(self._next_eval)
                    assert self.interval_s is not None
                    step = self.interval_s
                    nxt = self._next_eval + step
                    if p.ts - nxt > 10 * step:  # a long silence: jump instead of ticking through
                        nxt = p.ts - (p.ts % step)
                    self._next_eval = nxt
            delta = store.add(p)
            if self.first_ts is None:
                self.first_ts = p.ts
            self._learn_interval(p.ts, delta)
            if self._next_eval is None and self.interval_s is not None and len(self._deltas) >= 8:
                step = self.interval_s
                self._next_eval = p.ts - (p.ts % step) + step

    # -- evaluation ------------------------------------------------------------------------

    def entity_type(self, entity: str) -> str:
        """The inventory's type, else the ``nf`` label's (or ``job``'s) when it names one, else
        what the entity exports says (GPU serving metrics, the label or the id by the
        operator's naming rules, a prefix or a word, or the type whose own metrics it exports:
        a CSV replay need not carry ``nf``)."""
        t = self._types.get(entity)
        if t:
            return t
        hint = self.store.entity_hint(entity)
        if hint in self.pack.nf_types:
            return hint
        metrics = self.store.metrics_of(entity)
        if any(m.startswith(_GPU_PREFIXES) for m in metrics):
            return "gpu_server"
        cached = self._guessed.get(entity)
        if cached is not None and cached[0] == len(metrics):
            return cached[1]
        guess = (
            (guess_type(hint, self.pack) if hint else "")
            or guess_type(entity, self.pack)
            or self._type_by_metrics(metrics)
        )
        self._guessed[entity] = (len(metrics), guess)
        return guess

    def _type_by_metrics(self, metrics: set[str]) -> str:
        """The one type whose own metrics (read by its KPIs only) ``metrics`` hold most of."""
        if self._own_by_type is None:
            self._own_by_type = own_metrics(self.kpis.values(), self.pack.nf_types)
        counts = {t: len(own & metrics) for t, own in self._own_by_type.items()}
        best = max(counts.values(), default=0)
        top = [t for t, c in counts.items() if c == best]
        return top[0] if best > 0 and len(top) == 1 else ""

    def _roles(self, entity: str, metrics: Iterable[str]) -> frozenset[str]:
        """The roles ``entity`` plays: its type, and of the types it may act as (an EPC PGW:
        the SMF's, the UPF's) those whose own metrics it exports. A PGW-C and a PGW-U both
        export ``pfcp_peers_active``, read by the SMF's and the UPF's KPIs alike, so the shared
        names say nothing; if no role's own metric is there, every role is kept."""
        etype = self.entity_type(entity)
        roles = self.pack.roles(etype)
        if len(roles) == 1:
            return roles
        own = self._role_metrics.get(etype)
        if own is None:
            own = own_metrics(self.kpis.values(), roles - {etype})
            self._role_metrics[etype] = own
        names = set(metrics)
        shown = {r for r, excl in own.items() if excl & names}
        return frozenset({etype, *shown}) if shown else roles

    def _kpis_for(self, entity: str) -> list[KpiDef]:
        metrics = self.store.metrics_of(entity)
        cached = self._applicable.get(entity)
        if cached is not None and cached[0] == len(metrics):
            return cached[1]
        played = self._roles(entity, metrics)
        chosen = [
            k
            for k in self.kpis.values()
            if any(k.applies_to(t) for t in played)
            and not stored_names(k.parsed).isdisjoint(metrics)
        ]
        self._applicable[entity] = (len(metrics), chosen)
        return chosen

    def _groups_for(self, entity: str, kpi: KpiDef) -> list[tuple[tuple[str, str], ...]]:
        """Label groups a grouped KPI (``group_by``) is evaluated for on ``entity``."""
        if not kpi.group_by:
            return [()]
        size = len(self.store.metrics_of(entity))
        cached = self._groups.get((entity, kpi.id))
        if cached is not None and cached[0] == size:
            return cached[1]
        groups = sorted(self.store.label_groups(entity, stored_names(kpi.parsed), kpi.group_by))
        self._groups[(entity, kpi.id)] = (size, groups)
        return groups

    def _evaluate(self, at: float) -> None:
        step = self.interval_s or 15.0
        observations: list[Observation] = []
        where: dict[Hashable, tuple[KpiDef, str, tuple[tuple[str, str], ...]]] = {}
        # entities with an open alarm: their other KPIs' peaks are not normal time either
        busy = {entity for _, entity in self._firing_keys()}
        self._phase = 0  # missed-scrape evidence
        for entity in sorted(self.store.entities):
            seen = self.store.last_seen.get(entity)
            if not entity or seen is None:
                continue
            # the entity's own time: its latest scrape (targets are scraped at their own
            # phases; a window ending on the tick would cut its last interval, and its newest
            # sample would wait a tick); nothing new since the last evaluation, nothing to learn
            now = min(at, seen)
            since = self._evaluated.get(entity, -math.inf)
            if now <= since:
                continue
            self._evaluated[entity] = now
            grace = liveness_grace_s(self.store.entity_interval(entity) or step)
            zone = None if self.topology is None else self.topology.zone_of(entity)
            for kpi in self._kpis_for(entity):
                window = kpi_window_s(step, kpi.window_s)
                for group in self._groups_for(entity, kpi):
                    view = self.store.view(entity, now, window, dict(group), grace, since)
                    value = kpi.parsed.evaluate(view)
                    if value is None:
                        continue
                    support = kpi.parsed_support.evaluate(view) if kpi.parsed_support else None
                    if kpi.reads_presence and window < grace:
                        self._missed_scrape(kpi, entity, group, now, window, value)
                    key = (series_id(kpi.id, group), entity)
                    if self.topology is None and kpi.unit == "count" and "plmnid" in kpi.group_by:
                        plmn = plmn_digits(dict(group).get("plmnid", ""))  # 26201, 262-01
                        if len(plmn) in (5, 6):
                            self._plmn_counts[(plmn, entity)] = value
                    hist = self.kpi_history.get(key)
                    if hist is None:
                        hist = self.kpi_history[key] = deque(maxlen=self._history)
                    hist.append((now, value))
                    # a number of events (value × scale): its alarms pass a count gate
                    unit = None if support is not None else count_unit(kpi.formula)
                    scale = 0.0 if unit is None else window if unit == "rate" else 1.0
                    observations.append(
                        Observation(
                            key,
                            value,
                            support,
                            kpi.bad_direction,
                            kpi.min_support,
                            kpi.counts_events,
                            entity in busy,
                            kpi.proportion,
                            now,
                            zone,
                            scale,
                            window,
                        )
                    )
                    where[key] = (kpi, entity, group)
        if self.monitors is None:
            settle = monitor_settle(step)
            self.monitors = MonitorBank(
                min_duration=monitor_min_duration(step),
                alpha=monitor_alpha(step),
                grace=settle,
                min_warmup=settle,
                **self._local,
            )
        # a finding of the next scrape may escalate; those of this one (any phase) may not
        self.correlator.notice_s = 0.9 * step
        self._phase = 1  # the monitors' openings and clears (in observation order: by entity)
        for series, event in self.monitors.observe(at, observations):
            kpi, entity, group = where[series]
            self._on_monitor(kpi, entity, group, event)
        self._phase = 2  # liveness
        self._watch_liveness(at)
        if self.outbox is not None:
            self.outbox.tick(at, step)
        for ev in self.correlator.tick(at):
            self._emit(ev)

    # -- the network-wide correlator of sliced workers (noc_assistant.stream.fanin) ----------------

    def take(self, batch: Batch) -> int:
        """A worker's batch into the merge, and every tick all workers have passed into the
        correlator; the number of findings it carried (0 for a batch taken before)."""
        if self.fan_in is None:
            raise ConfigError("this pipeline reads telemetry, not workers' findings")
        if not self.fan_in.offer(batch):
            return 0
        self._take_ready(everything=False)
        return sum(isinstance(e, Seen) for t in batch.ticks for e in t.events)

    def release(self) -> None:
        """Into the correlator, every tick all workers have passed (after the workers it
        waits for changed: :meth:`FanIn.set_workers`)."""
        if self.fan_in is not None:
            self._take_ready(everything=False)

    def _take_ready(self, *, everything: bool) -> None:
        assert self.fan_in is not None
        for tick in self.fan_in.ready(everything=everything):
            self.interval_s = tick.step
            self.correlator.notice_s = 0.9 * tick.step
            for ev in tick.events:
                if isinstance(ev, Clear):
                    self.correlator.clear(ev.series, ev.entity, ev.ts)
                    continue
                f = ev.finding
                if f.entity_type:  # the worker's knowledge (the inventory's is kept)
                    self._types.setdefault(f.entity, f.entity_type)
                reading = ev.reading and self.correlator.alarming(
                    series_id(f.kpi, f.labels), f.entity, f.direction
                )
                self._add(f if f.update == reading else f.model_copy(update={"update": reading}))
            if self.first_ts is None:
                self.first_ts = tick.at
            self._last_ts = tick.at if self._last_ts is None else max(self._last_ts, tick.at)
            for ie in self.correlator.tick(tick.at):
                self._emit(ie)

    def _missed_scrape(
        self,
        kpi: KpiDef,
        entity: str,
        group: tuple[tuple[str, str], ...],
        now: float,
        window: float,
        value: float,
    ) -> None:
        """At PM periods (a KPI window shorter than the liveness grace) a series that missed
        one scrape still counts as ``present`` (routine for a flaky exporter, so no page), but
        may be the only trace of an engine that hung for a few minutes: evidence for an
        incident it joins (``Finding.evidence_only``)."""
        bare = kpi.parsed.evaluate(self.store.view(entity, now, window, dict(group)))
        if bare is None or bare == value:
            return
        if kpi.bad_direction != "both" and (bare < value) != (kpi.bad_direction == "down"):
            return
        self._open(kpi, entity, group, _silence(now, bare, value, 1.0), evidence_only=True)

    def _watch_liveness(self, at: float) -> None:
        """Judge the liveness KPIs of every entity at ``at`` (see the module docstring)."""
        if not self._live_kpis or self._alive_since is None:
            return
        store = self.store
        for entity, seen in sorted(store.last_seen.items()):
            interval = store.entity_interval(entity)
            if not entity or interval is None:  # too few scrapes to know when one is missed
                continue
            grace = liveness_grace_s(interval, on_clock=True)
            silent_for = at - max(seen, self._alive_since)
            for kpi in self._live_kpis:
                key = (kpi.id, entity)
                down = self._down.get(key)
                if down is None and silent_for < grace:  # answering: nothing to judge
                    continue
                up = kpi.parsed.evaluate(store.view(entity, at, grace))
                if down is not None:
                    if up == 1.0:  # it answered again
                        del self._down[key]
                        self._clear(kpi.id, entity, seen)
                        continue
                    if not down or self.correlator.in_maintenance(entity, at):
                        continue
                    # still silent when its maintenance window ended: that is a page now
                if silent_for < grace or up != 0.0:
                    continue
                played = self._roles(entity, self.store.metrics_of(entity))
                if not any(kpi.applies_to(t) for t in played):
                    continue
                self._down[key] = self.correlator.in_maintenance(entity, at)
                self._open(kpi, entity, (), _silence(at, 0.0, 1.0, silent_for / grace))

    def _firing_keys(self) -> list[tuple[str, str]]:
        """(series id, entity) of the KPI series whose alarm is open."""
        if self.monitors is None:
            return []
        return [k for k in self.monitors.firing_keys() if isinstance(k, tuple)]

    def _on_monitor(
        self,
        kpi: KpiDef,
        entity: str,
        group: tuple[tuple[str, str], ...],
        event: MonitorEvent,
    ) -> None:
        if event.kind == "close":
            self._clear(series_id(kpi.id, group), entity, event.ts)
            return
        self._open(kpi, entity, group, event)

    def _open(
        self,
        kpi: KpiDef,
        entity: str,
        group: tuple[tuple[str, str], ...],
        event: MonitorEvent,
        evidence_only: bool = False,
    ) -> None:
        """A finding of an opening (or a further reading) of ``kpi`` on ``entity``."""
        sid = series_id(kpi.id, group)
        tag = f"{sid}|{entity}|{event.ts:.3f}" + ("|evidence" if evidence_only else "")
        fid = "f-" + hashlib.sha1(tag.encode()).hexdigest()[:12]
        finding = Finding(
            id=fid,
            detector=event.detector,
            kpi=kpi.id,
            entity=entity,
            entity_type=self.entity_type(entity),
            ts=event.ts,
            score=event.score,
            observed=event.observed,
            expected_low=event.expected_low,
            expected_high=event.expected_high,
            direction=event.direction,
            series=kpi.formula,
            labels=group,
            # a further reading when the correlator holds the series alarming that way
            update=event.kind == "update"
            and self.correlator.alarming(sid, entity, event.direction),
            evidence_only=evidence_only,
        )
        if self.outbox is not None:
            self.outbox.finding(finding, event.kind == "update", self._phase)
        self._add(finding)

    def add_finding(self, finding: Finding) -> None:
        """A finding from outside the detectors (an Alertmanager alert, through the console's
        webhook): kept, correlated and ranked like the detectors' own."""
        self._add(finding)

    def clear_series(self, series: str, entity: str, ts: float) -> None:
        """An outside finding's series stopped alarming at ``ts`` (its alert resolved)."""
        self._clear(series, entity, ts)

    def _add(self, finding: Finding) -> None:
        rule = self.correlator.held(finding)
        if rule is not None:  # under a raised bar: evidence, no page (Finding.held_by)
            finding = finding.model_copy(update={"evidence_only": True, "held_by": rule.id})
        self.findings.append(finding)
        self._by_id[finding.id] = finding
        if self.on_finding is not None:
            self.on_finding(finding)
        for ev in self.correlator.add_finding(finding):
            self._emit(ev)

    def _clear(self, series: str, entity: str, ts: float) -> None:
        if self.outbox is not None:
            self.outbox.clear(series, entity, ts, self._phase)
        self.correlator.clear(series, entity, ts)

    def _emit(self, event: IncidentEvent) -> None:
        if self.rca and (
            event.kind != "updated"
            or (event.finding is not None and (_widens(event) or _strongest(event)))
        ):
            self.diagnose(event.incident)
        if self.on_incident is not None:
            self.on_incident(event)

    @property
    def last_ts(self) -> float | None:
        """The data's clock: the newest sample time released so far."""
        return self._last_ts

    def forget(self, before: float) -> int:
        """Drop what can no longer change: incidents resolved before ``before`` (out of the
        flap window), with their findings and diagnoses, and other findings older than it.
        What follows is unchanged (tested); a long-running worker calls this so that its
        memory and snapshots stay bounded, its sinks having stored the rest. Returns the
        number of incidents dropped. A replay keeps everything for its report."""
        gone = self.correlator.forget(before)
        for inc in gone:
            self.diagnoses.pop(inc.id, None)
        live = {fid for inc in self.correlator.incidents.values() for fid in inc.finding_ids}
        self.findings = [f for f in self.findings if f.ts >= before or f.id in live]
        self._by_id = {f.id: f for f in self.findings}
        return len(gone)

    def diagnose(self, incident: Incident) -> Diagnosis:
        """Rank root causes for ``incident`` now; the hypotheses are stored on the incident."""
        findings = [self._by_id[i] for i in incident.finding_ids if i in self._by_id]
        diag = diagnose(incident, findings, self.current_topology(), self.pack)
        incident.hypotheses = list(diag.hypotheses)
        top = diag.top
        incident.title = (
            f"{top.fault} on {top.entity}" if top.fault != "no_fault" else incident.title
        )
        self.diagnoses[incident.id] = diag
        return diag


def _silence(ts: float, observed: float, expected: float, score: float) -> MonitorEvent:
    """The opening of a liveness finding: ``observed`` where ``expected`` was due."""
    return MonitorEvent(
        kind="open",
        ts=ts,
        score=score,
        observed=observed,
        expected_low=expected,
        expected_high=expected,
        direction="down" if observed < expected else "up",
        detector=LIVENESS_DETECTOR,
    )


def _widens(event: IncidentEvent) -> bool:
    """Whether the finding just attached brought a new entity or KPI to the incident (worth a
    new diagnosis); repeats of known series are not."""
    f = event.finding
    assert f is not None
    inc = event.incident
    return inc.entities[-1] == f.entity or inc.kpis[-1] == f.kpi


def _strongest(event: IncidentEvent) -> bool:
    """Whether the finding just attached is the incident's strongest so far (a KPI's reading
    that grew while it alarmed: the first one may have held a part of the fault only)."""
    f = event.finding
    assert f is not None
    return f.score >= event.incident.max_score


#: How many scrape intervals a replay file's lines may be out of order (FORMATS §1: "a few")
#: before a line counts as late; a file is read whole, so waiting costs no detection time.
REPLAY_LATENESS_INTERVALS = 3.0


def run_replay(
    telemetry: Path,
    *,
    inventory: Path | None = None,
    pack_dir: Path | None = None,
    maintenance: Iterable[MaintenanceWindow] = (),
    quarantine_path: Path | None = None,
    on_finding: FindingSink | None = None,
    on_incident: IncidentSink | None = None,
    rca: bool = True,
) -> ReplayResult:
    """Run a replay file through the whole pipeline and return what it found.

    ``pack_dir`` is an operator overlay pack (it extends the default one). Bad lines go to
    ``quarantine_path`` (default ``<telemetry>.quarantine.jsonl``).
    """
    started = time.perf_counter()
    try:
        pack = load_pack(pack_dir)
    except PackError as exc:
        raise ConfigError(str(exc)) from None
    topology = load_topology(inventory, pack) if inventory is not None else None
    qpath = quarantine_path or telemetry.with_name(telemetry.name + ".quarantine.jsonl")
    if qpath.exists():
        qpath.unlink()
    quarantine = Quarantine(path=qpath)
    pipe = Pipeline(
        pack=pack,
        topology=topology,
        quarantine=quarantine,
        on_finding=on_finding,
        on_incident=on_incident,
        rca=rca,
        lateness_intervals=REPLAY_LATENESS_INTERVALS,
    )
    pipe.correlator.maintenance.extend(maintenance)
    pipe.store.scrape_log = {}
    pipe.replay(read_replay(telemetry, quarantine))
    return ReplayResult(
        incidents=list(pipe.correlator.incidents.values()),
        findings=pipe.findings,
        diagnoses=pipe.diagnoses,
        suppressed=pipe.correlator.suppressed,
        samples=pipe.samples,
        quarantined=quarantine.count,
        duplicates=pipe.buffer.duplicates,
        elapsed_s=time.perf_counter() - started,
        interval_s=pipe.interval_s or 0.0,
        first_ts=pipe.first_ts if pipe.first_ts is not None else 0.0,
        last_ts=pipe.last_ts if pipe.last_ts is not None else 0.0,
        entities=[e for e in pipe.store.entities if e],
        quarantine=quarantine,
        scrapes=pipe.store.scrape_log or {},
    )
