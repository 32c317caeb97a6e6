"""The pipeline seam: SeriesMonitor gating, events and hysteresis."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from detectors import Alerter, MonitorBank, MonitorEvent, Observation, SeriesMonitor
from detectors.monitor import Columns
from detectors.robust_zscore import Direction


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
        # the warm-up fault pages too (beyond 4 iid bars before the tail fit exists) ...
        assert any(2700 <= t < 2700 + 960 for t in opened), interval
        # ... which it did not before warmup_alarm
        quiet = _error_share_day(SeriesMonitor(bad_direction="up", warmup_alarm=False), interval)
        assert not any(t < 3600 for t in quiet), interval
    # what the guard prevents: learning the warm-up fault as a normal peak
    blind = _error_share_day(SeriesMonitor(bad_direction="up", warmup_outlier=float("inf")), 30.0)
    assert not any(75000 <= t < 75000 + 960 for t in blind)


@pytest.mark.parametrize("spread", [0.0, 0.1])
def test_monitor_bank_gives_each_monitors_events(spread: float) -> None:
    """30 series, three bad directions, series that appear late (the banks grow past their
    first 8 slots), gaps, ratios of counts with too little support, counts of rare events
    (some quiet until long after the warm-up): the bank's events are the per-series monitors'
    events, in feed order, with the spread member off (the NOC's default) and on."""
    rng = np.random.default_rng(5)
    steps, n = 1500, 30
    directions: list[Direction] = ["up", "down", "both"]
    spec = [(f"s{i}", directions[i % 3], 30.0 if i % 4 == 0 else 0.0) for i in range(n)]
    start = {key: (0 if i < 10 else 50 * (i - 9)) for i, (key, _, _) in enumerate(spec)}
    t = np.arange(steps) * 60.0
    day = np.sin(2 * np.pi * t / 86400.0)
    bank = MonitorBank(warmup=200, spread_share=spread)
    counts = {key: i % 10 == 7 for i, (key, _, _) in enumerate(spec)}
    singles = {
        key: SeriesMonitor(
            bad_direction=d,
            min_support=m,
            warmup=200,
            resolution_always=counts[key],
            spread_share=spread,
        )
        for key, d, m in spec
    }
    got: list[tuple[str, MonitorEvent]] = []
    want: list[tuple[str, MonitorEvent]] = []
    for j in range(steps):
        obs = []
        for i, (key, d, m) in enumerate(spec):
            if j < start[key]:
                continue
            if i % 4 == 0:  # a success ratio of ~200 events, sometimes of 5
                den = 5.0 if rng.random() < 0.05 else float(rng.integers(150, 250))
                p = 0.995 if j < 1200 or i != 4 else 0.9
                val: float | None = rng.binomial(int(den), p) / den
                # series 8, 16, 24: declared shares whose window cut a scrape (2/3 of it)
                sup: float | None = den * (2.0 / 3.0 if i % 8 == 0 and i > 0 else 1.0)
            else:
                # series 5: a step that grows while it alarms (an update event)
                val = 50 + 5 * day[j] + rng.normal(0, 1) + (12 if i == 5 and j > 1100 else 0)
                val += 40 if i == 5 and j > 1110 else 0
                sup = None
            if rng.random() < 0.02:
                val = None
            if counts[key] and i % 4 != 0:  # rare events; series 7 quiet until step 800
                val, sup = float(rng.poisson(0.3 if i != 7 or j > 800 else 0.0)), None
            hold = i % 3 == 1 and j % 40 < 6  # another series of its entity alarms
            share = i % 8 == 0 and i > 0
            obs.append(Observation(key, val, sup, d, m, counts[key], hold, share))
            ev = singles[key].observe(float(t[j]), val, sup, hold, share)
            if ev is not None:
                want.append((key, ev))
        got += [(str(k), e) for k, e in bank.observe(float(t[j]), obs)]
    assert len(bank) == n and {k for k, _ in want} >= {"s4", "s5"}
    # one bank of every direction and rule, grown as keys came (by a quarter at least)
    assert len(want) >= 4 and list(bank._banks) == [(None, None, None)]
    assert n <= bank._banks[None, None, None].n_series < 2 * n
    assert ("s5", "update") in {(k, e.kind) for k, e in want}
    assert [(k, e.kind, e.ts, e.direction, e.detector) for k, e in got] == [
        (k, e.kind, e.ts, e.direction, e.detector) for k, e in want
    ]
    for (_, a), (_, b) in zip(got, want, strict=True):
        for field in ("score", "expected_low", "expected_high", "observed"):
            assert math.isclose(getattr(a, field), getattr(b, field), rel_tol=1e-9, abs_tol=1e-9)
    assert bank.firing("s5") == singles["s5"].firing
    assert sorted(map(str, bank.firing_keys())) == sorted(k for k, m in singles.items() if m.firing)


def _few_events_share(proportion: bool, seed: int) -> int:
    """Openings of a monitor of a success share over windows of about twenty attempts that
    fail one time in a thousand, whose window cuts a scrape interval (the support is three
    quarters of the attempts, a fraction)."""
    rng = np.random.default_rng(seed)
    mon = SeriesMonitor(bad_direction="down", min_support=2.0)
    opened = 0
    for j in range(4000):
        attempts = int(rng.poisson(20.0)) + 1
        ok = attempts - int(rng.binomial(attempts, 0.001))
        ev = mon.observe(60.0 * j, ok / attempts, 0.75 * attempts, proportion=proportion)
        opened += ev is not None and ev.kind == "open"
    return opened


def test_a_declared_share_keeps_its_noise_floor_with_a_fractional_support() -> None:
    """One failure in twenty attempts is noise: declared a share, the monitor knows it even
    though no value × support is a whole number; left to infer it, the floor is lost and the
    share pages on odd failures (as phased scrapes made every success ratio do)."""
    assert sum(_few_events_share(True, s) for s in range(4)) == 0
    assert sum(_few_events_share(False, s) for s in range(4)) >= 5


def test_pm_periods_are_watched_after_hours_not_days() -> None:
    """At a 15-min PM period the monitor's warm-up is 12 + 12 values (six hours), not the
    ensemble's 30 + 30 (fifteen): a PFCP peers gauge that drops seven hours in pages."""
    steps = 40
    t = 900.0 * np.arange(steps)
    x = np.full(steps, 4.0)
    x[28] = 2.0
    mon = SeriesMonitor(bad_direction="down", min_duration=1)
    opened = [
        e.ts
        for e in (mon.observe(float(a), float(b)) for a, b in zip(t, x, strict=True))
        if e is not None and e.kind == "open"
    ]
    assert opened == [t[28]]
    late = SeriesMonitor(bad_direction="down", min_duration=1, grace=30, min_warmup=30)
    assert all(late.observe(float(a), float(b)) is None for a, b in zip(t, x, strict=True))


def test_an_observation_carries_its_own_time() -> None:
    """An entity scraped off the tick: its values come with their own time, which the bank
    learns the interval from and the events report."""
    bank = MonitorBank(warmup=50, min_duration=1)
    for k in range(200):
        ob = Observation("a", 1.0 + 0.01 * (k % 3), None, "down", ts=60.0 * k - 17.0)
        assert bank.observe(60.0 * k, [ob]) == []
    events = bank.observe(12000.0, [Observation("a", 0.2, None, "down", ts=11983.0)])
    assert [(e.kind, e.ts) for _, e in events] == [("open", 11983.0)]


def test_a_first_day_fault_does_not_become_that_hours_normal() -> None:
    """A fault at noon of the first day, at 10-min periods: the daily profile is too young to
    predict then, and learnt the fault's values raw, so every later noon read the normal
    value as a drop (a GPU server's requests running paged at noon for a week of the 10-day
    600 s tuning run). While an alarm is open a young profile learns the values clipped as the
    level clips them."""
    from detectors.params import monitor_alpha

    step = 600.0
    rng = random.Random(5)
    days = 6
    t = step * np.arange(days * 144)
    hour = (t % 86400) / 3600
    x = 40 + 25 * np.sin(2 * np.pi * (hour - 8) / 24) + np.array([rng.gauss(0, 3) for _ in t])
    x[72:74] += 150  # noon and 12:10 of the first day
    kw = {"bad_direction": "both", "min_duration": 1, "alpha": monitor_alpha(step)}
    mon = SeriesMonitor(**kw)  # type: ignore[arg-type]
    bank = MonitorBank(**kw)
    opened, banked = [], []
    for a, b in zip(t, x, strict=True):
        e = mon.observe(float(a), float(b))
        if e is not None and e.kind == "open":
            opened.append(float(a))
        banked += [float(a) for _, e in bank.observe(float(a), [Observation("k", float(b))])
                   if e.kind == "open"]  # fmt: skip
    assert opened == banked
    assert t[72] in opened  # the fault pages
    noons = [ts for ts in opened if ts > 86400 and 11 <= (ts % 86400) / 3600 <= 13]
    assert noons == []


def test_columns_with_kept_slots_give_the_observations_events() -> None:
    """The pipeline's path (``observe_columns``, a row per series, where each row sits kept
    from tick to tick) gives the events of the same values as observations: rows with no
    value, too little support, late first values, count series behind their gate, values
    held and values off the tick."""
    rng = np.random.default_rng(11)
    n, steps = 24, 900
    directions: list[Direction] = ["up", "down", "both"]
    keys = [("kpi", f"e{i}") for i in range(n)]
    by_list = MonitorBank(warmup=100, min_duration=1)
    by_columns = MonitorBank(warmup=100, min_duration=1)
    slots = by_columns.slots(n)
    got: list[tuple[object, MonitorEvent]] = []
    want: list[tuple[object, MonitorEvent]] = []
    for j in range(steps):
        ts = 60.0 * j
        obs = []
        for i, key in enumerate(keys):
            count = i % 6 == 5
            value: float | None = float(rng.normal(50, 2)) + (30 if i % 5 == 1 and j > 700 else 0)
            if count:
                value = float(rng.poisson(0.4 if j < 600 else 6.0))
            if j < 30 * i or rng.random() < 0.03:
                value = None  # not yet seen, or a gap
            support = float(rng.integers(1, 300)) if i % 4 == 0 else None
            obs.append(
                Observation(
                    key, value, support, directions[i % 3], 20.0, count, i % 7 == 3 and j % 50 < 5,
                    i % 8 == 0, ts - 7.0 if i % 2 else None, "Asia/Tokyo" if i % 9 == 2 else None,
                    60.0 if count else 0.0, 60.0,
                )
            )  # fmt: skip
        want += by_list.observe(ts, obs)
        cols = Columns(
            keys=keys,
            value=np.array([math.nan if o.value is None else o.value for o in obs]),
            support=np.array([math.nan if o.support is None else o.support for o in obs]),
            has_support=np.array([o.support is not None for o in obs]),
            direction=[o.bad_direction for o in obs],
            min_support=np.full(n, 20.0),
            counts=np.array([o.counts for o in obs]),
            hold=np.array([o.hold for o in obs]),
            proportion=np.array([o.proportion for o in obs]),
            ts=np.array([ts if o.ts is None else o.ts for o in obs]),
            tz=[o.tz for o in obs],
            count_scale=np.array([o.count_scale for o in obs]),
            window_s=np.full(n, 60.0),
        )
        got += [(keys[r], e) for r, e in by_columns.observe_columns(ts, cols, slots)]
    assert got == want
    kinds = {e.kind for _, e in want}
    assert {"open", "close", "update"} <= kinds and len(want) >= 5
    assert sorted(by_columns.firing_keys()) == sorted(by_list.firing_keys())  # type: ignore[type-var]
