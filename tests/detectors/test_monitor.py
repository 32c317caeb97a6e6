"""The pipeline seam: SeriesMonitor gating, events and hysteresis."""

from __future__ import annotations

import random

from detectors import Alerter, MonitorEvent, SeriesMonitor


def test_low_support_and_gaps_are_ignored() -> None:
    mon = SeriesMonitor(bad_direction="down", min_support=50, warmup=50)
    rng = random.Random(0)
    for t in range(200):
        assert mon.observe(60.0 * t, 0.99 + rng.gauss(0, 0.002), support=500) is None
    # a ratio of 3 events collapses: not enough support, no alarm, nothing learnt
    n_before = mon.ensemble_.level_.n_
    for t in range(200, 210):
        assert mon.observe(60.0 * t, 0.3, support=3) is None
        assert mon.observe(60.0 * t, None) is None
        assert mon.observe(60.0 * t, float("nan")) is None
    assert mon.ensemble_.level_.n_ == n_before and not mon.firing


def test_open_then_close_with_hysteresis() -> None:
    mon = SeriesMonitor(bad_direction="up", warmup=50, min_duration=2, clear_after=3)
    rng = random.Random(1)
    events: list[MonitorEvent] = []
    for t in range(300):
        v = 100 + rng.gauss(0, 1) + (30 if 200 <= t < 220 else 0)
        ev = mon.observe(60.0 * t, v)
        if ev is not None:
            events.append(ev)
    kinds = [e.kind for e in events]
    assert kinds[:1] == ["open"] and kinds.count("open") == 1
    opened = events[0]
    assert opened.ts == 60.0 * 201 and opened.direction == "up"
    assert opened.expected_low < 100 < opened.expected_high < opened.observed
    assert opened.detector.startswith("ensemble")


def test_single_noisy_point_does_not_page() -> None:
    al = Alerter(threshold=1.0, min_duration=2)
    assert [al.update(s) for s in [0.2, 5.0, 0.1, 0.3]] == [None, None, None, None]


def _error_share_day(mon: SeriesMonitor, interval: float) -> list[float]:
    """An SBI error share that is ~0 when healthy (40 calls per window), failing at 50 % for
    16 min inside the first hour and again 20 hours later; returns the times alarms opened."""
    rng = random.Random(3)
    opened = []
    for k in range(int(86400 / interval)):
        t = k * interval
        failing = 2700 <= t < 2700 + 960 or 75000 <= t < 75000 + 960
        calls = 40
        errors = sum(rng.random() < (0.5 if failing else 0.001) for _ in range(calls))
        event = mon.observe(t, errors / calls, support=calls)
        if event is not None and event.kind == "open":
            opened.append(t)
    return opened


def test_a_fault_in_the_warm_up_does_not_blind_the_monitor() -> None:
    for interval in (15.0, 30.0, 60.0):
        opened = _error_share_day(SeriesMonitor(bad_direction="up"), interval)
        assert any(75000 <= t < 75000 + 960 for t in opened), interval
    # what the guard prevents: learning the warm-up fault as a normal peak
    blind = _error_share_day(SeriesMonitor(bad_direction="up", warmup_outlier=float("inf")), 30.0)
    assert not any(75000 <= t < 75000 + 960 for t in blind)
