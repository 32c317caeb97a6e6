"""Writing a scenario: ``telemetry.jsonl``, ``labels.json``, ``inventory.json`` (FORMATS.md).

Lines are formatted by hand from precomputed per-series fragments; the result is exactly what
``json.dumps(..., separators=(",", ":"))`` gives for the same sample (floats by ``repr``,
gaps as ``null``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from noc_assistant.simulate.schedule import rfc3339
from noc_assistant.simulate.series import SeriesDef

__all__ = ["format_lines", "line_parts", "write_json"]


def line_parts(series: Sequence[SeriesDef]) -> tuple[list[str], list[str]]:
    """Per-series text before and after the value of a JSONL line."""
    heads = []
    tails = []
    for s in series:
        labels = json.dumps(s.labels, separators=(",", ":"))
        heads.append(f'"metric":{json.dumps(s.metric)},"labels":{labels},"value":')
        tails.append(f',"type":"{s.type}"}}\n')
    return heads, tails


def format_lines(
    heads: Sequence[str],
    tails: Sequence[str],
    times: Sequence[float],
    rows: Sequence[Sequence[float]],
    duplicates: frozenset[tuple[int, int]] = frozenset(),
) -> Iterator[str]:
    """JSONL text, one string per tick (``rows[j][i]`` is series ``i`` at tick ``j``)."""
    for j, (ts, row) in enumerate(zip(times, rows, strict=True)):
        head = '{"ts":"' + rfc3339(ts) + '",'
        lines = [
            f"{head}{h}{'null' if v != v else repr(v)}{t}"
            for h, v, t in zip(heads, row, tails, strict=True)
        ]
        if duplicates:
            for i in sorted((i for jj, i in duplicates if jj == j), reverse=True):
                lines.insert(i + 1, lines[i])
        yield "".join(lines)


def write_json(path: Path, doc: Any) -> Path:
    """Compact, key-order-preserving JSON with a trailing newline."""
    path.write_text(json.dumps(doc, separators=(",", ":")) + "\n", encoding="utf-8")
    return path
