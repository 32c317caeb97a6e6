"""Fixes of simulator false alarms, each with a series that reproduces the cause.

1. A smooth daily gauge: a bin's level is a per-day estimate, used only once the bin was seen
   on two separate days, and interpolated between bins (no staircase).
2. A low-volume ratio stuck at 1.0: the scale has a sampling-noise floor ``√(p̃(1 − p̃)/n)``
   from the ``support`` of each value, and only for ratios of counts.
3. After an episode closes, the CUSUM restarts: a recovering series does not re-page.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import numpy as np

from detectors import Ensemble, SeasonalProfile, SeriesMonitor

DAY = 86400.0
T0 = 1_795_910_400.0  # midnight UTC


def _opens(mon: SeriesMonitor, rows: Sequence[tuple[float, float, float | None]]) -> list[float]:
    out = []
    for ts, v, sup in rows:
        ev = mon.observe(ts, v, sup)
        if ev is not None and ev.kind == "open":
            out.append(ts)
    return out


def test_profile_needs_two_separate_days() -> None:
    prof = SeasonalProfile(n_bins=48)
    for t in np.arange(0.0, DAY, 60.0):
        prof.learn_one(100.0, T0 + t)
        assert not prof.mature(T0 + t + 60.0) or t + 60.0 >= DAY  # one day: never used
    assert prof.mature(T0 + DAY + 3600.0)  # a second day: yesterday's bins are used


def test_profile_interpolates_between_bins() -> None:
    prof = SeasonalProfile(n_bins=48)

    def ramp(t: float) -> float:  # 0 → 24 over the day: 0.5 per bin
        return (t % DAY) / 3600.0

    for t in np.arange(T0, T0 + 2 * DAY, 60.0):
        prof.learn_one(ramp(float(t)), float(t))
    errors = []
    for t in np.arange(T0 + 2 * DAY + 3600.0, T0 + 3 * DAY - 3600.0, 450.0):
        pred = prof.predict(float(t))
        assert pred is not None
        errors.append(abs(pred[0] - ramp(float(t))))
    assert max(errors) < 0.05  # a staircase of 0.5-unit bins would be off by up to 0.25


def test_trend_term_follows_growth_and_leaves_a_wandering_series_alone() -> None:
    """A series growing 3 % a day: without the trend term the profile (a per-day EWMA)
    trails it by 10 % on day 12; with it, by 3 % (the term is shrunk toward 0 by its
    standard error over its first days). A series whose daily level wanders ±10 % at random
    (no trend) gets no correction at all."""
    rng = np.random.default_rng(3)
    grow, fixed, wander = SeasonalProfile(), SeasonalProfile(follow_trend=False), SeasonalProfile()
    level = 1.0
    for day in range(12):
        level = float(np.exp(rng.normal(0.0, 0.1)))
        for t in np.arange(0.0, DAY, 300.0):
            ts = T0 + day * DAY + float(t)
            shape = 1 + 0.5 * math.sin(2 * math.pi * t / DAY)
            grown = 1000.0 * shape * (1 + 0.03 * (day + t / DAY))
            grow.learn_one(grown + rng.normal(0, 5), ts)
            fixed.learn_one(grown + rng.normal(0, 5), ts)
            wander.learn_one(1000.0 * shape * level + rng.normal(0, 5), ts)
    ts = T0 + 12 * DAY + 6 * 3600.0
    truth = 1500.0 * (1 + 0.03 * 12.25)
    with_trend, without = grow.predict(ts), fixed.predict(ts)
    assert with_trend is not None and without is not None
    assert abs(with_trend[0] / truth - 1) < 0.04
    assert without[0] / truth < 0.92
    assert grow.trend(ts) > 0.05
    assert fixed.trend(ts) == 0.0
    assert wander.trend(ts) == 0.0


def test_hourly_series_has_a_daily_profile() -> None:
    """Values on the hour fill every other half-hour bin. A bin the series never visits does
    not hold its neighbour back: from the second day on (the visited bin seen on two days,
    today counted, as for any bin) the profile predicts the hour's own level; a series that
    starts mid-day is not affected (a bin not yet visited today keeps its neighbour waiting,
    as before)."""
    prof = SeasonalProfile(n_bins=48)
    hours = np.arange(0.0, 4 * DAY, 3600.0)
    for t in hours[hours < DAY]:
        prof.learn_one(10.0 + (t % DAY) / 3600.0, T0 + t)
    pred = prof.predict(T0 + DAY + 5 * 3600.0)
    assert pred is not None and abs(pred[0] - 15.0) < 1e-9
    for t in hours[(hours >= DAY) & (hours < 2 * DAY)]:
        prof.learn_one(10.0 + (t % DAY) / 3600.0, T0 + t)
    pred = prof.predict(T0 + 2 * DAY + 5 * 3600.0)
    assert pred is not None and abs(pred[0] - 15.0) < 1e-9
    late = SeasonalProfile(n_bins=48)
    for t in np.arange(DAY / 2, DAY + 3600.0, 60.0):  # from noon to 01:00 the next day
        late.learn_one(1.0, T0 + t)
    assert late.predict(T0 + DAY + 3600.0) is None  # 01:00's bin: first seen today


def test_day_types_keep_weekends_apart() -> None:
    """Hourly traffic at 100 on working days and 60 at weekends, from a Monday. The day-type
    profile predicts 60 on the first Sunday (Saturday seen) and 100 on Monday again; the plain
    daily profile, one set of bins for every day, predicts a weekday-sized Sunday. The first
    Saturday is new to it (:meth:`SeasonalProfile.new_day_type`), Sunday is not; it may
    stand in for the daily profile (:meth:`SeasonalProfile.both_ready`) from that Sunday on,
    once it has predicted both kinds of day. A Friday–Saturday weekend three hours east of UTC
    puts 21:00 UTC on Thursday in the weekend."""
    monday = T0 + DAY  # T0 is a Sunday
    typed, plain = SeasonalProfile(day_types=True), SeasonalProfile()
    new_on: set[int] = set()
    both_on: set[int] = set()
    for t in np.arange(monday, monday + 7 * DAY, 3600.0):
        weekday = int((t - monday) // DAY)
        x = 60.0 if weekday >= 5 else 100.0
        if typed.new_day_type(float(t)):
            new_on.add(weekday)
        if typed.both_ready(float(t)) and typed.predict(float(t)) is not None:
            both_on.add(weekday)
        typed.learn_one(x, float(t))
        plain.learn_one(x, float(t))
        if t == monday + 6 * DAY + 11 * 3600.0:  # Sunday 11:00, before its value
            sunday_typed, sunday_plain = typed.predict(float(t)), plain.predict(float(t))
    assert new_on == {5} and both_on == {6}
    assert typed.both_ready(monday + 9 * DAY)  # a Wednesday: both seen
    assert sunday_typed is not None and abs(sunday_typed[0] - 60.0) < 1e-6
    assert sunday_plain is not None and sunday_plain[0] > 85.0
    monday_typed = typed.predict(monday + 7 * DAY + 11 * 3600.0)
    assert monday_typed is not None and abs(monday_typed[0] - 100.0) < 1e-6
    gulf = SeasonalProfile(day_types=True, weekend=(4, 5), utc_offset=3 * 3600.0)
    thursday = monday + 3 * DAY
    at = gulf.clock_.local
    assert gulf._bin(at(thursday + 20 * 3600.0)) < 48 <= gulf._bin(at(thursday + 21 * 3600.0))
    for bad in ({"period": 7 * DAY}, {"weekend": (7,)}):
        try:
            SeasonalProfile(day_types=True, **bad)  # type: ignore[arg-type]
        except ValueError:
            continue
        raise AssertionError(f"accepted {bad}")


def test_each_day_type_follows_its_own_trend() -> None:
    """Flat working days and weekends growing 2 % a day: the day-type profile corrects its
    weekend bins by their own lag (they are seen two days a week and trail further) and
    leaves the working days alone; the plain daily profile, whose days' lags have no steady
    sign, corrects neither."""
    rng = np.random.default_rng(2)
    monday = T0 + DAY
    typed, plain = SeasonalProfile(day_types=True), SeasonalProfile()
    for t in np.arange(monday, monday + 42 * DAY, 900.0):
        day = (t - monday) / DAY
        level = 0.6 * (1 + 0.02 * day) if int(day) % 7 >= 5 else 1.0
        x = 1000.0 * (1 + 0.3 * math.sin(2 * math.pi * t / DAY)) * level
        typed.learn_one(x + rng.normal(0, 3), float(t))
        plain.learn_one(x + rng.normal(0, 3), float(t))
    wednesday, saturday = monday + 44 * DAY, monday + 47 * DAY
    assert typed.trend(wednesday) == 0.0 and typed.trend(saturday) > 0.1
    assert plain.trend(wednesday) == 0.0 and plain.trend(saturday) == 0.0


def test_smooth_daily_gauge_does_not_page() -> None:
    """A registered-subscribers gauge: integer, smooth, slowly wandering day to day."""
    rng = np.random.default_rng(2)
    t = T0 + np.arange(0.0, 3 * DAY, 15.0)
    drift = np.cumsum(rng.normal(0, 0.3, len(t)))
    x = np.round(2000 + 600 * np.sin(2 * np.pi * (t - T0) / DAY - 1.0) + drift)
    mon = SeriesMonitor(bad_direction="down")
    assert _opens(mon, [(a, b, None) for a, b in zip(t.tolist(), x.tolist(), strict=True)]) == []


def _low_volume_ratio(seed: int, days: float, p_fail: float) -> list[tuple[float, float, float]]:
    """Success ratio over 4 overlapping scrapes of a few attempts each (as the pipeline does)."""
    rng = np.random.default_rng(seed)
    t = T0 + np.arange(0.0, days * DAY, 15.0)
    req = rng.poisson(1.5, len(t))
    fail = rng.binomial(req, p_fail)
    den = np.convolve(req, np.ones(4))[: len(t)]
    num = den - np.convolve(fail, np.ones(4))[: len(t)]
    return [
        (a, n / d, d)
        for a, n, d in zip(t.tolist(), num.tolist(), den.tolist(), strict=True)
        if d >= 1
    ]


def test_low_volume_ratio_stuck_at_one_does_not_page() -> None:
    rows = _low_volume_ratio(5, 2.0, 0.01)
    assert sum(v == 1.0 for _, v, _ in rows) > 0.9 * len(rows)  # the spread collapses
    assert _opens(SeriesMonitor(bad_direction="down", min_support=1), rows) == []


def test_low_volume_ratio_outage_still_pages() -> None:
    rows = _low_volume_ratio(6, 1.5, 0.002)
    mon = SeriesMonitor(bad_direction="down", min_support=1)
    assert _opens(mon, rows) == []
    rng = np.random.default_rng(7)
    t_end = rows[-1][0]
    outage = []
    for i in range(1, 120):  # half the attempts fail for 30 minutes
        den = float(rng.integers(4, 10))
        outage.append((t_end + 15.0 * i, float(rng.binomial(int(den), 0.5)) / den, den))
    hit = _opens(mon, outage)
    assert hit and hit[0] - t_end <= 300.0


def test_noise_floor_only_for_ratios_of_counts() -> None:
    ratio, mean = Ensemble(), Ensemble()
    rng = np.random.default_rng(8)
    for i in range(200):
        n = float(rng.integers(5, 50))
        ratio.update(float(rng.binomial(int(n), 0.9)) / n, 15.0 * i, n)
        mean.update(0.02 + float(rng.normal(0, 0.001)), 15.0 * i, n)  # a latency with a count
    assert ratio.proportion_ and not mean.proportion_
    assert ratio._noise_floor(1.0, 10.0) > 0.05  # one failure in 10 is within the noise
    assert mean._noise_floor(0.02, 10.0) == 0.0


def test_cusum_restarts_when_an_episode_closes() -> None:
    rng = np.random.default_rng(9)
    ens = Ensemble(bad_direction="down", warmup=300)
    closed = False
    for i in range(1000):
        dip = 20.0 if 600 <= i < 640 else 0.0
        tr = ens.update(100.0 + float(rng.normal(0, 1)) - dip, 60.0 * i)
        if tr == "close":
            closed = True
            assert ens.up_ == 0.0 and ens.down_ == 0.0
    assert closed and math.isfinite(ens.bars_[1])


def _small_shift_opens(shift_gate: float, size: float) -> list[int]:
    """Alarm openings on N(100, 1) noise with a lasting shift of ``size`` σ from step 800."""
    rng = np.random.default_rng(12)
    ens = Ensemble(warmup=300, shift_gate=shift_gate)
    out = []
    for i in range(1400):
        x = 100.0 + float(rng.normal(0, 1)) + (size if i >= 800 else 0.0)
        if ens.update(x, 60.0 * i) == "open":
            out.append(i)
    return out


def test_shift_member_only_confirms_by_default() -> None:
    """A 1.5 σ shift keeps the values inside the normal band: the CUSUM alone would page it
    (``shift_gate=0``), the gated ensemble does not. A 3.5 σ shift, which the point member
    alone misses, still pages promptly with the shift member confirming."""
    assert _small_shift_opens(0.0, 1.5)
    assert not _small_shift_opens(0.5, 1.5)
    assert any(800 <= i < 830 for i in _small_shift_opens(0.5, 3.5))
    assert not _small_shift_opens(math.inf, 3.5)


def test_shift_share_moves_the_risk_between_members() -> None:
    low, even = Ensemble(shift_share=0.1), Ensemble()
    for ens in (low, even):
        ens.update(1.0, 0.0)
        ens.update(1.0, 60.0)
    (qp_low, qs_low), (qp, qs) = low.risk(), even.risk()
    assert qs_low < qs and qp_low > qp
    assert math.isclose(qp_low + qs_low, qp + qs)
    assert low.floors()[1] > even.floors()[1] and low.floors()[0] < even.floors()[0]


def test_a_change_of_clocks_leaves_the_busy_hour_in_its_bins() -> None:
    """Traffic that follows Berlin's wall clock moves an hour earlier in UTC on 30 March 2025;
    a profile on Berlin time still predicts it, one on UTC is an hour off on every ramp."""
    berlin = ZoneInfo("Europe/Berlin")
    start = datetime(2025, 3, 17, tzinfo=UTC).timestamp()  # a Monday, CET
    change = datetime(2025, 3, 30, 1, tzinfo=UTC).timestamp()

    def traffic(t: float) -> float:
        local = datetime.fromtimestamp(t, UTC).astimezone(berlin)
        hour = local.hour + local.minute / 60.0
        return 1000.0 + 800.0 * math.sin(2 * math.pi * (hour - 9.0) / 24.0)

    zoned = SeasonalProfile(tz="Europe/Berlin", follow_trend=False)
    plain = SeasonalProfile(follow_trend=False)
    worst = {"zoned": 0.0, "plain": 0.0}
    rng = random.Random(3)
    t = start
    while t < change + 3 * DAY:
        x = traffic(t) + rng.gauss(0.0, 5.0)
        if t >= change + 3600.0:  # after the change (the first hour's bins are new)
            for name, prof in (("zoned", zoned), ("plain", plain)):
                pred = prof.predict(t)
                assert pred is not None
                worst[name] = max(worst[name], abs(x - pred[0]))
        zoned.learn_one(x, t)
        plain.learn_one(x, t)
        t += 900.0
    assert worst["zoned"] < 60.0, worst  # noise and the bins' interpolation
    assert worst["plain"] > 150.0, worst  # an hour of a ±800 daily swing


def test_profile_scores_nothing_until_its_scale_is_trusted() -> None:
    """A first mature bin has a handful of residuals behind its scale: scored alone, the
    profile gave routine values z in the hundreds there. It scores 0 until :meth:`ready`, and
    a routine day after that stays under a textbook bar; a real dip still scores."""
    rng = random.Random(4)
    prof = SeasonalProfile()
    scores = []
    for k in range(6 * 288):
        t = 300.0 * k
        x = 80 + 10 * math.sin(2 * math.pi * t / 86400) + rng.gauss(0, 1)
        scores.append((prof.ready(), prof.score_one(x, t=t)))
        prof.learn_one(x, t=t)
    assert all(s == 0.0 for ready, s in scores if not ready)
    assert any(ready for ready, _ in scores[: 3 * 288])
    assert max(s for _, s in scores) < 8.0
    assert prof.score_one(40.0, t=300.0 * 6 * 288) > 10.0
