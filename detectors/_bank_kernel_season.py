"""The profiles of :mod:`detectors._bank_kernel`, compiled: where a timestamp falls, what a
profile predicts there, and how it learns a value (numba, inlined into the step).

Each function follows :class:`detectors.seasonal.SeasonalProfile` term by term on the bank's
state (:mod:`detectors._bank_kernel_state`): ``s`` is one profile's ``(bins, series)`` record
array, ``g`` its series-wide state, ``i`` the series, ``o`` the offset of the trend columns
in use (0, or :data:`~detectors._bank_kernel_state.TREND_COLS` for a day-type profile's
weekend days). A place (:func:`place`) is the two bins around a timestamp and the weight of
the second (for prediction), its own bin (for learning) and its period number.
"""

from __future__ import annotations

import math
from typing import Any

from numpy.typing import NDArray

from detectors._bank_kernel_state import (
    CLIP,
    DAYS_CAP,
    G_MAD,
    G_RTOTAL,
    G_TDAY,
    G_TDEN,
    G_TK,
    G_TM,
    G_TR,
    G_TSUM,
    G_TV,
    MIN_RESIDUALS,
    REL_FLOOR,
    RESN_CAP,
    inline,
)
from detectors.robust_zscore import MAD_TO_SIGMA
from detectors.seasonal import day_type_base, trend_fold, trend_ratio

__all__ = ["Place", "Prediction", "learn_season", "new_day_type", "place", "place_types", "predict"]

#: a place in a profile: the bins around a timestamp, the second one's weight, its own bin
#: and its period number
Place = tuple[int, int, float, int, float]
#: a profile's prediction: expected value, scale, maturity and the trend term's part
Prediction = tuple[float, float, bool, float]

_trend_fold = inline(trend_fold)  # the profiles' trend term (detectors.seasonal)
_trend_ratio = inline(trend_ratio)
_day_type_base = inline(day_type_base)  # working day or weekend (detectors.seasonal)


@inline
def place(t: float, period: float, nb: int) -> Place:
    """Where ``t`` falls in a profile of ``nb`` bins over ``period``."""
    frac = (t % period) / period * nb
    pos = frac - 0.5
    lo = math.floor(pos)
    return int(lo) % nb, (int(lo) + 1) % nb, pos - lo, int(frac) % nb, float(math.floor(t / period))


@inline
def place_types(t: float, period: float, nb: int, mask: int) -> Place:
    """:func:`place` in a day-type profile: the bins of ``t``'s day type."""
    base = _day_type_base(t, mask, nb)
    lo, hi, w, own, day = place(t, period, nb)
    return base + lo, base + hi, w, base + own, day


@inline
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
        lim = CLIP * (MAD_TO_SIGMA * max(float(s[b, i].mad), float(g[i, G_MAD])))
        off = trend * abs(lvl)
        r = off + min(max(r - off, -lim), lim)
    return (mean if days == 0 else lvl + a * r), days + 1.0


@inline
def _trend_folded(g: NDArray[Any], i: int, o: int) -> tuple[float, float, float]:
    """The trend term's running mean, variance and day count of series ``i`` with its
    pending day folded in (:func:`detectors.seasonal.trend_fold`)."""
    return _trend_fold(
        float(g[i, G_TM + o]), float(g[i, G_TV + o]), float(g[i, G_TK + o]),
        float(g[i, G_TSUM + o]), float(g[i, G_TDEN + o]),
    )  # fmt: skip


@inline
def _trend(g: NDArray[Any], i: int, tday: float, follow: bool, o: int) -> float:
    """The trend term's correction on the trend day ``tday`` (0 where the profile does not
    follow a trend): on a day's first value, its predecessor folded in, as learning will."""
    trend = 0.0
    if follow:
        if g[i, G_TDAY + o] < tday:
            tm, tv, tk = _trend_folded(g, i, o)
            trend = _trend_ratio(tm, tv, tk)
        else:
            trend = float(g[i, G_TR + o])
    return trend


@inline
def _learn_trend(g: NDArray[Any], i: int, tday: float, follow: bool, o: int) -> float:
    """Move the trend term on to the trend day ``tday`` (its last day folded in, the
    correction refreshed) and return that correction (0 where the profile does not follow
    a trend)."""
    trend = 0.0
    if follow:
        if tday > g[i, G_TDAY + o]:
            g[i, G_TM + o], g[i, G_TV + o], g[i, G_TK + o] = _trend_folded(g, i, o)
            g[i, G_TDAY + o], g[i, G_TSUM + o], g[i, G_TDEN + o] = tday, 0.0, 0.0
            g[i, G_TR + o] = _trend_ratio(
                float(g[i, G_TM + o]), float(g[i, G_TV + o]), float(g[i, G_TK + o])
            )
        trend = float(g[i, G_TR + o])
    return trend


@inline
def predict(
    s: NDArray[Any], g: NDArray[Any], i: int, pl: Place, alpha: float, min_days: float,
    tday: float, follow: bool, o: int,
) -> Prediction:  # fmt: skip
    """Expected value, scale and maturity of one profile at place ``pl`` (a bin the series
    skips leaves its neighbour alone, as in :meth:`detectors.seasonal.SeasonalProfile.predict`),
    and the trend term's part of the expected value (``tday``: the trend's day of ``t``;
    ``follow``: whether this profile follows a trend)."""
    b0, b1, w, _, day = pl
    trend = _trend(g, i, tday, follow, o)
    l0, d0 = _folded(s, g, i, b0, day, alpha, min_days, trend)
    l1, d1 = _folded(s, g, i, b1, day, alpha, min_days, trend)
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
    mad = max((1.0 - w) * s[b0, i].mad + w * s[b1, i].mad, g[i, G_MAD])
    scale = max(MAD_TO_SIGMA * mad, REL_FLOOR * abs(mid))
    return mid, max(scale, 1e-12), ok, off


@inline
def learn_season(
    s: NDArray[Any], g: NDArray[Any], i: int, x: float, pl: Place, alpha: float,
    min_days: float, pred: Prediction, tday: float, follow: bool, o: int, rcol: int,
    floor: float, x_young: float,
) -> None:  # fmt: skip
    """One value into its own bin of one profile (``pred``: the profile's :func:`predict` at
    ``pl``; ``rcol``: the column counting this day type's mature predictions, -1 for none;
    ``floor``: the scale's noise floor; ``x_young``: the value a profile too young to predict
    learns)."""
    b, day = pl[3], pl[4]
    mid, scale, ok, off = pred
    trend = _learn_trend(g, i, tday, follow, o)
    lvl, days = _folded(s, g, i, b, day, alpha, min_days, trend)
    cday = s[b, i].cday
    new_day = cday != day
    ssum = 0.0 if new_day else float(s[b, i].sum)
    cnt = 0.0 if new_day else float(s[b, i].cnt)
    resn = float(s[b, i].resn)
    mad_old = float(s[b, i].mad)
    gmad = float(g[i, G_MAD])
    limit = CLIP * max(scale, floor) if resn > 0 else math.inf
    r = x - mid
    dev = min(abs(r), limit)
    if ok:
        rc = min(max(r, -limit), limit)
        ssum += mid + rc
        if follow:
            g[i, G_TSUM + o] += off + rc
            g[i, G_TDEN + o] += abs(mid - off)
        mad = gmad if resn == 0 else mad_old
        s[b, i].mad = mad + 0.02 * (dev - mad)
        rt = g[i, G_RTOTAL] + 1.0
        g[i, G_RTOTAL] = rt
        if rcol >= 0:
            g[i, rcol] += 1.0
        g[i, G_MAD] = gmad + max(0.01, 1.0 / max(rt, 1.0)) * (dev - gmad)
        s[b, i].resn = min(resn + 1.0, RESN_CAP)
    else:
        ssum += x_young
    s[b, i].level = lvl
    s[b, i].days = min(days, DAYS_CAP)
    if new_day:
        s[b, i].cday = day
    s[b, i].sum = ssum
    s[b, i].cnt = cnt + 1.0


@inline
def new_day_type(s: NDArray[Any], g: NDArray[Any], i: int, pl: Place) -> bool:
    """Whether the day type at place ``pl`` of a day-type profile is new to a profile that
    has otherwise learnt (``MIN_RESIDUALS`` residuals): its bin was seen on no earlier day
    (:meth:`detectors.seasonal.SeasonalProfile.new_day_type`)."""
    b, day = pl[3], pl[4]
    if not g[i, G_RTOTAL] >= MIN_RESIDUALS:
        return False
    return s[b, i].days == 0 and not (s[b, i].cnt > 0 and s[b, i].cday < day)
