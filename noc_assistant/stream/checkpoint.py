"""Signed snapshots of a running pipeline, so that a restart resumes instead of re-learning.

A pipeline's detectors learn each series' level, daily profile, tail and alarm state over days
(the probation alone is a day); a process that restarted from nothing would be blind that long,
and incidents open at the crash would be forgotten. :func:`snapshot` captures the whole
streaming state (reorder buffer, series store, monitors, correlator, open incidents, findings
not yet resolved) and :func:`restore` rebuilds it: fed the same points afterwards, the restored
pipeline emits exactly what the uninterrupted one would have (tested).

What is not in a snapshot: the knowledge pack (KPIs are referenced by id and re-attached from
the pack given to :func:`restore`, which must define every KPI the snapshot watched with the
same formula, or the restore is refused) and the sinks (``on_finding``/``on_incident``, given
again).

Format: ``MAGIC``, a 4-byte header length, a JSON header (pack, KPI fingerprints, the caller's
metadata such as a bus sequence), an HMAC-SHA256 over all of it and the payload, then the
zlib-compressed pickle. The HMAC key comes from settings (``NOC_STATE_KEY``), never from the
repository; a snapshot whose signature does not verify is refused before anything is
unpickled. Even a signed payload is not trusted to name what runs: the unpickler resolves only
the (module, name) pairs of :data:`_ALLOWED` (the state's own classes, numpy's array
rebuilders, the standard containers), each looked up as a plain attribute of its module, never
a dotted path (``find_class("noc_assistant.stream.checkpoint", "os.system")`` would otherwise reach
``os`` through this module's imports); and the bound methods a state holds
(``Pipeline._related`` and the correlator's other callbacks) come from :func:`_bound`, not
from ``getattr``, which would let a payload walk from any allowed class to ``__globals__``.
A payload that names anything else is refused before it runs.

A snapshot taken before the pipeline was split into parts (its whole state on the pipeline
itself) is rebuilt into the parts as it is restored (:data:`_PARTS`).

What is referenced, not held (the pack, KPIs, sinks), is pickled as a call of :func:`_ref`
that the running restore resolves (snapshots of earlier versions used pickle's
persistent ids, which are still read): a persistent-id hook would run for every number of
the state, and snapshots took three times as long.
"""

from __future__ import annotations

import contextvars
import hashlib
import hmac
import importlib
import io
import json
import os
import pickle
import struct
import zlib
from collections.abc import Callable, Mapping
from pathlib import Path
from types import FunctionType, MethodType
from typing import Any, cast
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from knowledge.kpis import KpiDef
from knowledge.pack import Pack
from noc_assistant.errors import BadInputError, ConfigError
from noc_assistant.ingest.door import Labels, SeriesDoor
from noc_assistant.settings import Settings
from noc_assistant.stream.clock import ScrapeClock
from noc_assistant.stream.evaluate import KpiEvaluator
from noc_assistant.stream.liveness import LivenessWatch
from noc_assistant.stream.network import NetworkCorrelator
from noc_assistant.stream.pipeline import FindingSink, IncidentSink, Pipeline
from noc_assistant.stream.topology_guess import TopologyGuess

__all__ = [
    "MAGIC",
    "CheckpointError",
    "read_file",
    "read_meta",
    "restore",
    "snapshot",
    "state_key",
    "write_file",
]

MAGIC = b"NOC-CKPT\x01"
_MAC = 32

#: what the unpickler may resolve, exactly: (module, name) pairs, never a dotted name. A class
#: added to the pipeline's state goes here too (the snapshot tests fail naming it until then).
_ALLOWED: frozenset[tuple[str, str]] = frozenset(
    {
        ("builtins", name)
        for name in ("set", "frozenset", "dict", "list", "tuple", "bytearray", "complex", "slice")
    }
    | {
        ("collections", "deque"),
        ("collections", "OrderedDict"),
        ("collections", "defaultdict"),
        ("collections", "Counter"),
        ("itertools", "count"),
        ("pathlib", "PosixPath"),
        ("pathlib", "PurePosixPath"),
        ("datetime", "datetime"),
        ("datetime", "date"),
        ("datetime", "timedelta"),
        ("datetime", "timezone"),
        ("zoneinfo", "ZoneInfo"),
        ("numpy", "dtype"),
        ("numpy", "ndarray"),
        ("numpy", "float64"),
        ("numpy", "float32"),
        ("numpy", "int64"),
        ("numpy", "int32"),
        ("numpy", "bool_"),
        # numpy 2 and numpy 1 spell the array rebuilders' module differently
        ("numpy._core.numeric", "_frombuffer"),
        ("numpy.core.numeric", "_frombuffer"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "scalar"),
        ("numpy.core.multiarray", "scalar"),
        ("noc_assistant.stream.checkpoint", "_ref"),
        ("noc_assistant.stream.checkpoint", "_bound"),
        ("noc_assistant.stream.checkpoint", "_zone"),
        ("noc_assistant.stream.pipeline", "Pipeline"),
        ("noc_assistant.stream.topology_guess", "TopologyGuess"),
        ("noc_assistant.stream.clock", "ScrapeClock"),
        ("noc_assistant.stream.evaluate", "KpiEvaluator"),
        ("noc_assistant.stream.history", "KpiHistory"),
        ("noc_assistant.stream.liveness", "LivenessWatch"),
        ("noc_assistant.stream.network", "NetworkCorrelator"),
        ("noc_assistant.stream.correlate", "Correlator"),
        ("noc_assistant.stream.correlate", "_Open"),
        ("noc_assistant.stream.correlate", "MaintenanceWindow"),
        ("noc_assistant.models", "SeriesKey"),
        ("noc_assistant.models", "Sample"),
        ("noc_assistant.models", "Finding"),
        ("noc_assistant.models", "Evidence"),
        ("noc_assistant.models", "Hypothesis"),
        ("noc_assistant.models", "Diagnosis"),
        ("noc_assistant.models", "Incident"),
        ("noc_assistant.models", "Tuning"),
        ("noc_assistant.triage.rca", "Diagnosis"),
        ("noc_assistant.ingest.point", "Point"),
        ("noc_assistant.ingest.quarantine", "Quarantine"),
        ("noc_assistant.ingest.quarantine", "QuarantineRecord"),
        ("noc_assistant.ingest.reorder", "ReorderBuffer"),
        ("noc_assistant.ingest.reorder", "Released"),
        ("noc_assistant.ingest.door", "SeriesDoor"),
        ("noc_assistant.ingest.series", "SeriesState"),
        ("noc_assistant.ingest.series", "SeriesStore"),
        ("noc_assistant.ingest.rings", "Rings"),
        ("noc_assistant.stream.fanin", "FanIn"),
        ("noc_assistant.stream.fanin", "TickRecorder"),
        ("noc_assistant.stream.fanin", "Seen"),
        ("noc_assistant.stream.fanin", "Clear"),
        ("noc_assistant.stream.fanin", "Tick"),
        ("noc_assistant.stream.fanin", "Batch"),
        ("knowledge.topology", "Topology"),
        ("knowledge.topology", "PartnerLink"),
        ("detectors._bank_kernel", "KernelParams"),
        ("detectors.bank", "EnsembleBank"),
        ("detectors.bank", "BankResult"),
        ("detectors.params", "EnsembleParams"),
        ("detectors.clock", "LocalClock"),
        ("detectors.monitor", "MonitorBank"),
        ("detectors.counts", "CountGate"),
        ("detectors.count_bank", "CountGates"),
        ("detectors.monitor", "SeriesMonitor"),
        ("detectors.monitor", "Observation"),
        ("detectors.monitor", "MonitorEvent"),
        ("detectors.alerting", "Alerter"),
        ("detectors.calibrate", "AdaptiveThreshold"),
        ("detectors.cusum", "Cusum"),
        ("detectors.ensemble", "Ensemble"),
        ("detectors.forecast", "ForecastResidual"),
        ("detectors.ratio", "BinomialRatio"),
        ("detectors.robust_zscore", "RobustZScore"),
        ("detectors.seasonal", "SeasonalProfile"),
        ("detectors.spot", "PeaksOverThreshold"),
        ("detectors.window_outlier", "WindowOutlier"),
        ("detectors.energy", "EnergyPerRequest"),
        ("detectors.kv_cache", "KvCacheSaturation"),
        ("detectors.latency_load", "LatencyLoadRegression"),
        ("detectors.spec_accept", "SpecAcceptCollapse"),
    }
)

#: pairs that earlier snapshots name by a dotted path, each mapped to a function of this
#: module that does the one thing the path did (never resolved as a path)
_LEGACY: dict[tuple[str, str], str] = {("zoneinfo", "ZoneInfo._unpickle"): "_zone"}

#: modules that moved when the package was grouped by role: snapshots taken before the move
#: name the old module, which is read as the new one (then checked against :data:`_ALLOWED`)
_MOVED: dict[str, str] = {
    "noc_assistant.pipeline": "noc_assistant.stream.pipeline",
    "noc_assistant.correlate": "noc_assistant.stream.correlate",
    "noc_assistant.fanin": "noc_assistant.stream.fanin",
    "noc_assistant.checkpoint": "noc_assistant.stream.checkpoint",
    "noc_assistant.rca": "noc_assistant.triage.rca",
}

#: where the attributes of a pipeline's state went when the pipeline was split into parts
#: (part → its class and, per attribute a snapshot taken before held on the pipeline itself,
#: its name on the part): :func:`_split_up` moves them
_PARTS: dict[str, tuple[type, dict[str, str]]] = {
    "guess": (
        TopologyGuess,
        {
            name: name
            for name in (
                "topology",
                "_types",
                "_inferred",
                "_inferred_plmns",
                "_plmn_counts",
                "_role_metrics",
                "_own_by_type",
                "_guessed",
            )
        },
    ),
    "clock": (
        ScrapeClock,
        {
            "interval_s": "interval_s",
            "first_ts": "first_ts",
            "_last_ts": "last_ts",
            "_next_eval": "next_eval",
            "_deltas": "_deltas",
            "_lateness": "_lateness",
            "_probe": "_probe",
            "_probe_steps": "_probe_steps",
        },
    ),
    "evaluator": (
        KpiEvaluator,
        {
            name: name
            for name in ("kpi_history", "_history", "_applicable", "_evaluated", "_groups")
        },
    ),
    "liveness": (
        LivenessWatch,
        {"_live_kpis": "kpis", "_down": "down", "_alive_since": "alive_since"},
    ),
}

#: the bound methods a state may hold: (class, method name); a snapshot of one is written as
#: a call of :func:`_bound`, as pickle writes it as ``getattr(obj, name)``
_BOUND_METHODS: frozenset[tuple[str, str]] = frozenset(
    ("noc_assistant.stream.pipeline.Pipeline", name)
    for name in ("_related", "_scope", "_aftermath", "_same_site")
)


#: what rebuilding a payload the allowlist lets through may still raise (wrong arguments, a
#: truncated stream): a damaged snapshot, exit 2, not an internal error
_DAMAGE = (
    pickle.UnpicklingError,
    EOFError,
    TypeError,
    ValueError,
    AttributeError,
    LookupError,
    RecursionError,
)


class CheckpointError(BadInputError):
    """A snapshot that cannot be restored: damaged, unsigned, or from another pack."""


def state_key(settings: Settings) -> bytes:
    """The snapshot signing key from settings (``NOC_STATE_KEY``)."""
    if settings.state_key is None:
        raise ConfigError(
            "NOC_STATE_KEY is not set: pipeline snapshots are signed with it (any long random "
            "string, kept with the deployment's other secrets)"
        )
    key = settings.state_key.get_secret_value().encode()
    if len(key) < 16:
        raise ConfigError("NOC_STATE_KEY: use at least 16 characters")
    return key


def _fingerprint(kpi: KpiDef) -> str:
    body = json.dumps([kpi.formula, kpi.support, kpi.min_support, kpi.window_s, kpi.group_by])
    return hashlib.sha256(body.encode()).hexdigest()[:16]


_RESOLVE: contextvars.ContextVar[Callable[[Any], Any] | None] = contextvars.ContextVar(
    "noc_checkpoint_resolve", default=None
)


def _ref(*pid: str) -> Any:
    """What a snapshot references instead of holding (the pack, a KPI, a sink), resolved by
    the :func:`restore` running now; pickled by name, so the pickler's reducer hook, which
    plain numbers, strings and containers never reach, is the only per-object cost."""
    resolve = _RESOLVE.get()
    if resolve is None:
        raise CheckpointError(f"reference {pid!r} outside a restore")
    return resolve(pid)


def _bound(obj: Any, name: str) -> Any:
    """The bound method ``obj.name`` for a pair of :data:`_BOUND_METHODS`, refused for
    anything else: the one lookup a snapshot may make on an object. The function is taken from
    the class itself (not the instance, whose state the payload wrote), then bound."""
    if obj is ZoneInfo and name == "_unpickle":  # how earlier snapshots rebuilt a time zone
        return _zone
    cls = type(obj)
    func = vars(cls).get(name)
    if (f"{cls.__module__}.{cls.__qualname__}", name) not in _BOUND_METHODS or not isinstance(
        func, FunctionType
    ):
        raise CheckpointError(f"refuses to look up {cls.__qualname__}.{name}")
    return MethodType(func, obj)


def _zone(key: str, *_cache: object) -> ZoneInfo:
    """A time zone by its IANA key (a detector's local clock holds one); pickled as this
    call, as ``ZoneInfo`` pickles itself under a dotted name (``ZoneInfo._unpickle``)."""
    if not isinstance(key, str):
        raise CheckpointError(f"time zone key {key!r} is not text")
    try:
        return ZoneInfo(key)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise CheckpointError(f"unknown time zone {key!r}: {exc}") from None


class _Pickler(pickle.Pickler):
    def __init__(self, fh: io.BytesIO, pipe: Pipeline, kpis: dict[str, str]) -> None:
        super().__init__(fh, protocol=5)
        self._pipe = pipe
        self._kpis = kpis

    def reducer_override(self, obj: Any) -> Any:
        # (a persistent_id hook would be called for every float and tuple of the state)
        if obj is self._pipe.pack:
            return _ref, ("pack",)
        if isinstance(obj, KpiDef):
            self._kpis[obj.id] = _fingerprint(obj)
            return _ref, ("kpi", obj.id)
        if obj is not None and obj is self._pipe.on_finding:
            return _ref, ("sink", "finding")
        if obj is not None and obj is self._pipe.on_incident:
            return _ref, ("sink", "incident")
        if isinstance(obj, MethodType) and isinstance(obj.__self__, Pipeline):
            return _bound, (obj.__self__, obj.__func__.__name__)
        if isinstance(obj, ZoneInfo) and obj.key is not None:
            return _zone, (obj.key,)
        return NotImplemented


class _Unpickler(pickle.Unpickler):
    def __init__(
        self, fh: io.BytesIO, pack: Pack, sinks: Mapping[str, object], source: str
    ) -> None:
        super().__init__(fh)
        self._pack = pack
        self._sinks = sinks
        self._source = source

    def load(self) -> Any:
        token = _RESOLVE.set(self.persistent_load)
        try:
            return super().load()
        finally:
            _RESOLVE.reset(token)

    def persistent_load(self, pid: Any) -> Any:
        """A reference (:func:`_ref`; snapshots of earlier versions held persistent ids)."""
        kind = pid[0]
        if kind == "pack":
            return self._pack
        if kind == "kpi":
            return self._pack.kpis[pid[1]]  # presence checked against the header first
        if kind == "sink":
            return self._sinks.get(pid[1])
        raise CheckpointError(f"unknown reference {pid!r}", source=self._source)

    def find_class(self, module: str, name: str) -> Any:
        """The one object a (module, name) pair of :data:`_ALLOWED` names, as a plain attribute
        of the module (no dotted path, no ``getattr`` chain); anything else is refused.

        Snapshots written before bound methods were pickled through :func:`_bound` name
        ``builtins.getattr``: they get :func:`_bound`, which looks up only what it allows; those
        written before the package was grouped by role name modules by :data:`_MOVED`.
        """
        if (module, name) == ("builtins", "getattr"):
            return _bound
        module = _MOVED.get(module, module)
        if (module, name) in _LEGACY:
            return globals()[_LEGACY[module, name]]
        if (module, name) not in _ALLOWED:
            raise CheckpointError(f"refuses to load {module}.{name}", source=self._source)
        try:
            namespace = vars(importlib.import_module(module))
        except ImportError:
            raise CheckpointError(f"cannot import {module}", source=self._source) from None
        if name not in namespace:
            raise CheckpointError(f"{module} has no {name}", source=self._source)
        return namespace[name]


def _split_up(pipe: Pipeline) -> None:
    """A pipeline restored from a snapshot taken before it was split into parts (its whole
    state on itself, :data:`_PARTS`), rebuilt as the parts hold it now."""
    state = vars(pipe)
    if "clock" in state:
        return
    parts: dict[str, object] = {}
    for part, (cls, moved) in _PARTS.items():
        obj: object = object.__new__(cls)
        vars(obj).update({new: state.pop(old) for old, new in moved.items()})
        parts[part] = obj
    vars(parts["guess"]).update(pack=state["pack"], kpis=state["kpis"], store=state["store"])
    vars(parts["clock"]).update(buffer=state["buffer"])
    evaluator = parts["evaluator"]
    assert isinstance(evaluator, KpiEvaluator)
    vars(evaluator).update(kpis=state["kpis"], store=state["store"], guess=parts["guess"])
    evaluator.restored()
    fan_in = state.pop("fan_in", None)
    state.update(parts, network=NetworkCorrelator(fan_in) if fan_in is not None else None)


def _add_door(pipe: Pipeline) -> None:
    """A pipeline restored from a snapshot taken before its buffer held arrays: its buffer
    numbered the series it held by a door of its own (:meth:`ReorderBuffer.__setstate__`),
    and is numbered by the pipeline's door now, one made for a snapshot from before the
    pipeline numbered series at the door (:class:`SeriesDoor`); a clock still probing keyed
    its series by metric and labels, and by number now."""
    state = vars(pipe)
    if "door" not in state:
        state["door"] = SeriesDoor()
    door = pipe.door
    if pipe.buffer.door is not door:
        pipe.buffer.rekey(door)
    probe = pipe.clock._probe
    if probe and not isinstance(next(iter(probe)), int):
        old = cast(dict[tuple[str, Labels], float], probe)
        pipe.clock._probe = {door.key_of(m, labels): ts for (m, labels), ts in old.items()}


def snapshot(pipe: Pipeline, key: bytes, meta: Mapping[str, Any] | None = None) -> bytes:
    """The pipeline's whole streaming state as signed bytes; ``meta`` (JSON) rides along."""
    kpis: dict[str, str] = {}
    buf = io.BytesIO()
    _Pickler(buf, pipe, kpis).dump(pipe)
    payload = zlib.compress(buf.getvalue(), 3)
    header = json.dumps(
        {
            "pack": f"{pipe.pack.meta.name}@{pipe.pack.meta.version}",
            "kpis": kpis,
            "meta": dict(meta or {}),
        },
        sort_keys=True,
    ).encode()
    head = MAGIC + struct.pack(">I", len(header)) + header
    mac = hmac.new(key, head + payload, hashlib.sha256).digest()
    return head + mac + payload


def _split(blob: bytes, source: str) -> tuple[dict[str, Any], bytes, bytes, bytes]:
    if not blob.startswith(MAGIC):
        raise CheckpointError("not a noc-assistant pipeline snapshot", source=source)
    at = len(MAGIC)
    if len(blob) < at + 4:
        raise CheckpointError("truncated header", source=source)
    (size,) = struct.unpack(">I", blob[at : at + 4])
    header_end = at + 4 + size
    if len(blob) < header_end + _MAC:
        raise CheckpointError("truncated snapshot", source=source)
    try:
        header = json.loads(blob[at + 4 : header_end])
    except ValueError as exc:
        raise CheckpointError(f"header is not JSON: {exc}", source=source) from None
    if not isinstance(header, dict):
        raise CheckpointError("header is not a JSON object", source=source)
    return (
        header,
        blob[:header_end],
        blob[header_end : header_end + _MAC],
        blob[header_end + _MAC :],
    )


def read_meta(blob: bytes, source: str = "snapshot") -> dict[str, Any]:
    """The caller's metadata of a snapshot (unverified: for listings, not for decisions)."""
    header = _split(blob, source)[0]
    meta = header.get("meta", {})
    return meta if isinstance(meta, dict) else {}


def restore(
    blob: bytes,
    key: bytes,
    *,
    pack: Pack,
    on_finding: FindingSink | None = None,
    on_incident: IncidentSink | None = None,
    source: str = "snapshot",
) -> tuple[Pipeline, dict[str, Any]]:
    """The pipeline of a :func:`snapshot` (and its metadata), its sinks attached.

    Raises :class:`CheckpointError` naming ``source`` if the bytes are damaged or were signed
    with another key, or if ``pack`` lacks a watched KPI or defines it differently.
    """
    header, head, mac, payload = _split(blob, source)
    if not hmac.compare_digest(mac, hmac.new(key, head + payload, hashlib.sha256).digest()):
        raise CheckpointError(
            "signature does not verify (damaged, or signed with another NOC_STATE_KEY)",
            source=source,
        )
    kpis = header.get("kpis", {})
    for kpi_id, print_ in sorted(kpis.items()):
        kpi = pack.kpis.get(kpi_id)
        if kpi is None:
            raise CheckpointError(
                f"the pack no longer defines KPI {kpi_id!r}, which the snapshot watched",
                source=source,
            )
        if _fingerprint(kpi) != print_:
            raise CheckpointError(
                f"KPI {kpi_id!r} changed its formula since the snapshot: its learnt state "
                "would not fit (start without the snapshot)",
                source=source,
            )
    try:
        raw = zlib.decompress(payload)
    except zlib.error as exc:
        raise CheckpointError(f"payload does not decompress: {exc}", source=source) from None
    sinks = {"finding": on_finding, "incident": on_incident}
    try:
        pipe = _Unpickler(io.BytesIO(raw), pack, sinks, source).load()
        if isinstance(pipe, Pipeline):
            _split_up(pipe)
            _add_door(pipe)
    except _DAMAGE as exc:  # signed, but not a state this version can rebuild
        raise CheckpointError(
            f"payload does not unpickle: {type(exc).__name__}: {str(exc)[:200]}", source=source
        ) from None
    if not isinstance(pipe, Pipeline):
        raise CheckpointError("payload is not a pipeline", source=source)
    pipe.on_finding = on_finding
    pipe.on_incident = on_incident
    meta = header.get("meta", {})
    return pipe, meta if isinstance(meta, dict) else {}


def write_file(path: Path, blob: bytes) -> None:
    """Write ``blob`` to ``path`` atomically (a crash leaves the old file or the new one)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("wb") as fh:
        fh.write(blob)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def read_file(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise CheckpointError(f"cannot read: {exc.strerror}", source=str(path)) from None
