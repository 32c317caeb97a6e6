"""``noc pm``: 3GPP PM files (TS 32.435 / TS 28.550) as a telemetry source."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from noc_assistant.cli._console import console

__all__ = ["app"]

app = typer.Typer(help="Read 3GPP PM files (measCollecFile).", no_args_is_help=True)


@app.command("convert")
def convert(
    files: Annotated[list[Path], typer.Argument(help="PM XML files, or folders of them.")],
    out: Annotated[Path, typer.Option(help="FORMATS §1 JSONL replay file to write.")],
    inventory: Annotated[
        Path | None,
        typer.Option(
            help="Network inventory (FORMATS §4): name each network function by its id (its "
            "'ldn' key, or ManagedElement=<id>,<Type>Function=1) instead of its LDN."
        ),
    ] = None,
) -> None:
    """Write the measurements of PM files as a replay file (``noc eval run`` and the pipeline
    read it); files or values that cannot be read go to ``<out>.quarantine.jsonl``. The
    knowledge pack's measurements (NOC_PACK_DIR, ``measurements/*.yaml``) name the
    vendor-specific ones by the metrics the KPIs read."""
    from noc_assistant.cli._live import load_pack_and_topology
    from noc_assistant.errors import BadInputError
    from noc_assistant.ingest import Quarantine
    from noc_assistant.ingest.pm import ldn_names, pm_points
    from noc_assistant.ingest.replay import write_replay
    from noc_assistant.settings import get_settings

    if inventory is not None:
        from noc_assistant.ingest.files import reading
        from noc_assistant.inventory import load_topology

        with reading(str(inventory)):  # what the inventory's parser lets through, named
            load_topology(inventory)
    pack, topology = load_pack_and_topology(get_settings(), inventory)
    names = ldn_names(topology.types, topology.attributes) if topology is not None else None

    paths: list[Path] = []
    for f in files:
        if f.is_dir():
            paths.extend(sorted(p for p in f.rglob("*") if p.suffix.lower() == ".xml"))
        elif f.exists():
            paths.append(f)
        else:
            raise BadInputError("no such file or folder", source=str(f))
    qpath = out.with_name(out.name + ".quarantine.jsonl")
    qpath.unlink(missing_ok=True)
    quarantine = Quarantine(path=qpath)
    n, _ = write_replay(pm_points(paths, quarantine, names, pack.pm_names()), out)
    console.print(
        f"{len(paths)} PM file(s) → {n:,} samples in {out}"
        + (f"; {quarantine.count} quarantined to {qpath}" if quarantine.count else ""),
        highlight=False,
    )
