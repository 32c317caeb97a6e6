"""The state layout of :class:`detectors.bank.EnsembleBank` and how its kernels are compiled.

State is laid out series-major so that one series' state is one contiguous row: a pass over
the series then streams through memory (the series-minor layout of a numpy bank, one row per
quantity, made the fused loop wait on ~80 concurrent streams and ran slower than numpy).

- ``level``, ``(series, 4)``: :data:`LEVEL_KEYS`, the robust level of
  :class:`detectors.robust_zscore.RobustZScore`;
- ``state``, ``(series, 21)``: :data:`STATE_KEYS`, the members' running state, and each
  series' bad direction (0 both, 1 up, 2 down) and resolution rule (1: always learnt);
- ``tails``, ``(series, 14, 3)``: :data:`TAIL_KEYS` × member (:data:`POINT`, :data:`SHIFT`,
  :data:`SPREAD`), the peaks-over-threshold state of each member's bar;
- per profile (daily, weekly, day-type), one ``(bins, series)`` record array
  (:func:`season_dtype`, :data:`SEASON_KEYS`) and a ``(series, 9)`` array of its series-wide
  state (:data:`SERIES_KEYS`; a day-type profile's has ``TYPE_RES + 2`` columns);
- ``detail``, ``(series, 5)``: :data:`DETAIL`, what an alarm event reports.

Each column has a module-level integer name (``ST_UP``, ``T_PEAK``, ...): numba compiles a
global integer as a constant, so the kernels index by name at no cost.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, cast

import numba
import numpy as np

__all__ = [
    "CLIP",
    "DAYS_CAP",
    "DETAIL",
    "LEVEL_KEYS",
    "MIN_RESIDUALS",
    "REL_FLOOR",
    "RESN_CAP",
    "SEASON_KEYS",
    "SERIES_KEYS",
    "STATE_KEYS",
    "TAIL_KEYS",
    "TREND_COLS",
    "TYPE_RES",
    "inline",
    "jit",
    "season_dtype",
]

#: the profiles' and the level's Huber clip, in scales
CLIP = 3.0
#: the smallest scale, relative to the expected value
REL_FLOOR = 1e-6
#: residuals a profile needs before it may be the point member's reference
MIN_RESIDUALS = 30

F = TypeVar("F", bound=Callable[..., Any])


def jit(f: F) -> F:
    """A kernel the bank calls (compiled once, cached on disk)."""
    return cast(F, numba.njit(cache=True, nogil=True, error_model="numpy")(f))


def inline(f: F) -> F:
    """A helper of the kernels, inlined into them by numba (a call would pass each array with
    reference counting and the parameters by value: more than the helper's own work)."""
    return cast(F, numba.njit(cache=True, inline="always", error_model="numpy")(f))


#: per series: the level's value count, mean, mean absolute deviation and slow deviation
LEVEL_KEYS = ("n", "mean", "mad", "slow_mad")
LV_N, LV_MEAN, LV_MAD, LV_SLOW_MAD = range(len(LEVEL_KEYS))

#: per series: the CUSUM's up and down sums, the last clipped z, its lag-1 covariance,
#: variance and count; the supported values and those that were whole counts; the alerter's
#: run and cool-down; the warm-up, tail lag and daily cycle in values (refreshed with the
#: interval); the last value (NaN before the first), the resolution (0 while unknown) and
#: how often it was seen (:func:`detectors.params.resolution`); the spread member's short
#: EWMA of |z| and that EWMA's slow mean and variance
STATE_KEYS = (
    "up", "down", "z_prev", "cov", "var", "rho_n", "counted", "whole", "run", "cool",
    "warm_n", "tail_lag_n", "x_prev", "resolution", "resolution_n", "cycle_n",
    "spread_m", "spread_mu", "spread_var", "direction", "resolution_always",
)  # fmt: skip
(
    ST_UP, ST_DOWN, ST_Z_PREV, ST_COV, ST_VAR, ST_RHO_N, ST_COUNTED, ST_WHOLE, ST_RUN, ST_COOL,
    ST_WARM_N, ST_TAIL_LAG_N, ST_X_PREV, ST_RES, ST_RES_N, ST_CYCLE_N,
    ST_SPREAD_M, ST_SPREAD_MU, ST_SPREAD_VAR, ST_DIR, ST_RES_ALWAYS,
) = range(len(STATE_KEYS))  # fmt: skip

#: per member: POT counts and sums, the open cluster's peak, the quarantined peaks
#: (count, Σ excess, Σ excess², age), the risk and floor, and the cached tail fit
TAIL_KEYS = (
    "n", "clusters", "excess", "excess_sq", "peak", "pc", "pe", "pe2", "age",
    "log_q", "floor", "lc", "sigma", "xi",
)  # fmt: skip
(
    T_N, T_CLUSTERS, T_EXCESS, T_EXCESS_SQ, T_PEAK, T_PC, T_PE, T_PE2, T_AGE,
    T_LOG_Q, T_FLOOR, T_LC, T_SIGMA, T_XI,
) = range(len(TAIL_KEYS))  # fmt: skip
#: the members, the last axis of the tails
POINT, SHIFT, SPREAD = range(3)

SEASON_KEYS = ("level", "mad", "sum", "days", "resn", "cnt", "cday")
#: where a bin's day count stops (its uint16 field) and its residual count (uint8)
DAYS_CAP = 65535.0
RESN_CAP = 255.0
#: per series and profile: the series-wide deviation and residual count, then the trend term
#: (:meth:`detectors.seasonal.SeasonalProfile.trend`): its day, that day's clipped residuals
#: and predictions, the days' running mean, variance and count, and the correction they give
#: (:func:`detectors.seasonal.trend_ratio`, refreshed once a day); a day-type profile has the
#: trend term twice, working days then weekend days (:data:`TREND_COLS` further on)
SERIES_KEYS = ("gmad", "rtotal", "tday", "tsum", "tden", "tm", "tv", "tk", "tr")
G_MAD, G_RTOTAL, G_TDAY, G_TSUM, G_TDEN, G_TM, G_TV, G_TK, G_TR = range(len(SERIES_KEYS))
#: columns of one trend term in :data:`SERIES_KEYS`
TREND_COLS = 7
#: a day-type profile's mature predictions on working days and weekend days, the columns
#: after its two trend terms (:meth:`detectors.seasonal.SeasonalProfile.both_ready`)
TYPE_RES = len(SERIES_KEYS) + TREND_COLS

#: per series, at its last scored value: the expected value, the scale, the point member's
#: bar and the point and shift members' ratios
DETAIL = ("expected", "scale", "point_bar", "point_ratio", "shift_ratio")
D_EXPECTED, D_SCALE, D_POINT_BAR, D_POINT_RATIO, D_SHIFT_RATIO = range(len(DETAIL))


def season_dtype(dtype: Any) -> np.dtype[np.void]:
    """One profile bin of one series: level, MAD and the day's sum in ``dtype``; the day
    count in uint16 (saturating at :data:`DAYS_CAP`, where it no longer changes anything
    while ``1 / (DAYS_CAP + 1) <= alpha`` and ``min_days <= DAYS_CAP``, which
    :class:`detectors.params.EnsembleParams` checks); whether the bin has a residual in uint8
    (a count saturating at :data:`RESN_CAP`: only ``> 0`` is read); the day's value count and
    day number in float32 (whole numbers below 2**24 are exact; a day number since 1970 is
    ~20,000, and -1 marks a bin never seen). 35 bytes a bin in float64, 23 in float32,
    against 40 and 28 with every count in float32, with the same results bit for bit. One
    record, so a bin stays one memory stream (two arrays ran a quarter slower)."""
    return np.dtype(
        [(k, dtype) for k in SEASON_KEYS[:3]]
        + [("days", np.uint16), ("resn", np.uint8), ("cnt", np.float32), ("cday", np.float32)]
    )
