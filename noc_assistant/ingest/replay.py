"""Replay files (docs/FORMATS.md §1): JSONL, one sample per line, or CSV.

A line that does not parse is quarantined with its line number and the reason: not JSON, not
UTF-8, a CSV field past the csv module's limit, a line longer than :data:`MAX_LINE_BYTES`, a
label with a control character (a NUL in an instance name), a timestamp outside the reader's
:class:`~noc_assistant.ingest.window.TimeWindow`. A file that cannot be read as a whole
(missing, a folder, wrong CSV header, a ``.gz`` that is not gzip or ends mid-stream) raises
:class:`ReplayFormatError` naming the file and the line it got to. A UTF-8 byte order mark in
front of the first line is read past, not taken for part of it.
"""

from __future__ import annotations

import codecs
import csv
import gzip
import json
import math
import re
import zlib
from collections.abc import Iterable, Iterator
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import IO, Any

import orjson

from noc_assistant.errors import ReplayFormatError
from noc_assistant.ingest.point import METRIC_TYPES, Point
from noc_assistant.ingest.quarantine import Quarantine
from noc_assistant.ingest.window import REPLAY_WINDOW, TimeWindow

__all__ = [
    "MAX_LINE_BYTES",
    "LineError",
    "epoch_seconds",
    "jsonl_lines",
    "parse_json_line",
    "parse_lines",
    "parse_time",
    "parse_ts",
    "read_replay",
    "write_replay",
]

_METRIC_RE = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_CSV_REQUIRED = ("ts", "metric", "instance", "value")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
"""A control character: no label (an entity's name) holds one; a NUL truncates it in C and
PostgreSQL refuses it."""

MAX_LINE_BYTES = 1 << 20
"""A line longer than this (1 MiB; a sample is about 200 bytes) is quarantined unread: one
line without a newline must not load a whole file into memory."""


class LineError(ValueError):
    """One line (or message) of telemetry that is not a valid sample; the text says why."""


_LineError = LineError


def parse_ts(raw: object) -> float:
    """RFC 3339 (``Z`` or offset) or epoch seconds → epoch seconds.

    >>> parse_ts("2026-11-29T10:05:00Z")
    1795946700.0
    >>> parse_ts(1795946700)
    1795946700.0
    """
    if isinstance(raw, bool):
        raise _LineError("ts must be RFC 3339 text or epoch seconds")
    if isinstance(raw, int | float):
        try:
            if not math.isfinite(raw):
                raise _LineError("ts is not finite")
            return float(raw)
        except OverflowError:  # an integer past any float
            raise _LineError(f"ts {raw:.6g} is not a time") from None
    if isinstance(raw, str):
        return _text_ts(raw)
    raise _LineError("ts missing or not text/number")


def parse_time(value: str | None, default: float, name: str) -> float:
    """An option or query parameter that is a time (:func:`parse_ts`), ``default`` when it is
    absent; ``ValueError`` naming ``name`` otherwise.

    >>> parse_time("2026-12-03T10:00:00Z", 0.0, "since"), parse_time(None, 5.0, "since")
    (1796292000.0, 5.0)
    >>> parse_time("yesterday", 0.0, "--since")
    Traceback (most recent call last):
    ...
    ValueError: --since: ts 'yesterday' is not RFC 3339
    """
    if value is None or not value.strip():
        return default
    try:
        return parse_ts(value)
    except ValueError as exc:
        raise ValueError(f"{name}: {exc}") from None


def epoch_seconds(text: str) -> float | None:
    """``text`` read as epoch seconds when it is a number, else None (it may be a date); a
    number that is not finite (``nan``, ``inf``) is no time: ValueError.

    >>> epoch_seconds(" 1795946700 "), epoch_seconds("2026-11-29T10:05:00Z")
    (1795946700.0, None)
    """
    try:
        seconds = float(text)
    except ValueError:
        return None
    if not math.isfinite(seconds):
        raise ValueError(f"ts {text!r} is not finite")
    return seconds


@lru_cache(maxsize=1024)
def _text_ts(raw: str) -> float:
    """:func:`parse_ts` of text (cached: the lines of one scrape share their timestamp; an
    error is raised again, not cached)."""
    text = raw.strip()
    try:
        seconds = epoch_seconds(text)
    except ValueError as exc:
        raise _LineError(str(exc)) from None
    if seconds is not None:
        return seconds
    try:
        dt = datetime.fromisoformat(text)
    except ValueError:
        raise _LineError(f"ts {raw!r} is not RFC 3339") from None
    if dt.tzinfo is None:
        raise _LineError(f"ts {raw!r} has no time zone (use Z or +00:00)")
    try:
        return dt.timestamp()
    except (OverflowError, ValueError):  # year 1 shifted before the epoch's range
        raise _LineError(f"ts {raw!r} is out of range") from None


@lru_cache(maxsize=65536)
def _metric_ok(metric: str) -> bool:
    return _METRIC_RE.match(metric) is not None


def _value(raw: object) -> float | None:
    if raw is None:
        return None
    if isinstance(raw, bool):
        raise _LineError("value must be a number")
    if isinstance(raw, int | float):
        return None if math.isnan(raw) else float(raw)
    if isinstance(raw, str):
        text = raw.strip()
        if text.lower() in {"nan", "", "null"}:
            return None
        try:
            number = float(text)
        except ValueError:
            raise _LineError(f"value {raw!r} is not a number") from None
        return None if math.isnan(number) else number
    raise _LineError("value must be a number or null")


#: no quantity this product reads comes near it (a byte counter at 100 GB/s takes 3e11 years
#: to reach it); a value past it, or ±inf, is an exporter's placeholder (DBL_MAX, an
#: uninitialised register), which read as a sample pages on every KPI built from it
_ABSURD = 1e30

#: sample types that count events from zero (a histogram's sum may go down: not here)
_COUNTS_UP = frozenset({"counter", "histogram_bucket", "histogram_count"})


def _point(
    ts: object,
    metric: object,
    labels: object,
    value: object,
    type_: object,
    window: TimeWindow | None = None,
) -> Point:
    if not isinstance(metric, str) or not _metric_ok(metric):
        raise _LineError(f"metric {metric!r} is not a Prometheus metric name")
    if not isinstance(labels, dict):
        raise _LineError("labels must be an object of string → string")
    try:
        label_key = _label_key(tuple(labels.items()))
    except TypeError:  # an unhashable label value (a list, an object)
        raise _LineError("labels must be an object of string → string") from None
    if type_ is None:
        type_ = "gauge"
    if not isinstance(type_, str) or type_ not in METRIC_TYPES:  # [] is unhashable
        raise _LineError(f"type {type_!r} is not one of {sorted(METRIC_TYPES)}")
    number = _value(value)
    if number is not None and not -_ABSURD < number < _ABSURD:
        raise _LineError(
            f"value {number!r} is not a measurement (not finite, or past ±{_ABSURD:g}: "
            "an exporter's placeholder such as DBL_MAX)"
        )
    if number is not None and number < 0 and type_ in _COUNTS_UP:
        # read as a reset, a negative sample would make a negative rate, then a burst as
        # large as the counter when the next good sample "restarts" it
        raise _LineError(f"{type_} value {number!r} is negative (a counter counts up from 0)")
    seconds = parse_ts(ts)
    if window is not None:
        window.check(seconds, _LineError)
    return Point(seconds, metric, label_key, number, str(type_))


@lru_cache(maxsize=65536)
def _label_key(items: tuple[tuple[object, object], ...]) -> tuple[tuple[str, str], ...]:
    """Checked, sorted label pairs (cached: every scrape repeats a series' label set, and the
    one tuple it returns is shared by all that series' points)."""
    checked: list[tuple[str, str]] = []
    for k, v in items:
        if not (isinstance(k, str) and isinstance(v, str)):
            raise _LineError("labels must be an object of string → string")
        if _CONTROL.search(k) or _CONTROL.search(v):
            raise _LineError(f"label {k!r} holds a control character: {v!r}")
        checked.append((k, v))
    return tuple(sorted(checked))


def _loads(raw: bytes) -> Any:
    """orjson for speed; the standard library for lines with a bare ``NaN`` token, which
    Python's json writes for a missing value and docs/FORMATS.md allows."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        if b"NaN" not in raw:
            raise
        return json.loads(raw)


def _open(path: Path) -> IO[bytes]:
    if path.is_dir():
        raise ReplayFormatError("is a folder, not a replay file", source=str(path))
    try:
        if path.suffix == ".gz":
            return gzip.open(path, "rb")  # type: ignore[return-value]
        return path.open("rb")
    except OSError as exc:
        raise ReplayFormatError(f"cannot open: {exc.strerror}", source=str(path)) from None


#: what reading a (gzip) file can fail with past its opening: not gzip, cut short, damaged
_READ_ERRORS = (OSError, EOFError, zlib.error)

_TOO_LONG = b"\x00too long\x00"
"""Stands for a line longer than :data:`MAX_LINE_BYTES` (no line of a text file is this)."""


def _binary_lines(fh: IO[bytes], source: str) -> Iterator[bytes]:
    """The lines of ``fh``, each at most :data:`MAX_LINE_BYTES` (a longer one is read past
    and stands as :data:`_TOO_LONG`); a read that fails raises :class:`ReplayFormatError`
    naming the line it got to."""
    lineno = 0
    while True:
        try:
            raw = fh.readline(MAX_LINE_BYTES + 1)
            if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
                while raw and not raw.endswith(b"\n"):
                    raw = fh.readline(MAX_LINE_BYTES)
                raw = _TOO_LONG
        except _READ_ERRORS as exc:
            raise ReplayFormatError(
                f"cannot read past line {lineno}: {exc}", source=source, line=lineno + 1
            ) from None
        if not raw:
            return
        lineno += 1
        if lineno == 1 and raw.startswith(codecs.BOM_UTF8):
            raw = raw[len(codecs.BOM_UTF8) :]
        yield raw


def parse_json_line(raw: bytes, window: TimeWindow | None = None) -> Point:
    """One FORMATS §1 JSONL sample; :class:`LineError` says what is wrong with it (its
    timestamp outside ``window`` too, when one is given).

    >>> parse_json_line(b'{"ts": 60, "metric": "up", "labels": {"instance": "amf-1"}, "value": 1}')
    Point(ts=60.0, metric='up', labels=(('instance', 'amf-1'),), value=1.0, type='gauge')
    >>> parse_json_line(b'{"ts": 60, "metric": "up", "value": "x"}')
    Traceback (most recent call last):
    ...
    noc_assistant.ingest.replay.LineError: value 'x' is not a number
    >>> parse_json_line(b'{"ts": 60, "metric": "up", "value": 1.7e308}')  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    noc_assistant.ingest.replay.LineError: value 1.7e+308 is not a measurement (not finite, ...)
    """
    try:
        obj: Any = _loads(raw)
    except ValueError as exc:  # not UTF-8 either (UnicodeDecodeError is a ValueError)
        raise LineError(f"invalid JSON: {exc}") from None
    except RecursionError:
        raise LineError("invalid JSON: nested too deeply") from None
    if not isinstance(obj, dict):
        raise LineError("line is not a JSON object")
    for key in ("ts", "metric", "value"):
        if key not in obj:
            raise LineError(f"missing required field {key!r}")
    try:
        return _point(
            obj["ts"], obj["metric"], obj.get("labels", {}), obj["value"], obj.get("type"), window
        )
    except LineError:
        raise
    except ValueError as exc:  # anything else a field's conversion refused
        raise LineError(str(exc)) from None


def parse_lines(
    lines: Iterable[bytes],
    source: str,
    quarantine: Quarantine,
    window: TimeWindow | None = None,
) -> Iterator[tuple[int, bytes, Point]]:
    """(line number, raw line, point) of each JSONL sample in ``lines``; blank lines are
    skipped, bad ones (a timestamp outside ``window`` too, when one is given) quarantined
    under ``source`` with their number. A replay file, a bus message and a publisher all read
    their lines through this."""
    for lineno, raw in enumerate(lines, start=1):
        point = _parse_one(lineno, raw, source, quarantine, window)
        if point is not None:
            yield lineno, raw, point


def _parse_one(
    lineno: int, raw: bytes, source: str, quarantine: Quarantine, window: TimeWindow | None
) -> Point | None:
    """Line ``lineno`` of :func:`parse_lines`: its point, or None when it is blank or was
    quarantined (the columnar reader sends each line it cannot vouch for through here)."""
    if raw is _TOO_LONG:
        quarantine.add(source, lineno, f"line longer than {MAX_LINE_BYTES} bytes", "")
        return None
    if not raw.strip():
        return None
    try:
        return parse_json_line(raw, window)
    except LineError as exc:
        quarantine.add(source, lineno, str(exc), _text(raw))
        return None


def jsonl_lines(
    path: Path, quarantine: Quarantine, window: TimeWindow | None = REPLAY_WINDOW
) -> Iterator[tuple[int, bytes, Point]]:
    """:func:`parse_lines` of a JSONL file (``.gz`` too), its timestamps in ``window``."""
    with _open(path) as fh:
        yield from parse_lines(_binary_lines(fh, str(path)), str(path), quarantine, window)


def _read_jsonl(path: Path, quarantine: Quarantine, window: TimeWindow | None) -> Iterator[Point]:
    for _, _, point in jsonl_lines(path, quarantine, window):
        yield point


_LABEL_RE = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


def _csv_extra_columns(header: list[str], source: str) -> tuple[int | None, list[tuple[int, str]]]:
    """The columns after ``ts,metric,instance,value``: the ``type`` column's index (None if
    absent) and the label columns as (index, label name). A label column is ``label=NAME``,
    as FORMATS writes it, or ``NAME`` alone (a Prometheus label name), as exports often do.

    >>> _csv_extra_columns(["ts", "metric", "instance", "value", "type", "label=nf", "plmnid"], "f")
    (4, [(5, 'nf'), (6, 'plmnid')])
    """
    type_col: int | None = None
    labels: list[tuple[int, str]] = []
    seen = {"instance"}
    for i, col in enumerate(header[4:], start=4):
        if col == "type" and type_col is None:
            type_col = i
            continue
        name = col[len("label=") :] if col.startswith("label=") else col
        if not _LABEL_RE.match(name) or name in seen:
            why = "a repeated label" if name in seen else "not a label name"
            raise ReplayFormatError(
                f"CSV column {col!r} is {why} (expected 'type', 'label=NAME' or 'NAME')",
                source=source,
                line=1,
            )
        seen.add(name)
        labels.append((i, name))
    return type_col, labels


class _CsvLines:
    """The decoded lines of a CSV file for :mod:`csv`, and the number of the last one read:
    a line that is not UTF-8 (or too long) is quarantined here and never reaches the reader."""

    def __init__(self, lines: Iterator[bytes], source: str, quarantine: Quarantine) -> None:
        self._lines = lines
        self._source = source
        self._quarantine = quarantine
        self.lineno = 0

    def __iter__(self) -> Iterator[str]:
        for raw in self._lines:
            self.lineno += 1
            if raw is _TOO_LONG:
                reason = f"line longer than {MAX_LINE_BYTES} bytes"
                self._quarantine.add(self._source, self.lineno, reason, "")
                continue
            try:
                yield raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                if self.lineno == 1:
                    raise ReplayFormatError(
                        f"CSV header is not UTF-8: {exc.reason}", source=self._source, line=1
                    ) from None
                reason = f"line is not UTF-8 ({exc.reason} at byte {exc.start})"
                self._quarantine.add(self._source, self.lineno, reason, _text(raw))


def _read_csv(path: Path, quarantine: Quarantine, window: TimeWindow | None) -> Iterator[Point]:
    source = str(path)
    with _open(path) as binary:
        lines = _CsvLines(_binary_lines(binary, source), source, quarantine)
        reader = csv.reader(iter(lines))
        try:
            header = next(reader, None)
        except csv.Error as exc:
            raise ReplayFormatError(f"CSV header: {exc}", source=source, line=1) from None
        if header is None:
            raise ReplayFormatError("empty CSV file (no header)", source=source, line=1)
        header = [h.strip() for h in header]
        if tuple(header[:4]) != _CSV_REQUIRED:
            shown = ",".join(header)
            shown = shown if len(shown) <= 200 else shown[:200] + "…"
            raise ReplayFormatError(
                f"CSV header must start with {','.join(_CSV_REQUIRED)}, got {shown!r}",
                source=source,
                line=1,
            )
        type_col, label_cols = _csv_extra_columns(header, source)
        while True:
            try:
                row = next(reader)
            except StopIteration:
                return
            except csv.Error as exc:  # a field past the csv module's limit, a quote left open
                quarantine.add(source, lines.lineno, f"not a CSV row: {exc}", "")
                continue
            lineno = lines.lineno
            if not row:
                continue
            try:
                if len(row) != len(header):
                    raise _LineError(f"expected {len(header)} fields, got {len(row)}")
                labels = {"instance": row[2]}
                for col, name in label_cols:
                    if row[col] != "":
                        labels[name] = row[col]
                type_ = (row[type_col] or None) if type_col is not None else None
                yield _point(row[0], row[1], labels, row[3], type_, window)
            except _LineError as exc:
                quarantine.add(source, lineno, str(exc), ",".join(row))


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace").rstrip("\n")


def write_replay(points: Iterable[Point], path: Path) -> tuple[int, int]:
    """Write ``points`` as a FORMATS §1 JSONL replay file, atomically (a failure midway
    leaves no file); (samples, distinct series) written.

    >>> import tempfile
    >>> out = Path(tempfile.mkdtemp()) / "t.jsonl"
    >>> write_replay([Point(60.0, "up", (("instance", "amf-1"),), None, "gauge")], out)
    (1, 1)
    >>> out.read_text()
    '{"ts":60.0,"metric":"up","labels":{"instance":"amf-1"},"value":null,"type":"gauge"}\\n'
    """
    n = 0
    series: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
    tmp = path.with_name(path.name + ".tmp")
    try:
        with tmp.open("wb") as fh:
            for p in points:
                row = {"ts": p.ts, "metric": p.metric, "labels": dict(p.labels), "value": p.value}
                fh.write(orjson.dumps({**row, "type": p.type}) + b"\n")
                series.add((p.metric, p.labels))
                n += 1
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)
    return n, len(series)


def read_replay(
    path: Path,
    quarantine: Quarantine | None = None,
    window: TimeWindow | None = REPLAY_WINDOW,
) -> Iterator[Point]:
    """Yield the points of a replay file in file order; bad lines go to ``quarantine``, a
    sample whose timestamp lies outside ``window`` too (None: any time).

    The format is chosen by suffix: ``.csv`` (optionally ``.csv.gz``) is CSV, anything else
    JSONL, line by line: the reference the columnar reader is tested against
    (:func:`noc_assistant.ingest.reader.read_replay` chooses between them).
    """
    q = quarantine if quarantine is not None else Quarantine()
    if not path.exists():
        raise ReplayFormatError("file not found", source=str(path))
    if path.is_dir():
        raise ReplayFormatError("is a folder, not a replay file", source=str(path))
    suffixes = [s.lower() for s in path.suffixes]
    if ".csv" in suffixes:
        return _read_csv(path, q, window)
    return _read_jsonl(path, q, window)
