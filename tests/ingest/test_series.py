"""The series store and KPI formulas together: windowed increases, resets, label matchers,
and the per-selector cache of matching series (it must see series that arrive later)."""

from __future__ import annotations

import pytest

from knowledge.formula import parse_formula
from noc_assistant.ingest.point import Point
from noc_assistant.ingest.series import SeriesStore


def _counter(store: SeriesStore, ts: float, value: float, **labels: str) -> None:
    lab = tuple(sorted({"instance": "amf-1", **labels}.items()))
    store.add(Point(ts, "req_total", lab, value, "counter"))


def test_increase_counts_the_part_of_a_step_inside_the_window() -> None:
    store = SeriesStore()
    for ts, v in ((0, 0.0), (15, 10.0), (30, 20.0), (45, 40.0)):
        _counter(store, ts, v)
    f = parse_formula('increase("req")')
    # window (20, 45]: two thirds of the 15 -> 30 step, all of 30 -> 45
    assert f.evaluate(store.view("amf-1", 45.0, 25.0)) == pytest.approx(10 * 2 / 3 + 20)
    assert f.evaluate(store.view("amf-1", 45.0, 15.0)) == pytest.approx(20.0)
    assert f.evaluate(store.view("amf-2", 45.0, 15.0)) is None  # no such entity: a gap


def test_counter_reset_counts_the_new_value_not_a_negative_step() -> None:
    store = SeriesStore()
    for ts, v in ((0, 100.0), (15, 110.0), (30, 4.0)):
        _counter(store, ts, v)
    assert parse_formula('increase("req")').evaluate(store.view("amf-1", 30.0, 30.0)) == 14.0


def test_a_reset_after_a_gap_is_unknown_in_a_window_holding_part_of_it() -> None:
    """A node down for 20 min and up again: the counter restarted at some time between the
    two samples around the gap. A 10-min window holds part of that step, and a third of the
    new value over it was read as a throughput collapse (a page after every restart at
    10-min periods); it is a gap. A window holding the whole step counts the whole value,
    and a step with no reset is still spread over the gap."""
    store = SeriesStore()
    for ts, v in ((0, 1000.0), (600, 2000.0), (2400, 500.0), (3000, 1500.0)):
        _counter(store, ts, v)
    _counter(store, 0, 0.0, shard="b")
    _counter(store, 2400, 900.0, shard="b")  # no reset: 900 spread over 2400 s
    rate = parse_formula('increase("req")')
    assert rate.evaluate(store.view("amf-1", 2400.0, 600.0)) is None
    assert rate.evaluate(store.view("amf-1", 2400.0, 1800.0)) == pytest.approx(500.0 + 675.0)
    assert rate.evaluate(store.view("amf-1", 3000.0, 600.0)) == pytest.approx(1000.0)
    only_b = parse_formula('increase("req", shard="b")')
    assert only_b.evaluate(store.view("amf-1", 2400.0, 600.0)) == pytest.approx(225.0)


def test_present_is_the_share_of_series_that_answered() -> None:
    """An engine's exporter silent (null samples) while the host still answers: its series
    did not answer within the window; one gone for longer than the store's horizon is not
    counted (a model swapped under a new label), and none left is a gap."""
    store = SeriesStore(horizon_s=900.0)
    lab = (("instance", "gpu-1"),)
    for ts in range(0, 601, 60):
        store.add(Point(float(ts), "gpu_temp", lab, 50.0, "gauge"))
        up = ts < 420
        for model in ("a", "b"):
            value = 3.0 if up or model == "b" else None
            store.add(Point(float(ts), "running", (*lab, ("model", model)), value, "gauge"))
    f = parse_formula('present("running")')
    assert f.evaluate(store.view("gpu-1", 360.0, 120.0)) == 1.0
    assert f.evaluate(store.view("gpu-1", 600.0, 120.0)) == 0.5  # "a" silent since 360 s
    assert f.evaluate(store.view("gpu-1", 1300.0, 120.0)) == 0.0  # "a" gone, "b" silent
    assert f.evaluate(store.view("gpu-1", 1600.0, 120.0)) is None  # both beyond 900 s
    assert parse_formula('present("nothing")').evaluate(store.view("gpu-1", 600.0, 120.0)) is None


def test_present_forgives_a_single_missed_period() -> None:
    """At PM periods a KPI window is one interval: with the liveness grace (1.5 intervals) a
    series that missed one file still answers, one that missed two in a row does not."""
    store = SeriesStore()
    lab = (("instance", "gpu-1"),)
    f = parse_formula('present("running")')
    seen: dict[int, tuple[float | None, float | None]] = {}
    for ts in range(0, 3001, 300):
        store.add(Point(float(ts), "gpu_temp", lab, 50.0, "gauge"))
        if ts not in (1500, 2400, 2700):  # one missed file at 1500, two in a row from 2400
            store.add(Point(float(ts), "running", lab, 3.0, "gauge"))
        bare = f.evaluate(store.view("gpu-1", float(ts), 300.0))
        seen[ts] = (bare, f.evaluate(store.view("gpu-1", float(ts), 300.0, grace_s=450.0)))
    assert seen[1500] == (0.0, 1.0)  # the window alone counts one missed file as silence
    assert seen[2400] == (0.0, 1.0)
    assert seen[2700] == (0.0, 0.0)
    assert seen[3000] == (1.0, 1.0)


def test_matcher_cache_sees_series_that_arrive_later() -> None:
    store = SeriesStore()
    f = parse_formula('increase("req", cause="a|b") / increase("req")')
    for ts in (0.0, 15.0):
        _counter(store, ts, ts, cause="a")
        _counter(store, ts, 2 * ts, cause="c")
    assert f.evaluate(store.view("amf-1", 15.0, 15.0)) == pytest.approx(15 / 45)
    for ts in (15.0, 30.0):  # a new matching series appears after the first evaluation
        _counter(store, ts, 3 * ts, cause="b")
    _counter(store, 30.0, 30.0, cause="a")
    _counter(store, 30.0, 60.0, cause="c")
    assert f.evaluate(store.view("amf-1", 30.0, 15.0)) == pytest.approx((15 + 45) / (15 + 45 + 30))
    # the group of a grouped KPI narrows every selector
    view = store.view("amf-1", 30.0, 15.0, extra={"cause": "b"})
    assert f.evaluate(view) == pytest.approx(1.0)


def test_formula_gaps_and_aggregates() -> None:
    store = SeriesStore()
    for ts, v in ((0, 5.0), (15, 5.0)):
        _counter(store, ts, v)
    view = store.view("amf-1", 15.0, 15.0)
    assert parse_formula('1 / increase("req")').evaluate(view) is None  # division by zero
    assert parse_formula('max(increase("nope"), -increase("req") + 2)').evaluate(view) == 2.0
    assert parse_formula('min(increase("nope"), gauge("nope"))').evaluate(view) is None
