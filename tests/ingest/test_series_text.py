"""The columnar reader reads each series text of a file once (:class:`PairMemo`), and numbers
its series as the line reader meets them, whichever chunk and line first vouch for them."""

from __future__ import annotations

from pathlib import Path

import pytest

from noc_assistant.ingest import Quarantine, read_replay, series_text
from noc_assistant.ingest.columnar import SeriesTable, read_jsonl_columns, read_jsonl_points

LINE = '{"ts":"2026-11-29T10:%02d:00Z","metric":"%s","labels":%s,"value":%s,"type":"%s"}\n'


def _write(path: Path, ticks: int, series: int) -> None:
    """``ticks`` scrapes of ``series`` counters; series 3's first two values negative (the
    line reader refuses them), series 5's labels written in the other order from tick 2 on
    (the same series), and each tick one line whose value the line reader reads itself."""
    with path.open("w") as fh:
        for t in range(ticks):
            for s in range(series):
                labels = f'{{"instance":"amf-{s}","nf":"amf"}}'
                if s == 5 and t >= 2:
                    labels = f'{{"nf":"amf","instance":"amf-{s}"}}'
                value = "-1" if s == 3 and t < 2 else ("-0" if s == 7 else f"{t * 10 + s}.0")
                fh.write(LINE % (t, "reqs", labels, value, "counter"))


def test_series_read_alike_across_chunks(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    _write(path, ticks=12, series=40)
    q_line, q_col = Quarantine(keep=10**6), Quarantine(keep=10**6)
    by_line = list(read_replay(path, q_line, None, columnar=False))
    by_col = list(read_jsonl_points(path, q_col, None, chunk_bytes=700))
    assert by_col == by_line
    assert q_col.records == q_line.records and q_col.count == 2
    table = SeriesTable()
    for _ in read_jsonl_columns(path, Quarantine(), None, chunk_bytes=700, table=table):
        pass
    first_met = list(dict.fromkeys((p.metric, p.labels, p.type) for p in by_line))
    assert [tuple(k) for k in table.keys] == first_met
    assert len(table) == 40  # series 5's two spellings are one series


def test_each_series_text_is_read_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "t.jsonl"
    _write(path, ticks=20, series=30)
    read: list[str | None] = []
    key_of = series_text._series_key

    def counted(text: str | None) -> tuple[str, series_text.Labels] | None:
        read.append(text)
        return key_of(text)

    monkeypatch.setattr(series_text, "_series_key", counted)
    chunks = list(read_jsonl_columns(path, Quarantine(), None, chunk_bytes=1500))
    assert len(chunks) > 15
    assert len(read) == len(set(read)) == 31  # 30 series, one written two ways
