"""Columnar JSONL replay: the samples of a plain JSONL file a chunk of lines at a time.

The same points, in the same (file) order, and the same quarantine records as the line-by-line
reader (:func:`~noc_assistant.ingest.replay.parse_lines`), faster (bench/parse_results.md):
polars splits a chunk of the file into lines and each line at its separators, in Rust; every
*distinct* timestamp text of a chunk, and metric and label set of the file
(:mod:`noc_assistant.ingest.series_text`), is read once, by the functions the line-by-line
reader uses (:func:`~noc_assistant.ingest.replay.parse_ts`, ``_metric_ok``, ``_label_key`` on
what orjson makes of the labels), and the values are parsed and checked as arrays.
:func:`read_jsonl_columns` gives the chunks as numpy columns, :func:`read_jsonl_points` as
:class:`Point` s.

Only a line of the shape the simulator and :func:`~noc_assistant.ingest.replay.write_replay`
write is read here::

    {"ts":"2026-11-29T00:00:00Z","metric":"up","labels":{"instance":"amf-1"},"value":1.0,"type":"gauge"}

with no space between the fields, the keys in that order, ``ts`` a JSON string without
escapes or a number, ``value`` a number (an integer part of at most 18 digits) or ``null`` (a
gap), ``type`` left out or one of :data:`METRIC_TYPES`, and labels an object that orjson reads
as text → text (where ``,"type":"`` is not found). Every other line, and a line of that shape
with a field the line reader would refuse (a timestamp outside the window or without a zone,
a negative counter, a value past ±1e30, a label with a control character, an unknown type),
goes through the line-by-line reader with its number, which keeps what it accepts and the
reason it gives for what it does not: blank lines, a byte order mark, JSON with spaces or
other key orders, labels left out, escapes in a timestamp or metric, ``NaN`` tokens, values
as text, the integer ``-0``, repeated keys, nested labels, bytes that are not UTF-8, lines over
:data:`~noc_assistant.ingest.replay.MAX_LINE_BYTES`.

A chunk is read whole before its first point is yielded: its quarantine records are added
before its points are yielded (the line-by-line reader adds each as it reaches the line; once
the file is read both have added the same records in the same order).

polars is imported inside the functions that use it, never at module level, so that importing
noc_assistant stays cheap (polars loads a large native library and starts a thread pool). It
sizes that pool once, when first imported, from ``POLARS_MAX_THREADS`` (unset: one thread per
CPU); nothing here changes it, and setting the variable after polars is imported does nothing.
"""

from __future__ import annotations

import codecs
import io
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import repeat
from pathlib import Path
from typing import IO, TYPE_CHECKING, NamedTuple

import numpy as np
import orjson
from numpy.typing import NDArray

from noc_assistant.errors import ReplayFormatError
from noc_assistant.ingest.point import Point
from noc_assistant.ingest.quarantine import Quarantine
from noc_assistant.ingest.replay import (
    _ABSURD,
    _READ_ERRORS,
    _TOO_LONG,
    MAX_LINE_BYTES,
    _open,
    _parse_one,
    parse_ts,
)
from noc_assistant.ingest.series_text import TYPES, Labels, PairMemo, SeriesKey, codes, utf8
from noc_assistant.ingest.window import REPLAY_WINDOW, TimeWindow

if TYPE_CHECKING:
    import polars as pl

__all__ = ["CHUNK_BYTES", "ColumnChunk", "SeriesTable", "read_jsonl_columns", "read_jsonl_points"]

CHUNK_BYTES = 16 << 20
"""Bytes read at a time (about 90,000 simulated lines of 190 bytes; 8 to 16 MiB read fastest
on 1 and 2 threads, 32 MiB 15 % slower): a chunk and what polars makes of it take a few times
this in memory."""

#: a JSON number as orjson reads it, exactly (an integer part of up to 18 digits: an int that
#: fits in 64 bits, which both orjson and polars turn into the nearest float)
_NUMBER = r"^-?(?:0|[1-9][0-9]{0,17})(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?$"

_NUMBER_RE = re.compile(_NUMBER[1:-1])
_UNSAFE = re.compile(r'["\\\x00-\x1f]')
"""What JSON text holds only escaped: a string without any is what it reads as."""

_HEAD = '{"ts":'

_TYPE_TEXTS = [f'{name}"}}'.encode() for name in TYPES]
"""How each type ends a line of the shape read here: the name, its closing quote, the brace."""


class SeriesTable:
    """The series a reader has met, numbered from 0 in the order first met; a
    :class:`ColumnChunk`'s ``series`` column indexes it. It grows as chunks are read: an index
    in a chunk is below its length when the chunk is yielded."""

    def __init__(self) -> None:
        self.keys: list[SeriesKey] = []
        self._index: dict[SeriesKey, int] = {}
        self._columns: tuple[NDArray[np.object_], ...] = ()

    def __len__(self) -> int:
        return len(self.keys)

    def __getitem__(self, index: int) -> SeriesKey:
        return self.keys[index]

    def index(self, metric: str, labels: Labels, type_: str) -> int:
        """The number of this series (a new one is added at the end)."""
        key = SeriesKey(metric, labels, type_)
        found = self._index.get(key)
        if found is None:
            found = self._index[key] = len(self.keys)
            self.keys.append(key)
        return found

    def columns(self) -> tuple[NDArray[np.object_], ...]:
        """Metric, labels and type of each series as object arrays, to gather by a chunk's
        ``series``."""
        if not self._columns or len(self._columns[0]) != len(self.keys):
            self._columns = tuple(
                np.fromiter((key[f] for key in self.keys), dtype=object, count=len(self.keys))
                for f in range(3)
            )
        return self._columns


@dataclass(frozen=True)
class ColumnChunk:
    """The samples of a run of lines, in file order, as columns.

    ``ts`` is epoch seconds; ``series`` indexes ``table``; ``value`` is the sample, **NaN
    where it is a gap**, and nowhere else (the file's null, NaN or "nan": a gap, as
    :class:`Point`'s None; an infinite value is quarantined, not read).
    """

    ts: NDArray[np.float64]
    series: NDArray[np.int32]
    value: NDArray[np.float64]
    table: SeriesTable

    def __len__(self) -> int:
        return len(self.ts)

    def points(self) -> Iterator[Point]:
        """The chunk as :class:`Point` s (a gap's value None), as the line reader makes them,
        made as they are taken (a list of them all would cost the garbage collector as much
        as it takes to make them)."""
        metrics, labels, types = self.table.columns()
        values = self.value.astype(object)
        values[np.isnan(self.value)] = None
        rows = zip(
            self.ts.tolist(),
            metrics[self.series].tolist(),
            labels[self.series].tolist(),
            values.tolist(),
            types[self.series].tolist(),
            strict=True,
        )
        return map(tuple.__new__, repeat(Point), rows)


def read_jsonl_points(
    path: Path,
    quarantine: Quarantine,
    window: TimeWindow | None = REPLAY_WINDOW,
    *,
    chunk_bytes: int = CHUNK_BYTES,
) -> Iterator[Point]:
    """The points of a JSONL file in file order, bad lines quarantined under ``path`` with
    their numbers: what :func:`~noc_assistant.ingest.replay.jsonl_lines` gives, read by
    :func:`read_jsonl_columns`."""
    for chunk in read_jsonl_columns(path, quarantine, window, chunk_bytes=chunk_bytes):
        yield from chunk.points()


def read_jsonl_columns(
    path: Path,
    quarantine: Quarantine,
    window: TimeWindow | None = REPLAY_WINDOW,
    *,
    chunk_bytes: int = CHUNK_BYTES,
    table: SeriesTable | None = None,
) -> Iterator[ColumnChunk]:
    """The samples of a JSONL file as :class:`ColumnChunk` s of about ``chunk_bytes`` of the
    file each, in file order, their series numbered in ``table`` (a new one if None; pass one
    to number the series of several files alike). Bad lines are quarantined as the line reader
    does; a file that cannot be read raises :class:`ReplayFormatError` naming the line it got
    to (the chunk before it yielded). Meant for plain files: a ``.gz`` one is read too, but a
    read that fails mid-chunk loses the lines of that chunk the line reader would have given.
    """
    table = table if table is not None else SeriesTable()
    ctx = _Context(str(path), quarantine, window, table, PairMemo())
    with _open(path) as fh:
        blocks = _Blocks(fh, ctx.source, max(1, chunk_bytes))
        for data in blocks:
            first = blocks.lines + 1
            if data is None:
                blocks.lines += 1
                _parse_one(first, _TOO_LONG, ctx.source, quarantine, window)
                continue
            chunk, count = _read_chunk(data, first, ctx)
            blocks.lines += count
            if len(chunk):
                yield chunk


@dataclass(frozen=True)
class _Context:
    source: str
    quarantine: Quarantine
    window: TimeWindow | None
    table: SeriesTable
    memo: PairMemo


class _Blocks:
    """The runs of whole lines of ``fh``, about ``size`` bytes at a time; None for a line
    longer than :data:`MAX_LINE_BYTES` that did not fit in one run (read past, never held
    whole; a line that did fit may be longer: :func:`_read_chunk` sends it on as too long).
    The reader adds the lines it took from each run to ``lines``, which a read that fails
    names as ``_binary_lines`` does."""

    def __init__(self, fh: IO[bytes], source: str, size: int) -> None:
        self._fh = fh
        self._source = source
        self._size = size
        self.lines = 0
        #: a plain file: a line cut by a read is read again with the next (a gzip file seeks
        #: back by reading again from its start)
        self._rewind = isinstance(fh, io.BufferedReader) and fh.seekable()

    def __iter__(self) -> Iterator[bytes | None]:
        carry: list[bytes] = []  # the start of the line being read, in the reads it took
        held = 0  # its length
        skipping = False  # reading past a line longer than MAX_LINE_BYTES
        while True:
            buf = self._read(skipping)
            if not buf:
                if carry:
                    yield b"".join(carry)
                return
            if skipping:
                newline = buf.find(b"\n")
                if newline < 0:
                    continue
                buf, skipping = buf[newline + 1 :], False
            cut = buf.rfind(b"\n") + 1
            if cut:
                yield b"".join([*carry, buf[:cut]]) if carry else buf[:cut]
                carry, held = [], 0
            rest = len(buf) - cut
            if rest and cut and self._rewind:
                self._seek(-rest)
            elif rest:
                carry.append(buf[cut:])
                held += rest
            if held > MAX_LINE_BYTES:
                yield None
                carry, held, skipping = [], 0, True

    def _read(self, skipping: bool) -> bytes:
        try:
            return self._fh.read(self._size)
        except _READ_ERRORS as exc:
            done = self.lines - 1 if skipping else self.lines  # the long line is not done
            raise ReplayFormatError(
                f"cannot read past line {done}: {exc}", source=self._source, line=done + 1
            ) from None

    def _seek(self, back: int) -> None:
        try:
            self._fh.seek(back, io.SEEK_CUR)
        except OSError as exc:
            raise ReplayFormatError(
                f"cannot read past line {self.lines}: {exc}",
                source=self._source,
                line=self.lines + 1,
            ) from None


class _Lines(NamedTuple):
    """Where each line of a chunk lies: ``start``, ``end`` (its newline, or the end of the
    chunk) and ``cr`` (it ends in a carriage return, which polars' line splitter drops)."""

    start: NDArray[np.int64]
    end: NDArray[np.int64]
    cr: NDArray[np.bool_]


def _line_bounds(data: bytes, nbytes: NDArray[np.int64] | None) -> _Lines:
    """Where the lines of ``data`` lie: from the lengths polars gives them (``nbytes``) when
    each is followed by a newline where those lengths put it (no carriage return dropped),
    else from a search for the newlines."""
    raw = np.frombuffer(data, dtype=np.uint8)
    end = np.cumsum(nbytes + 1) - 1 if nbytes is not None else np.zeros(0, dtype=np.int64)
    if nbytes is not None and len(end) and end[-1] in (len(data) - 1, len(data)):
        inside = end[:-1] if end[-1] == len(data) else end
        if (raw[inside] == 10).all():
            start = end - nbytes
            return _Lines(start, end, np.zeros(len(end), dtype=bool))
    newlines = np.flatnonzero(raw == 10)
    end = newlines if data.endswith(b"\n") else np.append(newlines, len(data))
    start = np.concatenate(([0], end[:-1] + 1))
    before = np.maximum(end - 1, 0)
    cr = (end > start) & (raw[before] == 13)
    return _Lines(start.astype(np.int64), end.astype(np.int64), cr)


def _read_chunk(data: bytes, first: int, ctx: _Context) -> tuple[ColumnChunk, int]:
    """The samples of ``data`` (whole lines, the first numbered ``first``) and its number of
    lines."""
    fields = _fields(_split_lines(data, exact=False))
    lengths = fields["nbytes"]  # null for a line that is not UTF-8
    bounds = _line_bounds(data, None if lengths.null_count() else lengths.to_numpy())
    if len(bounds.start) != len(fields):  # polars split the lines otherwise: split them here
        fields = _fields(_split_lines(data, exact=True))
    ts = _timestamps(fields["ts"], ctx.window)
    memo = ctx.memo
    ref = memo.refs(fields["key"], fields["type"])
    value = fields["v"].to_numpy().astype(np.float64)
    gap = fields["gap"].to_numpy()
    nbytes = fields["nbytes"].fill_null(-1).to_numpy()
    length = bounds.end - bounds.start
    sure = (
        fields["ok"].to_numpy()
        & ((nbytes == length) | ((nbytes == length - 1) & bounds.cr))
        & (length <= MAX_LINE_BYTES)
        & ~np.isnan(ts)
        & memo.known[ref]
    )
    in_range = (value > -_ABSURD) & (value < _ABSURD) & ~(memo.up[ref] & (value < 0))
    sure &= (fields["number"].to_numpy() & in_range) | gap
    value[gap] = math.nan
    found: dict[int, Point] = {}
    for i in np.flatnonzero(~sure).tolist():
        point = _fallback(data, bounds, i, first, ctx)
        if point is not None:
            found[i] = point
            ts[i] = point.ts
            value[i] = math.nan if point.value is None else point.value
    series = _number(ctx.table, memo, ref, sure, found)
    keep = sure.copy()
    keep[list(found)] = True
    chunk = ColumnChunk(ts[keep], series[keep].astype(np.int32), value[keep], ctx.table)
    return chunk, len(keep)


def _number(
    table: SeriesTable,
    memo: PairMemo,
    ref: NDArray[np.int64],
    sure: NDArray[np.bool_],
    found: dict[int, Point],
) -> NDArray[np.int64]:
    """Each row's series in ``table`` (-1 for a line not kept): the ``sure`` rows' from their
    pair (``ref`` into ``memo``), the others' from the points the line reader ``found``; a
    series new to the table is numbered in the order of the rows that first have it."""
    rows = np.flatnonzero(sure)
    todo = rows[memo.number[ref[rows]] < 0]  # rows of pairs no row vouched for had before
    firsts = todo[np.unique(ref[todo], return_index=True)[1]]
    met: list[tuple[int, int | SeriesKey]] = [(row, int(ref[row])) for row in firsts.tolist()]
    met += [(row, SeriesKey(p.metric, p.labels, p.type)) for row, p in found.items()]
    met.sort(key=_row)
    for _, item in met:
        if isinstance(item, int):
            key = memo.keys[item]
            assert key is not None  # a sure row's pair is known
            memo.number[item] = table.index(*key)
        else:
            table.index(*item)
    series: NDArray[np.int64] = np.where(sure, memo.number[ref], -1)
    for row, p in found.items():
        series[row] = table.index(p.metric, p.labels, p.type)
    return series


def _row(met: tuple[int, int | SeriesKey]) -> int:
    return met[0]


def _fallback(data: bytes, bounds: _Lines, i: int, first: int, ctx: _Context) -> Point | None:
    """Line ``i`` of a chunk through the line reader, the bytes it would have read."""
    start, end = int(bounds.start[i]), int(bounds.end[i])
    lineno = first + i
    raw = _TOO_LONG if end - start > MAX_LINE_BYTES else data[start : end + 1]
    if lineno == 1 and raw is not _TOO_LONG and raw.startswith(codecs.BOM_UTF8):
        raw = raw[len(codecs.BOM_UTF8) :]
    return _parse_one(lineno, raw, ctx.source, ctx.quarantine, ctx.window)


def _split_lines(data: bytes, exact: bool) -> pl.Series:
    """The lines of ``data`` as polars text (a carriage return before a newline dropped): by
    polars' own splitter unless ``exact`` or a line is not UTF-8, then split here, on
    newlines only, a line that is not UTF-8 null (it goes to the line reader)."""
    import polars as pl

    if not exact:
        try:
            return pl.read_lines(data).to_series()
        except pl.exceptions.PolarsError:  # not UTF-8 somewhere
            pass
    parts = data.split(b"\n")
    if data.endswith(b"\n"):
        parts.pop()
    texts = [utf8(part[:-1] if part.endswith(b"\r") else part) for part in parts]
    return pl.Series("line", texts, dtype=pl.String)


def _fields(lines: pl.Series) -> pl.DataFrame:
    """Each line cut at the first of each separator of the one shape vouched for (a line of
    another shape gets nulls or pieces that do not parse), as bytes (polars finds bytes and
    slices text by characters): ``ts`` (its JSON text), ``key`` (the metric, ``","labels":``,
    the labels object less its closing brace), ``type`` (its index in ``_TYPES``, -1 for none
    of them; ``gauge`` where the line has no type), ``v``
    (the value, null where it is not a number), ``number``/``gap`` (the value is a JSON number
    as orjson reads it, or ``null``), ``ok`` (the line starts and ends as that shape and its
    separators come in order), ``nbytes`` (its length in bytes)."""
    import polars as pl

    line, raw = pl.col("line"), pl.col("raw")
    at_metric, at_value, at_type = pl.col("at_metric"), pl.col("at_value"), pl.col("at_type")
    typed = at_type.is_not_null() & (at_type >= at_value + 10)
    ends = line.str.ends_with("}")
    value_end = pl.when(typed).then(at_type).when(ends).then(pl.col("nbytes") - 1)
    value = raw.bin.slice(at_value + 10, (value_end.otherwise(0) - at_value - 10).clip(0))
    frame = (
        pl.LazyFrame({"line": lines})
        .with_columns(
            at_metric=line.str.find(',"metric":"', literal=True),
            at_value=line.str.find('},"value":', literal=True),
            at_type=line.str.find(',"type":"', literal=True),
            nbytes=line.str.len_bytes().cast(pl.Int64),
            raw=line.cast(pl.Binary),
        )
        .select(
            "nbytes",
            ok=(
                line.str.starts_with(_HEAD)
                & (at_value >= at_metric + 11)
                & (typed | (at_type.is_null() & ends))
            ).fill_null(False),
            ts=raw.bin.slice(len(_HEAD), (at_metric - len(_HEAD)).clip(0)),
            key=raw.bin.slice(at_metric + 11, (at_value - at_metric - 11).clip(0)),
            type=pl.when(typed)
            .then(raw.bin.slice(at_type + 9))
            .otherwise(b'gauge"}')
            .replace_strict(_TYPE_TEXTS, range(len(TYPES)), default=-1, return_dtype=pl.Int64),
            value=value.cast(pl.String),
        )
        .with_columns(
            number=(pl.col("value").str.contains(_NUMBER) & (pl.col("value") != "-0")).fill_null(
                False
            ),  # "-0": orjson reads the int 0, polars -0.0
            gap=(pl.col("value") == "null").fill_null(False),
            v=pl.col("value").cast(pl.Float64, strict=False),
        )
    )
    return frame.collect()


def _timestamps(column: pl.Series, window: TimeWindow | None) -> NDArray[np.float64]:
    """Each row's timestamp, NaN where the line reader is to say what is wrong with it."""
    index, texts = codes(column)
    seconds = np.array([_ts(text, window) for text in texts], dtype=np.float64)
    return seconds[index]


def _ts(text: str | None, window: TimeWindow | None) -> float:
    """A ``ts`` field's JSON text read as the line reader reads it, or NaN: not text without
    escapes or a plain number, not a time, outside ``window``."""
    raw: object
    if text is None:
        return math.nan
    if len(text) >= 2 and text[0] == text[-1] == '"' and not _UNSAFE.search(text, 1, len(text) - 1):
        raw = text[1:-1]  # no escapes: the JSON text is the string
    elif _NUMBER_RE.fullmatch(text):
        try:
            raw = orjson.loads(text)
        except orjson.JSONDecodeError:
            return math.nan
    else:
        return math.nan
    try:
        seconds = parse_ts(raw)
    except Exception:  # whatever it is, the line reader says it (or raises it) in its turn
        return math.nan
    return seconds if window is None or window.contains(seconds) else math.nan
