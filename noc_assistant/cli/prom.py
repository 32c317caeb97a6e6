"""``noc prom``: a Prometheus server as a telemetry source."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

from noc_assistant.cli._console import console

__all__ = ["app"]

app = typer.Typer(help="Read telemetry from a Prometheus server.", no_args_is_help=True)


@app.command("export")
def export(
    url: Annotated[str, typer.Option(help="Prometheus base URL (http://HOST:9090).")],
    out: Annotated[Path, typer.Option(help="FORMATS §1 JSONL replay file to write.")],
    start: Annotated[str, typer.Option(help="RFC 3339 time or epoch seconds.")],
    end: Annotated[str | None, typer.Option(help="RFC 3339 time or epoch seconds (now).")] = None,
    match: Annotated[
        list[str] | None, typer.Option(help="PromQL selector (repeatable; default all series).")
    ] = None,
) -> None:
    """Write the raw samples Prometheus holds for a span as a replay file (``noc eval run``
    then scores the detectors on them)."""
    from noc_assistant.errors import BadInputError
    from noc_assistant.ingest.replay import parse_ts, write_replay
    from noc_assistant.integrations.prometheus import PrometheusSource

    try:
        t0 = parse_ts(start)
        t1 = parse_ts(end) if end is not None else time.time()
    except ValueError as exc:
        raise BadInputError(f"--start/--end: {exc}") from None
    source = PrometheusSource(url, match=match or ['{__name__=~".+"}'])
    try:
        n, series = write_replay(source.fetch(t0, t1), out)
    finally:
        source.close()
    console.print(f"wrote {n:,} samples of {series:,} series to {out}", highlight=False)
