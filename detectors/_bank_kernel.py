"""Compiled per-step kernels of :class:`detectors.bank.EnsembleBank` (numba, one core).

The bank keeps its state as numpy arrays over series (laid out series-major:
:mod:`detectors._bank_kernel_state`); these kernels update that state in place, one series
after another, in one pass per step. The arithmetic is written to follow
:class:`detectors.ensemble.Ensemble` term by term (the bank is tested equal to one ensemble
per series), but fused: no temporary array per operation, one pass over the series instead
of ~150 numpy passes (~150 ns per series and step with both profiles, BENCHMARKS.md). As in
:class:`~detectors.ensemble.Ensemble`, each member has its own helper (:func:`_point`,
:func:`_shift`, :func:`_spread`, the profiles in :mod:`detectors._bank_kernel_season`), which
numba inlines into :func:`ensemble_step`. numba is imported by these ``_bank_kernel*``
modules only, so the rest of the package never imports numba directly.
"""

from __future__ import annotations

import hashlib
import inspect
import math
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import NDArray

from detectors import _bank_kernel_season, _bank_kernel_state, _bank_kernel_tail
from detectors._bank_kernel_season import (
    Place,
    Prediction,
    learn_season,
    new_day_type,
    place,
    place_types,
    predict,
)
from detectors._bank_kernel_state import (
    CLIP,
    D_EXPECTED,
    D_POINT_BAR,
    D_POINT_RATIO,
    D_SCALE,
    D_SHIFT_RATIO,
    DETAIL,
    G_MAD,
    G_RTOTAL,
    LEVEL_KEYS,
    LV_MAD,
    LV_MEAN,
    LV_N,
    LV_SLOW_MAD,
    MIN_RESIDUALS,
    POINT,
    REL_FLOOR,
    SEASON_KEYS,
    SERIES_KEYS,
    ST_COUNTED,
    ST_COV,
    ST_CYCLE_N,
    ST_DIR,
    ST_DOWN,
    ST_RES,
    ST_RES_ALWAYS,
    ST_RES_N,
    ST_RHO_N,
    ST_SPREAD_M,
    ST_SPREAD_MU,
    ST_SPREAD_VAR,
    ST_TAIL_LAG_N,
    ST_UP,
    ST_VAR,
    ST_WARM_N,
    ST_WHOLE,
    ST_X_PREV,
    ST_Z_PREV,
    STATE_KEYS,
    T_N,
    TAIL_KEYS,
    TREND_COLS,
    TYPE_RES,
    inline,
    jit,
    season_dtype,
)
from detectors._bank_kernel_tail import alert, bars, learn_tails, point_bar, vote
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
    "DETAIL",
    "LEVEL_KEYS",
    "SEASON_KEYS",
    "SERIES_KEYS",
    "STATE_KEYS",
    "TAIL_KEYS",
    "TREND_COLS",
    "TYPE_RES",
    "KernelParams",
    "ensemble_step",
    "interval_step",
    "season_dtype",
]

_resolution = inline(resolution)  # the smallest step and its count (detectors.params)
_resolution_floor = inline(resolution_floor)
_update_clip = inline(update_clip)  # the level's Huber clip (grace included), compiled

#: the functions of other modules compiled into the kernels
INLINED = (
    tail_shape, resolution, resolution_floor, update_clip, trend_fold, trend_ratio, day_type_base,
)  # fmt: skip
#: the kernel modules whose helpers :func:`ensemble_step` inlines
KERNEL_MODULES = (_bank_kernel_state, _bank_kernel_season, _bank_kernel_tail)

#: What the kernels compile in from other modules (:func:`dependency_digest`). numba's on-disk
#: cache is keyed on this file alone: after a change to an inlined helper or a constant it
#: reads, the cached machine code would run stale until this file changes too. The bank's
#: tests recompute the digest and fail until it is updated here.
DEPENDENCY_DIGEST = "18e840b67a90b02b"


def dependency_digest() -> str:
    """Digest of the source of :data:`KERNEL_MODULES` and of :data:`INLINED`, and of the
    numeric and text constants of the latter's modules (the constants the kernels import
    come from the same modules)."""
    parts = [inspect.getsource(m) for m in KERNEL_MODULES]
    parts += [inspect.getsource(f) for f in INLINED]
    mods = {m.__name__: m for m in map(inspect.getmodule, INLINED) if m is not None}
    for name, mod in sorted(mods.items()):
        for key, value in sorted(vars(mod).items()):
            if key.isupper() and isinstance(value, int | float | str):
                parts.append(f"{name}.{key}={value!r}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


class KernelParams(NamedTuple):
    """The ensemble parameters the step needs, as floats (``direction`` and ``res_always``:
    the bank's, which its series start with; the step reads each series' own, ``ST_DIR`` and
    ``ST_RES_ALWAYS`` of its state, and a snapshot's pickled parameters keep both fields;
    ``n_seasons``: profiles in use this step, 0 without timestamps; ``trend0`` and
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


@jit
def interval_step(
    t: NDArray[np.float64],
    valid: NDArray[np.bool_],
    last_t: NDArray[np.float64],
    step_est: NDArray[np.float64],
    interval: NDArray[np.float64],
    moved: NDArray[np.bool_],
) -> int:
    """Streaming median of the timestamp steps; ``moved`` marks the series whose interval
    moved by more than ``STEP_MOVE`` (their risk must be refreshed). ``t``: one timestamp,
    or one per series. Returns how many moved."""
    shared = t.shape[0] == 1
    n_moved = 0
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
            n_moved += 1
    return n_moved


@inline
def _support(
    st: NDArray[Any], i: int, x: float, sup: NDArray[np.float64], has_sup: bool,
    prop: NDArray[np.bool_], has_prop: bool,
) -> float:  # fmt: skip
    """The support behind ``x`` (0 for none); a support is counted, and so is ``x`` where it
    is a whole share of it (:attr:`detectors.ensemble.Ensemble.proportion_`)."""
    s_i = 0.0
    if has_sup:
        s_raw = sup[i]
        if s_raw > 0:
            s_i = s_raw
            xs = x * s_i
            whole = (has_prop and prop[i]) or (
                0.0 <= x <= 1.0 and abs(xs - np.rint(xs)) <= 1e-6 * max(s_i, 1.0)
            )
            st[i, ST_COUNTED] += 1.0
            if whole:
                st[i, ST_WHOLE] += 1.0
    return s_i


@inline
def _noise_floor(ref: float, counted: float, whole: float, sup: float, has_sup: bool) -> float:
    """Binomial noise of a ratio of ``sup`` counts whose values were always whole counts."""
    if not has_sup or not (counted > 0 and whole >= 0.99 * counted and sup > 0):
        return 0.0
    p = min(max((ref * sup + 0.5) / (sup + 1.0), 0.0), 1.0)
    return math.sqrt(p * (1.0 - p) / sup)


@inline
def _floors(
    st: NDArray[Any], i: int, ref: float, mean: float, l_scale: float, s_i: float, has_sup: bool
) -> tuple[float, float]:
    """The noise floor of the scale about ``ref`` (the resolution's rounding noise and, for a
    ratio of counts, its sampling noise: :meth:`detectors.ensemble.Ensemble._noise_floor`),
    and the level's scale ``l_scale`` floored by that noise about its ``mean``."""
    counted, wholes = float(st[i, ST_COUNTED]), float(st[i, ST_WHOLE])
    res_floor = _resolution_floor(float(st[i, ST_RES]), float(st[i, ST_RES_N]))
    floor = max(_noise_floor(ref, counted, wholes, s_i, has_sup), res_floor)
    return floor, max(l_scale, _noise_floor(mean, counted, wholes, s_i, has_sup), res_floor)


@inline
def _places(t: float, p: KernelParams) -> tuple[Place, Place, Place, int, int]:
    """Where ``t`` falls in the daily, weekly and day-type profiles, the offset of its day
    type's trend columns in the day-type profile, and its trend day."""
    nb0 = int(p.bins0)
    pl2 = place_types(t, p.period0, nb0, int(p.weekend_mask))
    o2 = TREND_COLS if pl2[3] >= nb0 else 0  # a weekend's trend columns
    pl0, pl1 = place(t, p.period0, nb0), place(t, p.period1, int(p.bins1))
    return pl0, pl1, pl2, o2, math.floor(t / TREND_DAY)


@inline
def _predict_profiles(
    s0: NDArray[Any], g0: NDArray[Any], s1: NDArray[Any], g1: NDArray[Any], s2: NDArray[Any],
    g2: NDArray[Any], i: int, places: tuple[Place, Place, Place, int, int], p: KernelParams,
    n_seasons: int, types: bool,
) -> tuple[Prediction, Prediction, Prediction]:  # fmt: skip
    """What the daily, weekly and day-type profiles predict at ``places`` (:func:`_places`;
    a profile not in use predicts nothing)."""
    pl0, pl1, pl2, o2, tday = places
    a = p.seasonal_alpha
    pr0 = pr1 = pr2 = (0.0, 0.0, False, 0.0)
    if n_seasons > 0:
        pr0 = predict(s0, g0, i, pl0, a, p.min_days0, tday, p.trend0 > 0.0, 0)
        if n_seasons > 1:
            pr1 = predict(s1, g1, i, pl1, a, p.min_days1, tday, p.trend1 > 0.0, 0)
        if types:
            pr2 = predict(s2, g2, i, pl2, a, p.min_days0, tday, p.trend0 > 0.0, o2)
    return pr0, pr1, pr2


@inline
def _level(lv: NDArray[Any], i: int) -> tuple[float, float, float]:
    """The level's mean, deviation and scale (:class:`detectors.robust_zscore.RobustZScore`)."""
    m_l, d_l, ds_l = float(lv[i, LV_MEAN]), float(lv[i, LV_MAD]), float(lv[i, LV_SLOW_MAD])
    l_scale = max(MAD_TO_SIGMA * d_l, (0.5 * MAD_TO_SIGMA) * ds_l)
    return m_l, d_l, max(max(l_scale, REL_FLOOR * abs(m_l)), 1e-12)


@inline
def _reference(
    st: NDArray[Any], tl: NDArray[Any], g0: NDArray[Any], g1: NDArray[Any], g2: NDArray[Any],
    i: int, level: tuple[float, float, float], preds: tuple[Prediction, Prediction, Prediction],
    o2: int, p: KernelParams, n_seasons: int, types: bool,
) -> tuple[float, float]:  # fmt: skip
    """The point member's reference and its scale: the level, or the mature profile with the
    smallest series-wide deviation (the day-type profile under ``day_type_margin`` × the best
    other's), as :meth:`detectors.ensemble.Ensemble._point` chooses."""
    ref, best, scale = level
    if n_seasons > 0:
        pr0, pr1, pr2 = preds
        # once the bars are live, a profile's deviation is trusted only after a daily
        # cycle of residuals (cycle_n; Ensemble.cycle_n)
        need = float(MIN_RESIDUALS)
        if tl[i, T_N, POINT] >= st[i, ST_WARM_N]:
            need = max(need, float(st[i, ST_CYCLE_N]))
        if pr0[2] and g0[i, G_RTOTAL] >= need and g0[i, G_MAD] < best:
            ref, scale, best = pr0[0], pr0[1], float(g0[i, G_MAD])
        if n_seasons > 1 and pr1[2] and g1[i, G_RTOTAL] >= need and g1[i, G_MAD] < best:
            ref, scale, best = pr1[0], pr1[1], float(g1[i, G_MAD])
        if types:
            # a candidate once it predicted the other day type too (both_ready)
            other = g2[i, TYPE_RES + (0 if o2 else 1)]
            if (
                pr2[2] and g2[i, G_RTOTAL] >= need and other > 0
                and g2[i, G_MAD] < p.day_type_margin * best
            ):  # fmt: skip
                ref, scale, best = pr2[0], pr2[1], float(g2[i, G_MAD])
    return ref, scale


@inline
def _point(
    x: float, ref: float, scale: float, floor: float, scored: bool, direction: int,
    p: KernelParams,
) -> tuple[float, float, float, bool]:  # fmt: skip
    """The point member: the scale floored by ``floor``, the signed z (0 in the grace), the
    member's score in the bad ``direction`` (the series' ``ST_DIR``), and whether ``x`` is
    off ``ref`` by a practical effect (no member scores otherwise:
    :meth:`detectors.ensemble.Ensemble.member_scores`)."""
    scale = max(scale, floor)
    z = (x - ref) / scale if scored else 0.0
    eff = max(p.min_effect * abs(ref), p.min_abs_effect)
    big = abs(x - ref) >= eff
    if direction == 1:
        point = max(z, 0.0)
    elif direction == 2:
        point = max(-z, 0.0)
    else:
        point = abs(z)
    if not big:
        point = 0.0
    return scale, z, point, big


@inline
def _shift(
    st: NDArray[Any], i: int, z: float, big: bool, p: KernelParams
) -> tuple[float, float, float, float]:
    """The shift member (:meth:`detectors.ensemble.Ensemble._shift`): the clipped z, the
    CUSUM's up and down sums after it over its long-run (lag-1) factor, and the member's
    score in the bad direction."""
    zc = min(max(z, -p.z_clip), p.z_clip)
    rho = min(max(st[i, ST_COV] / max(st[i, ST_VAR], 1e-30), 0.0), p.rho_max)
    u = zc * math.sqrt((1.0 - rho) / (1.0 + rho))
    up = max(st[i, ST_UP] + u - p.shift_k, 0.0)
    down = max(st[i, ST_DOWN] - u - p.shift_k, 0.0)
    direction = int(st[i, ST_DIR])
    if direction == 1:
        shift = up
    elif direction == 2:
        shift = down
    else:
        shift = max(up, down)
    if not big:
        shift = 0.0
    return zc, up, down, shift


@inline
def _spread(st: NDArray[Any], i: int, z: float, scored: bool, p: KernelParams) -> float:
    """The spread member's score (:meth:`detectors.ensemble.Ensemble._spread`, 0 while off):
    its short EWMA of |z| (moved while ``scored``) over its slow normal-time mean and spread."""
    spread = 0.0
    if p.spread_share > 0.0:
        m2 = float(st[i, ST_SPREAD_M])
        if scored:
            m2 += p.spread_alpha * (min(abs(z), SPREAD_Z_CLIP) - m2)
            st[i, ST_SPREAD_M] = m2
        sd = math.sqrt(max(float(st[i, ST_SPREAD_VAR]), 1e-12))
        spread = max((m2 - st[i, ST_SPREAD_MU]) / sd, 0.0)
    return spread


@inline
def _learn_profiles(
    s0: NDArray[Any], g0: NDArray[Any], s1: NDArray[Any], g1: NDArray[Any], s2: NDArray[Any],
    g2: NDArray[Any], i: int, x: float, places: tuple[Place, Place, Place, int, int],
    preds: tuple[Prediction, Prediction, Prediction], p: KernelParams, n_seasons: int,
    types: bool, floor: float, clip_young: bool, mean: float, lscale: float,
) -> None:  # fmt: skip
    """The profiles in use learn ``x`` (``floor``: the scale's noise floor). A profile too
    young to predict learns it as the level would, clipped about ``mean`` by ``lscale``
    where ``clip_young`` (an alarm's value: a fault on the first day must not become that
    hour's normal)."""
    pl0, pl1, pl2, o2, tday = places
    pr0, pr1, pr2 = preds
    a = p.seasonal_alpha
    xy = x
    if clip_young:
        xy = min(max(x, mean - CLIP * lscale), mean + CLIP * lscale)
    learn_season(s0, g0, i, x, pl0, a, p.min_days0, pr0, tday, p.trend0 > 0.0, 0, -1, floor, xy)
    if n_seasons > 1:
        learn_season(s1, g1, i, x, pl1, a, p.min_days1, pr1, tday, p.trend1 > 0.0, 0, -1, floor, xy)
    if types:
        rcol = TYPE_RES + (1 if o2 else 0)
        learn_season(
            s2, g2, i, x, pl2, a, p.min_days0, pr2, tday, p.trend0 > 0.0, o2, rcol, floor, xy
        )


@inline
def _learn_level(lv: NDArray[Any], i: int, x: float, lscale: float, p: KernelParams) -> None:
    """The level learns ``x`` (:class:`detectors.robust_zscore.RobustZScore`), Huber-clipped at
    its scale ``lscale`` (floored), the clip widened in the grace."""
    n_l, m_l = float(lv[i, LV_N]), float(lv[i, LV_MEAN])
    d_l, ds_l = float(lv[i, LV_MAD]), float(lv[i, LV_SLOW_MAD])
    n1 = n_l + 1.0
    inv = 1.0 / n1
    if n1 == 1.0:
        lv[i, LV_MEAN] = x
    else:
        a = max(inv, p.alpha)
        limit = lscale * _update_clip(n1, p.grace, CLIP, p.grace_clip, GRACE_CLIP_AFTER)
        r = x - m_l
        dev = min(abs(r), limit)
        lv[i, LV_MEAN] = m_l + a * min(max(r, -limit), limit)
        lv[i, LV_MAD] = d_l + a * (dev - d_l)
        lv[i, LV_SLOW_MAD] = ds_l + max(inv, 0.1 * p.alpha) * (dev - ds_l)
    lv[i, LV_N] = n1


@inline
def _learn_shift(
    st: NDArray[Any], i: int, zc: float, up: float, down: float, cl: bool, learn: bool,
    p: KernelParams,
) -> None:  # fmt: skip
    """The CUSUM keeps its sums (restarts where an alarm closed: no re-paging) and, where
    ``learn`` (normal time), the lag-1 correlation of the clipped z ``zc`` learns."""
    st[i, ST_UP] = 0.0 if cl else up
    st[i, ST_DOWN] = 0.0 if cl else down
    if learn:
        m = st[i, ST_RHO_N] + 1.0
        a = max(1.0 / m, p.rho_alpha)
        st[i, ST_COV] += a * (zc * st[i, ST_Z_PREV] - st[i, ST_COV])
        st[i, ST_VAR] += a * (zc * zc - st[i, ST_VAR])
        st[i, ST_RHO_N] = m
    st[i, ST_Z_PREV] = zc


@inline
def _learn_spread(st: NDArray[Any], i: int, p: KernelParams) -> None:
    """The slow normal-time mean and variance of the spread member's short EWMA learn."""
    mu2 = float(st[i, ST_SPREAD_MU]) + p.spread_slow * (
        float(st[i, ST_SPREAD_M]) - float(st[i, ST_SPREAD_MU])
    )
    d2 = float(st[i, ST_SPREAD_M]) - mu2
    st[i, ST_SPREAD_MU] = mu2
    st[i, ST_SPREAD_VAR] += p.spread_slow * (d2 * d2 - st[i, ST_SPREAD_VAR])


@inline
def _learn_resolution(st: NDArray[Any], i: int, x: float, warming: bool, p: KernelParams) -> None:
    """The resolution learns the step to ``x`` in the warm-up, or always where
    ``resolution_always`` (see :mod:`detectors.params`); ``x`` becomes the last value."""
    if warming or st[i, ST_RES_ALWAYS] > 0.0:
        st[i, ST_RES], st[i, ST_RES_N] = _resolution(
            abs(x - float(st[i, ST_X_PREV])), float(st[i, ST_RES]), float(st[i, ST_RES_N])
        )
    st[i, ST_X_PREV] = x


@jit
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

    ``lv``, ``st``, ``tl``, the daily, weekly and day-type profiles ``s0/g0``, ``s1/g1``,
    ``s2/g2`` and ``detail``: the bank's state (:mod:`detectors._bank_kernel_state`);
    ``dirty``: the series whose cached tail fit is stale; ``t``: empty (no timestamps), one,
    or one per series, in local wall-clock seconds; ``sup``: empty or the support of each
    value (NaN where unknown); ``hold``: empty or, per series, whether its peaks are kept out
    of the tails this step as if it were alarming (another series of its entity is);
    ``prop``: empty or, per series, whether a supported value is declared a share of its
    support (see :meth:`detectors.ensemble.Ensemble.update`). ``score`` holds the previous
    scores on entry (kept for gaps); ``detail`` gets, per scored series, what an alarm
    event reports.
    """
    has_sup, has_hold, has_prop = sup.shape[0] > 0, hold.shape[0] > 0, prop.shape[0] > 0
    shared = t.shape[0] == 1
    n_seasons = int(p.n_seasons) if t.shape[0] > 0 else 0
    types = n_seasons > 0 and p.day_types > 0.0
    on2 = p.spread_share > 0.0  # the spread member
    # with one timestamp for all series, the places are the same for all (computed once)
    places = _places(t[0] if t.shape[0] > 0 else 0.0, p)
    for i in range(x.shape[0]):
        opened[i] = False
        closed[i] = False
        if not valid[i]:
            continue
        xv = float(x[i])
        s_i = _support(st, i, xv, sup, has_sup, prop, has_prop)
        if n_seasons > 0 and not shared:
            places = _places(t[i], p)
        preds = _predict_profiles(s0, g0, s1, g1, s2, g2, i, places, p, n_seasons, types)
        level = _level(lv, i)
        scored = float(lv[i, LV_N]) >= p.grace
        ref, scale = _reference(st, tl, g0, g1, g2, i, level, preds, places[3], p, n_seasons, types)
        floor, lscale = _floors(st, i, ref, level[0], level[2], s_i, has_sup)
        # the members' scores, their bars and the vote
        scale, z, point, big = _point(xv, ref, scale, floor, scored, int(st[i, ST_DIR]), p)
        zc, up, down, shift = _shift(st, i, z, big, p)
        spread = _spread(st, i, z, scored, p)
        bar0, bar1, bar2, warming = bars(tl, st, dirty, i, p.xi_max, p.tail_start, on2)
        page0 = point_bar(tl, i, bar0, scored, p.warmup_alarm, p.warmup_outlier)
        # in the warm-up, a day type new to the day-type profile (a first weekend) is measured
        # against the other kind of day: its values count, its peaks stay out of the tails
        novel = types and not math.isfinite(bar0) and new_day_type(s2, g2, i, places[2])
        sc, r0, r1 = vote(point, shift, spread, page0, bar1, bar2, p.shift_gate, p.votes, on2)
        fire, op, cl = alert(
            st, firing, i, sc, p.min_duration, p.burst, p.release, p.clear_after, p.refractory
        )
        opened[i], closed[i], score[i] = op, cl, sc
        detail[i, D_EXPECTED], detail[i, D_SCALE], detail[i, D_POINT_BAR] = ref, scale, page0
        detail[i, D_POINT_RATIO], detail[i, D_SHIFT_RATIO] = r0, r1
        # learn: profiles, level, CUSUM and lag-1 correlation, tails (in normal time)
        held = fire or (has_hold and hold[i])
        if n_seasons > 0:
            _learn_profiles(
                s0, g0, s1, g1, s2, g2, i, xv, places, preds, p, n_seasons, types, floor,
                held and scored, level[0], lscale,
            )  # fmt: skip
        _learn_level(lv, i, xv, lscale, p)
        learn = scored and not held
        _learn_shift(st, i, zc, up, down, cl, learn, p)
        learn_tails(
            tl, dirty, i, st[i, ST_TAIL_LAG_N], (point, shift, spread), (bar0, bar1, bar2),
            learn, scored and held, novel, p.tail_start, p.warmup_outlier, on2,
        )  # fmt: skip
        if on2 and learn:
            _learn_spread(st, i, p)
        _learn_resolution(st, i, xv, warming, p)
