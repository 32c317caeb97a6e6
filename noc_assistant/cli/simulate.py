"""`noc simulate`: write a labelled telemetry scenario (telemetry, labels, inventory)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError

from noc_assistant.cli._console import console
from noc_assistant.errors import ConfigError

__all__ = ["register", "simulate"]


def simulate(
    out: Annotated[Path, typer.Option(help="Directory to write the scenario files into.")],
    days: Annotated[float, typer.Option(help="Simulated days.")] = 1.0,
    faults: Annotated[
        str, typer.Option(help="'all', 'none' or comma-separated fault ids.")
    ] = "all",
    seed: Annotated[int, typer.Option(help="Seed; the same seed gives identical files.")] = 7,
    interval: Annotated[float, typer.Option(help="Scrape interval in seconds.")] = 15.0,
    defects: Annotated[
        bool, typer.Option(help="Add a few missing samples and duplicate lines.")
    ] = False,
    scrape_phases: Annotated[
        bool,
        typer.Option(
            help="Scrape each entity at its own phase of the interval (as Prometheus spreads "
            "its targets) instead of every sample on the tick."
        ),
    ] = False,
    serving_engine: Annotated[
        str,
        typer.Option(
            help="The GPU servers' serving engine: vllm, sglang, or mixed (alternating); "
            "each exports the same quantities under its own metric names."
        ),
    ] = "vllm",
    scale: Annotated[
        int,
        typer.Option(
            help="Network size: scale × 2 AMFs, SMFs and GPU servers, one UPF more than SMFs "
            "(1: 2 AMF, 2 SMF, 3 UPF, 2 GPU servers)."
        ),
    ] = 1,
    core: Annotated[
        str,
        typer.Option(
            help="5gc (a standalone 5G core) or converged (an EPC beside it: MMEs, an HSS, an "
            "SGW, the gateway-selection DNS; S1, S6a and DNS faults happen there too)."
        ),
    ] = "5gc",
    sbi_metrics: Annotated[
        bool,
        typer.Option(
            help="Export SBI client metrics (free5gc_sbi_*) from the AMFs and SMFs; "
            "--no-sbi-metrics: none, as a plain Open5GS deployment."
        ),
    ] = True,
    tz: Annotated[
        str | None,
        typer.Option(
            help="IANA zone the subscribers live by (Europe/Berlin): the daily traffic follows "
            "its wall clock, daylight saving included; written as each entity's tz in the "
            "inventory. Default: UTC."
        ),
    ] = None,
    weekend: Annotated[
        float,
        typer.Option(
            help="Saturday and Sunday's traffic at noon relative to a working day's (0.7: 30 % "
            "less), the nights alike; 1: no weekend."
        ),
    ] = 1.0,
    start: Annotated[
        str | None,
        typer.Option(
            help="First scrape, ISO 8601 (2026-03-20 or 2026-03-20T00:00:00Z; UTC unless it "
            "says otherwise). Default: 2026-11-29T00:00:00Z."
        ),
    ] = None,
    pm_out: Annotated[
        Path | None,
        typer.Option(
            help="Also write 3GPP PM files (TS 32.435 measCollecFile) into this directory: one "
            "per network function with 3GPP measurements (AMF, SMF, UPF, PCF) and granularity "
            "period (the --interval, whole seconds, at least 60 s), for `noc pm convert`."
        ),
    ] = None,
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
        f"  telemetry  {paths['telemetry']}\n"
        f"  labels     {paths['labels']}\n"
        f"  inventory  {paths['inventory']}"
        + (f"\n  pm files   {pm_out} ({len(pm_files):,} files)" if pm_out is not None else ""),
        highlight=False,
    )


def register(app: typer.Typer) -> None:
    """Add the ``simulate`` command to ``app``."""
    app.command("simulate")(simulate)
