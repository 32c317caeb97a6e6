"""A corpus of bad input files, generated in a tmp dir, through every CLI command that reads
files (``noc eval run``: replay JSONL/CSV/.gz, labels, inventory; ``noc eval nab``: a NAB
folder; ``noc pm convert``: PM XML): each exits 0 (what could be read was, the rest
quarantined) or 2 (the file and line named), never 1, never with a traceback, never hanging.

Each command runs in this process (``noc_assistant.cli.run``, as ``noc`` does, under an alarm
that fails a hang); a few run as the real ``noc`` executable too, for its exit status.
"""

from __future__ import annotations

import gzip
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

import pytest

from noc_assistant.cli import run
from noc_assistant.cli._console import console, err_console

TIMEOUT_S = 30
NOW = int(time.time()) // 60 * 60


@dataclass(frozen=True)
class Case:
    name: str
    argv: list[str]


def _sample(ts: object, value: object = 1, instance: object = "amf-1", **extra: object) -> bytes:
    obj = {"ts": ts, "metric": "up", "labels": {"instance": instance}, "value": value, **extra}
    return json.dumps(obj).encode() + b"\n"


def _good_lines(n: int = 5) -> bytes:
    return b"".join(_sample(NOW - 600 + 60 * i) for i in range(n))


def _csv_good(n: int = 3) -> str:
    return "".join(f"{NOW - 600 + 60 * i},up,amf-1,1\n" for i in range(n))


_CSV_HEADER = "ts,metric,instance,value\n"

_REPLAYS: dict[str, tuple[str, bytes]] = {
    "empty": ("jsonl", b""),
    "blank-lines": ("jsonl", b"\n\n   \n"),
    "bom": ("jsonl", b"\xef\xbb\xbf" + _good_lines()),
    "latin-1": ("jsonl", _good_lines() + b'{"ts": 1, "metric": "caf\xe9"}\n'),
    "binary": ("jsonl", bytes(random.Random(1).randrange(256) for _ in range(4096))),
    "nul-bytes": ("jsonl", b"\x00" * 100 + b"\n" + _good_lines()),
    "truncated-json": ("jsonl", _good_lines() + b'{"ts": 1795946400, "metric": "up", "val'),
    "array": ("jsonl", b"[1, 2, 3]\n" + _good_lines()),
    "ts-1e20": ("jsonl", _sample(1e20) + _good_lines()),
    "ts-minus-1e20": ("jsonl", _sample(-1e20) + _good_lines()),
    "ts-huge-int": ("jsonl", b'{"ts": ' + b"9" * 400 + b', "metric": "up", "value": 1}\n'),
    "ts-year-9999": ("jsonl", _sample("9999-12-31T23:59:59Z") + _good_lines()),
    "ts-year-1": ("jsonl", _sample("0001-01-01T00:00:00+14:00") + _good_lines()),
    "ts-1970": ("jsonl", _sample(0) + _good_lines()),
    "ts-nan-token": ("jsonl", b'{"ts": NaN, "metric": "up", "value": 1}\n' + _good_lines()),
    "ts-infinity-token": ("jsonl", b'{"ts": Infinity, "metric": "up", "value": 1}\n'),
    "ts-only-future": ("jsonl", b"".join(_sample(NOW + 10 * 365 * 86400 + i) for i in range(3))),
    "value-1e400": ("jsonl", _sample(NOW, b"1e400".decode()) + _good_lines()),
    "value-bool": ("jsonl", _sample(NOW, True) + _good_lines()),
    "nul-in-instance": ("jsonl", _sample(NOW, 1, "amf\x00-1") + _good_lines()),
    "newline-in-instance": ("jsonl", _sample(NOW, 1, "amf\n-1") + _good_lines()),
    "bad-metric": ("jsonl", b'{"ts": 1795946400, "metric": "a b", "value": 1}\n' + _good_lines()),
    "deep-nesting": ("jsonl", b"[" * 100_000 + b"]" * 100_000 + b"\n" + _good_lines()),
    "deep-nesting-nan": ("jsonl", b'{"x": NaN, "y": ' + b"[" * 100_000 + b"\n"),
    "long-line": ("jsonl", b'{"ts": 1, "pad": "' + b"x" * 3_000_000 + b'"}\n' + _good_lines()),
    "no-newline-at-all": ("jsonl", b"x" * 2_500_000),
    "labels-not-object": (
        "jsonl",
        b'{"ts": 1795946400, "metric": "up", "labels": [1], "value": 1}\n',
    ),
    "utf-16": ("jsonl", _good_lines().decode().encode("utf-16")),
    "crlf": ("jsonl", _good_lines().replace(b"\n", b"\r\n")),
    "duplicate-keys": ("jsonl", b'{"ts": 1, "ts": "x", "metric": "up", "value": 1}\n'),
    "csv-empty": ("csv", b""),
    "csv-header-only": ("csv", _CSV_HEADER.encode()),
    "csv-wrong-header": ("csv", b"time,name,value\n1,2,3\n"),
    "csv-bom": ("csv", b"\xef\xbb\xbf" + (_CSV_HEADER + _csv_good()).encode()),
    "csv-latin-1": ("csv", (_CSV_HEADER + _csv_good()).encode() + b"1795946400,up,caf\xe9,1\n"),
    "csv-latin-1-header": ("csv", b"ts,metric,instance,value,caf\xe9\n"),
    "csv-binary": ("csv", bytes(random.Random(2).randrange(256) for _ in range(4096))),
    "csv-binary-after-header": (
        "csv",
        _CSV_HEADER.encode() + bytes(random.Random(3).randrange(256) for _ in range(4096)),
    ),
    "csv-field-200k": (
        "csv",
        (_CSV_HEADER + f"{NOW},up,{'a' * 200_000},1\n" + _csv_good()).encode(),
    ),
    "csv-quoted-field-200k": (
        "csv",
        (_CSV_HEADER + f'{NOW},up,"{"a" * 200_000}",1\n' + _csv_good()).encode(),
    ),
    "csv-nul-instance": ("csv", (_CSV_HEADER + f"{NOW},up,amf\x00-1,1\n" + _csv_good()).encode()),
    "csv-open-quote": ("csv", (_CSV_HEADER + _csv_good() + f'{NOW},up,"amf-1,1\n').encode()),
    "csv-ts-1e20": ("csv", (_CSV_HEADER + "1e20,up,amf-1,1\n" + _csv_good()).encode()),
    "csv-ts-nan": ("csv", (_CSV_HEADER + "nan,up,amf-1,1\ninf,up,amf-1,1\n").encode()),
    "csv-value-1e400": ("csv", (_CSV_HEADER + f"{NOW},up,amf-1,1e400\n" + _csv_good()).encode()),
    "csv-extra-columns": ("csv", (_CSV_HEADER + f"{NOW},up,amf-1,1,2,3\n" + _csv_good()).encode()),
    "csv-repeated-label": ("csv", b"ts,metric,instance,value,nf,label=nf\n"),
    "csv-10000-columns": (
        "csv",
        (
            ",".join(["ts", "metric", "instance", "value"] + [f"l{i}" for i in range(10_000)])
            + "\n"
        ).encode(),
    ),
    "csv-nul-header": ("csv", b"ts,metric,instance,value\x00\n"),
}


def _gz_cases(tmp: Path) -> Iterator[tuple[str, Path]]:
    good = gzip.compress(_good_lines(50))
    for name, data in {
        "gz-truncated": good[: len(good) // 2],
        "gz-not-gzip": _good_lines(),
        "gz-empty": b"",
        "gz-garbage": gzip.compress(bytes(random.Random(4).randrange(256) for _ in range(4096))),
        "gz-latin-1": gzip.compress(_good_lines() + b'{"metric": "caf\xe9"}\n'),
        "gz-crc-damaged": good[:-8] + b"\x00" * 8,
    }.items():
        path = tmp / f"{name}.jsonl.gz"
        path.write_bytes(data)
        yield name, path
    good_csv = gzip.compress((_CSV_HEADER + _csv_good(50)).encode())
    for name, data in {
        "csv-gz-truncated": good_csv[: len(good_csv) // 2],
        "csv-gz-not-gzip": (_CSV_HEADER + _csv_good()).encode(),
    }.items():
        path = tmp / f"{name}.csv.gz"
        path.write_bytes(data)
        yield name, path


_LABELS: dict[str, bytes] = {
    "labels-empty": b"",
    "labels-latin-1": b'{"incidents": [], "note": "caf\xe9"}',
    "labels-array": b"[]",
    "labels-nan-times": b'{"incidents": [{"id": "i", "start": NaN, "end": Infinity,'
    b' "root_cause": {"entity": "amf-1", "fault": "amf_overload"}}]}',
    "labels-1e20": b'{"incidents": [{"id": "i", "start": 1e20, "end": 1e21,'
    b' "root_cause": {"entity": "amf-1", "fault": "amf_overload"}}]}',
    "labels-huge-int": b'{"incidents": [{"id": "i", "start": ' + b"9" * 400 + b', "end": 1}]}',
    "labels-bad-strings": b'{"incidents": [{"id": "i", "start": "soon", "end": "later"}]}',
    "labels-bad-maintenance": b'{"incidents": [], "maintenance": [{"entity": 1, "start": []}]}',
    "labels-maintenance-1e20": b'{"incidents": [], "maintenance": [{"entity": "amf-1",'
    b' "start": 1e20, "end": "9999-12-31T23:59:59Z"}]}',
    "labels-deep": b'{"x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    "labels-binary": bytes(random.Random(5).randrange(256) for _ in range(2048)),
    "labels-bom": b"\xef\xbb\xbf" + b'{"incidents": []}',
}

_INVENTORIES: dict[str, bytes] = {
    "inventory-latin-1": b'{"entities": [{"id": "caf\xe9", "type": "amf"}]}',
    "inventory-not-json": b"entities:\n  - amf-1\n",
    "inventory-entities-not-list": b'{"entities": {"id": "amf-1"}}',
    "inventory-deep": b'{"entities": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    "inventory-binary": bytes(random.Random(6).randrange(256) for _ in range(2048)),
}

_NAB_ROW = "2014-04-01 00:{:02d}:00,{}\n"
_NAB: dict[str, tuple[bytes, bytes]] = {
    "nab-latin-1": (b"timestamp,value\n2014-04-01 00:00:00,1\n2014-04-01 00:05:00,caf\xe9\n", b""),
    "nab-binary": (bytes(random.Random(7).randrange(256) for _ in range(4096)), b""),
    "nab-field-200k": (
        (
            "timestamp,value\n"
            + _NAB_ROW.format(0, 1)
            + "2014-04-01 00:05:00,"
            + "1" * 200_000
            + "\n"
        ).encode(),
        b"",
    ),
    "nab-ts-1e20": (b"timestamp,value\n1e20,1\n1e20,2\n", b""),
    "nab-ts-year-9999": (b"timestamp,value\n9999-12-31 23:59:59,1\n", b""),
    "nab-nul": (b"timestamp,value\n2014-04-01 00:00:00,1\x00\n", b""),
    "nab-bom": (
        # the BOM is read past (the header is accepted): the value on line 4 is the error
        b"\xef\xbb\xbftimestamp,value\n2014-04-01 00:00:00,1\n2014-04-01 00:05:00,2\n"
        b"2014-04-01 00:10:00,x\n",
        b"",
    ),
    "nab-open-quote": (b'timestamp,value\n"2014-04-01 00:00:00,1\n', b""),
    "nab-header-only": (b"timestamp,value\n", b""),
    "nab-labels-latin-1": (
        b"timestamp,value\n2014-04-01 00:00:00,1\n",
        b'{"x.csv": [], "n": "\xe9"}',
    ),
    "nab-labels-not-list": (b"timestamp,value\n2014-04-01 00:00:00,1\n", b'{"x.csv": 7}'),
    "nab-labels-dict-window": (
        b"timestamp,value\n2014-04-01 00:00:00,1\n",
        b'{"x.csv": [{"a": 1}]}',
    ),
    "nab-labels-window-1e20": (
        b"timestamp,value\n2014-04-01 00:00:00,1\n",
        b'{"x.csv": [["1e20", "1e21"]]}',
    ),
    "nab-labels-deep": (b"timestamp,value\n", b'{"x.csv": ' + b"[" * 100_000 + b"}"),
}

_PM_HEAD = (
    '<?xml version="1.0" encoding="UTF-8"?>\n'
    '<measCollecFile xmlns="http://www.3gpp.org/ftp/specs/archive/32_series/32.435#measCollec">'
    '<measData><measInfo measInfoId="1">'
)
_PM_TAIL = "</measInfo></measData></measCollecFile>\n"


def _pm(gran_end: str, types: str, values: str) -> bytes:
    return (
        _PM_HEAD
        + f'<granPeriod duration="PT900S" endTime="{gran_end}"/>'
        + types
        + '<measValue measObjLdn="ManagedElement=amf-1,AMFFunction=1">'
        + values
        + "</measValue>"
        + _PM_TAIL
    ).encode()


_END = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(NOW - 900))
_PM: dict[str, bytes] = {
    "pm-meastype-p-x": _pm(_END, '<measType p="x">RM.RegInitReq</measType>', '<r p="1">5</r>'),
    "pm-r-p-three": _pm(_END, '<measType p="1">RM.RegInitReq</measType>', '<r p="three">5</r>'),
    "pm-p-negative": _pm(_END, '<measType p="-1">RM.RegInitReq</measType>', '<r p="-1">5</r>'),
    "pm-value-inf": _pm(_END, '<measType p="1">RM.RegInitReq</measType>', '<r p="1">1e400</r>'),
    "pm-value-text": _pm(_END, '<measType p="1">RM.RegInitReq</measType>', '<r p="1">many</r>'),
    "pm-end-9999": _pm("9999-12-31T23:59:59Z", '<measType p="1">A.B</measType>', '<r p="1">1</r>'),
    "pm-end-year-1": _pm(
        "0001-01-01T00:00:00+14:00", '<measType p="1">A.B</measType>', "<r p='1'>1</r>"
    ),
    "pm-end-garbage": _pm("soon", '<measType p="1">A.B</measType>', '<r p="1">1</r>'),
    "pm-not-xml": b"measCollecFile, but not XML\n",
    "pm-binary": bytes(random.Random(8).randrange(256) for _ in range(4096)),
    "pm-latin-1": _PM_HEAD.encode() + b"<granPeriod endTime='caf\xe9'/>" + _PM_TAIL.encode(),
    "pm-unknown-encoding": b'<?xml version="1.0" encoding="x-no-such"?><measCollecFile/>',
    "pm-utf-16-declared-8": '<?xml version="1.0" encoding="UTF-8"?><measCollecFile/>'.encode(
        "utf-16"
    ),
    "pm-entity-bomb": (
        b'<?xml version="1.0"?><!DOCTYPE m [<!ENTITY a "aaaaaaaaaa">'
        + b"".join(
            f'<!ENTITY {chr(98 + i)} "{("&" + chr(97 + i) + ";") * 10}">'.encode() for i in range(8)
        )
        + b"]><measCollecFile>&i;</measCollecFile>"
    ),
    "pm-external-entity": (
        b'<?xml version="1.0"?><!DOCTYPE m [<!ENTITY x SYSTEM "file:///etc/passwd">]>'
        b"<measCollecFile>&x;</measCollecFile>"
    ),
    "pm-empty": b"",
    "pm-other-root": b"<html><body/></html>",
    "pm-deep": b"<measCollecFile>" + b"<a>" * 50_000 + b"</a>" * 50_000 + b"</measCollecFile>",
}


def _labels_ok(tmp: Path) -> Path:
    path = tmp / "labels.json"
    path.write_text('{"incidents": [], "no_fault": []}')
    return path


def corpus(tmp: Path) -> list[Case]:
    """Every bad file, written under ``tmp``, with the command that reads it."""
    tmp.mkdir(parents=True, exist_ok=True)
    labels = _labels_ok(tmp)
    good = tmp / "good.jsonl"
    good.write_bytes(_good_lines())
    cases: list[Case] = []

    def eval_run(telemetry: Path, labels_path: Path = labels, *extra: str) -> list[str]:
        argv = ["eval", "run", "--telemetry", str(telemetry), "--labels", str(labels_path)]
        return [*argv, *extra, "--out", str(tmp / "report.json")]

    for name, (kind, data) in _REPLAYS.items():
        path = tmp / f"{name}.{kind}"
        path.write_bytes(data)
        cases.append(Case(name, eval_run(path)))
    for name, path in _gz_cases(tmp):
        cases.append(Case(name, eval_run(path)))
    folder = tmp / "folder.jsonl"
    folder.mkdir()
    cases.append(Case("telemetry-is-a-folder", eval_run(folder)))
    cases.append(Case("telemetry-missing", eval_run(tmp / "missing.jsonl")))
    for name, data in _LABELS.items():
        path = tmp / f"{name}.json"
        path.write_bytes(data)
        cases.append(Case(name, eval_run(good, path)))
    cases.append(Case("labels-is-a-folder", eval_run(good, tmp)))
    for name, data in _INVENTORIES.items():
        path = tmp / f"{name}.json"
        path.write_bytes(data)
        cases.append(Case(name, eval_run(good, labels, "--inventory", str(path))))
        pm_ok = tmp / "pm-ok.xml"
        pm_ok.write_bytes(_pm(_END, '<measType p="1">RM.RegInitReq</measType>', '<r p="1">5</r>'))
        out = tmp / f"{name}.pm.jsonl"
        argv = ["pm", "convert", str(pm_ok), "--out", str(out), "--inventory", str(path)]
        cases.append(Case(f"pm-{name}", argv))
    for name, (data, windows) in _NAB.items():
        root = tmp / name
        (root / "data").mkdir(parents=True)
        (root / "labels").mkdir()
        (root / "data" / "x.csv").write_bytes(data)
        (root / "labels" / "combined_windows.json").write_bytes(windows or b'{"x.csv": []}')
        cases.append(
            Case(name, ["eval", "nab", "--data", str(root), "--out", str(root / "r.json")])
        )
    nab_folder = tmp / "nab-csv-is-a-folder"
    (nab_folder / "data" / "x.csv").mkdir(parents=True)
    (nab_folder / "labels").mkdir()
    (nab_folder / "labels" / "combined_windows.json").write_text('{"x.csv": []}')
    cases.append(Case("nab-csv-is-a-folder", ["eval", "nab", "--data", str(nab_folder)]))
    pm_dir = tmp / "pm"
    pm_dir.mkdir()
    for name, data in _PM.items():
        path = pm_dir / f"{name}.xml"
        path.write_bytes(data)
        argv = ["pm", "convert", str(path), "--out", str(tmp / f"{name}.jsonl")]
        cases.append(Case(name, argv))
    cases.append(
        Case(
            "pm-folder-of-bad-files",
            ["pm", "convert", str(pm_dir), "--out", str(tmp / "all.jsonl")],
        )
    )
    return cases


class _Hang(Exception):
    pass


def _alarm(signum: int, frame: FrameType | None) -> None:
    raise _Hang


def _run(argv: list[str]) -> tuple[int | str, str]:
    """Exit status of ``noc argv`` in this process (or what it raised), and its stderr."""
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(TIMEOUT_S)
    try:
        with err_console.capture() as err, console.capture():
            code: int | str = run(argv)
        return code, err.get()
    except _Hang:
        return "hang", ""
    except BaseException as exc:  # a traceback: the one thing this test is about
        return f"{type(exc).__name__}: {str(exc)[:200]}", ""
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.fixture(autouse=True)
def _pack_from_the_repo(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """The default settings (no NOC_PACK_DIR overlay, a store in tmp) whatever the shell's."""
    from noc_assistant.settings import get_settings

    for var in ("NOC_PACK_DIR", "NOC_DB_URL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NOC_DATA_DIR", str(tmp_path / "data"))
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


def test_bad_input_corpus_exits_0_or_2_and_names_the_file(tmp_path: Path) -> None:
    cases = corpus(tmp_path)
    assert len(cases) >= 80, len(cases)
    seen: dict[str, int | str] = {}
    unnamed: list[str] = []
    for case in cases:
        code, err = _run(case.argv)
        seen[case.name] = code
        if code == 2 and str(tmp_path) not in err:
            unnamed.append(f"{case.name}: {err.strip()[:200]}")
    bad = {name: code for name, code in seen.items() if code not in (0, 2)}
    assert not bad, bad
    assert not unnamed, unnamed
    assert sum(1 for c in seen.values() if c == 2) >= len(cases) // 2


def test_the_real_executable_exits_2_without_a_traceback(tmp_path: Path) -> None:
    """The console script itself, for what it prints and returns (three files)."""
    tmp_path.mkdir(exist_ok=True)
    labels = _labels_ok(tmp_path)
    noc = Path(sys.executable).with_name("noc")
    inputs = {
        "t.jsonl.gz": gzip.compress(_good_lines(50))[:100],
        "t.csv": b"ts,metric,instance,value,caf\xe9\n",
        "t.jsonl": b"",
    }
    for name, data in inputs.items():
        path = tmp_path / name
        path.write_bytes(data)
        proc = subprocess.run(
            [str(noc), "eval", "run", "--telemetry", str(path), "--labels", str(labels)],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "NOC_DATA_DIR": str(tmp_path / "data")},
            check=False,
        )
        assert proc.returncode == 2, (name, proc.stderr[-2000:])
        assert "Traceback" not in proc.stderr
        assert str(path) in proc.stderr


def test_replay_readers_quarantine_what_they_skip(tmp_path: Path) -> None:
    """A BOM costs no line, a NUL in a label, a non-UTF-8 line, an oversized CSV field and a
    timestamp of 1e20 are each quarantined with their line and reason, the rest is read."""
    from noc_assistant.ingest import Quarantine, read_replay

    jsonl = tmp_path / "t.jsonl"
    jsonl.write_bytes(
        b"\xef\xbb\xbf"
        + _sample(NOW)
        + _sample(1e20)
        + _sample(NOW + 60, 1, "a\x00b")
        + b'{"ts": 1, "metric": "\xff"}\n'
        + _sample(NOW + 120)
    )
    q = Quarantine()
    assert [p.ts for p in read_replay(jsonl, q)] == [NOW, NOW + 120]
    assert [r.line for r in q.records] == [2, 3, 4]
    assert "outside" in q.records[0].reason and "control character" in q.records[1].reason
    csv = tmp_path / "t.csv"
    csv.write_bytes(
        b"\xef\xbb\xbf"
        + _CSV_HEADER.encode()
        + f"{NOW},up,amf-1,1\n".encode()
        + f"{NOW},up,{'a' * 200_000},1\n".encode()
        + b"1795946400,up,caf\xe9,1\n"
        + f"{NOW},up,amf\x00-1,1\n1e20,up,amf-1,1\n{NOW + 60},up,amf-1,2\n".encode()
    )
    q = Quarantine()
    assert [p.value for p in read_replay(csv, q)] == [1.0, 2.0]
    assert [r.line for r in q.records] == [3, 4, 5, 6]
    reasons = [r.reason for r in q.records]
    assert "field larger than field limit" in reasons[0] and "not UTF-8" in reasons[1]
    assert "control character" in reasons[2] and "outside" in reasons[3]


def test_pm_positions_that_are_no_numbers_cost_only_their_entry(tmp_path: Path) -> None:
    from noc_assistant.ingest import Quarantine
    from noc_assistant.ingest.pm import read_pm_file

    path = tmp_path / "pm.xml"
    path.write_bytes(
        _pm(
            _END,
            '<measType p="1">RM.RegInitReq</measType><measType p="x">RM.RegInitFail</measType>',
            '<r p="1">5</r><r p="three">6</r>',
        )
    )
    q = Quarantine()
    values = read_pm_file(path, q)
    assert [(v.meas_type, v.value) for v in values] == [("RM.RegInitReq", 5.0)]
    assert ["p='x'" in r.reason or "p='three'" in r.reason for r in q.records] == [True, True]


def test_a_scraped_sample_stamped_outside_the_live_window_is_quarantined() -> None:
    from noc_assistant.ingest import Quarantine
    from noc_assistant.ingest.scrape import parse_exposition

    text = f"up 1 {NOW * 1000}\nup 2 {10**23}\nup 3 1\nup 4\n"
    q = Quarantine()
    points = list(parse_exposition(text, instance="amf-1", ts=NOW, source="t", quarantine=q))
    assert [(p.value, p.ts) for p in points] == [(1.0, NOW), (4.0, NOW)]
    assert [r.line for r in q.records] == [2, 3]
    assert all("outside" in r.reason for r in q.records)
