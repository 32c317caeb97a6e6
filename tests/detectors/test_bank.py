"""The vectorised bank gives the per-series ensemble's scores and alarms."""

from __future__ import annotations

import math
import pickle
import re
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pytest

from detectors import Ensemble, EnsembleBank, SeasonalProfile
from detectors import _bank_kernel as kernel
from detectors.bank import BankResult
from detectors.clock import LocalClock


def _series(seed: int, n_series: int = 6, steps: int = 1500) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    t = np.arange(steps) * 600.0
    day = np.sin(2 * np.pi * t / 86400)
    x = 50 + rng.normal(0, 1, (n_series, steps)) * rng.uniform(0.5, 5, (n_series, 1))
    x += rng.uniform(0, 20, (n_series, 1)) * day
    x[1:3] = 50 + rng.normal(0, 1, (2, steps)) + 10 * day
    x[1, 1000:] += 15  # level shift
    x[2, 900] += 40  # spike
    x[3, rng.choice(steps, 60, replace=False)] = np.nan  # gaps
    x[4] = np.round(x[4])  # quantised
    x[5, :] = 7.0  # constant
    x[5, 100:115] = 3.0  # a step of the constant gauge inside the warm-up
    x[5, 1300:1315] = 3.0  # and the same step later
    return x, t


def _assert_matches_ensembles(
    res: BankResult,
    x: np.ndarray,
    t: np.ndarray | None,
    params: dict[str, Any],
    warm: list[int | None] | None = None,
    sup: np.ndarray | None = None,
    hold: np.ndarray | None = None,
) -> None:
    """Each series of ``res`` equals one :class:`Ensemble` fed that series (``t``: per step,
    per value, or None; ``sup``: support per value, NaN where unknown; ``hold``: per value)."""
    for i in range(x.shape[0]):
        kw = dict(params) if warm is None else {**params, "warmup": warm[i]}
        ens = Ensemble(**kw)
        scores, opened = [], []
        for j in range(x.shape[1]):
            v = float(x[i, j])
            ts = None if t is None else float(t[j] if t.ndim == 1 else t[i, j])
            s = None if sup is None or math.isnan(sup[i, j]) else float(sup[i, j])
            tr = ens.update(v, ts, s, bool(hold is not None and hold[i, j]))
            if not math.isnan(v):
                scores.append(ens.score_)
                opened.append(tr == "open")
        keep = ~np.isnan(x[i])
        np.testing.assert_allclose(res.score[i, keep], scores, rtol=1e-9, atol=1e-12)
        assert res.opened[i, keep].tolist() == opened


@pytest.mark.parametrize(
    ("params", "with_t"),
    [
        ({}, True),
        ({}, False),
        ({"bad_direction": "up", "votes": 2, "min_duration": 1, "burst": 3.0}, True),
        ({"bad_direction": "up", "warmup": 200, "target_rate": 0.5, "refractory": 20}, True),
        ({"target_rate": 2.0, "min_effect": 0.0, "min_abs_effect": 0.5, "warmup": None}, True),
        ({"shift_gate": 0.0, "shift_share": 0.2, "target_rate": 0.5}, True),
        ({"shift_gate": 0.8, "shift_share": 0.7, "target_rate": 1.0, "min_duration": 1}, True),
        ({"warmup_outlier": 10.0, "min_duration": 1}, True),
        ({"warmup_outlier": 4.0, "warmup_alarm": True, "min_duration": 1}, True),
        ({"warmup_outlier": 4.0, "warmup_alarm": True, "warmup": None}, True),
        # a 2-day "week" so the second profile matures inside the 10-day series
        ({"week_period": 2 * 86400.0, "week_bins": 24, "min_duration": 1}, True),
        ({"week_bins": 0}, True),
        ({"resolution_always": True, "min_duration": 1}, True),
        # the spread member on: alone (no gate on the shift), in a vote of two, and quicker
        ({"spread_share": 0.2, "shift_gate": 0.0, "min_duration": 1}, True),
        ({"spread_share": 0.3, "votes": 2, "min_duration": 1, "target_rate": 2.0}, True),
        ({"spread_share": 0.1, "spread_alpha": 0.3, "spread_slow": 0.01}, False),
    ],
)
def test_bank_matches_per_series(params: dict[str, object], with_t: bool) -> None:
    x, t = _series(3)
    warmup = params.pop("warmup", [300, 250, 300, 400, 300, 300])
    bank = EnsembleBank(x.shape[0], warmup=warmup, **params)  # type: ignore[arg-type]
    res = bank.run(x, t if with_t else None)
    assert res.opened.any() or not with_t  # the comparison covers alarms, not only quiet scores
    warm: list[int | None] = (
        [None] * x.shape[0]
        if warmup is None
        else [int(w) for w in np.broadcast_to(np.asarray(warmup), (x.shape[0],))]
    )
    _assert_matches_ensembles(res, x, t if with_t else None, params, warm)


def test_bank_catches_shift_and_spike_not_constant() -> None:
    x, t = _series(3)
    res = EnsembleBank(x.shape[0], warmup=300, min_duration=1, warmup_outlier=10.0).run(x, t)
    assert res.opened[1, 1000:1010].any()  # the shift
    assert res.opened[2, 900]  # the spike
    # the constant gauge pages on its later step, not while it is constant: the step that
    # fell in the warm-up did not become its idea of a normal peak
    assert res.opened[5, 1300:1302].any() and res.opened[5].sum() == 1


@pytest.mark.parametrize("interval", [15.0, 60.0, 300.0])
def test_incident_in_warmup_does_not_blind_a_constant_gauge(interval: float) -> None:
    """A PFCP peers gauge (constant 1) drops to 0 for 17 min in the first hour, and again a
    day later: the second drop pages at every scrape interval (the first one is learnt from,
    but not as a normal peak)."""
    steps = int(2 * 86400 / interval)
    t = np.arange(steps) * interval
    x = np.ones((1, steps))
    for start in (3000.0, 90000.0):
        x[0, (t >= start) & (t < start + 17 * 60)] = 0.0
    kw: dict[str, Any] = {"bad_direction": "down", "warmup": None, "warmup_outlier": 10.0}
    res = EnsembleBank(1, **kw).run(x, t)
    ens = Ensemble(**kw)
    opened = [ens.update(float(v), float(ts)) == "open" for v, ts in zip(x[0], t, strict=True)]
    later = (t >= 90000.0) & (t < 90000.0 + 17 * 60)
    assert res.opened[0, later].any()
    assert res.opened[0].tolist() == opened
    first = (t >= 3000.0) & (t < 3000.0 + 17 * 60)
    assert not res.opened[0, first].any()  # no bar yet: the warm-up drop is only kept out
    # with warmup_alarm (the NOC monitor's) the warm-up drop pages too, beyond 4 iid bars
    # (at 5 min the first drop falls in the grace of 30 values, when nothing is scored)
    alarm = EnsembleBank(1, **{**kw, "warmup_outlier": 4.0, "warmup_alarm": True}).run(x, t)
    assert alarm.opened[0, first].any() == (interval <= 60.0) and alarm.opened[0, later].any()
    if interval <= 60.0:  # (at 5 min the hour of warm-up ends inside the first drop)
        # the default learns every warm-up peak (spiky series): the step is its normal peak
        blind = EnsembleBank(1, bad_direction="down", warmup=None).run(x, t)
        assert not blind.opened[0, later].any()


def test_gap_leaves_state_untouched() -> None:
    bank = EnsembleBank(2, warmup=50)
    x = np.random.default_rng(0).normal(size=(2, 200))
    t = np.arange(200) * 60.0
    bank.run(x, t)
    season, season_wide = bank.profiles_[0]
    before = [a.copy() for a in (bank.level_, bank.state_, bank.tails_, season_wide)]
    before_season = season.copy()
    score = bank.score_.copy()
    res, opened, _ = bank.step(np.array([np.nan, 0.0]), 200 * 60.0)
    after = (bank.level_, bank.state_, bank.tails_, season_wide)
    for old, new in zip(before, after, strict=True):  # series first
        np.testing.assert_array_equal(old[0], new[0])
    np.testing.assert_array_equal(before_season[:, 0], season[:, 0])  # (bins, series, keys)
    assert res[0] == score[0] and not opened[0]
    assert bank.level_[1, 1] != before[0][1, 1]  # the other series learnt


def test_bank_matches_per_series_with_support() -> None:
    """Ratios of counts (the sampling-noise floor) and a non-ratio with a support column."""
    rng = np.random.default_rng(4)
    steps = 1200
    t = np.arange(steps) * 300.0
    den = rng.integers(2, 40, (4, steps)).astype(float)
    ok = rng.binomial(den.astype(int), 0.995).astype(float)
    x = ok / den
    x[1, 900:] = (ok[1, 900:] * 0.5).round() / den[1, 900:]  # a collapse of a low-volume ratio
    x[2] = 0.02 + rng.normal(0, 0.001, steps)  # a mean (not a ratio of counts) with a support
    x[3, rng.choice(steps, 50, replace=False)] = np.nan
    sup = den.copy()
    sup[0, rng.choice(steps, 50, replace=False)] = np.nan  # support unknown for some values
    bank = EnsembleBank(4, bad_direction="down", warmup=200)
    res = bank.run(x, t, sup)
    assert res.opened[1, 900:].any()
    _assert_matches_ensembles(res, x, t, {"bad_direction": "down", "warmup": 200}, sup=sup)


def test_weekly_profile_learns_the_weekend() -> None:
    """Daytime traffic that is lower at weekends. A Wednesday that looks like a Sunday (its
    daytime at the weekend level) is normal for the daily profile, which blends the days of
    the week; the weekly profile (used from the third week) pages on it. Neither pages on
    the weekends themselves."""
    rng = np.random.default_rng(7)
    t = np.arange(0.0, 6 * 7 * 86400.0, 600.0)
    weekend = (t // 86400.0) % 7 >= 5
    busy = np.clip(np.sin(np.pi * ((t % 86400.0) / 3600.0 - 6) / 16), 0, None)
    x = 30 + np.where(weekend, 20.0, 70.0) * busy + rng.normal(0, 2, len(t))
    wednesday = (5 * 7 + 2) * 86400.0
    dip = (t >= wednesday + 10 * 3600.0) & (t < wednesday + 16 * 3600.0)
    x[dip] -= 50.0 * busy[dip]
    kw: dict[str, Any] = {"warmup": 2000, "min_duration": 2, "target_rate": 0.1}
    weekly = EnsembleBank(1, **kw).run(x[None], t)
    daily = EnsembleBank(1, week_bins=0, day_types=False, **kw).run(x[None], t)
    assert weekly.opened[0, dip].any() and weekly.opened[0].sum() == 1
    assert not daily.opened[0].any()


def test_hourly_series_pages_on_a_dip_only_its_daily_profile_sees() -> None:
    """Hourly values (every other bin of the 48-bin daily profile): on day 12 (before the
    weekly profile's third week) the value at the day's peak hour falls to the daily mean,
    well inside the series' range. Only the daily profile sees it; the bank pages there and
    nowhere else, and equals the per-series ensemble."""
    rng = np.random.default_rng(5)
    t = 1_795_910_400.0 + np.arange(0.0, 16 * 86400.0, 3600.0)
    x = 100 + 50 * np.sin(2 * np.pi * t / 86400.0) + rng.normal(0, 1, (1, len(t)))
    peak = int(np.flatnonzero(t >= t[0] + 12 * 86400.0 + 6 * 3600.0)[0])
    x[0, peak] = 100.0
    kw: dict[str, Any] = {"warmup": 200, "min_duration": 1, "target_rate": 0.1}
    res = EnsembleBank(1, **kw).run(x, t)
    assert np.flatnonzero(res.opened[0]).tolist() == [peak]
    _assert_matches_ensembles(res, x, t, kw)


def test_interval_is_the_median_step_not_the_smallest() -> None:
    """One 60 s step among 5-min ones (NAB's realTraffic files), scrape jitter and a gap: the
    interval behind the per-sample risk stays near 300 s in the bank and in the ensemble."""
    rng = np.random.default_rng(3)
    steps = 300.0 + rng.normal(0, 3, 600)
    steps[5] = 60.0
    steps[300] = 6 * 3600.0  # an outage
    t = np.cumsum(steps)
    x = 50 + rng.normal(0, 1, (1, len(t)))
    bank = EnsembleBank(1, warmup=100)
    bank.run(x, t)
    ens = Ensemble(warmup=100)
    for v, ts in zip(x[0], t, strict=True):
        ens.update(float(v), float(ts))
    assert abs(bank.interval_[0] - 300.0) < 0.06 * 300.0
    assert ens.interval_ == bank.interval_[0]


def test_bank_matches_per_series_with_own_timestamps() -> None:
    """One timestamp per value (NAB's files: each its own start, interval and jitter): the
    bank's per-series path gives each series' ensemble scores and alarms."""
    rng = np.random.default_rng(11)
    steps = 1600
    step = np.array([300.0, 600.0, 300.0])[:, None] + np.r_[0.0, 0.0, 5.0][:, None] * rng.normal(
        size=(3, steps)
    )
    t = np.cumsum(step, axis=1) + np.array([0.0, 7 * 3600.0, 86400.0 * 3.5])[:, None]
    x = 50 + 10 * np.sin(2 * np.pi * t / 86400) + rng.normal(0, 1, (3, steps))
    x[0, 1200:] += 8.0
    x[1, 1000] += 30.0
    x[2, rng.choice(steps, 40, replace=False)] = np.nan
    kw: dict[str, Any] = {"warmup": 300, "min_duration": 1, "target_rate": 0.5}
    res = EnsembleBank(3, **kw).run(x, t)
    assert res.opened[0, 1200:].any() and res.opened[1, 1000:1003].any()
    _assert_matches_ensembles(res, x, t, kw)


def test_float32_bank_stays_close_to_float64() -> None:
    """Half the memory, the same alarms on noisy series (scores within float32 noise). Not on
    the constant gauge (series 5): its scale sits at the 1e-6 relative floor, where float32
    rounding is the size of the deviation."""
    x, t = _series(5)
    kw: dict[str, Any] = {"warmup": 300, "min_duration": 1}
    r64 = EnsembleBank(x.shape[0], **kw).run(x, t)
    r32 = EnsembleBank(x.shape[0], dtype=np.float32, **kw).run(x, t)
    assert r32.score.dtype == np.float32
    np.testing.assert_allclose(r32.score[:5], r64.score[:5], rtol=1e-3, atol=1e-3)
    assert r64.opened[:5].any()
    assert (r32.opened[:5] != r64.opened[:5]).sum() <= 2


def test_sparse_counts_page_on_news_not_on_every_event() -> None:
    """Counts of rare events (0 most of the time) have a robust scale of 0: without the
    resolution floor every 1 was an infinite z and paged (2.3 alarms a day at 2 % ones);
    with it, a 1 is ordinary, and a count far beyond what the series showed still pages. (The
    exponential tail fitted to the 1s reaches about four counts at the budget's risk, so a 3
    does not page: conservative for discrete data.)"""
    rng = np.random.default_rng(5)
    steps = 4000  # 5-min samples, ~14 days
    t = np.arange(steps) * 300.0
    x = np.vstack(
        [
            (rng.random(steps) < 0.02).astype(float),
            (rng.random(steps) < 0.10).astype(float),
            rng.poisson(0.3, steps).astype(float),
        ]
    )
    x[0, 3500] = 6.0
    # as the NOC monitor runs it: warm-up peaks beyond 4x the iid bar (the first 1s, scored
    # before the resolution was known) do not feed the tail
    params: dict[str, Any] = {"min_duration": 1, "warmup_outlier": 4.0}
    res = EnsembleBank(3, warmup=300, **params).run(x, t)
    opened = np.flatnonzero(res.opened[0]).tolist()
    assert 3500 in opened and len(opened) <= 2
    assert res.opened[1:].sum() <= 2
    _assert_matches_ensembles(res, x, t, params, [300] * 3)


def test_counts_quiet_in_the_warm_up_learn_their_resolution_later() -> None:
    """A counter quiet through its warm-up that later ticks now and then (10 % of intervals):
    as events (``resolution_always``) it pages on the first ticks, then learns that a tick is
    routine; as a state (the default: peers up, an Xid code) every later tick is news."""
    rng = np.random.default_rng(9)
    steps = 4000
    t = np.arange(steps) * 300.0
    x = np.zeros((1, steps))
    x[0, 1500:] = (rng.random(steps - 1500) < 0.1).astype(float)
    params: dict[str, Any] = {"min_duration": 1, "warmup_outlier": 4.0}
    as_state = EnsembleBank(1, warmup=300, **params).run(x, t).opened[0]
    as_counts = EnsembleBank(1, warmup=300, resolution_always=True, **params).run(x, t).opened[0]
    assert as_counts[1500:1600].any() and not as_counts[2000:].any()
    assert as_state[2000:].sum() >= 20


def _grace_fault(interval: float = 900.0, days: float = 3.0) -> tuple[np.ndarray, np.ndarray]:
    """An SM-clock gauge (1977 MHz, noise 4) at a 15-min PM period that drops to 345 MHz for
    two periods inside the grace (a fault in the first hours of monitoring), then to 1800 MHz
    for one period a day later (a thermal throttle)."""
    rng = np.random.default_rng(17)
    steps = int(days * 86400 / interval)
    t = np.arange(steps) * interval
    x = 1977.0 + rng.normal(0, 4, (1, steps))
    x[0, 25:27] = 345.0
    x[0, 110] = 1800.0
    return x, t


def test_a_fault_in_the_grace_does_not_inflate_the_scale() -> None:
    """Learnt as it came, the grace's fault made the scale 30 times the noise for days, and
    the throttle a day later went unseen; clipped at ``grace_clip`` scales it pages."""
    x, t = _grace_fault()
    kw: dict[str, Any] = {"bad_direction": "down", "warmup_outlier": 4.0, "min_duration": 1}
    res = EnsembleBank(1, grace_clip=8.0, **kw).run(x, t)
    assert res.opened[0, 110] and res.opened[0].sum() == 1
    assert not EnsembleBank(1, **kw).run(x, t).opened[0].any()


def test_bank_matches_per_series_with_grace_clip_and_hold() -> None:
    x, t = _series(5)
    x[0, 12:15] -= 200.0  # a fault in the grace
    x[2, 20] += 300.0
    hold = np.random.default_rng(2).random(x.shape) < 0.1
    hold[:, 880:960] = True  # another KPI of the entity alarms around the spike at 900
    params: dict[str, Any] = {"grace_clip": 6.0, "min_duration": 1, "warmup_outlier": 10.0}
    warm = [300, 250, 300, 400, 300, 300]
    bank = EnsembleBank(x.shape[0], warmup=warm, **params)
    res = bank.run(x, t, hold=hold)
    assert res.opened.any()
    _assert_matches_ensembles(res, x, t, params, list(warm), hold=hold)


def test_peaks_while_the_entity_alarms_stay_out_of_the_tail() -> None:
    """A KPI that moves 4 z with every fault of its entity (less than its bar) learns those
    moves as normal peaks and raises its bar until it never pages; held while another KPI of
    the entity alarms, its bar stays where the noise alone puts it (and the larger moves
    page)."""
    rng = np.random.default_rng(8)
    steps = 2000
    t = np.arange(steps) * 300.0
    clean = 100.0 + rng.normal(0, 1, (1, steps))
    x = clean.copy()
    faults = np.zeros((1, steps), np.bool_)
    for start in range(200, steps, 100):
        x[0, start : start + 2] += 4.0
        faults[0, start : start + 3] = True
    kw: dict[str, Any] = {"bad_direction": "up", "target_rate": 0.005, "min_duration": 2}
    bars, pages = [], []
    for values, hold in ((clean, None), (x, faults), (x, None)):
        bank = EnsembleBank(1, **kw)
        pages.append(int(bank.run(values, t, hold=hold).opened.sum()))
        bars.append(float(bank.detail_[0, 2]))
    noise, held, free = bars
    assert held == pytest.approx(noise, abs=0.5)
    assert free > noise + 3.0  # about 11 z: the faults became normal
    assert pages[1] > 0 and pages[2] == 0


def test_trending_series_pages_on_a_dip_its_lagging_profile_hid() -> None:
    """Traffic growing 3 % a day: a daily profile learnt per day (weight 0.2) trails it by
    ~15 %, and that lag sat in the scale, so a 12 % dip for an hour at the day's peak on day
    16 stayed under the bar (score 0.15 before the trend term). The trend term learns the
    steady lag and the bank pages on the dip and nowhere else, equal to the per-series
    ensemble."""
    rng = np.random.default_rng(7)
    t = 1_795_910_400.0 + np.arange(0.0, 20 * 86400.0, 300.0)
    days = (t - t[0]) / 86400.0
    x = rng.poisson(1000 * (1 + 0.5 * np.sin(2 * np.pi * days)) * (1 + 0.03 * days))
    x = x.astype(float)[None, :]
    dip = int(np.flatnonzero(t >= t[0] + 16 * 86400.0 + 6 * 3600.0)[0])
    x[0, dip : dip + 12] *= 0.88
    kw: dict[str, Any] = {"warmup": 1000, "min_duration": 2, "target_rate": 0.1}
    res = EnsembleBank(1, **kw).run(x, t)
    opens = np.flatnonzero(res.opened[0]).tolist()
    assert len(opens) == 1 and dip <= opens[0] < dip + 12
    _assert_matches_ensembles(res, x, t, kw)
    kw["follow_trend"] = False  # the knob the KPI benchmark compares against
    res = EnsembleBank(1, **kw).run(x, t)
    assert not res.opened[0].any() and res.score[0, dip : dip + 12].max() < 0.5
    _assert_matches_ensembles(res, x, t, kw)


def test_kernel_cache_is_keyed_on_what_it_inlines() -> None:
    """numba keys its on-disk cache on the kernel's own file: a helper or constant compiled
    in from another module (the trend term's shrinkage, the resolution floor) must change that
    file when it changes, or a stale kernel would run. The digest below is that change."""
    got = kernel.dependency_digest()
    assert got == kernel.DEPENDENCY_DIGEST, (
        f"an inlined helper or constant changed: set DEPENDENCY_DIGEST = {got!r} in"
        " detectors/_bank_kernel.py"
    )


def test_a_level_step_is_not_taken_for_a_trend() -> None:
    """Traffic that steps up by 15–50 % on day 15 (a migration, new sites) and stays: the
    profiles lag it for days, but by a share that shrinks day by day, not a steady one, so
    the trend term stays out. Each series pages at the step and never again (with the term
    unshrunk, TREND_T = 0, two series paged again on day 28)."""
    rng = np.random.default_rng(11)
    t = 1_795_910_400.0 + np.arange(0.0, 40 * 86400.0, 300.0)
    days = (t - t[0]) / 86400.0
    n = 20
    rate = 500 * (1 + 0.5 * np.sin(2 * np.pi * days))[None, :] * rng.uniform(0.5, 4, (n, 1))
    rate = rate * np.where(days >= 15, rng.uniform(1.15, 1.5, (n, 1)), 1.0)
    x = rng.poisson(rate).astype(float)
    res = EnsembleBank(n, warmup=2000, min_duration=2, target_rate=0.1).run(x, t)
    step = (days >= 15.0) & (days < 17.0)
    assert res.opened[:, step].sum(axis=1).tolist() == [1] * n
    assert not res.opened[:, ~step].any()


def _weekend_traffic(
    seed: int, days: int, interval: float, level: float, start: float = 0.0,
    weekend: tuple[int, ...] = (5, 6), utc_offset: float = 0.0,
) -> np.ndarray:  # fmt: skip
    """Poisson counts from ``start`` after Monday 1970-01-05 00:00 UTC: a daily swing of 40 %,
    the ``weekend`` days (local time, ``utc_offset`` s east of UTC) at 60 %."""
    rng = np.random.default_rng(seed)
    t = 4 * 86400.0 + start + np.arange(days * 86400.0 // interval) * interval
    weekday = ((t + utc_offset) // 86400.0 + 3) % 7
    low = np.isin(weekday, weekend)
    rate = level * (1 + 0.4 * np.sin(2 * np.pi * t / 86400.0)) * np.where(low, 0.6, 1.0)
    return np.stack([t, rng.poisson(rate).astype(float)])


def test_first_weekend_in_the_warm_up_does_not_blind_the_bars() -> None:
    """Hourly traffic whose 9-day warm-up (NAB's probation of a 60-day file) holds the first
    weekend. Measured against the weekday profile, that weekend scores tens of z, and learnt
    as normal peaks it set the bars for good: a 15 % dip on a Tuesday of the fourth week
    scored a fifth of its bar. The day-type profile predicts the weekend from its second day,
    and the first one's peaks stay out of the tails; the dip pages, the same series without
    it pages nothing, and the bank equals the per-series ensemble."""
    t, x = _weekend_traffic(4, 40, 3600.0, 10_000.0)
    dip = slice(22 * 24 + 10, 22 * 24 + 13)  # Tuesday 10:00-13:00
    clean = x.copy()
    x[dip] *= 0.85
    kw: dict[str, Any] = {
        "warmup": 9 * 24 - 30, "min_duration": 1, "target_rate": 0.02, "shift_gate": 0.0,
        "tail_start": 3.0, "min_effect": 0.03,
    }  # fmt: skip
    res = EnsembleBank(1, **kw).run(x[None], t)
    assert np.flatnonzero(res.opened[0]).tolist() == [dip.start]
    assert not EnsembleBank(1, **kw).run(clean[None], t).opened.any()
    without = EnsembleBank(1, day_types=False, **kw).run(x[None], t)
    assert not without.opened.any() and without.score[0, dip].max() < 0.5
    _assert_matches_ensembles(res, x[None], t, kw)


def test_bank_matches_per_series_with_day_types() -> None:
    """Weekend traffic at 5 min, 20 min and 1 h with their own timestamps, a Friday–Saturday
    weekend three hours east of UTC: the bank equals the per-series ensemble, whose day-type
    profile is both chosen and, on the first weekend in the warm-up, keeps peaks out."""
    gulf: dict[str, Any] = {"weekend": (4, 5), "utc_offset": 3 * 3600.0}
    rows = [
        _weekend_traffic(s, d, i, level, start, **gulf)
        for s, d, i, level, start in (
            (1, 6, 300.0, 500.0, 0.0), (2, 24, 1200.0, 500.0, 1800.0),
            (3, 72, 3600.0, 2000.0, 7 * 3600.0),
        )
    ]  # fmt: skip
    t = np.stack([r[0] for r in rows])
    x = np.stack([r[1] for r in rows])
    x[1, 900:905] *= 0.5
    kw: dict[str, Any] = {**gulf, "min_duration": 1, "target_rate": 0.5}
    warm = [600, 300, 400]
    res = EnsembleBank(3, warmup=warm, **kw).run(x, t)
    _assert_matches_ensembles(res, x, t, kw, warm)  # type: ignore[arg-type]
    chosen = novel = 0
    for i in range(3):
        ens = Ensemble(warmup=warm[i], **kw)
        typed = ens.daytype_
        assert typed is not None
        for v, ts in zip(x[i], t[i], strict=True):
            novel += math.isinf(ens.bars_[0]) and typed.new_day_type(float(ts))
            ens.update(float(v), float(ts))
            pred = typed.predict(float(ts)) if typed.ready() else None
            chosen += pred is not None and pred[0] == ens.expected_
    assert chosen > 100 and novel > 10
    assert res.opened[1, 900:903].any()


@pytest.mark.parametrize(
    ("monday", "change"),
    [((2025, 3, 10), (2025, 3, 30, 1)), ((2025, 10, 13), (2025, 10, 26, 1))],
    ids=["forward", "back"],
)
def test_a_change_of_clocks_does_not_page_a_zoned_bank(
    monday: tuple[int, ...], change: tuple[int, ...]
) -> None:
    """15-min traffic that follows Berlin's wall clock (a 60 % daily swing, weekend days 30 %
    lower at noon) through a change of clocks (30 March 2025: the day's pattern moves an hour
    earlier in UTC; 26 October: later). On Berlin time the bank pages only a 30 % dip three
    days on and equals the per-series ensemble; on UTC the next morning's ramp comes an hour
    off against every profile and pages."""
    start = datetime(*monday, tzinfo=UTC).timestamp()
    moved = datetime(*change, tzinfo=UTC).timestamp()
    t = start + np.arange(27 * 96) * 900.0
    local = LocalClock("Europe/Berlin").local_array(t)
    hour = (local % 86400.0) / 3600.0
    weekend = ((local // 86400.0 + 3) % 7) >= 5
    rng = np.random.default_rng(11)
    level = np.array([[2000.0], [10000.0], [40000.0]])
    quiet = 1 - 0.3 * weekend * np.sin(np.pi * hour / 24.0) ** 2  # nights alike every day
    rate = level * (1 + 0.6 * np.sin(2 * np.pi * (hour - 9.0) / 24.0)) * quiet
    x = rng.poisson(rate).astype(float)
    dip = int(np.flatnonzero(t >= moved + 3 * 86400.0 + 7 * 3600.0)[0])
    x[1, dip : dip + 4] *= 0.7
    kw: dict[str, Any] = {"warmup": 7 * 96, "min_duration": 2, "target_rate": 0.1}
    zoned = EnsembleBank(3, tz="Europe/Berlin", **kw).run(x, t)
    assert [np.flatnonzero(o).tolist() for o in zoned.opened] == [[], [dip + 1], []]
    _assert_matches_ensembles(zoned, x, t, {**kw, "tz": "Europe/Berlin"})
    on_utc = EnsembleBank(3, **kw).run(x, t)
    after = (t >= moved) & (t < moved + 2 * 86400.0)
    assert on_utc.opened[:, after].any()


def test_a_profile_learnt_over_one_night_is_not_yet_the_reference() -> None:
    """A 15-min throughput gauge, 1,000 at night and 30,000 at 14:00, with 5 % noise. The
    daily profile predicts from the second day; after its first 30 residuals, all at night,
    its deviation is a fifth of what a whole day teaches it, and taken as the reference then
    it paged the second day's ordinary busy-hour noise (all three series, 08:00-14:00). Once
    the bars are live (a warm-up of an hour) a profile is the reference only after it has
    predicted a daily cycle: nothing pages after the first day's climb, and the bank equals
    the per-series ensemble."""
    rng = np.random.default_rng(5)
    t = 4 * 86400.0 + np.arange(5 * 96) * 900.0  # Monday 00:00 UTC, 5 days
    hour = (t % 86400.0) / 3600.0
    level = 1000.0 + 29000.0 * np.exp(-0.5 * ((hour - 14.0) / 3.5) ** 2)
    x = level * (1 + 0.05 * rng.standard_normal((3, len(t))))
    kw: dict[str, Any] = {"min_duration": 2, "target_rate": 0.1, "warmup_s": 3600.0}
    res = EnsembleBank(3, **kw).run(x, t)
    assert res.opened[:, :96].any() and not res.opened[:, 96:].any()
    _assert_matches_ensembles(res, x, t, kw)
    prof = SeasonalProfile()
    first = math.nan
    for v, ts in zip(x[0], t, strict=True):
        prof.learn_one(float(v), float(ts))
        if prof.ready() and math.isnan(first):
            first = prof.global_mad_
    assert first < 0.3 * prof.global_mad_


@pytest.mark.parametrize("share", [0.0, 0.3])
def test_spread_member_pages_when_the_noise_grows(share: float) -> None:
    """A 1-min gauge whose noise grows by 60 % on day 3, its level unchanged: no single value
    is far enough off to page, the spread member (``spread_share``) pages within the hour;
    the bank and the per-series ensemble agree."""
    rng = np.random.default_rng(3)
    day = 1440
    x = 100 + rng.normal(0, 1, 3 * day)
    x[2 * day :] = 100 + rng.normal(0, 1.6, day)
    t = np.arange(3 * day) * 60.0
    kw: dict[str, Any] = {"warmup": 600, "min_duration": 1, "week_bins": 0, "spread_share": share}
    res = EnsembleBank(1, **kw).run(x[None, :], t)
    ens = Ensemble(**kw)
    opened = [ens.update(float(v), float(ts)) == "open" for v, ts in zip(x, t, strict=True)]
    assert res.opened[0].tolist() == opened
    assert not res.opened[0, : 2 * day].any()
    if share > 0:
        assert res.opened[0, 2 * day : 2 * day + 60].any()
    else:
        assert not res.opened[0].any() and ens.spread_ratio_ == 0.0


@pytest.mark.parametrize("cls", [Ensemble, EnsembleBank])
@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"shift_share": 0.7, "spread_share": 0.3}, "shift_share + spread_share"),
        ({"spread_share": -0.1}, "spread_share"),
        ({"shift_share": 1.0}, "shift_share"),
        ({"spread_alpha": 0.0}, "spread_alpha"),
        ({"target_rate": math.nan}, "target_rate"),
        ({"votes": 0}, "votes"),
        ({"bad_direction": "sideways"}, "bad_direction"),
    ],
)
def test_settings_the_detectors_cannot_honour_are_refused(
    cls: type[Ensemble] | type[EnsembleBank], params: dict[str, Any], field: str
) -> None:
    args: tuple[int, ...] = (2,) if cls is EnsembleBank else ()
    with pytest.raises(ValueError, match=f"^{re.escape(field)} must"):
        cls(*args, **params)
    cls(*args)  # the defaults pass


def _old_layout(season: np.ndarray) -> np.ndarray:
    """A profile's bins as snapshots before the compact layout held them: every count in
    float32."""
    old = np.dtype([(k, season.dtype[k]) for k in ("level", "mad", "sum")]
                   + [(k, np.float32) for k in ("days", "resn", "cnt", "cday")])  # fmt: skip
    out = np.empty(season.shape, old)
    for name in old.names or ():
        out[name] = season[name]
    return out


def test_compact_bins_restore_old_snapshots_and_cost_35_bytes() -> None:
    """A bin is 35 bytes in float64 (23 in float32): counts in uint16 and uint8, not float32.
    A bank pickled with the old layout restores into the new one and goes on exactly as the
    bank that was never pickled."""
    rng = np.random.default_rng(3)
    t = 1_795_910_400.0 + np.arange(0.0, 9 * 86400.0, 600.0)
    x = 100 + 20 * np.sin(2 * np.pi * t / 86400.0) + rng.normal(0, 2, size=(3, t.size))
    x[1, -40:] += 30.0
    half = t.size // 2
    for dtype, per_bin in ((np.float64, 35), (np.float32, 23)):
        bank = EnsembleBank(3, warmup=200, dtype=dtype)
        bank.run(x[:, :half], t[:half])
        bins = sum(s.shape[0] for s, _ in bank.profiles_)
        assert [s.dtype.itemsize for s, _ in bank.profiles_] == [per_bin] * 3
        assert bins == 48 + 168 + 96
        old = pickle.loads(pickle.dumps(bank))
        old.profiles_ = [(_old_layout(s), g) for s, g in old.profiles_]
        restored = pickle.loads(pickle.dumps(old))
        assert [s.dtype for s, _ in restored.profiles_] == [s.dtype for s, _ in bank.profiles_]
        for (a, _), (b, _) in zip(bank.profiles_, restored.profiles_, strict=True):
            assert a.tobytes() == b.tobytes()
        restored.extend(1)  # a new series after the restore: the layouts join
        ref = bank.run(x[:, half:], t[half:])
        got = restored.run(np.vstack([x[:, half:], x[:1, half:]]), t[half:])
        np.testing.assert_array_equal(ref.score, got.score[:3])
        np.testing.assert_array_equal(ref.opened, got.opened[:3])
        assert ref.opened[1].any()


def test_a_learning_rate_the_day_count_cannot_follow_is_refused() -> None:
    """A bin counts days to 65535: below a rate of 1/65536 the count would still matter
    where it stops, so such a setting is an error that names the field."""
    with pytest.raises(ValueError, match="seasonal_alpha must be at least 1/65536"):
        EnsembleBank(1, seasonal_alpha=1e-6)
    with pytest.raises(ValueError, match="week_min at most 65535"):
        EnsembleBank(1, week_min=70_000)
