"""Which reader a replay file goes through: a plain JSONL file a chunk at a time
(:mod:`noc_assistant.ingest.columnar`, polars: the same points and quarantine records, about 4
times as fast, bench/parse_results.md), anything else line by line
(:func:`noc_assistant.ingest.replay.read_replay`, the reference).

Apart from :mod:`~noc_assistant.ingest.replay` because the columnar reader is built on the
line reader's parts (its checks, and the lines it cannot vouch for): the choice sits above both.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from noc_assistant.ingest import replay
from noc_assistant.ingest.columnar import ColumnChunk, read_jsonl_columns, read_jsonl_points
from noc_assistant.ingest.point import Point
from noc_assistant.ingest.quarantine import Quarantine
from noc_assistant.ingest.window import REPLAY_WINDOW, TimeWindow

__all__ = ["read_replay", "read_replay_columns"]


def read_replay(
    path: Path,
    quarantine: Quarantine | None = None,
    window: TimeWindow | None = REPLAY_WINDOW,
    *,
    columnar: bool = True,
) -> Iterator[Point]:
    """Yield the points of a replay file in file order; bad lines go to ``quarantine``, a
    sample whose timestamp lies outside ``window`` too (None: any time).

    The format is chosen by suffix: ``.csv`` (optionally ``.csv.gz``) is CSV, anything else
    JSONL. A plain JSONL file is read a chunk at a time by the columnar reader (a chunk's
    quarantine records are added before its points are yielded) unless ``columnar`` is
    False; a ``.gz`` or CSV file, and a path that is not a file (its error named), go line by
    line.
    """
    if not columnar or not _columnar(path):
        return replay.read_replay(path, quarantine, window)
    return read_jsonl_points(path, quarantine if quarantine is not None else Quarantine(), window)


def read_replay_columns(
    path: Path, quarantine: Quarantine, window: TimeWindow | None = REPLAY_WINDOW
) -> Iterator[ColumnChunk] | None:
    """The samples of a plain JSONL file as columns (:func:`read_jsonl_columns`: the points
    and quarantine records :func:`read_replay` gives); None for a file it reads line by
    line."""
    return read_jsonl_columns(path, quarantine, window) if _columnar(path) else None


def _columnar(path: Path) -> bool:
    suffixes = [s.lower() for s in path.suffixes]
    return ".csv" not in suffixes and path.suffix != ".gz" and path.is_file()
