"""The series of the lines of a columnar chunk (:mod:`noc_assistant.ingest.columnar`), from
their metric-and-labels text and their type.

Each distinct text is read once, by what the line reader uses (``_metric_ok``, and
``_label_key`` on what orjson makes of the labels). :class:`PairMemo` keeps what every
(text, type) pair of a file read as, across its chunks, and matches a chunk's rows to the
pairs met before in polars (a join). A chunk of series met before then costs no Python per
series, where a large network's chunk holds a line of nearly every series: 10⁵ series at
one line each a scrape put about 85,000 distinct series in each 16 MiB chunk, and reading
each chunk's texts again (orjson and a cache of 65,536 texts, cycled through in file
order, so missing every time) made the reader the pipeline's bottleneck (about 15 MB/s).
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import orjson
from numpy.typing import NDArray

from noc_assistant.ingest.point import METRIC_TYPES
from noc_assistant.ingest.replay import _COUNTS_UP, _label_key, _metric_ok

if TYPE_CHECKING:
    import polars as pl

__all__ = ["TYPES", "Labels", "PairMemo", "SeriesKey", "codes", "utf8"]

Labels = tuple[tuple[str, str], ...]

#: the metric types, in the order a chunk's ``type`` column numbers them
TYPES = sorted(METRIC_TYPES)


class SeriesKey(NamedTuple):
    """What a point carries besides its time and value."""

    metric: str
    labels: Labels
    type: str


def utf8(raw: bytes | None) -> str | None:
    """``raw`` as text, None if it is not UTF-8."""
    try:
        return None if raw is None else raw.decode("utf-8")
    except UnicodeDecodeError:
        return None


def codes(column: pl.Series) -> tuple[NDArray[np.int64], list[str | None]]:
    """Each row's index into the column's distinct byte strings (a null read as empty), and
    those as text (None: not UTF-8)."""
    import polars as pl

    filled = column.fill_null(b"")
    texts = filled.unique()
    index = filled.replace_strict(texts, np.arange(len(texts)), return_dtype=pl.Int64)
    return index.to_numpy().astype(np.int64), [utf8(text) for text in texts.to_list()]


class _Pairs(NamedTuple):
    """The distinct (metric and labels, type) texts of some rows: ``keys``, the series each
    reads as (None: the line reader is to say what is wrong with it), and ``of``, each row's
    index in ``keys``."""

    keys: list[SeriesKey | None]
    of: NDArray[np.int64]


def _pairs(keys: pl.Series, types: pl.Series) -> _Pairs:
    """The series of each row, from its distinct metric and labels text and its type."""
    key_codes, key_texts = codes(keys)
    kinds = len(TYPES) + 1  # and none of them
    both = key_codes * kinds + types.to_numpy() + 1
    if len(key_texts) * kinds <= 4 * len(both) + 4096:  # a table of every pair
        present = np.zeros(len(key_texts) * kinds, dtype=bool)
        present[both] = True
        pairs = np.flatnonzero(present)
        index = np.zeros(len(present), dtype=np.int64)
        index[pairs] = np.arange(len(pairs))
        of = index[both]
    else:
        pairs, of = np.unique(both, return_inverse=True)
    read: list[SeriesKey | None] = []
    for pair in pairs.tolist():
        key, kind = _series_key(key_texts[pair // kinds]), pair % kinds - 1
        read.append(None if key is None or kind < 0 else SeriesKey(*key, TYPES[kind]))
    return _Pairs(read, of.reshape(-1).astype(np.int64))


@lru_cache(maxsize=65536)
def _series_key(text: str | None) -> tuple[str, Labels] | None:
    """Metric and sorted labels from ``metric","labels":{...`` (the object less its closing
    brace), as the line reader makes them, or None where it would refuse them."""
    if text is None:
        return None
    metric, sep, labels = text.partition('","labels":')
    if not sep or not _metric_ok(metric):  # a metric name needs no escapes
        return None
    try:
        obj = orjson.loads(labels + "}")
        if not isinstance(obj, dict):
            return None
        return metric, _label_key(tuple(obj.items()))
    except Exception:  # not JSON, not text → text, a control character: the line reader's
        return None


class PairMemo:
    """The (metric and labels text, type) pairs one reader has met, over a file's chunks.

    Pair ``r`` reads as ``keys[r]`` (None: the line reader judges its lines), is ``known``
    (not None) and ``up`` (a type that only counts up), and has ``number[r]``, its series in
    the reader's table, once a row the reader vouches for has had it (-1 before: a pair whose
    rows all go to the line reader is not numbered)."""

    def __init__(self) -> None:
        self.keys: list[SeriesKey | None] = []
        self.known = np.zeros(0, dtype=bool)
        self.up = np.zeros(0, dtype=bool)
        self.number = np.zeros(0, dtype=np.int64)
        self._frame: pl.DataFrame | None = None  # key (bytes), type, ref: each pair's text

    def refs(self, keys: pl.Series, types: pl.Series) -> NDArray[np.int64]:
        """Each row's pair (``keys``: its metric and labels text, null read as empty;
        ``types``: its type's index in :data:`TYPES`, -1 for none), the pairs new to the memo
        read and added."""
        import polars as pl

        rows = pl.DataFrame({"key": keys.fill_null(b""), "type": types.cast(pl.Int64)})
        if self._frame is None:
            ref = np.full(len(rows), -1, dtype=np.int64)
        else:
            met = rows.join(self._frame, on=["key", "type"], how="left", maintain_order="left")
            ref = met["ref"].fill_null(-1).to_numpy().astype(np.int64)
        new = np.flatnonzero(ref < 0)
        if len(new):
            fresh = rows[new]
            pairs = _pairs(fresh["key"], fresh["type"])
            base = len(self.keys)
            ref[new] = base + pairs.of
            first = np.unique(pairs.of, return_index=True)[1]  # a row of each new pair
            added = fresh[first].with_columns(
                ref=pl.Series(np.arange(base, base + len(first), dtype=np.int64))
            )
            self._frame = added if self._frame is None else pl.concat([self._frame, added])
            self.keys += pairs.keys
            known = [key is not None for key in pairs.keys]
            up = [key is not None and key.type in _COUNTS_UP for key in pairs.keys]
            self.known = np.concatenate([self.known, np.array(known, dtype=bool)])
            self.up = np.concatenate([self.up, np.array(up, dtype=bool)])
            self.number = np.concatenate([self.number, np.full(len(known), -1, dtype=np.int64)])
        return ref
