"""``noc serve`` (the console and API over the configured store alone) and ``noc replay`` (a
recording through the pipeline into that store).

In the scaled-out deployment, bus workers and ``noc bus correlate`` write incidents to
PostgreSQL and any number of ``noc serve`` replicas show them: each replica's live feed comes
from the store (:class:`~noc_assistant.api.feed.StoreFeed`), not from a pipeline in its
process.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Annotated

import typer

from noc_assistant.cli._console import console, err_console
from noc_assistant.cli._live import InventoryOpt, load_pack_and_topology
from noc_assistant.settings import get_settings
from noc_assistant.store import open_store

__all__ = ["register"]


def serve(
    host: Annotated[str | None, typer.Option(help="Address (default NOC_HTTP_HOST)")] = None,
    port: Annotated[int | None, typer.Option(help="Port (default NOC_HTTP_PORT)")] = None,
    inventory: InventoryOpt = None,
) -> None:
    """Serve the web console and API over NOC_DB_URL alone (no pipeline in this process)."""
    import uvicorn

    from knowledge.topology import Topology
    from noc_assistant.api.events import Broadcaster
    from noc_assistant.api.feed import StoreFeed
    from noc_assistant.cli._live import console_app

    settings = get_settings()
    if inventory is None and (settings.data_dir / "inventory.json").is_file():
        inventory = settings.data_dir / "inventory.json"
    pack, topology = load_pack_and_topology(settings, inventory)
    store = open_store(settings.db_url)
    hub = Broadcaster()
    app = console_app(store, hub, settings, pack, topology or Topology.infer({}, pack))
    feed = StoreFeed(store, hub).start()
    host = host or settings.http_host
    port = port or settings.http_port
    err_console.print(f"noc serve: console at http://{host}:{port} over {_where(store)}")
    try:
        uvicorn.run(app, host=host, port=port, log_level="warning")
    finally:
        feed.stop()


def replay(
    telemetry: Annotated[Path, typer.Argument(help="Replay file (JSONL or CSV)")],
    inventory: InventoryOpt = None,
    json_out: Annotated[bool, typer.Option("--json", help="The summary as JSON")] = False,
) -> None:
    """Stream a recording (a simulator day, `noc prom export`, `noc pm convert`) through the
    pipeline into NOC_DB_URL, so that its incidents can be browsed and judged."""
    import json

    from noc_assistant.stream.replay import run_replay

    settings = get_settings()
    store = open_store(settings.db_url)
    result = run_replay(telemetry, inventory=inventory)
    by_incident = defaultdict(list)
    for inc in result.incidents:
        for finding_id in inc.finding_ids:
            by_incident[finding_id].append(inc.id)
    for inc in result.incidents:
        store.save_incident(inc)
        diagnosis = result.diagnoses.get(inc.id)
        if diagnosis is not None:
            store.save_diagnosis(diagnosis)
    for finding in result.findings:
        owners = by_incident.get(finding.id)
        store.save_findings([finding], incident_id=owners[0] if owners else None)
    summary = {
        "telemetry": str(telemetry),
        "samples": result.samples,
        "incidents": len(result.incidents),
        "findings": len(result.findings),
        "quarantined": result.quarantined,
        "store": _where(store),
    }
    if json_out:
        typer.echo(json.dumps(summary, indent=2))
    else:
        console.print(
            f"{telemetry}: {result.samples:,} samples, {len(result.incidents)} incidents, "
            f"{len(result.findings)} findings, {result.quarantined} quarantined → {_where(store)}",
            highlight=False,
        )


def _where(store: object) -> str:
    """The store, named without credentials (a PostgreSQL store's ``path`` is redacted)."""
    return str(getattr(store, "path", "the store"))


def register(app: typer.Typer) -> None:
    """Add ``serve`` and ``replay`` to ``app``."""
    app.command("serve")(serve)
    app.command("replay")(replay)
