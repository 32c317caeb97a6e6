"""Findings → incidents: the unit an engineer is paged for.

A finding joins the open incident of the same entity, of a related entity (topology:
an SMF's symptoms join its UPF's fault), or of the same scope (findings about one upstream NF,
e.g. every consumer's SBI errors towards the UDM), when it comes within ``window_s`` of that
incident's last finding (a further reading of a series still alarming in an open incident joins
it however long ago that was); otherwise it opens a new incident. An incident resolves when none of
its series is still alarming and nothing new arrived for ``resolve_after_s``. A finding of one of
its KPIs that comes within ``flap_s`` after its incident resolved reopens that incident instead of
paging again (the same symptom flapping); a new symptom on the same entity is a new incident.
A finding of a new series that joins an open incident with a score at least ``escalate_factor``
times the strongest one the on-call was last told of escalates it (paged again, like
Alertmanager's notification of a group that gained alerts): a marginal alert followed by a real
fault on the same entity minutes later must not be folded silently into the first page. Not
sooner than ``repage_after_s`` after the incident's last page, though (Alertmanager's
``group_interval``): a storm's rejects a scrape after its first symptom paged are that page's
update, shown to the on-call who was just paged, not a second page. Once
the incident's leading diagnosis is a fault on that entity or next to it, though, a stronger
symptom there is that fault growing: evidence for the page already sent, not a second page. A
further reading of a series already alarming there is evidence, not a new symptom: no page.
Findings on an entity inside a declared maintenance window are kept but page nobody, and so
are findings on its topology neighbours at that time (an SMF taken down for maintenance takes
the sessions of its UPFs with it: Alertmanager's inhibition, with the maintenance as source).
A finding of a KPI under a raised bar (:class:`noc_assistant.models.Tuning`, declared by the
NOC after false pages) that scores below it is held: kept as evidence for an incident something
else opens, never a page of its own (:meth:`Correlator.held`; the pipeline marks it).
A finding that an entity stopped answering (detector ``liveness``) joins an open incident of
that entity however long ago its last new symptom: a target that goes down during a fault (a
GPU node rebooted after an Xid error, an NF restarted by its watchdog) is that fault's
consequence, not a new page. So does a finding the incident's leading diagnosis expects to
follow (``aftermath``: the re-attach wave when the eNBs of an MME come back twenty minutes
after they were lost is part of that S1 incident, not an attach storm of its own).

One cause pages once. A finding joins, up to ``diagnosed_reach`` grouping windows after its
last new symptom, the open incident whose leading diagnosis is a fault (at least
``diagnosed_min_confidence``) rooted at the finding's entity or at a topology neighbour of
it: the engine of a GPU server going silent twelve minutes
into its NCCL hang, a second SMF failing sessions towards the PCF whose certificate expired.
And a finding of the same KPI, the same way, as a series alarming in an open incident on
another entity (a peer: the KPI is of one type) within the grouping window joins it: the same
symptom on peers at once is one upstream cause or one mass event (every AMF's registrations
surging together), not one page per peer, within one site: where the inventory places both
entities at different sites (``same_site``), the same symptom on both is two incidents, as a
national network's coincident faults in two regions are. Whether an incident pages at all is
its diagnosis's call (``Incident.severity``, :func:`noc_assistant.triage.rca.severity`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Literal

from knowledge.topology import Topology, plmn_digits
from noc_assistant.models import LIVENESS_DETECTOR, Finding, Hypothesis, Incident, Tuning

__all__ = ["Correlator", "IncidentEvent", "MaintenanceWindow", "inhibit_rules", "series_id"]

Related = Callable[[str, str], bool]
Scope = Callable[[Finding], str | None]
Aftermath = Callable[[Finding, Incident], bool]


def series_id(kpi: str, labels: tuple[tuple[str, str], ...] = ()) -> str:
    """Identity of one watched KPI series of an entity (a KPI, or one group of a grouped KPI).

    >>> series_id("amf-registration-success-by-plmn", (("plmnid", "26201"),))
    'amf-registration-success-by-plmn{plmnid=26201}'
    """
    if not labels:
        return kpi
    return kpi + "{" + ",".join(f"{k}={v}" for k, v in labels) + "}"


@dataclass(frozen=True)
class MaintenanceWindow:
    entity: str
    start: float
    end: float


@dataclass(frozen=True)
class IncidentEvent:
    kind: Literal["opened", "updated", "escalated", "reopened", "resolved"]
    incident: Incident
    finding: Finding | None = None


@dataclass
class _Open:
    incident: Incident
    #: (series id, entity) of its alarming series → the direction they alarm in
    firing: dict[tuple[str, str], str] = field(default_factory=dict)
    scopes: set[str] = field(default_factory=set)
    #: the highest finding score of the last notice (opening, reopening or escalation) and
    #: its time: findings of the same evaluation belong to that notice
    notified: float = 0.0
    notified_at: float = 0.0

    def alarms(self, key: tuple[str, str], direction: str) -> bool:
        """Whether series ``key`` alarms ``direction`` here: a finding of it is a further
        reading (one that turned the other way, a drop become a surge, is a new symptom)."""
        return self.firing.get(key) == direction


class Correlator:
    """Group findings into incidents (see module docstring).

    >>> c = Correlator(window_s=600, resolve_after_s=300)
    >>> def f(i, e, ts): return Finding(id=i, detector="d", kpi="k", entity=e, ts=ts, score=9,
    ...     observed=0, expected_low=1, expected_high=2, direction="down")
    >>> [ev.kind for ev in c.add_finding(f("f1", "amf-1", 0))]
    ['opened']
    >>> [ev.kind for ev in c.add_finding(f("f2", "amf-1", 60))]
    ['updated']
    >>> strong = f("f3", "amf-1", 120).model_copy(update={"score": 30, "kpi": "k2"})
    >>> [ev.kind for ev in c.add_finding(strong)]
    ['escalated']
    >>> c.clear("k", "amf-1", 130); c.clear("k2", "amf-1", 130)
    >>> [ev.kind for ev in c.tick(500)]
    ['resolved']
    """

    def __init__(
        self,
        window_s: float = 600.0,
        resolve_after_s: float = 300.0,
        flap_s: float = 900.0,
        escalate_factor: float = 2.0,
        notice_s: float = 0.0,
        repage_after_s: float = 0.0,
        related: Related | None = None,
        maintenance: Iterable[MaintenanceWindow] = (),
        scope: Scope | None = None,
        aftermath: Aftermath | None = None,
        diagnosed_min_confidence: float = 0.5,
        same_site: Related | None = None,
    ) -> None:
        self.window_s = window_s
        self.resolve_after_s = resolve_after_s
        self.flap_s = flap_s
        self.escalate_factor = escalate_factor
        #: findings up to this long after a notice belong to it (the pipeline sets 0.9 scrape
        #: intervals: targets scraped at their own phases report one evaluation over it)
        self.notice_s = notice_s
        #: no escalation sooner than this after the incident's last page (module docstring)
        self.repage_after_s = repage_after_s
        self.related = related
        self.scope = scope
        #: whether a finding is one the open incident's leading diagnosis expects to follow
        self.aftermath = aftermath
        self.maintenance = list(maintenance)
        self.diagnosed_min_confidence = diagnosed_min_confidence
        self.same_site = same_site
        self._open: list[_Open] = []
        self._recent: list[Incident] = []
        self.incidents: dict[str, Incident] = {}
        self.suppressed: list[Finding] = []
        #: evidence-only findings no incident took yet (kept for one correlation window)
        self._pending: list[Finding] = []

    #: the raised bars in force (the store's, given by the live commands each round); a
    #: class default, so that a correlator restored from an older snapshot has none
    tuning: tuple[Tuning, ...] = ()
    #: (class default, for snapshots from before it) see ``__init__``
    diagnosed_min_confidence = 0.5
    #: how many grouping windows past its last new symptom a diagnosed incident still takes
    #: further symptoms of its fault (module docstring): an NCCL hang's engine going silent
    #: twelve minutes in joins it, a second fault on that server three quarters of an hour
    #: after the first quietened does not (it was folded in, unpaged, and took the diagnosis
    #: of both)
    diagnosed_reach = 2.0
    #: (class default, for snapshots from before it) see ``__init__``
    repage_after_s = 0.0
    #: whether two entities may be one site (peers join only then); None: any two may
    #: (class default, for snapshots from before it)
    same_site: Related | None = None

    def held(self, finding: Finding) -> Tuning | None:
        """The raised bar that holds ``finding`` (a new symptom scoring below it), if any: a
        further reading, an evidence-only finding and a silent target are never held."""
        if finding.update or finding.evidence_only or finding.detector == LIVENESS_DETECTOR:
            return None
        return next(
            (
                t
                for t in self.tuning
                if t.holds(finding.kpi, finding.entity, finding.score, finding.ts)
            ),
            None,
        )

    def in_maintenance(self, entity: str, ts: float) -> bool:
        """Whether ``entity`` or a topology neighbour of it is in maintenance at ``ts``."""
        return any(
            m.start <= ts <= m.end
            and (
                m.entity == entity or (self.related is not None and self.related(entity, m.entity))
            )
            for m in self.maintenance
        )

    def alarming(self, series: str, entity: str, direction: str) -> bool:
        """Whether ``series`` on ``entity`` alarms ``direction`` in an open incident: a finding
        of it now is a further reading there (``Finding.update``), not a new symptom. The
        correlator decides it, not the monitor: a reading that turned the other way, or one
        whose first finding was kept out (maintenance), is a new symptom."""
        return any(o.alarms((series, entity), direction) for o in self._open)

    def _near(self, finding: Finding, target: _Open) -> bool:
        """Whether ``finding`` joins ``target`` as a new symptom: it relates to the incident
        and comes within the grouping window of its last new symptom."""
        return finding.ts - target.incident.updated_at <= self.window_s and self._joins(
            finding, target.incident, target.scopes
        )

    @staticmethod
    def _consequence(finding: Finding, target: _Open) -> bool:
        """Whether ``finding`` says that an entity of the open incident ``target`` stopped
        answering: part of that fault whatever the grouping window (module docstring)."""
        return finding.detector == LIVENESS_DETECTOR and finding.entity in target.incident.entities

    def _leading_fault(self, inc: Incident) -> Hypothesis | None:
        """``inc``'s leading diagnosis where it is a fault of at least
        ``diagnosed_min_confidence``, else None."""
        top = inc.hypotheses[0] if inc.hypotheses else None
        if top is None or top.fault == "no_fault" or top.confidence < self.diagnosed_min_confidence:
            return None
        return top

    def _diagnosed_at(self, finding: Finding, inc: Incident) -> bool:
        """Whether ``inc``'s leading diagnosis is a fault (at least
        ``diagnosed_min_confidence``) on ``finding``'s entity or a topology neighbour of it."""
        top = self._leading_fault(inc)
        return bool(
            top is not None
            and top.entity
            and (
                top.entity == finding.entity
                or (self.related is not None and self.related(finding.entity, top.entity))
            )
        )

    def _partner_elsewhere(self, finding: Finding, inc: Incident) -> bool:
        """Whether ``inc``'s leading diagnosis (at least ``diagnosed_min_confidence``) is a
        fault of the roaming partner whose PLMN ``finding`` is about, and the finding comes
        from another site than some entity of ``inc``: one partner's outage seen at several
        sites is one incident (within a site, the PLMN's scope joins it already)."""
        top = self._leading_fault(inc)
        plmn = dict(finding.labels).get("plmnid")
        if (
            self.same_site is None
            or top is None
            or not top.partner
            or not plmn
            or plmn_digits(top.partner) != plmn_digits(plmn)
        ):
            return False
        return any(not self.same_site(finding.entity, e) for e in inc.entities)

    def _same_cause(self, finding: Finding, target: _Open) -> bool:
        """Whether ``finding`` is a further symptom of ``target``'s cause whatever the grouping
        window: its diagnosed fault sits on the finding's entity or next to it, or the finding
        is a peer's reading of a KPI alarming there within the window (module docstring)."""
        inc = target.incident
        since = finding.ts - inc.updated_at
        if since <= self.diagnosed_reach * self.window_s and (
            self._diagnosed_at(finding, inc) or self._partner_elsewhere(finding, inc)
        ):
            return True
        if since > self.window_s:
            return False
        prefix = finding.kpi + "{"
        return any(
            entity != finding.entity
            and direction == finding.direction
            and (series == finding.kpi or series.startswith(prefix))
            and (self.same_site is None or self.same_site(finding.entity, entity))
            for (series, entity), direction in target.firing.items()
        )

    def _joins(self, finding: Finding, incident: Incident, scopes: set[str]) -> bool:
        entity = finding.entity
        if entity in incident.entities:
            return True
        if self.scope is not None and scopes and self.scope(finding) in scopes:
            return True
        return self.related is not None and any(self.related(entity, e) for e in incident.entities)

    def add_finding(self, finding: Finding) -> list[IncidentEvent]:
        if self.in_maintenance(finding.entity, finding.ts):
            self.suppressed.append(finding)
            return []
        if finding.evidence_only:
            return self._add_evidence(finding)
        key = (series_id(finding.kpi, finding.labels), finding.entity)
        candidates = [
            o
            for o in self._open
            # a series still alarming in an incident reports there (an update of its reading),
            # however long ago the incident last changed (one 15-min PM period is > window_s)
            if o.alarms(key, finding.direction)
            or self._near(finding, o)
            or self._consequence(finding, o)
            or (self.aftermath is not None and self.aftermath(finding, o.incident))
            or self._same_cause(finding, o)
        ]
        if candidates:
            # a further reading of an alarming series goes to the incident it alarms in
            target = max(
                candidates, key=lambda o: (o.alarms(key, finding.direction), o.incident.updated_at)
            )
            known = target.alarms(key, finding.direction)
            # an entity of the incident going silent is that fault's consequence: it joins
            # without moving the grouping window, so peers' later readings are not pulled in
            aftermath_only = self._consequence(finding, target) and not self._near(finding, target)
            self._attach(target, finding, symptom=not known and not aftermath_only)
            if known:  # evidence for the diagnosis, not a new symptom: no page
                return [IncidentEvent("updated", target.incident, finding)]
            last_page = max([target.notified_at, *target.incident.escalated_at])
            if (
                finding.ts <= target.notified_at + self.notice_s
                or target.incident.severity == "info"
                or finding.ts < last_page + self.repage_after_s
            ):
                # part of the last notice or page (the same round, or sooner than
                # repage_after_s); a notice pages when its diagnosis says so
                # (Incident.severity), not by score
                target.notified = max(target.notified, finding.score)
            elif finding.score >= self.escalate_factor * target.notified and not (
                # a stronger symptom of the fault the on-call was paged for, diagnosed on
                # this entity or next to it, is evidence for that page, not a new one
                self._diagnosed_at(finding, target.incident)
            ):
                target.notified, target.notified_at = finding.score, finding.ts
                target.incident.escalated_at.append(finding.ts)
                return [IncidentEvent("escalated", target.incident, finding)]
            return [IncidentEvent("updated", target.incident, finding)]
        for inc in reversed(self._recent):
            if (
                inc.resolved_at is not None
                and finding.ts - inc.resolved_at <= self.flap_s
                and finding.kpi in inc.kpis
                and self._joins(finding, inc, set())
            ):
                self._recent.remove(inc)
                inc.state, inc.resolved_at = "open", None
                inc.reopened_at.append(finding.ts)
                reopened = _Open(inc, notified=finding.score, notified_at=finding.ts)
                self._open.append(reopened)
                self._attach(reopened, finding)
                return [IncidentEvent("reopened", inc, finding)]
        digest = hashlib.sha1(
            f"{finding.entity}|{finding.kpi}|{finding.ts:.0f}".encode()
        ).hexdigest()[:10]
        incident = Incident(
            id=f"inc-{digest}",
            fingerprint=hashlib.sha1(finding.entity.encode()).hexdigest()[:12],
            opened_at=finding.ts,
            updated_at=finding.ts,
            title=f"{finding.kpi} {finding.direction} on {finding.entity}",
        )
        opened = _Open(incident, notified=finding.score, notified_at=finding.ts)
        self._open.append(opened)
        self.incidents[incident.id] = incident
        self._attach(opened, finding)
        self._take_pending(opened)
        return [IncidentEvent("opened", incident, finding)]

    def _add_evidence(self, finding: Finding) -> list[IncidentEvent]:
        """An evidence-only finding: to the open incident it joins, else kept a window long
        for one that opens (see ``Finding.evidence_only``)."""
        candidates = [
            o for o in self._open if finding.entity in o.incident.entities or self._near(finding, o)
        ]
        if not candidates:
            self._pending = [f for f in self._pending if finding.ts - f.ts <= self.window_s] + [
                finding
            ]
            return []
        target = max(candidates, key=lambda o: o.incident.updated_at)
        self._attach(target, finding, symptom=False, firing=False)
        return [IncidentEvent("updated", target.incident, finding)]

    def _take_pending(self, target: _Open) -> None:
        """Attach the evidence-only findings of the last window that the new incident joins."""
        inc = target.incident
        keep: list[Finding] = []
        for f in self._pending:
            if inc.opened_at - f.ts > self.window_s:
                continue  # older than the window: dropped
            if self._joins(f, inc, target.scopes):
                self._attach(target, f, symptom=False, firing=False)
            else:
                keep.append(f)
        self._pending = keep

    def _attach(
        self, target: _Open, finding: Finding, symptom: bool = True, firing: bool = True
    ) -> None:
        """Add ``finding`` to ``target``; a further reading of an alarming series (``symptom``
        False) is evidence only: the grouping window runs from the last new symptom, so the
        readings of a long fault do not pull the next one's symptoms into its incident. An
        evidence-only finding (``firing`` False) has no alarm to hold the incident open."""
        inc = target.incident
        inc.finding_ids.append(finding.id)
        if finding.entity not in inc.entities:
            inc.entities.append(finding.entity)
        if finding.kpi not in inc.kpis:
            inc.kpis.append(finding.kpi)
        if symptom:
            inc.updated_at = max(inc.updated_at, finding.ts)
        if not firing:
            return
        inc.max_score = max(inc.max_score, finding.score)
        target.firing[(series_id(finding.kpi, finding.labels), finding.entity)] = finding.direction
        if self.scope is not None:
            sc = self.scope(finding)
            if sc:
                target.scopes.add(sc)

    def clear(self, series: str, entity: str, ts: float) -> None:
        """A series (see :func:`series_id`) of ``entity`` stopped alarming."""
        for o in self._open:
            o.firing.pop((series, entity), None)

    def open_incidents(self) -> list[Incident]:
        """The incidents open now, oldest first."""
        return [o.incident for o in self._open]

    def open_alarming(self) -> list[Incident]:
        """The incidents open now with a series still alarming (not only waiting to
        resolve), oldest first."""
        return [o.incident for o in self._open if o.firing]

    def tick(self, ts: float) -> list[IncidentEvent]:
        """Resolve incidents that went quiet; call at every evaluation time."""
        events: list[IncidentEvent] = []
        still: list[_Open] = []
        for o in self._open:
            if not o.firing and ts - o.incident.updated_at >= self.resolve_after_s:
                o.incident.state = "resolved"
                o.incident.resolved_at = ts
                self._recent.append(o.incident)
                events.append(IncidentEvent("resolved", o.incident))
            else:
                still.append(o)
        self._open = still
        cutoff = ts - self.flap_s
        self._recent = [i for i in self._recent if (i.resolved_at or 0) >= cutoff]
        return events

    def forget(self, before: float) -> list[Incident]:
        """Drop incidents resolved before ``before`` (and out of the flap window), suppressed
        findings and maintenance windows that ended before it; the dropped incidents.

        A long-running process keeps only what can still change: the store has the rest.
        """
        recent = {id(i) for i in self._recent}
        gone = [
            inc
            for inc in self.incidents.values()
            if inc.state == "resolved"
            and inc.resolved_at is not None
            and inc.resolved_at < before
            and id(inc) not in recent
        ]
        for inc in gone:
            del self.incidents[inc.id]
        self.suppressed = [f for f in self.suppressed if f.ts >= before]
        self.maintenance = [m for m in self.maintenance if m.end >= before]
        return gone

    def close_all(self, ts: float) -> list[IncidentEvent]:
        """End of input: nothing more will arrive, resolve whatever is quiet."""
        return self.tick(ts)


def inhibit_rules(topology: Topology, source_severity: str = "critical") -> dict[str, object]:
    """The topology as Prometheus Alertmanager ``inhibit_rules``: while an alert of
    ``source_severity`` fires on an entity, alerts on the entities that depend on it are muted
    (an SMF's session failures while its UPF is down page once, for the UPF).

    Entities are matched on the ``instance`` label, as our exporters and alerts carry it.

    >>> topo = Topology({"smf-1": "smf", "upf-2": "upf"}, {"smf-1": {"upf-2"}, "upf-2": set()})
    >>> inhibit_rules(topo)["inhibit_rules"]
    [{'source_matchers': ['instance="upf-2"', 'severity="critical"'], \
'target_matchers': ['instance="smf-1"']}]
    """
    rules: list[dict[str, list[str]]] = []
    for upstream in sorted(topology.types):
        if "/" in upstream:
            # a part of an entity (a GPU of a server): its alerts carry the server's
            # instance and a `gpu` label, so instance matching cannot single it out
            continue
        dependents = sorted(d for d in topology.dependents(upstream) if "/" not in d)
        if not dependents:
            continue
        target = (
            f'instance="{dependents[0]}"'
            if len(dependents) == 1
            else 'instance=~"' + "|".join(_re_escape(d) for d in dependents) + '"'
        )
        rules.append(
            {
                "source_matchers": [f'instance="{upstream}"', f'severity="{source_severity}"'],
                "target_matchers": [target],
            }
        )
    return {"inhibit_rules": rules}


def _re_escape(text: str) -> str:
    return "".join("\\" + c if c in ".^$*+?()[]{}|\\" else c for c in text)
