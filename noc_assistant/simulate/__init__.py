"""Deterministic telemetry simulator: an operator's 5G core and GPU inference servers, with
labelled faults, benign events and maintenance.

The same :class:`ScenarioConfig` always gives the same samples and byte-identical files.

>>> sc = build_scenario(ScenarioConfig(days=0.02, faults="none", seed=3, interval_s=60))
>>> first = next(sc.iter_samples())
>>> first.metric, first.labels["instance"], first.type
('gnb', 'amf-1', 'gauge')
>>> sc.n_ticks, sc.n_series == len({(s.metric, tuple(s.labels.items())) for s in sc.series})
(29, True)
>>> sorted(sc.labels)
['incidents', 'maintenance', 'no_fault', 'restarts']
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field, field_validator

from detectors.clock import zone
from noc_assistant.simulate.faults import FAULT_IDS, FAULTS
from noc_assistant.simulate.model import Generator, RunState
from noc_assistant.simulate.network import (
    MAX_SCALE,
    Core,
    Network,
    ServingEngine,
    build_network,
)
from noc_assistant.simulate.schedule import Schedule, make_schedule
from noc_assistant.simulate.series import SeriesDef, build_series
from noc_assistant.simulate.vary import VaryDraw, draw_vary, scrape_effects, vary_events
from noc_assistant.simulate.writer import format_lines, line_parts, write_json

__all__ = [
    "FAULTS",
    "FAULT_IDS",
    "Scenario",
    "ScenarioConfig",
    "SimColumns",
    "SimSample",
    "build_scenario",
    "scrape_offset",
    "write_scenario",
]

DEFAULT_START = datetime(2026, 11, 29, tzinfo=UTC)


class ScenarioConfig(BaseModel):
    """What to simulate.

    ``faults``: ``"all"`` (every class at least once per simulated day), ``"none"``, a
    comma-separated string or a list of fault ids (each once per simulated day).
    ``defects``: add a few data-quality defects (missing samples, duplicate lines).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    days: float = Field(default=1.0, gt=0, le=366)
    faults: str | list[str] = "all"
    seed: int = 7
    interval_s: float = Field(default=15.0, gt=0, le=3600)
    start: datetime = DEFAULT_START
    defects: bool = False
    #: scrape each entity at its own phase of the interval (:func:`scrape_offset`), as
    #: Prometheus spreads its targets; False: every sample on the tick
    scrape_phases: bool = False
    #: the GPU servers' serving engine: ``vllm``, ``sglang`` or ``mixed`` (alternating); the
    #: packet core, the faults and the traffic are the same whatever it is
    serving_engine: ServingEngine = "vllm"
    #: network size: ``scale`` × 2 AMFs, SMFs and GPU servers, one UPF more than SMFs, each
    #: NF carrying a typical NF's traffic (a larger network, not thinner NFs)
    scale: int = Field(default=1, ge=1, le=MAX_SCALE)
    #: ``5gc`` (a standalone 5G core) or ``converged`` (an EPC control plane beside it:
    #: MMEs, an HSS, an SGW and the gateway-selection DNS; the faults that have an EPC form
    #: happen in either core, one chance in two)
    core: Core = "5gc"
    #: whether the AMFs and SMFs export SBI client metrics (``free5gc_sbi_*`` request counts
    #: and latency by target service and status); a plain Open5GS deployment exports none,
    #: and subscriber-data timeouts show only in its reject and failure causes
    sbi_metrics: bool = True
    #: the IANA zone whose wall clock the subscribers live by (the daily traffic pattern, the
    #: evening peak, the nightly maintenance; daylight saving included), written into the
    #: inventory as each entity's ``tz``; None: UTC, and no ``tz`` in the inventory
    tz: str | None = None
    #: Saturday and Sunday's traffic (core and GPU serving) at noon relative to a working
    #: day's, easing to the same at night; 1: no weekend
    weekend: float = Field(default=1.0, ge=0.2, le=2.0)
    #: ``noc simulate --vary``: draw the network from a seeded distribution
    #: (:mod:`noc_assistant.simulate.vary`); the draw replaces ``scale``, ``core``,
    #: ``serving_engine``, ``sbi_metrics``, ``tz``, ``scrape_phases`` and ``weekend``. None:
    #: the plain simulator, unchanged
    vary: int | None = Field(default=None, ge=0)

    @field_validator("tz")
    @classmethod
    def _known_zone(cls, v: str | None) -> str | None:
        if v is not None:
            zone(v)
        return v

    @field_validator("faults")
    @classmethod
    def _known_faults(cls, v: str | list[str]) -> str | list[str]:
        ids = _parse_faults(v)
        unknown = [f for f in ids if f not in FAULTS]
        if unknown:
            raise ValueError(
                f"unknown fault id(s) {', '.join(unknown)}; known: {', '.join(FAULT_IDS)}"
            )
        return v

    @field_validator("start")
    @classmethod
    def _utc(cls, v: datetime) -> datetime:
        return v.replace(tzinfo=UTC) if v.tzinfo is None else v.astimezone(UTC)

    @property
    def fault_ids(self) -> tuple[str, ...]:
        """The fault classes to inject, in catalogue order."""
        return _parse_faults(self.faults)


def _parse_faults(v: str | list[str]) -> tuple[str, ...]:
    if isinstance(v, str):
        text = v.strip()
        if text == "all":
            return FAULT_IDS
        if text in ("none", ""):
            return ()
        items = [x.strip() for x in text.split(",") if x.strip()]
    else:
        items = list(v)
    seen = dict.fromkeys(items)
    return tuple(f for f in FAULT_IDS if f in seen) + tuple(f for f in seen if f not in FAULTS)


class SimColumns(NamedTuple):
    """Samples as columns: ``ts``, ``series`` (an index of :attr:`Scenario.series`),
    ``value`` (NaN: a gap)."""

    ts: npt.NDArray[np.float64]
    series: npt.NDArray[np.int64]
    value: npt.NDArray[np.float64]


class SimSample(NamedTuple):
    """One sample: ``ts`` epoch seconds (float), ``metric``, ``labels`` (a fresh dict),
    ``value`` (float, ``None`` for a gap) and ``type`` (docs/FORMATS.md §1 type name)."""

    ts: float
    metric: str
    labels: dict[str, str]
    value: float | None
    type: str


Chunk = tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], frozenset[tuple[int, int]]]


def scrape_offset(entity: str, interval_s: float, seed: int) -> float:
    """Whole seconds in ``[0, interval_s)`` after each tick at which ``entity`` is scraped
    (with ``ScenarioConfig.scrape_phases``): fixed per entity and seed, as a Prometheus server
    spreads its targets over the interval. A sample reports the interval that ends at its
    stamp (faults and events are shifted by the phase; the traffic's slow daily shape is the
    tick's), so windows evaluated on the tick cut a scrape interval and the increases over
    them hold fractions of an interval's events.

    >>> [scrape_offset(e, 15.0, 7) for e in ("amf-1", "smf-1", "upf-1")]
    [8.0, 12.0, 0.0]
    >>> scrape_offset("amf-1", 900.0, 7) < 900.0
    True
    """
    h = zlib.crc32(f"{seed}|{entity}".encode()) % 10_000
    return float(math.floor(h / 10_000 * interval_s))


class Scenario:
    """A planned scenario; samples are generated lazily, chunk by chunk."""

    def __init__(self, config: ScenarioConfig) -> None:
        #: what ``config.vary`` drew (None: no variation)
        self.vary: VaryDraw | None = None
        if config.vary is not None:
            self.vary = draw_vary(config.vary)
            config = config.model_copy(update=self.vary.config_update())
        self.config = config
        self.network: Network = build_network(
            config.seed, config.serving_engine, config.scale, config.core
        )
        self.start = config.start.timestamp()
        self.interval_s = float(config.interval_s)
        self.n_ticks = max(1, round(config.days * 86400.0 / self.interval_s))
        self.schedule: Schedule = make_schedule(
            self.network,
            start=self.start,
            n_ticks=self.n_ticks,
            interval_s=self.interval_s,
            seed=config.seed,
            fault_ids=config.fault_ids,
            tz=config.tz,
            events=None if self.vary is None else vary_events(self.vary, config.seed),
        )
        self.series: list[SeriesDef] = build_series(self.network, config.sbi_metrics)
        #: per series, seconds after the tick its samples are stamped (all 0 without
        #: ``scrape_phases``)
        self.offsets: list[float] = [
            scrape_offset(s.entity, self.interval_s, config.seed) if config.scrape_phases else 0.0
            for s in self.series
        ]
        self.inventory: dict[str, Any] = self.network.inventory()
        if config.tz is not None:
            for entity in self.inventory["entities"]:
                entity["tz"] = config.tz
        self.labels: dict[str, Any] = self.schedule.labels()
        self._gen = Generator(
            self.network,
            self.series,
            seed=config.seed,
            start=self.start,
            n_ticks=self.n_ticks,
            dt=self.interval_s,
            effects=self.schedule.effects,
            gaps=self.schedule.gaps,
            restarts=self.schedule.restarts,
            shift={s.entity: off for s, off in zip(self.series, self.offsets, strict=True)},
            tz=config.tz,
            weekend=config.weekend,
            shape=None if self.vary is None else self.vary.shape(self.start),
        )

    @property
    def n_series(self) -> int:
        return len(self.series)

    @property
    def end(self) -> float:
        """Epoch seconds just after the last tick."""
        return self.start + self.n_ticks * self.interval_s

    def iter_chunks(self) -> Iterator[Chunk]:
        """``(times, values[series, tick], duplicates)`` per chunk of ticks; NaN is a gap and
        ``duplicates`` holds ``(tick, series)`` positions written twice."""
        state = RunState()
        for k in range(self._gen.n_chunks()):
            times = self._gen.times(k)
            values = self._gen.render(k, state)
            if self.vary is not None:
                values[self._scrape_effects(k, len(times))[0]] = math.nan
            dups: frozenset[tuple[int, int]] = frozenset()
            if self.config.defects:
                dups = self._defects(k, values)
            yield times, values, dups

    def _scrape_effects(
        self, chunk: int, n: int
    ) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.float64]]:
        assert self.vary is not None
        entities = [s.entity for s in self.series]
        return scrape_effects(self.vary, self.config.seed, chunk, n, self.interval_s, entities)

    def jitter(self, chunk: int, n: int) -> npt.NDArray[np.float64] | None:
        """Per series and tick of ``chunk``, seconds each stamp is late (``--vary``'s scrape
        jitter); None without ``vary``."""
        return None if self.vary is None else self._scrape_effects(chunk, n)[1]

    def iter_samples(self) -> Iterator[SimSample]:
        """Every sample in non-decreasing ``ts`` order (series order within a tick and
        scrape phase)."""
        meta = [(s.metric, s.labels, s.type) for s in self.series]
        offsets = self.offsets
        order = sorted(range(len(meta)), key=offsets.__getitem__)
        for k, (times, values, dups) in enumerate(self.iter_chunks()):
            jit = self.jitter(k, len(times))
            for j, row in enumerate(values.T.tolist()):
                ts = float(times[j])
                late = [0.0] * len(meta) if jit is None else jit[:, j].tolist()
                if jit is not None:
                    order = sorted(range(len(meta)), key=lambda i: offsets[i] + late[i])
                for i in order:
                    v = row[i]
                    metric, labels, type_ = meta[i]
                    sample = SimSample(
                        ts + offsets[i] + late[i],
                        metric,
                        dict(labels),
                        None if v != v else v,
                        type_,
                    )
                    yield sample
                    if dups and (j, i) in dups:
                        yield sample._replace(labels=dict(labels))

    def iter_columns(self) -> Iterator[SimColumns]:
        """The samples of :meth:`iter_samples`, in its order and with its times, as columns
        per chunk of ticks (for a pipeline's :meth:`feed_columns`, without a point each)."""
        offsets = np.asarray(self.offsets, np.float64)
        n = len(self.series)
        for k, (times, values, dups) in enumerate(self.iter_chunks()):
            jit = self.jitter(k, len(times))
            rows = values.T  # (tick, series)
            if jit is None:
                order = np.broadcast_to(np.argsort(offsets, kind="stable"), rows.shape)
                ts = times[:, None] + offsets[order]
            else:
                late = jit.T
                order = np.argsort(offsets[None, :] + late, axis=1, kind="stable")
                ts = times[:, None] + offsets[order] + np.take_along_axis(late, order, 1)
            cols = SimColumns(
                ts.ravel(), np.ascontiguousarray(order).ravel(),
                np.take_along_axis(rows, order, 1).ravel(),
            )  # fmt: skip
            if dups:
                where = np.argsort(order, axis=1)  # each series' place in its tick's order
                at = sorted(j * n + int(where[j, i]) for j, i in dups)
                after = [a + 1 for a in at]
                cols = SimColumns(
                    np.insert(cols.ts, after, cols.ts[at]),
                    np.insert(cols.series, after, cols.series[at]),
                    np.insert(cols.value, after, cols.value[at]),
                )
            yield cols

    def _defects(self, chunk: int, values: npt.NDArray[np.float64]) -> frozenset[tuple[int, int]]:
        rng = np.random.default_rng([self.config.seed, 404, chunk])
        n_series, n = values.shape
        for _ in range(2):
            values[int(rng.integers(n_series)), int(rng.integers(n))] = math.nan
        return frozenset((int(rng.integers(n)), int(rng.integers(n_series))) for _ in range(2))


def build_scenario(config: ScenarioConfig) -> Scenario:
    """Plan the network, faults and events of ``config`` (samples come lazily)."""
    return Scenario(config)


def write_scenario(scenario: Scenario, out_dir: Path | str) -> dict[str, Path]:
    """Write ``telemetry.jsonl``, ``labels.json`` and ``inventory.json`` into ``out_dir``.

    Returns their paths under the keys ``telemetry``, ``labels`` and ``inventory``.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    heads, tails = line_parts(scenario.series)
    telemetry = out / "telemetry.jsonl"
    with telemetry.open("w", encoding="utf-8", newline="\n") as fh:
        for k, (times, values, dups) in enumerate(scenario.iter_chunks()):
            jit = scenario.jitter(k, len(times))
            for text in format_lines(
                heads,
                tails,
                times.tolist(),
                values.T.tolist(),
                dups,
                scenario.offsets,
                None if jit is None else jit.T.tolist(),
            ):
                fh.write(text)
    return {
        "telemetry": telemetry,
        "labels": write_json(out / "labels.json", scenario.labels),
        "inventory": write_json(out / "inventory.json", scenario.inventory),
    }
