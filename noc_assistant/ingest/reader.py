"""Which reader a replay file goes through: a plain JSONL file a chunk at a time
(:mod:`noc_assistant.ingest.columnar`, polars: the same points and quarantine records, about 4
times as fast, bench/parse_results.md), anything else line by line
(:func:`noc_assistant.ingest.replay.read_replay`, the reference).

Apart from :mod:`~noc_assistant.ingest.replay` because the columnar reader is built on the
line reader's parts (its checks, and the lines it cannot vouch for): the choice sits above both.
"""

from __future__ import annotations

import queue
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

from noc_assistant.ingest import replay
from noc_assistant.ingest.columnar import ColumnChunk, read_jsonl_columns, read_jsonl_points
from noc_assistant.ingest.point import Point
from noc_assistant.ingest.quarantine import Quarantine, QuarantineRecord
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
    path: Path,
    quarantine: Quarantine,
    window: TimeWindow | None = REPLAY_WINDOW,
    *,
    ahead: bool = True,
) -> Iterator[ColumnChunk] | None:
    """The samples of a plain JSONL file as columns (:func:`read_jsonl_columns`: the points
    and quarantine records :func:`read_replay` gives); None for a file it reads line by
    line. With ``ahead``, the next chunk is read in a thread while the caller works on this
    one (:func:`_read_ahead`): the same chunks, records and errors, in the same order."""
    if not _columnar(path):
        return None
    if not ahead:
        return read_jsonl_columns(path, quarantine, window)
    return _read_ahead(path, quarantine, window)


_Item = tuple[str, ColumnChunk | BaseException | None, list[QuarantineRecord]]


def _read_ahead(
    path: Path, quarantine: Quarantine, window: TimeWindow | None
) -> Iterator[ColumnChunk]:
    """:func:`read_jsonl_columns` a chunk ahead, in a thread (polars splits and parses
    without holding the interpreter, so on two cores the reading and the pipeline overlap).
    The thread quarantines into a list of its own, handed over with each chunk and added to
    ``quarantine`` just before the chunk is yielded, where reading in turn would have added
    them; an error the reader raises is raised here after the records before it."""
    handed: queue.Queue[_Item] = queue.Queue(maxsize=1)
    stop = threading.Event()

    def put(item: _Item) -> None:
        while not stop.is_set():
            try:
                handed.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    def read() -> None:
        side = Quarantine(keep=sys.maxsize)

        def taken() -> list[QuarantineRecord]:
            records, side.records = side.records, []
            return records

        try:
            for chunk in read_jsonl_columns(path, side, window):
                put(("chunk", chunk, taken()))
                if stop.is_set():
                    return
            put(("end", None, taken()))
        except BaseException as exc:  # handed to the caller's thread, raised there
            put(("error", exc, taken()))

    worker = threading.Thread(target=read, name="replay-read-ahead", daemon=True)
    worker.start()
    try:
        while True:
            kind, item, records = handed.get()
            for r in records:
                quarantine.add(r.source, r.line, r.reason, r.raw)
            if kind == "error":
                assert isinstance(item, BaseException)
                raise item
            if kind == "end":
                return
            assert isinstance(item, ColumnChunk)
            yield item
    finally:
        stop.set()
        worker.join()


def _columnar(path: Path) -> bool:
    suffixes = [s.lower() for s in path.suffixes]
    return ".csv" not in suffixes and path.suffix != ".gz" and path.is_file()
