"""NAB v1.1 corpus loading: the data files (``data/**.csv``, ``timestamp,value``) and their
labelled windows (``labels/combined_windows.json``), read whole or refused with a
:class:`~noc_assistant.errors.BadInputError` naming file and line. Scoring is
:mod:`evals.nab`, which re-exports :class:`NabSeries` and :func:`load_corpus`.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from evals._io import read_json_object
from noc_assistant.errors import BadInputError
from noc_assistant.ingest.files import reading
from noc_assistant.ingest.replay import epoch_seconds
from noc_assistant.ingest.window import REPLAY_WINDOW, TimeWindow

__all__ = ["NabSeries", "load_corpus"]

F64 = NDArray[np.float64]


@dataclass
class NabSeries:
    """One NAB data file: ``name`` is its path relative to ``data/``."""

    name: str
    timestamps: F64
    values: F64
    windows: list[tuple[float, float]]
    raw_timestamps: list[str] = field(default_factory=list, repr=False)
    raw_values: list[str] = field(default_factory=list, repr=False)

    @property
    def category(self) -> str:
        return self.name.split("/", 1)[0] if "/" in self.name else ""


#: NAB v1.1 itself holds repeated timestamps and one repeated hour (local clocks set back);
#: NAB scores rows in file order, so those are accepted. Anything earlier is "unsorted".
_MAX_STEP_BACK_S = 3600.0


_GAPS = frozenset({"", "nan", "null", "none"})


def _epoch(text: str) -> float:
    """ISO 8601 (NAB's ``2014-04-01 00:00:00``; naive is UTC) or epoch seconds (other public
    KPI series carry them, as FORMATS §1 allows for telemetry).

    >>> _epoch("2014-04-01 00:05:00") == _epoch("1396310700") == _epoch("1396310700.0")
    True
    """
    seconds = epoch_seconds(text)
    if seconds is not None:
        return seconds
    dt = datetime.fromisoformat(text.strip())
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    try:
        return dt.timestamp()
    except OverflowError:
        raise ValueError(f"{text!r} is out of range") from None


def _csv_lines(path: Path) -> Any:
    """The lines of a NAB file as text for :mod:`csv`: a byte order mark is read past, and a
    line that is not UTF-8 is a :class:`BadInputError` naming its line (a NAB file is read
    whole or not at all)."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise BadInputError(f"cannot read: {exc.strerror or exc}", source=str(path)) from None
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    for lineno, raw in enumerate(data.splitlines(keepends=True), start=1):
        try:
            yield raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise BadInputError(
                f"not UTF-8 ({exc.reason} at byte {exc.start})", source=str(path), line=lineno
            ) from None


def _read_csv(
    path: Path, name: str, window: TimeWindow = REPLAY_WINDOW
) -> tuple[list[str], list[str], F64, F64]:
    raw_ts: list[str] = []
    raw_vals: list[str] = []
    ts: list[float] = []
    vals: list[float] = []
    max_seen = -math.inf
    reader = csv.reader(_csv_lines(path))
    try:
        header = next(reader, None)
    except csv.Error as exc:
        raise BadInputError(f"header: {exc}", source=str(path), line=1) from None
    if header is None or [h.strip() for h in header] != ["timestamp", "value"]:
        shown = ",".join(header or [])
        raise BadInputError(
            f"expected header 'timestamp,value', got {shown[:200]!r}",
            source=str(path),
            line=1,
        )
    while True:
        try:
            row = next(reader)
        except StopIteration:
            break
        except csv.Error as exc:  # a field past the csv module's limit, a NUL, an open quote
            raise BadInputError(
                f"not a CSV row: {exc}", source=str(path), line=reader.line_num
            ) from None
        line = reader.line_num
        if not row:
            continue
        if len(row) != 2:
            raise BadInputError(f"expected 2 columns, got {len(row)}", source=str(path), line=line)
        try:
            t = _epoch(row[0])
        except ValueError:
            raise BadInputError(
                f"timestamp {row[0][:100]!r} is neither ISO 8601 nor epoch seconds",
                source=str(path),
                line=line,
            ) from None
        try:
            window.check(t)
        except ValueError as exc:
            raise BadInputError(str(exc), source=str(path), line=line) from None
        try:
            # a missing value (empty, NaN, null) is a gap, as in FORMATS §1: never zero
            v = math.nan if row[1].strip().lower() in _GAPS else float(row[1])
            if math.isinf(v):
                raise ValueError(row[1])
        except ValueError:
            raise BadInputError(
                f"value {row[1][:100]!r} is not a finite number", source=str(path), line=line
            ) from None
        if ts and t < max_seen - _MAX_STEP_BACK_S:
            raise BadInputError(
                f"timestamp {row[0]} is out of order (earlier than a previous row by more"
                " than an hour)",
                source=str(path),
                line=line,
            )
        max_seen = max(max_seen, t) if ts else t
        raw_ts.append(row[0])
        raw_vals.append(row[1])
        ts.append(t)
        vals.append(v)
    if not ts:
        raise BadInputError(f"{name} has no rows", source=str(path), line=1)
    return raw_ts, raw_vals, np.asarray(ts), np.asarray(vals)


def load_corpus(root: Path) -> list[NabSeries]:
    """Read ``root/data/**.csv`` and ``root/labels/combined_windows.json`` (NAB layout).

    Raises :class:`BadInputError` naming file and line for a wrong header, a non-numeric
    value, an unparsable or non-increasing timestamp, or a data file without labels.
    """
    data_dir = root / "data"
    labels_path = root / "labels" / "combined_windows.json"
    if not data_dir.is_dir():
        raise BadInputError("no data/ directory (NAB layout expected)", source=str(root))
    with reading(str(labels_path)):
        labels = read_json_object(labels_path, "an object of file → windows")
    out: list[NabSeries] = []
    for path in sorted(data_dir.rglob("*.csv")):
        name = path.relative_to(data_dir).as_posix()
        if not path.is_file():
            raise BadInputError("not a file", source=str(path))
        if name not in labels:
            raise BadInputError(f"no windows for {name}", source=str(labels_path))
        raw_ts, raw_vals, ts, vals = _read_csv(path, name)
        if not isinstance(labels[name], list):
            raise BadInputError(f"windows of {name} are not a list", source=str(labels_path))
        windows: list[tuple[float, float]] = []
        for w in labels[name]:
            try:
                edges = (_epoch(str(w[0])), _epoch(str(w[1])))
                for edge in edges:
                    REPLAY_WINDOW.check(edge)
            except (ValueError, TypeError, LookupError):
                raise BadInputError(
                    f"bad window {str(w)[:200]} for {name}", source=str(labels_path)
                ) from None
            windows.append(edges)
        out.append(NabSeries(name, ts, vals, sorted(windows), raw_ts, raw_vals))
    if not out:
        raise BadInputError("no .csv files under data/", source=str(data_dir))
    return out
