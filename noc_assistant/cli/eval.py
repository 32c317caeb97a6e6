"""`noc eval ...` commands: NAB benchmark scoring and scenario (replay + labels) scoring."""

from __future__ import annotations

import importlib
import json
import math
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from pydantic import ValidationError

from evals._io import json_safe
from noc_assistant.cli._console import console, err_console
from noc_assistant.errors import BadInputError, NocError
from noc_assistant.ingest.files import reading

if TYPE_CHECKING:
    from evals.rca import Labels
    from knowledge.pack import Pack

__all__ = ["app"]

app = typer.Typer(help="eval commands", no_args_is_help=True)


def _write(report: dict[str, Any], out: Path | None, as_json: bool = False) -> None:
    """The report to ``out`` and, with ``as_json`` or without ``out``, to stdout: the JSON
    document alone there (what is said about it goes to stderr)."""
    text = json.dumps(json_safe(report), indent=2, sort_keys=True, default=float, allow_nan=False)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text + "\n", encoding="utf-8")
        err_console.print(f"report written to {out}", highlight=False)
    if as_json or out is None:
        typer.echo(text)


def _zone_option(value: str | None) -> str | None:
    """A ``--tz`` that names a known IANA zone (else exit 2 naming the option)."""
    if value is None:
        return None
    from detectors.clock import zone

    try:
        zone(value)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    return value


def _budget_option(value: float | None) -> float | None:
    """A ``--budget`` that is a positive, finite rate (else exit 2 naming the option)."""
    if value is not None and not (math.isfinite(value) and value > 0.0):
        raise typer.BadParameter(f"must be a positive number of alarms, got {value}")
    return value


#: what ``noc eval nab --detector`` accepts besides the ensemble (evals.single.DETECTORS,
#: named here so that ``--help`` does not import the detectors)
_SINGLE_DETECTORS = (
    "robust_zscore",
    "seasonal",
    "cusum",
    "forecast_residual",
    "snarimax",
    "window_outlier",
    "half_space_trees",
)


def _detector_option(value: str) -> str:
    """A ``--detector`` the evaluation knows (else exit 2 naming the choices)."""
    if value != "ensemble-bank" and value not in _SINGLE_DETECTORS:
        known = ", ".join(("ensemble-bank", *_SINGLE_DETECTORS))
        raise typer.BadParameter(f"unknown detector {value!r}; known: {known}")
    return value


@app.command("nab")
def nab(
    data: Annotated[Path, typer.Option("--data", help="NAB root (data/, labels/)")],
    out: Annotated[Path | None, typer.Option("--out", help="report.json")] = None,
    scores_out: Annotated[
        Path | None, typer.Option("--scores-out", help="per-series timestamp,value,score,alarm")
    ] = None,
    tz: Annotated[
        str | None,
        typer.Option(
            "--tz",
            callback=_zone_option,
            help="IANA zone whose wall clock the traffic follows, its timestamps being UTC"
            " (KPI exports); default: the timestamps are the wall clock (NAB's are)",
        ),
    ] = None,
    budget: Annotated[
        float | None,
        typer.Option(
            "--budget",
            callback=_budget_option,
            help="false alarms per series-day the bars are set for (label-free; default 0.1,"
            " the operating target)",
        ),
    ] = None,
    detector: Annotated[
        str,
        typer.Option(
            "--detector",
            callback=_detector_option,
            help="ensemble-bank (default), or one library detector scored alone under the same"
            " label-free bar and alarm policy: " + ", ".join(_SINGLE_DETECTORS),
        ),
    ] = "ensemble-bank",
) -> None:
    """Score the label-free detector ensemble on a NAB corpus (NAB v1.1, three profiles)."""
    from evals import nab as nab_eval
    from evals.nab_run import evaluate

    rate = nab_eval.NAB_TARGET_RATE if budget is None else budget
    report = evaluate(data, scores_out=scores_out, detector=detector, tz=tz, target_rate=rate)
    _write(report, out)
    err_console.print(
        f"NAB standard {report['nab_score_standard']:.1f}  low_FP {report['nab_score_low_fp']:.1f}"
        f"  low_FN {report['nab_score_low_fn']:.1f}  windows {report['windows_detected']}/"
        f"{report['windows_total']}  FA/series-day {report['false_alarms_per_series_day']:.3f}",
        highlight=False,
    )


JsonOpt = Annotated[
    bool,
    typer.Option("--json", help="Print the report as JSON, alone on stdout (also with --out)"),
]


def _read_labels(labels: Path) -> tuple[dict[str, Any], Labels]:
    """The labels file as read and as checked against FORMATS §2 (exit 2 naming the field
    that fails)."""
    from evals._io import read_json_object
    from evals.rca import Labels

    with reading(str(labels)):
        label_doc = read_json_object(labels)
    try:
        return label_doc, Labels.model_validate(label_doc)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise BadInputError(f"field {where}: {first['msg']}", source=str(labels)) from None
    except (ValueError, TypeError, OverflowError) as exc:  # a validator's own error (1e400)
        raise BadInputError(f"labels do not hold: {exc}", source=str(labels)) from None


def _maintenance(label_doc: dict[str, Any], labels: Path) -> list[Any]:
    """The labels' maintenance windows, for the correlator to hold their pages."""
    from evals.scenario import parse_time

    correlate = importlib.import_module("noc_assistant.stream.correlate")
    try:
        return [
            correlate.MaintenanceWindow(
                str(m["entity"]),
                parse_time(m["start"], source=str(labels)),
                parse_time(m["end"], source=str(labels)),
            )
            for m in label_doc.get("maintenance", []) or []
        ]
    except (KeyError, TypeError):
        msg = "maintenance entries need entity/start/end"
        raise BadInputError(msg, source=str(labels)) from None


def _entities(result: Any, inventory: Path | None) -> set[str]:
    """The entities of the run and of its inventory (all of them have normal time)."""
    entities = set(result.entities)
    if inventory is not None:
        try:
            inv = json.loads(inventory.read_text(encoding="utf-8"))
            entities |= {str(e["id"]) for e in inv.get("entities", [])}
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            raise BadInputError("unreadable inventory", source=str(inventory)) from None
    return entities


def _check_inputs(telemetry: Path, inventory: Path | None, pack_dir: Path | None) -> Pack:
    """The knowledge pack (with the overlay ``pack_dir``; loaded once, for the inventory and
    the replay), once the telemetry and the inventory are known to be readable."""
    from knowledge.pack import load_pack

    if not telemetry.is_file():
        raise BadInputError(
            "is a folder, not a file" if telemetry.is_dir() else "file not found",
            source=str(telemetry),
        )
    pack = load_pack(pack_dir)  # a PackError is a ConfigError: exit 2 naming the file
    if inventory is not None:
        from noc_assistant.inventory import load_topology

        with reading(str(inventory)):  # its errors named before the replay starts
            load_topology(inventory, pack)
    return pack


def _replay_module() -> Any:
    try:
        return importlib.import_module("noc_assistant.stream.replay")
    except ImportError:
        raise NocError("noc_assistant.stream.replay is not available in this build") from None


def _run_summary(report: dict[str, Any]) -> str:
    """One line of the report, for the operator (stderr)."""
    recall, ac1 = report["incident_recall"], report["rca_ac1"]
    return (
        f"{report['incidents_total']} incidents, recall "
        + ("n/a" if recall is None else f"{recall:.2f}")
        + f"; {report['alerts_total']} pages: {report['false_positives']} false,"
        f" {report['duplicate_pages']} duplicate"
        f" ({report['false_alerts_per_entity_day']:.3f} per normal entity-day),"
        f" {report['no_fault_pages_total']} with no_fault ranked first; RCA AC@1 "
        + ("n/a" if ac1 is None else f"{ac1:.2f}")
    )


@app.command("run")
def run(
    telemetry: Annotated[Path, typer.Option("--telemetry", help="replay JSONL")],
    labels: Annotated[Path, typer.Option("--labels", help="ground-truth labels JSON")],
    inventory: Annotated[Path | None, typer.Option("--inventory")] = None,
    pack: Annotated[Path | None, typer.Option("--pack", help="knowledge pack directory")] = None,
    out: Annotated[Path | None, typer.Option("--out", help="report.json")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Replay telemetry through the pipeline and score its alerts against labels."""
    from evals.rca import cases_from_run, report_keys, score_rca
    from evals.scenario import alerts_raised, score_scenario

    label_doc, label_set = _read_labels(labels)
    loaded = _check_inputs(telemetry, inventory, pack)
    replay = _replay_module()
    maintenance = _maintenance(label_doc, labels)
    start = time.perf_counter()
    result = replay.run_replay(telemetry, inventory=inventory, pack=loaded, maintenance=maintenance)
    elapsed = time.perf_counter() - start
    if result.samples == 0:
        raise BadInputError("no parsable samples", source=str(telemetry))
    report = score_scenario(
        alerts_raised(result.incidents, result.findings),
        label_doc,
        _entities(result, inventory),
        (result.first_ts, result.last_ts),
        source=str(labels),
        scrapes=result.scrapes,
        interval_s=result.interval_s or None,
    )
    cases = cases_from_run(label_set, result.incidents, result.diagnoses, result.findings)
    report.update(report_keys(score_rca(cases)))
    report["samples"] = result.samples
    report["quarantined"] = result.quarantined
    seconds = result.elapsed_s or elapsed
    report["samples_per_s"] = result.samples / seconds if seconds > 0 else 0.0
    _write(report, out, as_json)
    err_console.print(_run_summary(report), highlight=False)


def _period(since: str | None, until: str | None) -> tuple[float, float]:
    from evals.live import period

    try:
        return period(since, until, time.time(), flag="--")
    except ValueError as exc:
        raise BadInputError(str(exc)) from None


SinceOpt = Annotated[
    str | None,
    typer.Option(help="From (RFC 3339 or epoch seconds; default: a week before --until)"),
]
UntilOpt = Annotated[str | None, typer.Option(help="Until (default: now)")]


@app.command("live")
def live(
    since: SinceOpt = None,
    until: UntilOpt = None,
    inventory: Annotated[
        Path | None,
        typer.Option(
            help="Network inventory (FORMATS §4): its entities count for the per-entity rate"
        ),
    ] = None,
    out: Annotated[Path | None, typer.Option("--out", help="report.json")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Score production from the engineers' verdicts (`noc incident verdict`): the share of
    false pages with its 95 % interval, false alerts per day, RCA accuracy against the
    confirmed root causes, time to acknowledge, the noisiest KPIs."""
    from evals.live import live_report
    from noc_assistant.cli._live import load_pack_and_topology
    from noc_assistant.settings import get_settings
    from noc_assistant.store import open_store

    settings = get_settings()
    pack, topology = load_pack_and_topology(settings, inventory)
    start, end = _period(since, until)
    entities = len(topology.types) if topology is not None else None
    report = live_report(
        open_store(settings.db_url), start, end, entities=entities, faults=set(pack.faults)
    )
    _write(report, out, as_json)
    share = report["false_alarm_share"]
    err_console.print(
        f"{report['incidents_total']} incidents over {report['days']:.2f} days of data,"
        f" {report['reviewed']} judged: {report['false_positives']} false"
        + (f" ({100 * share:.1f} %)" if math.isfinite(share) else "")
        + f", {report['duplicate_pages']} duplicate pages"
        f", {report['unreviewed']} not yet judged",
        highlight=False,
    )


@app.command("labels")
def labels_cmd(
    out: Annotated[Path, typer.Option("--out", help="labels JSON to write (FORMATS §2)")],
    since: SinceOpt = None,
    until: UntilOpt = None,
) -> None:
    """Write the engineers' verdicts as a labels file, to re-score a recording of the same
    telemetry with `noc eval run` (another detector version, another pack)."""
    from evals.live import labels_from_reviews
    from noc_assistant.settings import get_settings
    from noc_assistant.store import open_store

    start, end = _period(since, until)
    doc = labels_from_reviews(open_store(get_settings().db_url), start, end)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    console.print(
        f"{len(doc['incidents'])} incidents, {len(doc['no_fault'])} no-fault windows,"
        f" {len(doc['maintenance'])} maintenance windows written to {out}"
        + (
            f"; {len(doc['unlabelled'])} faults without a root cause yet"
            if doc["unlabelled"]
            else ""
        )
        + (f"; {len(doc['unreviewed'])} not judged" if doc["unreviewed"] else ""),
        highlight=False,
    )
