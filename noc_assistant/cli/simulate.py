"""`noc simulate`: write a labelled telemetry scenario (telemetry, labels, inventory)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError

from noc_assistant.cli._console import console
from noc_assistant.errors import ConfigError

__all__ = ["register", "simulate"]


_Out = Annotated[Path, typer.Option(help="Directory to write the scenario files into.")]

_Days = Annotated[float, typer.Option(help="Simulated days.")]

_Faults = Annotated[str, typer.Option(help="'all', 'none' or comma-separated fault ids.")]

_Seed = Annotated[int, typer.Option(help="Seed; the same seed gives identical files.")]

_Interval = Annotated[float, typer.Option(help="Scrape interval in seconds.")]

_Defects = Annotated[bool, typer.Option(help="Add a few missing samples and duplicate lines.")]

_ScrapePhases = Annotated[
    bool,
    typer.Option(
        help="Scrape each entity at its own phase of the interval (as Prometheus spreads "
        "its targets) instead of every sample on the tick."
    ),
]

_ServingEngine = Annotated[
    str,
    typer.Option(
        help="The GPU servers' serving engine: vllm, sglang, or mixed (alternating); "
        "each exports the same quantities under its own metric names."
    ),
]

_Scale = Annotated[
    int,
    typer.Option(
        help="Network size: scale × 2 AMFs, SMFs and GPU servers, one UPF more than SMFs "
        "(1: 2 AMF, 2 SMF, 3 UPF, 2 GPU servers)."
    ),
]

_Core = Annotated[
    str,
    typer.Option(
        help="5gc (a standalone 5G core) or converged (an EPC beside it: MMEs, an HSS, an "
        "SGW, the gateway-selection DNS; S1, S6a and DNS faults happen there too)."
    ),
]

_SbiMetrics = Annotated[
    bool,
    typer.Option(
        help="Export SBI client metrics (free5gc_sbi_*) from the AMFs and SMFs; "
        "--no-sbi-metrics: none, as a plain Open5GS deployment."
    ),
]

_Tz = Annotated[
    str | None,
    typer.Option(
        help="IANA zone the subscribers live by (Europe/Berlin): the daily traffic follows "
        "its wall clock, daylight saving included; written as each entity's tz in the "
        "inventory. Default: UTC."
    ),
]

_Weekend = Annotated[
    float,
    typer.Option(
        help="Saturday and Sunday's traffic at noon relative to a working day's (0.7: 30 % "
        "less), the nights alike; 1: no weekend."
    ),
]

_Start = Annotated[
    str | None,
    typer.Option(
        help="First scrape, ISO 8601 (2026-03-20 or 2026-03-20T00:00:00Z; UTC unless it "
        "says otherwise). Default: 2026-11-29T00:00:00Z."
    ),
]

_PmOut = Annotated[
    Path | None,
    typer.Option(
        help="Also write 3GPP PM files (TS 32.435 measCollecFile) into this directory: one "
        "per network function with 3GPP measurements (AMF, SMF, UPF, PCF) and granularity "
        "period (the --interval, whole seconds, at least 60 s), for `noc pm convert`."
    ),
]

_Vary = Annotated[
    int | None,
    typer.Option(
        help="Draw the network from a seeded distribution (noise families and heavy tails, "
        "daily, weekly and holiday shapes, sparse counters, benign flash crowds, counter "
        "resets, scrape jitter and gaps, network size, core, serving engine, SBI metrics, "
        "zone): the draw replaces --scale, --core, --serving-engine, --sbi-metrics, --tz, "
        "--scrape-phases and --weekend; every fault class still happens each day. The same "
        "--vary and --seed give identical files."
    ),
]


def simulate(
    out: _Out,
    days: _Days = 1.0,
    faults: _Faults = "all",
    seed: _Seed = 7,
    interval: _Interval = 15.0,
    defects: _Defects = False,
    scrape_phases: _ScrapePhases = False,
    serving_engine: _ServingEngine = "vllm",
    scale: _Scale = 1,
    core: _Core = "5gc",
    sbi_metrics: _SbiMetrics = True,
    tz: _Tz = None,
    weekend: _Weekend = 1.0,
    start: _Start = None,
    pm_out: _PmOut = None,
    vary: _Vary = None,
) -> None:
    """Simulate an operator network with injected faults and write telemetry.jsonl, labels.json
    and inventory.json (and, with --pm-out, the network functions' PM files)."""
    from noc_assistant.simulate import ScenarioConfig, build_scenario, write_scenario
    from noc_assistant.simulate.pm_writer import check_pm_config, write_pm_files

    try:
        config = ScenarioConfig(
            days=days,
            faults=faults,
            seed=seed,
            interval_s=interval,
            defects=defects,
            scrape_phases=scrape_phases,
            serving_engine=serving_engine,
            scale=scale,
            core=core,
            sbi_metrics=sbi_metrics,
            tz=tz,
            weekend=weekend,
            vary=vary,
            **({} if start is None else {"start": start}),
        )
    except ValidationError as exc:
        raise ConfigError(
            "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        ) from exc
    if pm_out is not None:
        check_pm_config(config)  # before the simulation: a bad period fails at once
    started = time.perf_counter()
    scenario = build_scenario(config)
    paths = write_scenario(scenario, out)
    pm_files = write_pm_files(scenario, pm_out) if pm_out is not None else []
    elapsed = time.perf_counter() - started
    labels = scenario.labels
    samples = scenario.n_series * scenario.n_ticks
    console.print(
        f"[bold]noc simulate[/]: {days:g} day(s) at {interval:g} s, faults={faults}, seed={seed}\n"
        f"  {scenario.n_series} series × {scenario.n_ticks} scrapes = {samples:,} samples "
        f"in {elapsed:.1f} s\n"
        f"  {len(labels['incidents'])} incidents, {len(labels['no_fault'])} no-fault windows, "
        f"{len(labels['maintenance'])} maintenance windows\n"
        + (f"  {_vary_line(scenario)}\n" if scenario.vary is not None else "")
        + f"  telemetry  {paths['telemetry']}\n"
        f"  labels     {paths['labels']}\n"
        f"  inventory  {paths['inventory']}"
        + (f"\n  pm files   {pm_out} ({len(pm_files):,} files)" if pm_out is not None else ""),
        highlight=False,
    )


def _vary_line(scenario: Any) -> str:
    v = scenario.vary
    cfg = scenario.config
    return (
        f"vary={v.vary_seed}: scale {cfg.scale}, {cfg.core}, {cfg.serving_engine}, "
        f"sbi_metrics={cfg.sbi_metrics}, tz={cfg.tz or 'UTC'}, phases={cfg.scrape_phases}, "
        f"noise {v.noise_family} ×{v.noise_scale:g}, {v.flash_crowds_per_day} flash crowd(s) "
        f"and {v.counter_resets_per_day} counter reset(s) a day, holidays {list(v.holiday_offsets)}"
    )


def register(app: typer.Typer) -> None:
    """Add the ``simulate`` command to ``app``."""
    app.command("simulate")(simulate)
