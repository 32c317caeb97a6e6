"""Compiled per-step kernels of :class:`detectors.bank.EnsembleBank` (numba, one core).

The bank keeps its state as numpy arrays over series; these kernels update that state in
place, one series after another, in one pass per step. The arithmetic is written to follow
:class:`detectors.ensemble.Ensemble` term by term (the bank is tested equal to one ensemble
per series), but fused: no temporary array per operation, one pass over the series instead
of ~150 numpy passes (~150 ns per series and step with both profiles, BENCHMARKS.md). Kept in
one module so the rest of the package never imports numba directly.

State is laid out series-major so that one series' state is one contiguous row: a pass over
the series then streams through memory (the series-minor layout of a numpy bank, one row per
quantity, made the fused loop wait on ~80 concurrent streams and ran slower than numpy).
Season state is one ``(bins, series)`` record array per profile (:func:`season_dtype`) and
a ``(series, 9)`` array of its series-wide state (:data:`SERIES_KEYS`); tail state is
``(series, 14, 3)``: :data:`TAIL_KEYS` × member (point, shift, spread).
"""

from __future__ import annotations

import hashlib
import inspect
import math
from collections.abc import Callable
from typing import Any, NamedTuple, TypeVar, cast

import numba
import numpy as np
from numpy.typing import NDArray

from detectors.params import (
    GRACE_CLIP_AFTER,
    SPREAD_Z_CLIP,
    STEP_MOVE,
    STEP_RATE,
    resolution,
    resolution_floor,
)
from detectors.robust_zscore import MAD_TO_SIGMA, update_clip
from detectors.seasonal import TREND_DAY, day_type_base, trend_fold, trend_ratio
from detectors.spot import tail_shape

__all__ = [
    "SEASON_KEYS",
    "SERIES_KEYS",
    "TAIL_KEYS",
    "TREND_COLS",
    "TYPE_RES",
    "KernelParams",
    "ensemble_step",
    "interval_step",
    "season_dtype",
]

CLIP = 3.0
REL_FLOOR = 1e-6
MIN_RESIDUALS = 30

SEASON_KEYS = ("level", "mad", "sum", "days", "resn", "cnt", "cday")
#: per series and profile: the series-wide deviation and residual count, then the trend term
#: (:meth:`detectors.seasonal.SeasonalProfile.trend`): its day, that day's clipped residuals
#: and predictions, the days' running mean, variance and count, and the correction they give
#: (:func:`detectors.seasonal.trend_ratio`, refreshed once a day); a day-type profile has the
#: trend term twice, working days then weekend days (:data:`TREND_COLS` further on)
SERIES_KEYS = ("gmad", "rtotal", "tday", "tsum", "tden", "tm", "tv", "tk", "tr")
#: columns of one trend term in :data:`SERIES_KEYS`
TREND_COLS = 7
#: a day-type profile's mature predictions on working days and weekend days, the columns
#: after its two trend terms (:meth:`detectors.seasonal.SeasonalProfile.both_ready`)
TYPE_RES = len(SERIES_KEYS) + TREND_COLS


def season_dtype(dtype: Any) -> np.dtype[np.void]:
    """One profile bin of one series: level, MAD and the day's sum in ``dtype``; the counts in
    float32 (whole numbers below 2**24 are exact; a day number since 1970 is ~20,000). One
    record, so a bin stays one memory stream (two arrays ran a quarter slower)."""
    return np.dtype(
        [(k, dtype) for k in SEASON_KEYS[:3]] + [(k, np.float32) for k in SEASON_KEYS[3:]]
    )


#: per member: POT counts and sums, the open cluster's peak, the quarantined peaks
#: (count, Σ excess, Σ excess², age), the risk and floor, and the cached tail fit
TAIL_KEYS = (
    "n", "clusters", "excess", "excess_sq", "peak", "pc", "pe", "pe2", "age",
    "log_q", "floor", "lc", "sigma", "xi",
)  # fmt: skip
(_TN, _TCL, _TEX, _TEX2, _TPEAK, _TPC, _TPE, _TPE2, _TAGE, _LOGQ, _FLOOR, _LC, _SIGMA, _XI) = range(
    14
)

F = TypeVar("F", bound=Callable[..., Any])


def _jit(f: F) -> F:
    return cast(F, numba.njit(cache=True, nogil=True, error_model="numpy")(f))


def _inline(f: F) -> F:
    """A helper of the kernels, inlined into them by numba (a call would pass each array with
    reference counting and the parameters by value: more than the helper's own work)."""
    return cast(F, numba.njit(cache=True, inline="always", error_model="numpy")(f))


_tail_shape = _inline(tail_shape)  # the per-series POT's moment fit of ξ, compiled
_resolution = _inline(resolution)  # the smallest step and its count (detectors.params)
_resolution_floor = _inline(resolution_floor)
_update_clip = _inline(update_clip)  # the level's Huber clip (grace included), compiled
_trend_fold = _inline(trend_fold)  # the profiles' trend term (detectors.seasonal)
_trend_ratio = _inline(trend_ratio)
_day_type_base = _inline(day_type_base)  # working day or weekend (detectors.seasonal)

#: the functions of other modules compiled into the kernels
INLINED = (
    tail_shape, resolution, resolution_floor, update_clip, trend_fold, trend_ratio, day_type_base,
)  # fmt: skip

#: What the kernels compile in from other modules (:func:`dependency_digest`). numba's on-disk
#: cache is keyed on this file alone: after a change to an inlined helper or a constant it
#: reads, the cached machine code would run stale until this file changes too. The bank's
#: tests recompute the digest and fail until it is updated here.
DEPENDENCY_DIGEST = "a1e480fed562331e"


def dependency_digest() -> str:
    """Digest of :data:`INLINED`'s source and of the numeric and text constants of their
    modules (the constants the kernels import come from the same modules)."""
    parts = [inspect.getsource(f) for f in INLINED]
    mods = {m.__name__: m for m in map(inspect.getmodule, INLINED) if m is not None}
    for name, mod in sorted(mods.items()):
        for key, value in sorted(vars(mod).items()):
            if key.isupper() and isinstance(value, int | float | str):
                parts.append(f"{name}.{key}={value!r}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


class KernelParams(NamedTuple):
    """The ensemble parameters the step needs, as floats (``direction``: 0 both, 1 up,
    2 down; ``n_seasons``: profiles in use this step, 0 without timestamps; ``trend0`` and
    ``trend1``: 1 where the daily and the weekly profile follow a trend; ``day_types``: 1
    where the day-type profile is kept, with the daily profile's period, twice its bins and
    its trend setting, ``weekend_mask`` (:func:`detectors.seasonal.weekend_mask`) and
    ``day_type_margin``). The timestamps the step gets are local wall-clock seconds
    (:class:`detectors.clock.LocalClock`)."""

    alpha: float
    grace: float
    grace_clip: float
    seasonal_alpha: float
    min_effect: float
    min_abs_effect: float
    z_clip: float
    rho_max: float
    rho_alpha: float
    shift_k: float
    direction: float
    shift_gate: float
    votes: float
    min_duration: float
    burst: float
    release: float
    clear_after: float
    refractory: float
    tail_start: float
    xi_max: float
    warmup_outlier: float
    warmup_alarm: float
    res_always: float
    n_seasons: float
    period0: float
    bins0: float
    min_days0: float
    period1: float
    bins1: float
    min_days1: float
    trend0: float
    trend1: float
    day_types: float
    weekend_mask: float
    day_type_margin: float
    spread_share: float
    spread_alpha: float
    spread_slow: float


@_jit
def interval_step(
    t: NDArray[np.float64],
    valid: NDArray[np.bool_],
    last_t: NDArray[np.float64],
    step_est: NDArray[np.float64],
    interval: NDArray[np.float64],
    moved: NDArray[np.bool_],
) -> None:
    """Streaming median of the timestamp steps; ``moved`` marks the series whose interval
    moved by more than ``STEP_MOVE`` (their risk must be refreshed). ``t``: one timestamp,
    or one per series."""
    shared = t.shape[0] == 1
    for i in range(valid.shape[0]):
        moved[i] = False
        if not valid[i]:
            continue
        ti = t[0] if shared else t[i]
        gap = ti - last_t[i]
        last_t[i] = ti
        if not gap > 0:
            continue
        est = step_est[i]
        if math.isfinite(est):
            d = gap - est
            est = est * (1.0 + STEP_RATE * (1.0 if d > 0 else (-1.0 if d < 0 else 0.0)))
        else:
            est = gap
        step_est[i] = est
        cur = interval[i]
        if not math.isfinite(cur) or abs(est - cur) > STEP_MOVE * cur:
            interval[i] = est
            moved[i] = True


@_inline
def _noise_floor(ref: float, counted: float, whole: float, sup: float, has_sup: bool) -> float:
    """Binomial noise of a ratio of ``sup`` counts whose values were always whole counts."""
    if not has_sup or not (counted > 0 and whole >= 0.99 * counted and sup > 0):
        return 0.0
    p = min(max((ref * sup + 0.5) / (sup + 1.0), 0.0), 1.0)
    return math.sqrt(p * (1.0 - p) / sup)


@_inline
def _folded(
    s: NDArray[Any], g: NDArray[Any], i: int, b: int, day: float, alpha: float, min_days: float,
    trend: float,
) -> tuple[float, float]:  # fmt: skip
    """Level and day count of bin ``b`` once its pending day (if any) is folded in (the clip
    centred on the trend's lag ``trend``, as in :class:`detectors.seasonal.SeasonalProfile`)."""
    lvl = float(s[b, i].level)
    days = float(s[b, i].days)
    cnt = float(s[b, i].cnt)
    if not (cnt > 0 and s[b, i].cday < day):
        return lvl, days
    mean = s[b, i].sum / cnt
    a = max(alpha, 1.0 / (days + 1.0))
    r = mean - lvl
    if days + 1.0 >= min_days and s[b, i].resn > 0:
        lim = CLIP * (MAD_TO_SIGMA * max(float(s[b, i].mad), float(g[i, 0])))
        off = trend * abs(lvl)
        r = off + min(max(r - off, -lim), lim)
    return (mean if days == 0 else lvl + a * r), days + 1.0


@_inline
def _place(t: float, period: float, nb: int) -> tuple[int, int, float, int, float]:
    """Where ``t`` falls in a profile: the two bins around it and the weight of the second
    (for prediction), its own bin (for learning), and its period number."""
    frac = (t % period) / period * nb
    pos = frac - 0.5
    lo = math.floor(pos)
    return int(lo) % nb, (int(lo) + 1) % nb, pos - lo, int(frac) % nb, float(math.floor(t / period))


@_inline
def _place_types(t: float, period: float, nb: int, mask: int) -> tuple[int, int, float, int, float]:
    """:func:`_place` in a day-type profile: the bins of ``t``'s day type."""
    base = _day_type_base(t, mask, nb)
    lo, hi, w, own, day = _place(t, period, nb)
    return base + lo, base + hi, w, base + own, day


@_inline
def _trend_folded(g: NDArray[Any], i: int, o: int) -> tuple[float, float, float]:
    """The trend term's running mean, variance and day count of series ``i`` with its
    pending day folded in (:func:`detectors.seasonal.trend_fold`; ``o``: the columns'
    offset, :data:`SERIES_KEYS`)."""
    return _trend_fold(
        float(g[i, 5 + o]), float(g[i, 6 + o]), float(g[i, 7 + o]), float(g[i, 3 + o]),
        float(g[i, 4 + o]),
    )  # fmt: skip


@_inline
def _predict(
    s: NDArray[Any], g: NDArray[Any], i: int, b0: int, b1: int, w: float, day: float,
    p: KernelParams, min_days: float, tday: float, follow: bool, o: int,
) -> tuple[float, float, bool, float]:  # fmt: skip
    """Expected value, scale and maturity of one profile between bins ``b0`` and ``b1`` (a
    bin the series skips leaves its neighbour alone, as in
    :meth:`detectors.seasonal.SeasonalProfile.predict`), and the trend term's part of the
    expected value (``tday``: the trend's day of ``t``; ``follow``: whether this profile
    follows a trend; ``o``: the offset of ``t``'s trend columns, :data:`SERIES_KEYS`)."""
    trend = 0.0
    if follow:
        if g[i, 2 + o] < tday:  # a day's first value: its predecessor folded in, as learning will
            tm, tv, tk = _trend_folded(g, i, o)
            trend = _trend_ratio(tm, tv, tk)
        else:
            trend = float(g[i, 8 + o])
    l0, d0 = _folded(s, g, i, b0, day, p.seasonal_alpha, min_days, trend)
    l1, d1 = _folded(s, g, i, b1, day, p.seasonal_alpha, min_days, trend)
    ok = True
    if s[b1, i].cnt == 0 and d0 + 1.0 >= min_days:
        w = 0.0
    elif s[b0, i].cnt == 0 and d1 + 1.0 >= min_days:
        w = 1.0
    else:
        ok = min(d0, d1) + 1.0 >= min_days
    raw = (1.0 - w) * l0 + w * l1
    off = trend * abs(raw)
    mid = raw + off
    mad = max((1.0 - w) * s[b0, i].mad + w * s[b1, i].mad, g[i, 0])
    scale = max(MAD_TO_SIGMA * mad, REL_FLOOR * abs(mid))
    return mid, max(scale, 1e-12), ok, off


@_inline
def _learn_season(
    s: NDArray[Any], g: NDArray[Any], i: int, x: float, b: int, day: float, p: KernelParams,
    min_days: float, mid: float, scale: float, ok: bool, off: float, tday: float,
    follow: bool, o: int, rcol: int, floor: float, x_young: float,
) -> None:  # fmt: skip
    """One value into bin ``b`` of one profile (``mid``, ``scale``, ``ok``, ``off``: its
    prediction and the trend's part of it; ``tday``: the trend's day, ``follow``: whether the
    profile follows a trend, ``o``: the offset of its trend columns; ``rcol``: the column
    counting this day type's mature predictions, -1 for none; ``x_young``: the value a
    profile too young to predict learns)."""
    trend = 0.0
    if follow:
        if tday > g[i, 2 + o]:
            g[i, 5 + o], g[i, 6 + o], g[i, 7 + o] = _trend_folded(g, i, o)
            g[i, 2 + o], g[i, 3 + o], g[i, 4 + o] = tday, 0.0, 0.0
            g[i, 8 + o] = _trend_ratio(float(g[i, 5 + o]), float(g[i, 6 + o]), float(g[i, 7 + o]))
        trend = float(g[i, 8 + o])
    lvl, days = _folded(s, g, i, b, day, p.seasonal_alpha, min_days, trend)
    cday = s[b, i].cday
    new_day = cday != day
    ssum = 0.0 if new_day else float(s[b, i].sum)
    cnt = 0.0 if new_day else float(s[b, i].cnt)
    resn = float(s[b, i].resn)
    mad_old = float(s[b, i].mad)
    gmad = float(g[i, 0])
    limit = CLIP * max(scale, floor) if resn > 0 else math.inf
    r = x - mid
    dev = min(abs(r), limit)
    if ok:
        rc = min(max(r, -limit), limit)
        ssum += mid + rc
        if follow:
            g[i, 3 + o] += off + rc
            g[i, 4 + o] += abs(mid - off)
        mad = gmad if resn == 0 else mad_old
        s[b, i].mad = mad + 0.02 * (dev - mad)
        rt = g[i, 1] + 1.0
        g[i, 1] = rt
        if rcol >= 0:
            g[i, rcol] += 1.0
        g[i, 0] = gmad + max(0.01, 1.0 / max(rt, 1.0)) * (dev - gmad)
        s[b, i].resn = resn + 1.0
    else:
        ssum += x_young
    s[b, i].level = lvl
    s[b, i].days = days
    if new_day:
        s[b, i].cday = day
    s[b, i].sum = ssum
    s[b, i].cnt = cnt + 1.0


@_inline
def _tail_fit(tl: NDArray[Any], i: int, xi_max: float, members: int) -> None:
    """Refresh the cached tail fit (``log(λ/q)`` up to ``−log n``, ``σ``, ``ξ``) of series ``i``'s
    first ``members`` members (the spread member's only where it is on)."""
    for j in range(members):
        c = float(tl[i, _TCL, j])
        has = c > 0
        safe_c = c if has else 1.0
        xi = _tail_shape(c, float(tl[i, _TEX, j]), float(tl[i, _TEX2, j]), xi_max)
        tl[i, _LC, j] = math.log(safe_c) - tl[i, _LOGQ, j]
        tl[i, _SIGMA, j] = tl[i, _TEX, j] / safe_c * (1.0 - xi) if has else 0.0
        tl[i, _XI, j] = xi


@_inline
def _bar(tl: NDArray[Any], j: int, i: int, tail_start: float, log_n: float) -> float:
    """SPOT bar of member ``j`` after ``exp(log_n)`` learnt values (floored)."""
    lr = max(float(tl[i, _LC, j]) - log_n, 0.0)
    xi = float(tl[i, _XI, j])
    if xi > 1e-9:
        lr = math.expm1(xi * lr) / xi
    return max(lr * float(tl[i, _SIGMA, j]) + tail_start, float(tl[i, _FLOOR, j]))


@_jit
def ensemble_step(
    x: NDArray[Any], valid: NDArray[np.bool_], t: NDArray[np.float64],
    sup: NDArray[np.float64], hold: NDArray[np.bool_], prop: NDArray[np.bool_],
    p: KernelParams,
    lv: NDArray[Any], st: NDArray[Any], tl: NDArray[Any], dirty: NDArray[np.bool_],
    firing: NDArray[np.bool_], s0: NDArray[Any], g0: NDArray[Any], s1: NDArray[Any],
    g1: NDArray[Any], s2: NDArray[Any], g2: NDArray[Any], score: NDArray[Any],
    opened: NDArray[np.bool_], closed: NDArray[np.bool_], detail: NDArray[Any],
) -> None:  # fmt: skip
    """One step of the ensemble for every series (state updated in place).

    ``lv``: per series (n, mean, mad, slow mad); ``st``: per series up, down, z_prev, cov,
    var, rho_n, counted, whole, run, cool, warm_n, tail_lag_n, x_prev (NaN before the first
    value), resolution (0 while unknown) and how often it was seen
    (:func:`detectors.params.resolution`), and cycle_n, the mature predictions a profile
    needs before it may be the point member's reference (a daily cycle's);
    ``tl``: :data:`TAIL_KEYS`;
    ``s0/g0``, ``s1/g1`` and ``s2/g2``: daily, weekly and day-type profiles; ``t``: empty
    (no timestamps), one, or one per series, in local wall-clock seconds; ``sup``: empty or
    the support of each value (NaN where unknown);
    ``hold``: empty or, per series, whether its peaks are kept out of the tails this step as
    if it were alarming (another series of its entity is); ``prop``: empty or, per series,
    whether a supported value is declared a share of its support (see
    :meth:`detectors.ensemble.Ensemble.update`).
    ``score`` holds the previous scores on entry (kept for gaps); ``detail`` gets, per scored
    series, the expected value, the scale, the point member's bar and the two member ratios
    (what an alarm event reports).
    """
    has_sup = sup.shape[0] > 0
    has_hold = hold.shape[0] > 0
    has_prop = prop.shape[0] > 0
    shared = t.shape[0] == 1
    n_seasons = int(p.n_seasons) if t.shape[0] > 0 else 0
    nb0, nb1 = int(p.bins0), int(p.bins1)
    direction = int(p.direction)
    k = p.shift_k
    # with one timestamp for all series, the bins are the same for all (computed once)
    t0 = t[0] if t.shape[0] > 0 else 0.0
    a0, c0, w0, e0, day0 = _place(t0, p.period0, nb0)
    a1, c1, w1, e1, day1 = _place(t0, p.period1, nb1)
    types = n_seasons > 0 and p.day_types > 0.0
    mask = int(p.weekend_mask)
    a2, c2, w2, e2, day2 = _place_types(t0, p.period0, nb0, mask)
    o2 = TREND_COLS if e2 >= nb0 else 0  # a weekend's trend columns
    tday = math.floor(t0 / TREND_DAY)
    follow0 = p.trend0 > 0.0
    follow1 = p.trend1 > 0.0
    on2 = p.spread_share > 0.0  # the spread member
    for i in range(x.shape[0]):
        opened[i] = False
        closed[i] = False
        if not valid[i]:
            continue
        xi_ = float(x[i])
        # support of a ratio of counts
        s_i = 0.0
        if has_sup:
            s_raw = sup[i]
            if s_raw > 0:
                s_i = s_raw
                xs = xi_ * s_i
                whole = (has_prop and prop[i]) or (
                    0.0 <= xi_ <= 1.0 and abs(xs - np.rint(xs)) <= 1e-6 * max(s_i, 1.0)
                )
                st[i, 6] += 1.0
                if whole:
                    st[i, 7] += 1.0
        counted, wholes = float(st[i, 6]), float(st[i, 7])
        # point member: level, or the mature profile that fits best
        n_l, m_l, d_l, ds_l = float(lv[i, 0]), float(lv[i, 1]), float(lv[i, 2]), float(lv[i, 3])
        l_scale = max(MAD_TO_SIGMA * d_l, (0.5 * MAD_TO_SIGMA) * ds_l)
        l_scale = max(max(l_scale, REL_FLOOR * abs(m_l)), 1e-12)
        scored = n_l >= p.grace
        ref, scale, best = m_l, l_scale, d_l
        mid0 = sc0 = mid1 = sc1 = mid2 = sc2 = off0 = off1 = off2 = 0.0
        ok0 = ok1 = ok2 = False
        if n_seasons > 0:
            if not shared:
                a0, c0, w0, e0, day0 = _place(t[i], p.period0, nb0)
                a1, c1, w1, e1, day1 = _place(t[i], p.period1, nb1)
                a2, c2, w2, e2, day2 = _place_types(t[i], p.period0, nb0, mask)
                o2 = TREND_COLS if e2 >= nb0 else 0
                tday = math.floor(t[i] / TREND_DAY)
            mid0, sc0, ok0, off0 = _predict(
                s0, g0, i, a0, c0, w0, day0, p, p.min_days0, tday, follow0, 0
            )
            # once the bars are live, a profile's deviation is trusted only after a daily
            # cycle of residuals (cycle_n; Ensemble.cycle_n)
            need = float(MIN_RESIDUALS)
            if tl[i, _TN, 0] >= st[i, 10]:
                need = max(need, float(st[i, 15]))
            if ok0 and g0[i, 1] >= need and g0[i, 0] < best:
                ref, scale, best = mid0, sc0, float(g0[i, 0])
            if n_seasons > 1:
                mid1, sc1, ok1, off1 = _predict(
                    s1, g1, i, a1, c1, w1, day1, p, p.min_days1, tday, follow1, 0
                )
                if ok1 and g1[i, 1] >= need and g1[i, 0] < best:
                    ref, scale, best = mid1, sc1, float(g1[i, 0])
            if types:
                mid2, sc2, ok2, off2 = _predict(
                    s2, g2, i, a2, c2, w2, day2, p, p.min_days0, tday, follow0, o2
                )
                # a candidate once it predicted the other day type too (both_ready)
                other = g2[i, TYPE_RES + (0 if o2 else 1)]
                if (
                    ok2 and g2[i, 1] >= need and other > 0
                    and g2[i, 0] < p.day_type_margin * best
                ):  # fmt: skip
                    ref, scale, best = mid2, sc2, float(g2[i, 0])
        res_floor = _resolution_floor(float(st[i, 13]), float(st[i, 14]))
        floor = max(_noise_floor(ref, counted, wholes, s_i, has_sup), res_floor)
        scale = max(scale, floor)
        z = (xi_ - ref) / scale if scored else 0.0
        eff = max(p.min_effect * abs(ref), p.min_abs_effect)
        big = abs(xi_ - ref) >= eff
        if direction == 1:
            point = max(z, 0.0)
        elif direction == 2:
            point = max(-z, 0.0)
        else:
            point = abs(z)
        if not big:
            point = 0.0
        # shift member: CUSUM of the clipped z over its long-run (lag-1) factor
        zc = min(max(z, -p.z_clip), p.z_clip)
        rho = min(max(st[i, 3] / max(st[i, 4], 1e-30), 0.0), p.rho_max)
        u = zc * math.sqrt((1.0 - rho) / (1.0 + rho))
        up = max(st[i, 0] + u - k, 0.0)
        down = max(st[i, 1] - u - k, 0.0)
        if direction == 1:
            shift = up
        elif direction == 2:
            shift = down
        else:
            shift = max(up, down)
        if not big:
            shift = 0.0
        # spread member: short EWMA of |z| over its slow normal-time mean and spread
        spread = 0.0
        if on2:
            m2 = float(st[i, 16])
            if scored:
                m2 += p.spread_alpha * (min(abs(z), SPREAD_Z_CLIP) - m2)
                st[i, 16] = m2
            spread = max((m2 - st[i, 17]) / math.sqrt(max(float(st[i, 18]), 1e-12)), 0.0)
        # bars and ratios
        if dirty[i]:
            _tail_fit(tl, i, p.xi_max, 3 if on2 else 2)
            dirty[i] = False
        warm_n = float(st[i, 10])
        nn = float(tl[i, _TN, 0])  # (both members learn the same steps)
        bar0 = bar1 = bar2 = math.inf  # during the warm-up
        if nn >= warm_n:
            log_n = math.log(max(nn, 1.0))
            bar0 = _bar(tl, 0, i, p.tail_start, log_n)
            bar1 = _bar(tl, 1, i, p.tail_start, log_n)
            if on2:
                bar2 = _bar(tl, 2, i, p.tail_start, log_n)
        # in the warm-up the point member may page beyond warmup_outlier x its iid bar
        # (EnsembleParams.warmup_alarm); the tails still see bar0 (inf: not yet learnt)
        page0 = bar0
        if p.warmup_alarm > 0.0 and scored and not math.isfinite(bar0):
            page0 = p.warmup_outlier * tl[i, _FLOOR, 0]
        # in the warm-up, a day type new to the day-type profile (a first weekend) is measured
        # against the other kind of day: its values count, its peaks stay out of the tails
        novel = False
        if types and not math.isfinite(bar0) and g2[i, 1] >= MIN_RESIDUALS:
            novel = s2[e2, i].days == 0 and not (s2[e2, i].cnt > 0 and s2[e2, i].cday < day2)
        r0 = point / page0
        r1 = shift / bar1 if r0 >= p.shift_gate else 0.0
        if not on2:
            sc = max(r0, r1) if p.votes <= 1 else min(r0, r1)
        else:  # the votes-th largest of three
            r2 = spread / bar2
            if p.votes <= 1:
                sc = max(max(r0, r1), r2)
            elif p.votes == 2:
                sc = max(min(r0, r1), min(max(r0, r1), r2))
            else:
                sc = min(min(r0, r1), r2)
        # alert: minimum duration, hysteresis, refractory
        f = firing[i]
        run0, cool0 = float(st[i, 8]), float(st[i, 9])
        cooling = not f and cool0 > 0
        run_nf = run0 + 1.0 if sc >= 1.0 else 0.0
        op = not f and not cooling and (run_nf >= p.min_duration or sc >= p.burst)
        run_f = run0 + 1.0 if sc < p.release else 0.0
        cl = f and run_f >= p.clear_after
        run = run_f if f else (0.0 if cooling else run_nf)
        if op or cl:
            run = 0.0
        st[i, 8] = run
        st[i, 9] = p.refractory if cl else cool0 - (1.0 if cooling else 0.0)
        fire = (f and not cl) or op
        firing[i] = fire
        opened[i] = op
        closed[i] = cl
        score[i] = sc
        detail[i, 0] = ref
        detail[i, 1] = scale
        detail[i, 2] = page0
        detail[i, 3] = r0
        detail[i, 4] = r1
        # learn: profiles, level, CUSUM, lag-1 correlation, tails
        lscale = max(l_scale, _noise_floor(m_l, counted, wholes, s_i, has_sup), res_floor)
        held = fire or (has_hold and hold[i])
        if n_seasons > 0:
            # a profile too young to predict learns an alarm's values as the level would
            # (clipped): a fault on the first day must not become that hour's normal
            xy = xi_
            if held and scored:
                xy = min(max(xi_, m_l - CLIP * lscale), m_l + CLIP * lscale)
            _learn_season(
                s0, g0, i, xi_, e0, day0, p, p.min_days0, mid0, sc0, ok0, off0, tday, follow0, 0,
                -1, floor, xy,
            )  # fmt: skip
            if n_seasons > 1:
                _learn_season(
                    s1, g1, i, xi_, e1, day1, p, p.min_days1, mid1, sc1, ok1, off1, tday, follow1,
                    0, -1, floor, xy,
                )  # fmt: skip
            if types:
                _learn_season(
                    s2, g2, i, xi_, e2, day2, p, p.min_days0, mid2, sc2, ok2, off2, tday, follow0,
                    o2, TYPE_RES + (1 if o2 else 0), floor, xy,
                )  # fmt: skip
        n1 = n_l + 1.0
        inv = 1.0 / n1
        if n1 == 1.0:
            lv[i, 1] = xi_
        else:
            a = max(inv, p.alpha)
            limit = lscale * _update_clip(n1, p.grace, CLIP, p.grace_clip, GRACE_CLIP_AFTER)
            r = xi_ - m_l
            dev = min(abs(r), limit)
            lv[i, 1] = m_l + a * min(max(r, -limit), limit)
            lv[i, 2] = d_l + a * (dev - d_l)
            lv[i, 3] = ds_l + max(inv, 0.1 * p.alpha) * (dev - ds_l)
        lv[i, 0] = n1
        st[i, 0] = 0.0 if cl else up
        st[i, 1] = 0.0 if cl else down
        w = scored and not held
        if w:
            m = st[i, 5] + 1.0
            a = max(1.0 / m, p.rho_alpha)
            st[i, 3] += a * (zc * st[i, 2] - st[i, 3])
            st[i, 4] += a * (zc * zc - st[i, 4])
            st[i, 5] = m
        drop = scored and held
        lag = st[i, 11]
        for j in range(3 if on2 else 2):
            s_j = 0.0 if novel else (point if j == 0 else (shift if j == 1 else spread))
            bar = bar0 if j == 0 else (bar1 if j == 1 else bar2)
            peak = float(tl[i, _TPEAK, j])
            if w and tl[i, _TPC, j] > 0:
                tl[i, _TAGE, j] += 1.0
            above = s_j > p.tail_start
            admit = bar
            if math.isfinite(p.warmup_outlier) and not math.isfinite(bar):
                admit = p.warmup_outlier * tl[i, _FLOOR, j]
            if w and not above and peak > p.tail_start and peak < admit:
                e = peak - p.tail_start
                tl[i, _TPC, j] += 1.0
                tl[i, _TPE, j] += e
                tl[i, _TPE2, j] += e * e
            commit = w and tl[i, _TPC, j] > 0 and tl[i, _TAGE, j] >= lag
            if commit:
                tl[i, _TCL, j] += tl[i, _TPC, j]
                tl[i, _TEX, j] += tl[i, _TPE, j]
                tl[i, _TEX2, j] += tl[i, _TPE2, j]
                dirty[i] = True
            if commit or drop:
                tl[i, _TPC, j] = 0.0
                tl[i, _TPE, j] = 0.0
                tl[i, _TPE2, j] = 0.0
                tl[i, _TAGE, j] = 0.0
            if w:
                tl[i, _TPEAK, j] = max(peak, s_j) if above else 0.0
                tl[i, _TN, j] += 1.0
            elif drop:
                tl[i, _TPEAK, j] = 0.0
        if on2 and w:
            mu2 = float(st[i, 17]) + p.spread_slow * (float(st[i, 16]) - float(st[i, 17]))
            d2 = float(st[i, 16]) - mu2
            st[i, 17] = mu2
            st[i, 18] += p.spread_slow * (d2 * d2 - st[i, 18])
        st[i, 2] = zc
        if nn < warm_n or p.res_always > 0.0:  # see detectors.params
            st[i, 13], st[i, 14] = _resolution(
                abs(xi_ - float(st[i, 12])), float(st[i, 13]), float(st[i, 14])
            )
        st[i, 12] = xi_
