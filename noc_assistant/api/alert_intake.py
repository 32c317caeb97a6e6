"""Alertmanager's alerts as findings: ``POST /api/alertmanager/webhook`` (docs/FORMATS.md §6).

Alertmanager's webhook receiver (payload ``version`` 4) posts each notification of a group:
its alerts, firing or resolved, each with labels, annotations, ``startsAt``/``endsAt`` and a
``fingerprint``. The endpoint needs an operator's bearer token (:data:`~.deps.Operator`: the
``NOC_API_TOKEN`` in the receiver's ``http_config.authorization``); a payload that is no
version-4 notification answers 422 naming the field.

Each alert becomes a :class:`~noc_assistant.models.Finding` (detector ``alertmanager``) on the
entity its ``instance`` label names (a ``:port`` suffix dropped; else its ``entity``, ``nf`` or
``job`` label; an alert with none of them is skipped and said so in the answer). Its KPI is
``alert:<alertname>``, pointing up, unless a ``kpi`` label names a KPI of the pack: then it is
a finding of that KPI (the way of its ``direction`` label, else the KPI's bad direction), and
the pack's rules read it as they read the detectors' findings. Its labels, and its annotations
as ``annotation:<name>`` labels, are kept on the finding as data: label values and annotations
are text whoever wrote the alert rule (or controls the exporter) chose, so subscriber
identifiers in them are masked first (:func:`noc_assistant.ingest.scrub.scrub_labels`, as at
ingest) and nothing in them is ever read as an instruction. A ``severity`` label sets the score
(:data:`SEVERITY_SCORES`).

Alertmanager repeats a firing alert at every ``group_interval`` and ``repeat_interval``: an
alert is known by its fingerprint, and a repeat of one still firing is no new finding (its
id is the fingerprint and ``startsAt`` hashed, so one seen again after a restart is stored
once). Resolved, its series stops alarming; the incident then resolves as any does, once none
of its series alarms and it has been quiet for the correlator's ``resolve_after_s``. An alert
that fires again later (a new ``startsAt``) is a new finding: within the correlator's flap
window it reopens its incident.

The findings go to an :class:`AlertSink`. In a console without a pipeline (``noc serve``) it
is :class:`StoreCorrelation`: a correlator and the RCA of its own, writing incidents, findings
and diagnoses to the store, whose live feed (:mod:`noc_assistant.api.feed`) then shows them,
and takes the store's maintenance windows at each tick. Where a pipeline runs in the same
process (``noc watch``), :class:`QueuedAlerts` hands them to the pipeline's own loop, so that
they join its correlator. The intake ticks its sink every ``tick_s`` (a thread of the app's
lifespan) and at each notification, on the wall clock.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal, Protocol

from fastapi import APIRouter, FastAPI
from pydantic import BaseModel, ConfigDict, Field, field_validator

from knowledge.pack import Pack, load_pack
from knowledge.topology import Topology, guess_type
from noc_assistant.api.deps import Operator
from noc_assistant.errors import NocError, StorageError
from noc_assistant.ingest.scrub import scrub_labels
from noc_assistant.models import Direction, Finding, Incident
from noc_assistant.store import Store
from noc_assistant.stream.correlate import Correlator, IncidentEvent, MaintenanceWindow, series_id
from noc_assistant.triage.drafting import Drafter
from noc_assistant.triage.rca import Diagnosis, diagnose

__all__ = [
    "ALERT_DETECTOR",
    "AlertIntake",
    "AlertSink",
    "IntakeResult",
    "QueuedAlerts",
    "StoreCorrelation",
    "WebhookAlert",
    "WebhookPayload",
    "alert_finding",
    "alert_router",
    "default_intake",
    "entity_of",
]

ALERT_DETECTOR = "alertmanager"
"""The detector of a finding that came from an Alertmanager alert."""
ENTITY_LABELS = ("instance", "entity", "nf", "job")
"""The labels that name an alert's entity, first found first."""
ANNOTATION = "annotation:"
"""Prefix of an annotation kept among a finding's labels."""
SEVERITY_SCORES = {
    "critical": 10.0,
    "major": 6.0,
    "error": 6.0,
    "warning": 3.0,
    "minor": 2.0,
    "info": 1.0,
}
DEFAULT_SCORE = 3.0
MAX_TEXT = 2000
"""The longest label value or annotation kept (the rest is cut)."""
KEEP_S = 86_400.0
"""How long a resolved alert's fingerprint, and a resolved incident, are kept in memory."""

EARLIEST, LATEST = 0.0, 7_258_118_400.0
"""The span of a plausible ``startsAt`` (1970 to 2200): a time past any page's calendar must
not reach the store (every page that showed it would fail)."""

_DIRECTIONS: dict[str, Direction] = {"up": "up", "down": "down", "both": "both"}
TopologyArg = Topology | Callable[[], Topology] | None
_default_pack = functools.cache(load_pack)


class WebhookAlert(BaseModel):
    """One alert of a notification (Alertmanager's ``alerts[]``)."""

    model_config = ConfigDict(extra="ignore")

    status: Literal["firing", "resolved"]
    labels: dict[str, str]
    annotations: dict[str, str] = Field(default_factory=dict)
    startsAt: datetime
    endsAt: datetime | None = None
    generatorURL: str = ""
    fingerprint: str = Field(default="", max_length=128)
    """Alertmanager's hash of the labels (derived from them where a sender leaves it out)."""

    @field_validator("startsAt")
    @classmethod
    def _plausible(cls, at: datetime) -> datetime:
        if not EARLIEST <= _epoch(at) <= LATEST:
            raise ValueError("startsAt must lie between 1970 and 2200")
        return at

    def key(self) -> str:
        if self.fingerprint:
            return self.fingerprint
        text = ",".join(f"{k}={v}" for k, v in sorted(self.labels.items()))
        return "labels-" + hashlib.sha1(text.encode()).hexdigest()[:16]


class WebhookPayload(BaseModel):
    """A notification of Alertmanager's webhook receiver (payload version 4); fields added by
    later Alertmanagers (``truncatedAlerts``) are read or ignored, never refused."""

    model_config = ConfigDict(extra="ignore")

    version: Literal["4"]
    groupKey: str = ""
    truncatedAlerts: int = 0
    status: Literal["firing", "resolved"]
    receiver: str = ""
    groupLabels: dict[str, str] = Field(default_factory=dict)
    commonLabels: dict[str, str] = Field(default_factory=dict)
    commonAnnotations: dict[str, str] = Field(default_factory=dict)
    externalURL: str = ""
    alerts: list[WebhookAlert] = Field(max_length=10_000)


class IntakeResult(BaseModel):
    """What one notification did."""

    alerts: int = 0
    findings: list[str] = Field(default_factory=list)
    """The ids of the new findings."""
    repeats: int = 0
    """Firing alerts already known (no new finding)."""
    resolved: int = 0
    unknown: int = 0
    """Resolved alerts never seen firing (ignored)."""
    skipped: list[str] = Field(default_factory=list)
    """Fingerprints of alerts that name no entity (no ``instance``, ``entity``, ``nf``, ``job``)."""


def _epoch(at: datetime) -> float:
    return (at if at.tzinfo is not None else at.replace(tzinfo=UTC)).timestamp()


def entity_of(labels: dict[str, str]) -> str | None:
    """The entity an alert's labels name (see the module docstring).

    >>> entity_of({"instance": "amf-1:9090"}), entity_of({"instance": "[::1]:9090"})
    ('amf-1', '::1')
    >>> entity_of({"job": "open5gs", "nf": "smf-2"}), entity_of({"alertname": "X"}) is None
    ('smf-2', True)
    """
    for name in ENTITY_LABELS:
        value = labels.get(name, "").strip()
        if not value:
            continue
        if name == "instance":
            host, sep, port = value.rpartition(":")
            if sep and host and port.isdigit() and (":" not in host or host.endswith("]")):
                value = host[1:-1] if host.startswith("[") and host.endswith("]") else host
        return value
    return None


def _text(pairs: dict[str, str], prefix: str = "") -> tuple[tuple[str, str], ...]:
    """Sorted (name, value) pairs, cut to size and without NUL (no database stores one)."""
    return tuple(
        sorted(
            (prefix + k[:200].replace("\x00", ""), v[:MAX_TEXT].replace("\x00", ""))
            for k, v in pairs.items()
        )
    )


def _score(labels: dict[str, str]) -> float:
    return SEVERITY_SCORES.get(labels.get("severity", "").lower(), DEFAULT_SCORE)


def _observed(notes: dict[str, str]) -> float:
    """The ``value`` annotation where it is a finite number, else 1 (the alert fires)."""
    try:
        value = float(notes.get(ANNOTATION + "value", "1"))
    except ValueError:
        return 1.0
    return value if value == value and abs(value) != float("inf") else 1.0


def alert_finding(
    alert: WebhookAlert, pack: Pack, entity_type: Callable[[str], str]
) -> Finding | None:
    """The finding of a firing alert (None: it names no entity), its texts masked."""
    labels = scrub_labels(pack, _text(alert.labels))
    notes = scrub_labels(pack, _text(alert.annotations, ANNOTATION))
    by_name = dict(labels)
    entity = entity_of(by_name)
    if entity is None:
        return None
    kpi_def = pack.kpis.get(by_name.get("kpi", ""))
    direction: Direction = "up"
    if kpi_def is not None:
        kpi = kpi_def.id
        direction = _DIRECTIONS.get(by_name.get("direction", ""), kpi_def.bad_direction)
    else:
        kpi = "alert:" + (by_name.get("alertname") or "unnamed")
    starts = _epoch(alert.startsAt)
    tag = f"{alert.key()}|{starts:.3f}"
    source = scrub_labels(pack, _text({"generatorURL": alert.generatorURL}))[0][1]
    return Finding(
        id="f-am-" + hashlib.sha1(tag.encode()).hexdigest()[:12],
        detector=ALERT_DETECTOR,
        kpi=kpi,
        entity=entity,
        entity_type=entity_type(entity) or guess_type(by_name.get("nf", ""), pack),
        ts=starts,
        score=_score(by_name),
        observed=_observed(dict(notes)),
        expected_low=0.0,
        expected_high=0.0,
        direction=direction,
        series=source or kpi,
        labels=tuple(sorted(labels + notes)),
    )


class AlertSink(Protocol):
    """Where alert findings go: a correlator that takes them (see the module docstring)."""

    def fire(self, finding: Finding) -> None:
        """A new finding (an alert began firing)."""

    def clear(self, series: str, entity: str, ts: float) -> None:
        """The series (:func:`series_id` of a finding's KPI and labels) stopped alarming."""

    def tick(self, now: float) -> None:
        """Resolve what went quiet by ``now``."""


def _topology(topology: TopologyArg, pack: Pack) -> Topology:
    if topology is None:
        return Topology.infer({}, pack)
    return topology if isinstance(topology, Topology) else topology()


class StoreCorrelation:
    """A correlator and RCA of the console's own, storing every incident event (the console
    without a pipeline, ``noc serve``). Thread-safe."""

    def __init__(
        self,
        store: Store,
        pack: Pack | None = None,
        topology: TopologyArg = None,
        *,
        window_s: float = 600.0,
        resolve_after_s: float = 300.0,
    ) -> None:
        self.store = store
        self._pack = pack
        self._topology = topology
        self.correlator = Correlator(
            window_s=window_s, resolve_after_s=resolve_after_s, related=self._related
        )
        self.findings: dict[str, Finding] = {}
        self.diagnoses: dict[str, Diagnosis] = {}
        self.last_error: str | None = None
        """Why the last maintenance sync failed (None: it did not)."""
        self._lock = threading.RLock()

    @property
    def pack(self) -> Pack:
        return self._pack if self._pack is not None else _default_pack()

    def topology(self) -> Topology:
        return _topology(self._topology, self.pack)

    def _related(self, a: str, b: str) -> bool:
        return self.topology().related(a, b)

    def fire(self, finding: Finding) -> None:
        with self._lock:
            self.findings[finding.id] = finding
            events = self.correlator.add_finding(finding)
            if not events:  # kept out (maintenance): stored, in no incident
                self.store.save_findings([finding])
            self._emit(events)

    def clear(self, series: str, entity: str, ts: float) -> None:
        with self._lock:
            self.correlator.clear(series, entity, ts)

    def tick(self, now: float) -> None:
        with self._lock:
            self._sync_maintenance(now)
            self._emit(self.correlator.tick(now))
            for inc in self.correlator.forget(now - KEEP_S):
                self.diagnoses.pop(inc.id, None)
            live = {i for inc in self.correlator.incidents.values() for i in inc.finding_ids}
            self.findings = {
                k: f for k, f in self.findings.items() if k in live or f.ts >= now - KEEP_S
            }

    def _sync_maintenance(self, now: float) -> None:
        """The store's maintenance windows (as ``noc watch`` takes them each round)."""
        try:
            declared = self.store.maintenance_windows(ending_after=now - KEEP_S)
        except StorageError as exc:
            self.last_error = str(exc)
            return
        self.last_error = None
        self.correlator.maintenance = [
            MaintenanceWindow(m.entity, m.start, m.end) for m in declared
        ]

    def _emit(self, events: list[IncidentEvent]) -> None:
        for ev in events:
            inc = ev.incident
            diagnosis = self._diagnose(inc)
            self.store.save_incident(inc)
            self.store.save_diagnosis(diagnosis)
            if ev.finding is not None:
                self.store.save_findings([ev.finding], incident_id=inc.id)

    def _diagnose(self, incident: Incident) -> Diagnosis:
        """Rank root causes as the pipeline does; the hypotheses go on the incident."""
        findings = [self.findings[i] for i in incident.finding_ids if i in self.findings]
        diag = diagnose(incident, findings, self.topology(), self.pack)
        incident.hypotheses = list(diag.hypotheses)
        top = diag.top
        if top.fault != "no_fault":
            incident.title = f"{top.fault} on {top.entity}"
        self.diagnoses[incident.id] = diag
        return diag


class QueuedAlerts:
    """The sink of a console beside a running pipeline (``noc watch``): alert findings and
    clears wait here until the pipeline's own loop takes them (:meth:`drain`, from the thread
    that feeds the pipeline), so that they join its correlator, its RCA and its sinks. Ticks
    are the pipeline's own. Thread-safe."""

    def __init__(self) -> None:
        self._queue: list[Finding | tuple[str, str, float]] = []
        self._lock = threading.Lock()

    def fire(self, finding: Finding) -> None:
        with self._lock:
            self._queue.append(finding)

    def clear(self, series: str, entity: str, ts: float) -> None:
        with self._lock:
            self._queue.append((series, entity, ts))

    def tick(self, now: float) -> None:
        """Nothing: the pipeline ticks its correlator."""

    def drain(
        self, add: Callable[[Finding], None], clear: Callable[[str, str, float], None]
    ) -> int:
        """Hand what waits to the pipeline, in arrival order: ``add`` a finding (as the
        pipeline adds its detectors' findings), ``clear`` a series. How many items."""
        with self._lock:
            items, self._queue = self._queue, []
        for item in items:
            if isinstance(item, Finding):
                add(item)
            else:
                clear(*item)
        return len(items)


@dataclass
class _Known:
    """An alert seen firing: its finding's series and entity, and when it started/ended."""

    finding_id: str
    series: str
    entity: str
    starts_at: float
    resolved_at: float | None = None


class AlertIntake:
    """The webhook's state: the alerts known by fingerprint, and the sink they go to."""

    def __init__(
        self,
        sink: AlertSink,
        pack: Pack | None = None,
        topology: TopologyArg = None,
        *,
        clock: Callable[[], float] = time.time,
        tick_s: float = 5.0,
    ) -> None:
        self.sink = sink
        self._pack = pack
        self._topology = topology
        self.clock = clock
        self.tick_s = tick_s
        self.last_error: str | None = None
        """Why the last background tick failed (None: it did not)."""
        self._known: dict[str, _Known] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @classmethod
    def for_store(
        cls,
        store: Store,
        pack: Pack | None = None,
        topology: TopologyArg = None,
        *,
        window_s: float = 600.0,
        resolve_after_s: float = 300.0,
        clock: Callable[[], float] = time.time,
        tick_s: float = 5.0,
    ) -> AlertIntake:
        """An intake whose findings are correlated here and stored (:class:`StoreCorrelation`)."""
        sink = StoreCorrelation(
            store, pack, topology, window_s=window_s, resolve_after_s=resolve_after_s
        )
        return cls(sink, pack, topology, clock=clock, tick_s=tick_s)

    @property
    def pack(self) -> Pack:
        return self._pack if self._pack is not None else _default_pack()

    def _entity_type(self, entity: str) -> str:
        types = _topology(self._topology, self.pack).types
        return types.get(entity) or guess_type(entity, self.pack)

    def receive(self, payload: WebhookPayload) -> IntakeResult:
        """Take one notification (see the module docstring); then tick the sink."""
        result = IntakeResult(alerts=len(payload.alerts))
        now = self.clock()
        with self._lock:
            for alert in payload.alerts:
                if alert.status == "firing":
                    self._firing(alert, result)
                else:
                    self._resolved(alert, now, result)
            self.sink.tick(now)
            self._forget(now)
        return result

    def _firing(self, alert: WebhookAlert, result: IntakeResult) -> None:
        key = alert.key()
        known = self._known.get(key)
        starts = _epoch(alert.startsAt)
        # still firing, or a late copy of a notification from before it resolved
        if known is not None and (known.resolved_at is None or known.starts_at == starts):
            result.repeats += 1
            return
        finding = alert_finding(alert, self.pack, self._entity_type)
        if finding is None:
            result.skipped.append(key)
            return
        series = series_id(finding.kpi, finding.labels)
        self._known[key] = _Known(finding.id, series, finding.entity, starts)
        self.sink.fire(finding)
        result.findings.append(finding.id)

    def _resolved(self, alert: WebhookAlert, now: float, result: IntakeResult) -> None:
        known = self._known.get(alert.key())
        if known is None or known.resolved_at is not None:
            result.unknown += 1
            return
        ends = _epoch(alert.endsAt) if alert.endsAt is not None else now
        known.resolved_at = ends if ends > 0 else now
        self.sink.clear(known.series, known.entity, known.resolved_at)
        result.resolved += 1

    def _forget(self, now: float) -> None:
        self._known = {
            k: a
            for k, a in self._known.items()
            if a.resolved_at is None or now - a.resolved_at <= KEEP_S
        }

    def tick(self, now: float | None = None) -> None:
        """Tick the sink at ``now`` (default: the clock)."""
        with self._lock:
            if self._known:  # nothing ever arrived: nothing to resolve
                self.sink.tick(self.clock() if now is None else now)

    def start(self) -> None:
        """Tick every ``tick_s`` on a daemon thread until :meth:`stop`."""
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="alert-intake", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.wait(self.tick_s):
            try:
                self.tick()
                self.last_error = None
            except NocError as exc:  # the store is down: the next tick tries again
                self.last_error = str(exc)


def default_intake(store: Store, drafter: Drafter | None) -> AlertIntake:
    """The intake of a console built without one: correlated here and stored, on the pack and
    network of ``drafter`` (without one, the default pack, loaded at the first alert)."""
    if drafter is None:
        return AlertIntake.for_store(store)
    return AlertIntake.for_store(store, drafter.pack, lambda: drafter.network_topology)


def alert_router(intake: AlertIntake) -> APIRouter:
    """The webhook endpoint; the intake ticks for as long as the application runs."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        intake.start()
        try:
            yield
        finally:
            intake.stop()

    router = APIRouter(lifespan=lifespan)

    @router.post("/api/alertmanager/webhook")
    def alertmanager_webhook(caller: Operator, payload: WebhookPayload) -> IntakeResult:
        """A notification of Alertmanager's webhook receiver (payload version 4)."""
        return intake.receive(payload)

    return router
