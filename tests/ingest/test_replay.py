"""Replay ingest: bad lines are quarantined with their line number, gaps stay gaps."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from noc_assistant.errors import ReplayFormatError
from noc_assistant.ingest import Point, Quarantine, ReorderBuffer, read_replay

T0 = 1_795_946_400  # 2026-11-29T09:20:00Z


def _line(ts: str, metric: str, value: object, **extra: object) -> str:
    obj = {"ts": ts, "metric": metric, "labels": {"instance": "amf-1", "nf": "amf"}, "value": value}
    obj.update(extra)
    return json.dumps(obj)


def test_malformed_lines_are_quarantined_with_line_numbers(tmp_path: Path) -> None:
    lines = [
        _line("2026-11-29T10:00:00Z", "gnb", 3.0),
        "{not json",
        _line("2026-11-29T10:00:15Z", "gnb", "three"),
        _line("yesterday", "gnb", 3.0),
        _line("2026-11-29T10:00:30Z", "bad metric name", 3.0),
        _line("2026-11-29T10:00:45Z", "gnb", 3.0, type="summary"),
        _line("2026-11-29T10:01:00Z", "gnb", 4.0),
        _line("yesterday", "gnb", 5.0),  # the same bad text again: quarantined again
        _line("2026-11-29T10:02:00", "gnb", 5.0),  # no time zone
        _line("2026-11-29T10:01:00Z", "bad metric name", 3.0),
        _line("nan", "gnb", 6.0),  # a number, but no time: it was read as a NaN timestamp
        _line("inf", "gnb", 6.0),
    ]
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(lines) + "\n")
    qpath = tmp_path / "q.jsonl"
    q = Quarantine(path=qpath)
    points = list(read_replay(path, q))
    assert [p.value for p in points] == [3.0, 4.0]
    assert q.count == 10
    assert [r.line for r in q.records] == [2, 3, 4, 5, 6, 8, 9, 10, 11, 12]
    assert "invalid JSON" in q.records[0].reason
    assert "not a number" in q.records[1].reason
    assert "RFC 3339" in q.records[2].reason
    assert "metric" in q.records[3].reason
    assert "type" in q.records[4].reason
    assert "RFC 3339" in q.records[5].reason and "time zone" in q.records[6].reason
    assert "metric" in q.records[7].reason
    assert all("not finite" in r.reason for r in q.records[8:])
    written = [json.loads(x) for x in qpath.read_text().splitlines()]
    assert [w["line"] for w in written] == [2, 3, 4, 5, 6, 8, 9, 10, 11, 12]
    assert written[0]["raw"] == "{not json"
    assert all(w["source"] == str(path) for w in written)


def test_a_negative_count_is_quarantined_not_read_as_a_reset(tmp_path: Path) -> None:
    """A counter (or a histogram's bucket or count) below zero is no sample an exporter can
    give: read as a reset it made a negative rate and then a burst the counter's size. A
    negative gauge or histogram sum is a value like any other."""
    lines = [
        _line("2026-11-29T10:00:00Z", "reqs", 100.0, type="counter"),
        _line("2026-11-29T10:00:15Z", "reqs", -3.0, type="counter"),
        _line("2026-11-29T10:00:15Z", "lat_bucket", -1, type="histogram_bucket"),
        _line("2026-11-29T10:00:15Z", "lat_count", "-2", type="histogram_count"),
        _line("2026-11-29T10:00:15Z", "lat_sum", -0.5, type="histogram_sum"),
        _line("2026-11-29T10:00:15Z", "temp", -4.0),
        _line("2026-11-29T10:00:30Z", "reqs", 0.0, type="counter"),
    ]
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(lines) + "\n")
    q = Quarantine()
    points = list(read_replay(path, q))
    assert [p.value for p in points] == [100.0, -0.5, -4.0, 0.0]
    assert [r.line for r in q.records] == [2, 3, 4]
    assert "counter value -3.0 is negative" in q.records[0].reason
    assert all("negative" in r.reason for r in q.records)


def test_placeholder_magnitudes_are_quarantined_not_read(tmp_path: Path) -> None:
    """DBL_MAX or ±inf from a broken exporter is no measurement: read as one, 0.5 % of such
    lines in a day of telemetry paged 17 times per entity-day (bench/detectors_notes.md)."""
    jsonl = tmp_path / "t.jsonl"
    jsonl.write_text(
        "\n".join(
            [
                _line("2026-11-29T10:00:00Z", "temp", 1.7e308),
                _line("2026-11-29T10:00:00Z", "bytes", 9.9e29, type="counter"),
                _line("2026-11-29T10:00:15Z", "temp", -1e30),
                _line("2026-11-29T10:00:15Z", "temp", "inf"),
                _line("2026-11-29T10:00:15Z", "temp", "-Infinity"),
            ]
        )
        + "\n"
    )
    csv = tmp_path / "t.csv"
    csv.write_text(
        "ts,metric,instance,value\n1795946400,temp,amf-1,1e300\n1795946400,temp,amf-1,2\n"
    )
    q = Quarantine()
    assert [p.value for p in read_replay(jsonl, q)] == [9.9e29]
    assert [p.value for p in read_replay(csv, q)] == [2.0]
    assert [(r.source, r.line) for r in q.records] == [
        (str(jsonl), 1),
        (str(jsonl), 3),
        (str(jsonl), 4),
        (str(jsonl), 5),
        (str(csv), 2),
    ]
    assert all("is not a measurement" in r.reason for r in q.records)


def test_nan_and_null_are_gaps_not_zero(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(
        "\n".join(
            [
                _line("2026-11-29T10:00:00Z", "gnb", None),
                _line("2026-11-29T10:00:15Z", "gnb", "NaN"),
                '{"ts": 1795946430, "metric": "gnb", "labels": {"instance": "amf-1"}, '
                '"value": NaN}',
            ]
        )
    )
    q = Quarantine()
    points = list(read_replay(path, q))
    assert q.count == 0
    assert len(points) == 3
    assert all(p.value is None for p in points)


def test_csv_replay_and_bad_header(tmp_path: Path) -> None:
    good = tmp_path / "t.csv"
    good.write_text(
        "ts,metric,instance,value,type,label=nf\n"
        "2026-11-29T10:00:00Z,fivegs_amffunction_rm_reginitreq,amf-1,10,counter,amf\n"
        "2026-11-29T10:00:15Z,fivegs_amffunction_rm_reginitreq,amf-1,,counter,amf\n"
        "2026-11-29T10:00:30Z,fivegs_amffunction_rm_reginitreq,amf-1,x,counter,amf\n"
    )
    q = Quarantine()
    points = list(read_replay(good, q))
    assert [p.value for p in points] == [10.0, None]
    assert points[0].labels == (("instance", "amf-1"), ("nf", "amf"))
    assert points[0].type == "counter"
    assert q.count == 1 and q.records[0].line == 4

    bad = tmp_path / "bad.csv"
    bad.write_text("time,name,value\n1,2,3\n")
    with pytest.raises(ReplayFormatError) as err:
        list(read_replay(bad, Quarantine()))
    assert f"{bad}:1" in str(err.value)
    assert "header" in str(err.value)


def test_csv_label_columns_may_be_bare_names(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text(
        "ts,metric,instance,value,nf,type,label=plmnid\n"
        "1795946400,fivegs_amffunction_rm_reginitreq,amf-1,10,amf,counter,99970\n"
    )
    q = Quarantine()
    (point,) = read_replay(path, q)
    assert point.labels == (("instance", "amf-1"), ("nf", "amf"), ("plmnid", "99970"))
    assert point.type == "counter" and q.count == 0
    for header, why in (("nf,label=nf", "a repeated label"), ("my nf", "not a label name")):
        path.write_text(f"ts,metric,instance,value,{header}\n")
        with pytest.raises(ReplayFormatError, match=why) as err:
            list(read_replay(path, Quarantine()))
        assert f"{path}:1" in str(err.value)


def test_missing_file_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(ReplayFormatError, match=r"nope\.jsonl"):
        read_replay(tmp_path / "nope.jsonl")


def _pt(ts: float, value: float | None) -> Point:
    return Point(ts, "gnb", (("instance", "amf-1"),), value, "gauge")


def test_out_of_order_duplicates_and_late_points() -> None:
    q = Quarantine()
    buf = ReorderBuffer(lateness_s=45, quarantine=q)
    out: list[Point] = []
    arrivals = [_pt(0, 1), _pt(30, 3), _pt(15, 2), _pt(15, 2), _pt(45, 4), _pt(90, 6), _pt(60, 5)]
    for p in arrivals:
        buf.push(p)
        out.extend(buf.pop_ready())
    # a point far behind everything already released is quarantined, not silently dropped
    buf.push(_pt(5, 9))
    out.extend(buf.pop_ready())
    out.extend(buf.drain())
    assert [p.ts for p in out] == [0, 15, 30, 45, 60, 90]
    assert [p.value for p in out] == [1, 2, 3, 4, 5, 6]
    assert buf.duplicates == 1
    assert q.count == 1 and "later than the allowed lateness" in q.records[0].reason


def test_conflicting_repeat_is_quarantined() -> None:
    q = Quarantine()
    buf = ReorderBuffer(lateness_s=0, quarantine=q)
    buf.push(_pt(0, 1))
    released = list(buf.pop_ready())
    buf.push(_pt(0, 7))
    released += list(buf.drain())
    assert [p.value for p in released] == [1]
    assert q.count == 1 and "conflicting" in q.records[0].reason


def test_bad_labels_are_quarantined_every_time(tmp_path: Path) -> None:
    good = {"instance": "amf-1", "nf": "amf"}
    rows = [
        {"ts": T0, "metric": "gnb", "labels": good, "value": 1.0},
        {"ts": T0 + 15, "metric": "gnb", "labels": {"instance": 7}, "value": 1.0},
        {"ts": T0 + 30, "metric": "gnb", "labels": {"instance": ["a"]}, "value": 1.0},
        {"ts": T0 + 45, "metric": "gnb", "labels": ["instance", "amf-1"], "value": 1.0},
        {"ts": T0 + 60, "metric": "gnb", "labels": {"instance": 7}, "value": 1.0},  # again
        {"ts": T0 + 75, "metric": "gnb", "labels": {"nf": "amf", "instance": "amf-1"}, "value": 2},
    ]
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    q = Quarantine()
    points = list(read_replay(path, q))
    assert [p.value for p in points] == [1.0, 2.0]
    assert points[0].labels == points[1].labels == (("instance", "amf-1"), ("nf", "amf"))
    assert [r.line for r in q.records] == [2, 3, 4, 5]
    assert all("labels must be an object" in r.reason for r in q.records)


def test_a_replay_may_be_out_of_order_by_a_few_intervals(tmp_path: Path) -> None:
    """FORMATS §1: lines may arrive out of order by a few scrape intervals. At 5-min periods
    that is longer than a live feed's minute of lateness: a replay waits three intervals, from
    its first line on."""
    import random

    from noc_assistant.stream.pipeline import Pipeline
    from noc_assistant.stream.replay import run_replay

    rng = random.Random(1)
    rows = []
    for i in range(100):
        for k in range(50):
            ts = 1.8e9 + 300 * i
            line = {"ts": ts, "metric": "up_since", "labels": {"instance": f"ne{k}"}, "value": 1}
            rows.append((ts + rng.uniform(0, 900), line))
    rows.sort(key=lambda r: r[0])  # each line displaced by up to three intervals
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for _, r in rows))
    result = run_replay(path, rca=False)
    assert result.quarantined == 0 and result.samples == 5000
    live = Pipeline()
    live.replay(read_replay(path, live.quarantine))
    assert live.quarantine.count > 0  # a live feed's minute is not enough here


def _arrivals(seed: int) -> list[Point]:
    """Three series, shuffled within two minutes, with repeats and conflicting repeats."""
    rng = random.Random(seed)
    points = [
        Point(float(t), m, (("instance", f"amf-{m[-1]}"),), float(t % 7), "gauge")
        for t in range(0, 1800, 15)
        for m in ("m1", "m2", "m3")
    ]
    points += [
        p._replace(value=(p.value or 0.0) + (rng.random() < 0.5)) for p in rng.sample(points, 40)
    ]
    return sorted(points, key=lambda p: p.ts + rng.uniform(0, 120))


def _run(
    buf: ReorderBuffer, points: list[Point], numbered: bool = False, drain: bool = True
) -> list[Point]:
    out: list[Point] = []
    for p in points:
        buf.push(p, buf.door.key_of(p.metric, p.labels, p.type) if numbered else None)
        out.extend(buf.pop_ready())
    return out + list(buf.drain()) if drain else out


@pytest.mark.parametrize("seed", range(3))
def test_series_numbered_at_the_door_release_as_keyed_by_labels(seed: int) -> None:
    """The pipeline keys each series by the number its door gave it: the same points come
    out, the same repeats count as duplicates and the same late ones are quarantined."""
    points = _arrivals(seed)
    by_labels = ReorderBuffer(lateness_s=60)
    numbered = ReorderBuffer(lateness_s=60)
    assert _run(numbered, points, True) == _run(by_labels, points, False)
    assert (numbered.duplicates, numbered.late) == (by_labels.duplicates, by_labels.late)
    assert numbered.duplicates and numbered.late
    assert [r.reason for r in numbered.quarantine.records] == [
        r.reason for r in by_labels.quarantine.records
    ]
