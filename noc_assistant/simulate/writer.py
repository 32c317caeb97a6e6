"""Writing a scenario: ``telemetry.jsonl``, ``labels.json``, ``inventory.json`` (docs/FORMATS.md).

Lines are formatted by hand from precomputed per-series fragments; the result is exactly what
``json.dumps(..., separators=(",", ":"))`` gives for the same sample (floats by ``repr``,
gaps as ``null``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from noc_assistant.simulate.series import SeriesDef
from noc_assistant.timefmt import rfc3339

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
    offsets: Sequence[float] | None = None,
    jitter: Sequence[Sequence[float]] | None = None,
) -> Iterator[str]:
    """JSONL text, one string per tick (``rows[j][i]`` is series ``i`` at tick ``j``), each
    series stamped ``offsets[i]`` seconds after the tick (all on the tick by default) plus
    ``jitter[j][i]`` (none by default), lines in time order."""
    phased = (offsets is not None and any(offsets)) or jitter is not None
    offs0 = list(offsets) if offsets is not None and phased else [0.0] * len(heads)
    distinct = sorted(set(offs0))
    offs = offs0
    for j, (ts, row) in enumerate(zip(times, rows, strict=True)):
        if jitter is not None:
            offs = [o + x for o, x in zip(offs0, jitter[j], strict=True)]
            distinct = sorted(set(offs))
        stamp = {o: '{"ts":"' + rfc3339(ts + o) + '",' for o in distinct}
        lines = [
            f"{stamp[o]}{h}{'null' if v != v else repr(v)}{t}"
            for h, v, t, o in zip(heads, row, tails, offs, strict=True)
        ]
        keys = list(offs)
        if duplicates:
            for i in sorted((i for jj, i in duplicates if jj == j), reverse=True):
                lines.insert(i + 1, lines[i])
                keys.insert(i + 1, keys[i])
        if phased:  # a stable sort: series order within one phase
            lines = [line for _, line in sorted(zip(keys, lines, strict=True), key=_first)]
        yield "".join(lines)


def _first(pair: tuple[float, str]) -> float:
    return pair[0]


def write_json(path: Path, doc: Any) -> Path:
    """Compact, key-order-preserving JSON with a trailing newline."""
    path.write_text(json.dumps(doc, separators=(",", ":")) + "\n", encoding="utf-8")
    return path
