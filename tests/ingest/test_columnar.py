"""The columnar JSONL reader gives what the line reader gives: the same points in the same
order, the same quarantine records, whatever the lines and wherever the chunks cut them; and
it reads the lines of the usual shape itself (they do not all go to the line reader)."""

from __future__ import annotations

import gzip
import json
import random
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from noc_assistant.errors import ReplayFormatError
from noc_assistant.ingest import Point, Quarantine, TimeWindow, columnar, read_replay
from noc_assistant.ingest.columnar import SeriesTable, read_jsonl_columns, read_jsonl_points
from noc_assistant.ingest.point import METRIC_TYPES
from noc_assistant.ingest.replay import MAX_LINE_BYTES
from noc_assistant.simulate import ScenarioConfig, build_scenario, write_scenario

NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z: the wall clock of WINDOW
WINDOW = TimeWindow(clock=lambda: NOW)
T = '"2026-11-29T10:00:00Z"'
L = '{"instance":"amf-1","nf":"amf"}'

Key = tuple[str, str, tuple[tuple[str, str], ...], str, str]


def _key(p: Point) -> Key:
    """A point with its numbers as their repr: -0.0 is not 0.0, 1 is not 1.0."""
    return (repr(p.ts), p.metric, p.labels, repr(p.value), p.type)


def _line(
    ts: str = T, metric: str = '"up"', labels: str = L, value: str = "1.0", type_: str = "gauge"
) -> bytes:
    """A line of the shape the columnar reader reads itself (with the given JSON texts)."""
    tail = f',"type":"{type_}"' if type_ else ""
    return f'{{"ts":{ts},"metric":{metric},"labels":{labels},"value":{value}{tail}}}'.encode()


def _long(size: int) -> bytes:
    """A good line of ``size`` bytes (a long label)."""
    line = _line(labels='{"a":"' + "x" * (size - len(_line(labels='{"a":""}'))) + '"}')
    assert len(line) == size
    return line


@pytest.fixture
def sent_on(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The numbers of the lines the columnar reader sends to the line reader."""
    numbers: list[int] = []
    parse_one = columnar._parse_one

    def spy(lineno: int, *args: object) -> Point | None:
        numbers.append(lineno)
        return parse_one(lineno, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(columnar, "_parse_one", spy)
    return numbers


def _compare(
    path: Path, window: TimeWindow | None = WINDOW, chunk_bytes: int = columnar.CHUNK_BYTES
) -> tuple[list[Key], Quarantine]:
    """Both readers' points and quarantine, asserted equal; the columnar reader's."""
    q_line, q_col = Quarantine(keep=10**6), Quarantine(keep=10**6)
    by_line = [_key(p) for p in read_replay(path, q_line, window, columnar=False)]
    by_col = [_key(p) for p in read_jsonl_points(path, q_col, window, chunk_bytes=chunk_bytes)]
    assert by_col == by_line
    assert q_col.records == q_line.records
    assert q_col.count == q_line.count
    return by_col, q_col


# (line, whether the columnar reader reads it itself)
ODD: list[tuple[bytes, bool]] = [
    (_line(), True),
    (_line(value="0", type_="counter"), True),
    (_line(value="-0.0"), True),
    (_line(value="-0.0", type_="counter"), True),
    (_line(value="-0"), False),  # orjson reads the int 0, polars -0.0
    (_line(value="1e29"), True),
    (_line(value="9.9e29", type_="counter"), True),
    (_line(value="-1e29"), True),
    (_line(value="null", type_="counter"), True),
    (_line(value="123456789012345678"), True),
    (_line(value="1234567890123456789"), False),
    (_line(value="3.141592653589793238462643383279", type_="histogram_bucket"), True),
    (_line(value="1E-5"), True),
    (_line(value="2.5e+3", type_="histogram_sum"), True),
    (_line(value="-2.5", type_="histogram_sum"), True),
    (_line(value="4.9e-324"), True),
    (_line(value="1e30"), False),
    (_line(value="-1e30"), False),
    (_line(value="1.7e308"), False),
    (_line(value="1e400"), False),
    (_line(value="-1", type_="counter"), False),
    (_line(value="-3", type_="histogram_count"), False),
    (_line(value='"1.5"'), False),
    (_line(value='" 2 "'), False),
    (_line(value='"x"'), False),
    (_line(value='"nan"'), False),
    (_line(value='""'), False),
    (_line(value="true"), False),
    (_line(value="NaN"), False),
    (_line(value="Infinity"), False),
    (_line(value="-Infinity"), False),
    (_line(value="{}"), False),
    (_line(value="01"), False),
    (_line(value="1."), False),
    (_line(value=".5"), False),
    (_line(value="+1"), False),
    (_line(ts="1795946400"), True),
    (_line(ts="1795946400.25"), True),
    (_line(ts="1.7959464e9"), True),
    (_line(ts='"2026-11-29T10:00:00.5Z"'), True),
    (_line(ts='"2026-11-29T10:00:00.123456Z"'), True),
    (_line(ts='"2026-11-29T10:00:00.1234567Z"'), True),
    (_line(ts='"2026-11-29T10:00:00+00:00"'), True),
    (_line(ts='"2026-11-29T11:00:00+01:00"'), True),
    (_line(ts='"2026-11-29 10:00:00Z"'), True),
    (_line(ts='"1795946400"'), True),
    (_line(ts='" 1795946400 "'), True),
    (_line(ts='"2026-11-29T10:00:00"'), False),  # no time zone
    (_line(ts='"yesterday"'), False),
    (_line(ts='"nan"'), False),
    (_line(ts='"inf"'), False),
    (_line(ts="1e20"), False),
    (_line(ts="0"), False),
    (_line(ts="-5"), False),
    (_line(ts='"2027-06-01T00:00:00Z"'), False),
    (_line(ts='"1999-12-31T23:59:59Z"'), False),
    (_line(ts='"2026-11-29T10:00:00\\u005a"'), False),  # an escape: read, but not here
    (_line(ts='"\t1795946400"'), False),  # a raw tab: not JSON
    (_line(ts="null"), False),
    (_line(ts="true"), False),
    (_line(ts="[1795946400]"), False),
    (_line(ts="99999999999999999999999"), False),
    (_line(metric='"vllm:num_requests_running"'), True),
    (_line(metric='"bad metric"'), False),
    (_line(metric='"\\u0075p"'), False),
    (_line(metric='""'), False),
    (_line(metric="5"), False),
    (_line(metric="null"), False),
    (_line(labels="{}"), True),
    (_line(labels='{"z":"1","a":"2"}'), True),
    (_line(labels='{"site":"Zürich","x":"日本"}'), True),
    (_line(labels='{"site":"Z\\u00fcrich"}'), True),
    (_line(labels='{ "a" : "b" , "c":"d" }'), True),
    (_line(labels='{"value":"x"}'), True),
    (_line(labels='{"x":"y","type":"z"}'), False),  # ',"type":"' before the value's
    (_line(labels='{"a":"1","a":"2"}'), True),
    (_line(labels='{"a":"}"}'), True),  # a brace in a label: the first "}," ends it
    (_line(labels='{"a":"},\\"value\\":7,\\"x\\":\\""}'), True),
    (_line(labels='{"a":{"b":"c"},"value":"x"}'), False),  # ends at the nested object's
    (_line(labels='{"a":"x\\u0000y"}'), False),
    (_line(labels='{"a":"x\\ny"}'), False),
    (_line(labels='{"a":"\\ud800"}'), False),
    (_line(labels='{"a":1}'), False),
    (_line(labels='{"a":null}'), False),
    (_line(labels='{"a":["x"]}'), False),
    (_line(labels='{"a":{"b":"c"}}'), False),
    (_line(labels="null"), False),
    (_line(labels='"amf-1"'), False),
    (_line(type_=""), True),  # no type: a gauge
    (_line(type_="histogram_count", value="5"), True),
    (_line(type_="summary"), False),
    (_line(type_="Gauge"), False),
    (_line().replace(b'"type":"gauge"', b'"type":null'), False),
    (_line().replace(b'"type":"gauge"', b'"type":5'), False),
    (_line()[:-1] + b',"extra":1}', False),
    (_line().replace(b'"metric"', b'"x":1,"metric"'), False),
    (_line()[:-1] + b',"value":2}', False),  # repeated keys: the last one counts
    (_line()[:-1] + b',"type":"counter"}', False),
    (_line().replace(b'{"ts":', b'{"ts":"2000-01-01T00:00:00Z","ts":'), False),
    (_line().replace(b'"metric":"up"', b'"metric":"up","metric":"down"'), False),
    (_line().replace(b',"value"', b',"labels":{"b":"c"},"value"'), False),
    (_line().replace(b',"value":1.0', b"").replace(b'"labels"', b'"value":1.0,"labels"'), False),
    (
        json.dumps({"ts": 1795946400, "metric": "up", "labels": {"a": "b"}, "value": 2}).encode(),
        False,
    ),
    (b" " + _line(), False),
    (_line().replace(b'{"ts":', b'{"TS":'), False),  # no "ts"
    (_line().replace(b'{"ts":', b'["ts",'), False),
    (_line() + b" ", False),
    (_line() + b"\t", False),
    (_line() + b"\r", True),  # a CRLF line ending
    (_line().replace(b',"metric"', b',\r"metric"'), False),
    (_line()[:-1], False),
    (_line()[:-2] + b"}}", False),
    (_line() + b"}", False),
    (_line() + b" x", False),
    (_line()[:-1] + b",}", False),
    (_line().replace(b"amf-1", b"amf-\xff"), False),  # not UTF-8
    (_line().replace(b"amf-1", b"caf\xe9"), False),
    (_line().replace(b"amf-1", b"amf\x00-1"), False),  # a raw NUL: not JSON
    (b"\xef\xbb\xbf" + _line(), False),  # a byte order mark past the first line
    (b"", False),
    (b"   ", False),
    (b"\t", False),
    (b"\x0c", False),
    (b"\r", False),
    (b"{not json", False),
    (b"[]", False),
    (b"[1,2]", False),
    (b'"string"', False),
    (b"42", False),
    (b"null", False),
    (b"{}", False),
    (b'{"ts":1795946400}', False),
    (b'{"ts":1795946400,"metric":"up"}', False),
    (b'{"metric":"up","value":1}', False),
    (b"[" * 2000 + b"]" * 2000, False),
    (b'{"ts":1795946400,"metric":"up","value":1}', False),  # no labels: read, but not here
    (_long(MAX_LINE_BYTES), True),
    (_long(MAX_LINE_BYTES + 1), False),
    (_long(3 * MAX_LINE_BYTES + 5), False),
    (_line(value="2"), True),
]


def _odd_file(tmp_path: Path, bom: bool = True, newline_at_end: bool = False) -> Path:
    """Every odd line twice, apart (a bad text is quarantined each time it comes), then a
    good line without a newline; a byte order mark in front of the first."""
    lines = [line for line, _ in ODD] + [line for line, _ in ODD][::-1] + [_line(value="7")]
    path = tmp_path / "odd.jsonl"
    data = (b"\xef\xbb\xbf" if bom else b"") + b"\n".join(lines)
    path.write_bytes(data + (b"\n" if newline_at_end else b""))
    return path


def test_the_odd_lines_are_what_they_are_meant_to_be() -> None:
    """Each long line is as long as it says (the test of the limit is a test of it)."""
    lengths = [len(line) for line, _ in ODD if len(line) > 100_000]
    assert lengths[:2] == [MAX_LINE_BYTES, MAX_LINE_BYTES + 1]
    assert len(lengths) == 3 and lengths[2] > 3 * MAX_LINE_BYTES > 3 * 1000


@pytest.mark.parametrize("chunk_bytes", [7, 300, 65_536, columnar.CHUNK_BYTES])
def test_odd_lines_read_alike_wherever_the_chunks_cut(
    tmp_path: Path, sent_on: list[int], chunk_bytes: int
) -> None:
    path = _odd_file(tmp_path)
    points, q = _compare(path, chunk_bytes=chunk_bytes)
    n = len(ODD)
    fast = [i + 1 for i, (_, f) in enumerate(ODD) if f]
    fast += [2 * n - i for i, (_, f) in enumerate(ODD) if f] + [2 * n + 1]
    fast = [i for i in fast if i != 1]  # the first line: a byte order mark in front
    assert sorted(set(range(1, 2 * n + 2)) - set(sent_on)) == sorted(fast)
    assert sorted(sent_on) == sorted(set(sent_on))  # each line sent on once
    assert len(points) > 2 * sum(f for _, f in ODD)  # some the line reader reads
    reasons = " ".join(r.reason for r in q.records)
    for why in ("invalid JSON", "not a measurement", "is negative", "outside", "RFC 3339"):
        assert why in reasons
    assert "line longer than" in reasons and "labels must be" in reasons


@pytest.mark.parametrize("window", [WINDOW, None])
def test_odd_lines_read_alike_in_any_window(tmp_path: Path, window: TimeWindow | None) -> None:
    _compare(_odd_file(tmp_path, bom=False, newline_at_end=True), window, chunk_bytes=4096)


def test_the_quarantine_files_are_the_same(tmp_path: Path) -> None:
    path = _odd_file(tmp_path)
    q_line = Quarantine(path=tmp_path / "line.jsonl")
    q_col = Quarantine(path=tmp_path / "col.jsonl")
    list(read_replay(path, q_line, WINDOW, columnar=False))
    list(read_replay(path, q_col, WINDOW))
    written = (tmp_path / "col.jsonl").read_bytes()
    assert written == (tmp_path / "line.jsonl").read_bytes()
    assert written.count(b"\n") == q_col.count > 100


@pytest.fixture(scope="module")
def simulated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    config = ScenarioConfig(days=0.05, seed=23, defects=True, scrape_phases=True)
    return write_scenario(build_scenario(config), tmp_path_factory.mktemp("sim"))["telemetry"]


@pytest.mark.parametrize("chunk_bytes", [50_000, columnar.CHUNK_BYTES])
def test_a_simulated_file_reads_alike_and_all_here(
    simulated: Path, sent_on: list[int], chunk_bytes: int
) -> None:
    points, q = _compare(simulated, window=None, chunk_bytes=chunk_bytes)
    assert len(points) > 50_000 and q.count == 0
    assert any(p[3] == "None" for p in points)  # gaps
    assert sent_on == []


def test_a_simulated_file_in_the_replay_window(simulated: Path, sent_on: list[int]) -> None:
    """With the wall-clock window read_replay uses (the simulated day is in it)."""
    q_line, q_col = Quarantine(), Quarantine()
    by_line = [_key(p) for p in read_replay(simulated, q_line, columnar=False)]
    assert [_key(p) for p in read_replay(simulated, q_col)] == by_line
    assert q_col.count == q_line.count == 0 and sent_on == []


def test_columns_index_one_series_table(tmp_path: Path) -> None:
    """The columns hold what the points hold; NaN in ``value`` is a gap; the table numbers
    the series in the order the file first has them, whatever the chunks; a second read with
    the same table numbers them alike."""
    path = _odd_file(tmp_path)
    table = SeriesTable()
    chunks = list(read_jsonl_columns(path, Quarantine(), WINDOW, chunk_bytes=500, table=table))
    assert len(chunks) > 10
    points = [p for c in chunks for p in c.points()]
    assert [_key(p) for p in points] == _compare(path)[0]
    for chunk in chunks:
        assert chunk.ts.dtype == np.float64 and chunk.value.dtype == np.float64
        assert chunk.series.dtype == np.int32 and chunk.table is table
    series = np.concatenate([c.series for c in chunks])
    value = np.concatenate([c.value for c in chunks])
    assert [table[s] for s in series.tolist()] == [(p.metric, p.labels, p.type) for p in points]
    assert np.isnan(value).tolist() == [p.value is None for p in points]
    first_met = list(dict.fromkeys((p.metric, p.labels, p.type) for p in points))
    assert table.keys == first_met  # numbered as first met, quarantined lines not met
    again = list(read_jsonl_columns(path, Quarantine(), WINDOW, table=table))
    assert table.keys == first_met
    assert np.concatenate([c.series for c in again]).tolist() == series.tolist()


def test_gzip_and_the_switch_keep_the_line_reader(tmp_path: Path, sent_on: list[int]) -> None:
    plain = _odd_file(tmp_path)
    packed = tmp_path / "odd.jsonl.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    q_plain, q_packed = Quarantine(keep=10**6), Quarantine(keep=10**6)
    by_plain = [_key(p) for p in read_replay(plain, q_plain, WINDOW, columnar=False)]
    assert sent_on == []  # the line reader does not go through the columnar one
    assert [_key(p) for p in read_replay(packed, q_packed, WINDOW)] == by_plain
    assert sent_on == []
    assert [(r.line, r.reason) for r in q_packed.records] == [
        (r.line, r.reason) for r in q_plain.records
    ]


def test_empty_and_blank_files(tmp_path: Path) -> None:
    for name, data in [("empty", b""), ("blank", b"\n\n  \n"), ("bom", b"\xef\xbb\xbf")]:
        path = tmp_path / f"{name}.jsonl"
        path.write_bytes(data)
        assert _compare(path, chunk_bytes=2) == ([], Quarantine(keep=10**6))


def _lines_of(n: int) -> Iterator[bytes]:
    for i in range(n):
        yield _line(ts=str(1_795_946_400 + i), value=str(i))


def test_a_file_that_cannot_be_read_past_a_line_names_it(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"\n".join(_lines_of(100)) + b"\n")

    class Failing:
        """A file whose reads fail after 2,000 bytes."""

        def __init__(self) -> None:
            self.fh = path.open("rb")

        def read(self, size: int) -> bytes:
            if self.fh.tell() >= 2000:
                raise OSError("device error")
            return self.fh.read(size)

    blocks = columnar._Blocks(Failing(), str(path), 1000)  # type: ignore[arg-type]
    got = []
    with pytest.raises(ReplayFormatError, match="cannot read past line") as err:
        for data in blocks:
            assert data is not None
            got.append(data)
            blocks.lines += data.count(b"\n")
    assert err.value.line == blocks.lines + 1 > 1
    assert b"".join(got) == path.read_bytes()[: len(b"".join(got))]


def test_a_line_polars_splits_otherwise_goes_to_the_line_reader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sent_on: list[int]
) -> None:
    """Should polars' splitter give a line other than the file holds (one byte short, as when
    it drops a carriage return), the line reader reads that line from the file."""
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"\n".join([_line(), _line(labels='{"a":"bc"}'), _line()]) + b"\n")
    split = columnar._split_lines

    def short(data: bytes, exact: bool) -> object:
        return split(data.replace(b'"bc"', b'"b"'), exact)

    monkeypatch.setattr(columnar, "_split_lines", short)
    amf = (("instance", "amf-1"), ("nf", "amf"))
    assert [labels for _, _, labels, _, _ in _compare(path)[0]] == [amf, (("a", "bc"),), amf]
    assert sent_on == [2]


def test_a_type_that_is_not_text_is_quarantined_by_both_readers(tmp_path: Path) -> None:
    """``"type": []`` (unhashable) is a bad line like any other: quarantined with its number,
    the lines around it kept, by either reader."""
    path = tmp_path / "t.jsonl"
    bad = _line().replace(b'"type":"gauge"', b'"type":[]')
    path.write_bytes(_line() + b"\n" + bad + b"\n" + _line() + b"\n")
    for columnar_ in (False, True):
        q = Quarantine()
        points = list(read_replay(path, q, WINDOW, columnar=columnar_))
        assert len(points) == 2
        assert [(r.line, r.reason) for r in q.records] == [
            (2, f"type [] is not one of {sorted(METRIC_TYPES)}")
        ]


def _mutants(n: int, seed: int) -> Iterator[bytes]:
    """Good lines with a few bytes changed: deleted, doubled, or replaced by one that means
    something to JSON, to a number or to a time."""
    rng = random.Random(seed)
    alphabet = b'{}[]":,.-+eE0123456789 \t\r\\nulltrueZT:x\xc3\xa9\x00\xff'
    bases = [line for line, fast in ODD if fast and len(line) < 1000] + [
        _line(ts="1795946400.5", value="-12.25e-3", type_="histogram_sum"),
        _line(labels='{"instance":"upf-2","dnn":"internet"}', value="null", type_=""),
    ]
    for _ in range(n):
        line = bytearray(rng.choice(bases))
        for _ in range(rng.randint(1, 3)):
            i = rng.randrange(len(line))
            what = rng.randrange(3)
            if what == 0:
                del line[i]
            elif what == 1:
                line.insert(i, line[i])
            else:
                line[i] = rng.choice(alphabet)
        yield bytes(line).replace(b"\n", b"")


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_damaged_lines_read_alike(tmp_path: Path, seed: int) -> None:
    path = tmp_path / "damaged.jsonl"
    path.write_bytes(b"\n".join(_mutants(3000, seed)) + b"\n")
    for chunk_bytes in (997, columnar.CHUNK_BYTES):
        points, q = _compare(path, chunk_bytes=chunk_bytes)
        assert len(points) > 200 and q.count > 1000


def test_importing_the_reader_does_not_import_polars() -> None:
    """polars (a large native library and a thread pool) is loaded when a file is read."""
    code = (
        "import sys, noc_assistant.ingest.columnar, noc_assistant.cli; "
        "print('polars' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
