"""The streaming pipeline: points → series store → derived KPIs → monitors → correlator.

One :class:`Pipeline` serves every source: the simulator in ``noc demo``, a replay file in
``noc eval run``, a live scrape. Points are pushed with :meth:`Pipeline.feed`; KPIs are evaluated
on a clock of the data's own scrape interval (inferred, not configured:
:mod:`~noc_assistant.stream.clock`), each entity at its own latest scrape (targets are scraped
at their own phases: a KPI window ends on the entity's sample, and an alarm is stamped with the
scrape that showed it: :mod:`~noc_assistant.stream.evaluate`), and every alarm transition
becomes a :class:`~noc_assistant.models.Finding` or a clear, which the
:class:`~noc_assistant.stream.correlate.Correlator` turns into incident events.

An entity that sends nothing has no scrape to evaluate: its liveness is judged on the clock
instead (:mod:`~noc_assistant.stream.liveness`). One missed scrape is routine (``present()``
forgives it too), but at PM periods it may be all a short outage shows: it becomes an
evidence-only finding, which joins an incident and never opens one.

Without an inventory, entity types and the topology are guessed from the telemetry
(:mod:`~noc_assistant.stream.topology_guess`). A pipeline made with a ``fan_in`` is the
network-wide correlator of detector workers instead (:mod:`~noc_assistant.stream.network`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from typing import Protocol

from detectors import MonitorBank, MonitorEvent
from detectors.params import (
    monitor_alpha,
    monitor_min_duration,
    monitor_settle,
)
from knowledge.kpis import KpiDef
from knowledge.pack import Pack, load_pack
from knowledge.topology import Topology
from noc_assistant.errors import ConfigError
from noc_assistant.ingest import Point, Quarantine, ReorderBuffer, SeriesStore
from noc_assistant.ingest.door import SeriesDoor
from noc_assistant.models import Finding, Incident
from noc_assistant.settings import get_settings
from noc_assistant.stream.clock import ScrapeClock
from noc_assistant.stream.correlate import Correlator, IncidentEvent, series_id
from noc_assistant.stream.evaluate import Group, KpiEvaluator
from noc_assistant.stream.fanin import Batch, FanIn
from noc_assistant.stream.history import KpiHistory
from noc_assistant.stream.intake import Intake
from noc_assistant.stream.liveness import Answered, LivenessWatch
from noc_assistant.stream.network import NetworkCorrelator
from noc_assistant.stream.topology_guess import TopologyGuess
from noc_assistant.triage.rca import Diagnosis, diagnose, held

__all__ = ["REPLAY_LATENESS_INTERVALS", "Outbox", "Pipeline"]

FindingSink = Callable[[Finding], None]
IncidentSink = Callable[[IncidentEvent], None]


class Outbox(Protocol):
    """What a detector worker of a slice sends to the network-wide correlator
    (:mod:`noc_assistant.stream.fanin`): each tick's findings and clears, then the tick."""

    def finding(self, finding: Finding, reading: bool, phase: int) -> None: ...

    def clear(self, series: str, entity: str, ts: float, phase: int) -> None: ...

    def tick(self, at: float, step: float) -> None: ...


class Pipeline(Intake):
    """Streaming detection over any source of points (see module docstring).

    Within a tick the correlator takes the detectors' events in a fixed order, whatever order
    the entities first appeared in: missed-scrape evidence, then the monitors' openings and
    clears, then liveness, each phase by entity name. So a network-wide correlator over
    workers of slices (:mod:`noc_assistant.stream.fanin`) can put them in the same order.

    Its parts, each owned by the pipeline: :attr:`guess` (entity types, roles and the
    topology), :attr:`clock` (the scrape interval and the evaluation ticks), :attr:`evaluator`
    (each entity's KPIs), :attr:`liveness` (silent entities) and, for the network-wide
    correlator, :attr:`network`.
    """

    # defaults for snapshots of versions that did not have them
    outbox: Outbox | None = None
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
        self.store = SeriesStore()
        self.guess = TopologyGuess(self.pack, topology, self.store, self.kpis)
        self.correlator = correlator or Correlator(
            window_s=settings.correlation_window_s,
            resolve_after_s=settings.resolve_after_s,
            repage_after_s=settings.repage_after_s,
            related=self._related,
            scope=self._scope,
            aftermath=self._aftermath,
            same_site=self._same_site,
        )
        self.rca = rca
        self.outbox = outbox
        """A worker of a slice: each tick's findings and clears go here too (``--findings``)."""
        self.network = NetworkCorrelator(fan_in) if fan_in is not None else None
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
        self.door = SeriesDoor()
        """Each series met, numbered once as its points come in (masked labels, number)."""
        self.buffer = ReorderBuffer(lateness_s, self.quarantine, self.door)
        self.clock = ScrapeClock(self.buffer, lateness_s, lateness_intervals)
        """Points are held ``lateness_s``, or ``lateness_intervals`` scrape intervals once the
        interval is known if that is longer: a replay file's lines may be out of order by a
        few intervals (FORMATS §1), which at 5-min periods is a quarter of an hour."""
        self.liveness = LivenessWatch(self.kpis.values())
        self.on_finding = on_finding
        self.on_incident = on_incident
        self.monitors: MonitorBank | None = None
        """Every KPI series' monitor, keyed (series id, entity), on the compiled bank; made at
        the first evaluation, once the scrape interval is known (PM periods page on one
        sample: :func:`detectors.params.monitor_min_duration`)."""
        self.evaluator = KpiEvaluator(self.kpis, self.store, self.guess, history)
        self.findings: list[Finding] = []
        self.samples = 0

    # -- what the parts hold ----------------------------------------------------------------

    @property
    def topology(self) -> Topology | None:
        """The inventory's topology (None: inferred from telemetry, :meth:`current_topology`)."""
        return self.guess.topology

    @property
    def fan_in(self) -> FanIn | None:
        """The network-wide correlator's merge of the workers' ticks (None: reads telemetry)."""
        return self.network.fan_in if self.network is not None else None

    @property
    def kpi_history(self) -> KpiHistory:
        """(series id, entity) → recent (time, value) of every evaluated KPI series."""
        return self.evaluator.kpi_history

    @property
    def interval_s(self) -> float | None:
        """The scrape interval (None until it is known)."""
        return self.clock.interval_s

    @property
    def first_ts(self) -> float | None:
        """The data's first sample time released."""
        return self.clock.first_ts

    @property
    def last_ts(self) -> float | None:
        """The data's clock: the newest sample time released so far."""
        return self.clock.last_ts

    # -- topology ---------------------------------------------------------------------------

    def current_topology(self) -> Topology:
        """The inventory's topology, or one inferred from telemetry labels without one."""
        return self.guess.current()

    def entity_type(self, entity: str) -> str:
        """The entity's type (:meth:`TopologyGuess.entity_type`)."""
        return self.guess.entity_type(entity)

    def _related(self, a: str, b: str) -> bool:
        return self.guess.current().related(a, b)

    def _same_site(self, a: str, b: str) -> bool:
        topology = self.guess.topology  # sites come from an inventory only
        return topology is None or topology.same_site(a, b)

    def _at_site(self, entity: str) -> str:
        """``@site`` where the inventory names the entity's site, else nothing."""
        topology = self.guess.topology
        site = None if topology is None else topology.site_of(entity)
        return "" if site is None else f"@{site}"

    def _scope(self, finding: Finding) -> str | None:
        kpi = self.kpis.get(finding.kpi)
        if kpi is not None and kpi.target_nf:
            # the upstream NF of the finding's site (each site has its own NRF, UDM, ...)
            return f"nf:{kpi.target_nf}" + self._at_site(finding.entity)
        # findings about one PLMN (a roaming partner's subscribers) on any AMF of a site share
        # one cause; at another site they are its own (a partner's outage seen there joins by
        # the diagnosis: Correlator._partner_elsewhere)
        plmn = dict(finding.labels).get("plmnid")
        if not plmn:
            return None
        return f"plmn:{plmn}" + self._at_site(finding.entity)

    def _aftermath(self, finding: Finding, incident: Incident) -> bool:
        """Whether ``finding`` is what the leading hypothesis of ``incident`` expects to come
        after its anchor (a support condition of its rule with ``order: after``), on an
        entity the condition's scope allows: the incident's own entities for ``anchor`` and
        ``root``, also their topology neighbours for ``related``, anywhere for ``any``. Or,
        whatever the diagnosis, that a part of an entity of the incident went silent (a KPI
        that reads ``present()``, gone its bad way: a GPU server's serving engine stopped
        answering twelve minutes into a hang), as a silent target joins it (liveness)."""
        kpi = self.pack.kpis.get(finding.kpi)
        if (
            kpi is not None
            and kpi.reads_presence
            and finding.direction == kpi.bad_direction
            and finding.entity in incident.entities
        ):
            return True
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

    def finish(self) -> None:
        """End of input: release the buffer, evaluate the last tick, resolve quiet incidents.
        The network-wide correlator takes every tick it holds, then resolves."""
        clock = self.clock
        if self.network is not None:
            self._take_ready(everything=True)
            if clock.last_ts is not None:
                self._resolve_all(clock.last_ts)
            return
        self._apply(self.buffer.take_all())
        if clock.next_eval is not None and clock.last_ts is not None:
            self._evaluate(clock.next_eval)
            self._resolve_all(clock.last_ts)

    def _resolve_all(self, last_ts: float) -> None:
        for ev in self.correlator.close_all(last_ts + (self.interval_s or 0.0)):
            self._emit(ev)

    def replay(self, points: Iterable[Point]) -> Pipeline:
        """Feed ``points`` to the end of input (:meth:`finish`); the pipeline itself."""
        self.feed_all(points)
        self.finish()
        return self

    # -- evaluation ------------------------------------------------------------------------

    def _evaluate(self, at: float) -> None:
        """One tick of the clock: every entity's KPIs at its latest scrape into the monitors,
        then liveness, then the correlator's tick (see the class docstring for the order)."""
        step = self.interval_s or 15.0
        # entities with an open alarm: their other KPIs' peaks are not normal time either
        busy = {entity for _, entity in self._firing_keys()}
        self._phase = 0  # missed-scrape evidence
        tick = self.evaluator.evaluate(at, step, busy)
        if tick is not None:
            for m in self.evaluator.missed(tick):
                self._open(m.kpi, m.entity, m.group, m.event, evidence_only=True)
        monitors = self._monitor_bank(step)
        # a finding of the next scrape may escalate; those of this one (any phase) may not
        self.correlator.notice_s = 0.9 * step
        self._phase = 1  # the monitors' openings and clears (in row order: by entity)
        if tick is not None:
            slots = tick.plan.slots_in(monitors)
            for row, event in monitors.observe_columns(at, tick.columns, slots):
                kpi, entity, group = tick.plan.where[row]
                self._on_monitor(kpi, entity, group, event)
        self._phase = 2  # liveness
        for change in self.liveness.judge(at, self.store, self.correlator, self.guess):
            if isinstance(change, Answered):
                self._clear(change.kpi, change.entity, change.ts)
            else:
                self._open(change.kpi, change.entity, (), change.event)
        if self.outbox is not None:
            self.outbox.tick(at, step)
        for ev in self.correlator.tick(at):
            self._emit(ev)
        if self.rca:
            self._judge_held(at)

    def _judge_held(self, at: float) -> None:
        """Diagnose again each incident still alarming whose hold ended (:func:`held`): one that
        pages now escalates at ``at``; one whose series all cleared in its hold stays a notice."""
        for inc in self.correlator.open_alarming():
            if held(inc, self._findings_of(inc), self.pack, at):
                self.diagnose(inc, now=at)
                if inc.severity == "page" and self.on_incident is not None:
                    self.on_incident(IncidentEvent("escalated", inc))

    def _monitor_bank(self, step: float) -> MonitorBank:
        """The monitors, made at the first evaluation for the scrape interval ``step``."""
        if self.monitors is None:
            settle = monitor_settle(step)
            self.monitors = MonitorBank(
                min_duration=monitor_min_duration(step),
                alpha=monitor_alpha(step),
                grace=settle,
                min_warmup=settle,
                **self._local,
            )
        return self.monitors

    # -- the network-wide correlator of sliced workers (noc_assistant.stream.fanin) ----------------

    def take(self, batch: Batch) -> int:
        """A worker's batch into the merge, and every tick all workers have passed into the
        correlator; the number of findings it carried (0 for a batch taken before)."""
        if self.network is None:
            raise ConfigError("this pipeline reads telemetry, not workers' findings")
        carried = self.network.offer(batch)
        if carried is None:
            return 0
        self._take_ready(everything=False)
        return carried

    def release(self) -> None:
        """Into the correlator, every tick all workers have passed (after the workers it
        waits for changed: :meth:`FanIn.set_workers`)."""
        if self.network is not None:
            self._take_ready(everything=False)

    def _take_ready(self, *, everything: bool) -> None:
        assert self.network is not None
        merged = self.network.merged(self.correlator, self.clock, self.guess, everything=everything)
        for item in merged:
            if isinstance(item, Finding):
                self._add(item)
            else:
                self._emit(item)

    # -- findings and incidents ----------------------------------------------------------------

    def _firing_keys(self) -> list[tuple[str, str]]:
        """(series id, entity) of the KPI series whose alarm is open."""
        if self.monitors is None:
            return []
        return [k for k in self.monitors.firing_keys() if isinstance(k, tuple)]

    def _on_monitor(
        self,
        kpi: KpiDef,
        entity: str,
        group: Group,
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
        group: Group,
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

    def _findings_of(self, incident: Incident) -> list[Finding]:
        """The findings of ``incident`` this pipeline still holds."""
        return [self._by_id[i] for i in incident.finding_ids if i in self._by_id]

    def diagnose(self, incident: Incident, now: float | None = None) -> Diagnosis:
        """Rank root causes for ``incident`` now; the hypotheses are stored on the incident."""
        findings = self._findings_of(incident)
        diag = diagnose(incident, findings, self.current_topology(), self.pack, now)
        incident.hypotheses = list(diag.hypotheses)
        top = diag.top
        incident.title = (
            f"{top.fault} on {top.entity}" if top.fault != "no_fault" else incident.title
        )
        self.diagnoses[incident.id] = diag
        return diag


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
