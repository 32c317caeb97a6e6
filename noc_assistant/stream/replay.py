"""A replay file through the whole pipeline (``noc eval run``, the console's replay): what
it found, with the counts an evaluation reports."""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from knowledge.pack import Pack, load_pack
from noc_assistant.ingest import Quarantine, read_replay
from noc_assistant.ingest.reader import read_replay_columns
from noc_assistant.inventory import load_topology
from noc_assistant.models import Finding, Incident
from noc_assistant.stream.correlate import MaintenanceWindow
from noc_assistant.stream.pipeline import (
    REPLAY_LATENESS_INTERVALS,
    FindingSink,
    IncidentSink,
    Pipeline,
)
from noc_assistant.triage.rca import Diagnosis

__all__ = ["ReplayResult", "run_replay"]


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


def run_replay(
    telemetry: Path,
    *,
    inventory: Path | None = None,
    pack_dir: Path | None = None,
    pack: Pack | None = None,
    maintenance: Iterable[MaintenanceWindow] = (),
    quarantine_path: Path | None = None,
    on_finding: FindingSink | None = None,
    on_incident: IncidentSink | None = None,
    rca: bool = True,
) -> ReplayResult:
    """Run a replay file through the whole pipeline and return what it found.

    ``pack_dir`` is an operator overlay pack (it extends the default one); ``pack``, a pack
    the caller loaded already (``pack_dir`` is then not read). Bad lines go to
    ``quarantine_path`` (default ``<telemetry>.quarantine.jsonl``).
    """
    started = time.perf_counter()
    if pack is None:
        pack = load_pack(pack_dir)  # a PackError is a ConfigError, naming the file
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
    chunks = read_replay_columns(telemetry, quarantine)
    if chunks is None:
        pipe.replay(read_replay(telemetry, quarantine))
    else:
        pipe.feed_chunks(chunks)
        pipe.finish()
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
