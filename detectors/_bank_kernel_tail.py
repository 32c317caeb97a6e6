"""From member scores to alarms in :mod:`detectors._bank_kernel`, compiled: the members' bars
(their peaks-over-threshold tails, learnt in normal time), the vote and the alerter (numba,
inlined into the step).

Each function follows its counterpart term by term (:class:`detectors.spot.PeaksOverThreshold`,
:meth:`detectors.ensemble.Ensemble.update`, :class:`detectors.alerting.Alerter`) on the bank's
state (:mod:`detectors._bank_kernel_state`): ``tl`` the tails, ``st`` the per-series state,
``i`` the series; the members are :data:`~detectors._bank_kernel_state.POINT`, ``SHIFT`` and
``SPREAD`` (``on2``: whether the spread member is on).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import NDArray

from detectors._bank_kernel_state import (
    POINT,
    SHIFT,
    SPREAD,
    ST_COOL,
    ST_RUN,
    ST_WARM_N,
    T_AGE,
    T_CLUSTERS,
    T_EXCESS,
    T_EXCESS_SQ,
    T_FLOOR,
    T_LC,
    T_LOG_Q,
    T_N,
    T_PC,
    T_PE,
    T_PE2,
    T_PEAK,
    T_SIGMA,
    T_XI,
    inline,
)
from detectors.spot import tail_shape

__all__ = ["alert", "bars", "learn_tails", "point_bar", "vote"]

_tail_shape = inline(tail_shape)  # the per-series POT's moment fit of ξ, compiled


@inline
def _tail_fit(tl: NDArray[Any], i: int, xi_max: float, members: int) -> None:
    """Refresh the cached tail fit (``log(λ/q)`` up to ``−log n``, ``σ``, ``ξ``) of series ``i``'s
    first ``members`` members (the spread member's only where it is on)."""
    for j in range(members):
        c = float(tl[i, T_CLUSTERS, j])
        has = c > 0
        safe_c = c if has else 1.0
        xi = _tail_shape(c, float(tl[i, T_EXCESS, j]), float(tl[i, T_EXCESS_SQ, j]), xi_max)
        tl[i, T_LC, j] = math.log(safe_c) - tl[i, T_LOG_Q, j]
        tl[i, T_SIGMA, j] = tl[i, T_EXCESS, j] / safe_c * (1.0 - xi) if has else 0.0
        tl[i, T_XI, j] = xi


@inline
def _bar(tl: NDArray[Any], j: int, i: int, tail_start: float, log_n: float) -> float:
    """SPOT bar of member ``j`` after ``exp(log_n)`` learnt values (floored)."""
    lr = max(float(tl[i, T_LC, j]) - log_n, 0.0)
    xi = float(tl[i, T_XI, j])
    if xi > 1e-9:
        lr = math.expm1(xi * lr) / xi
    return max(lr * float(tl[i, T_SIGMA, j]) + tail_start, float(tl[i, T_FLOOR, j]))


@inline
def bars(
    tl: NDArray[Any], st: NDArray[Any], dirty: NDArray[np.bool_], i: int, xi_max: float,
    tail_start: float, on2: bool,
) -> tuple[float, float, float, bool]:  # fmt: skip
    """The point, shift and spread members' bars (inf in the warm-up; the tail fit refreshed
    first where it is stale), and whether the warm-up is on."""
    if dirty[i]:
        _tail_fit(tl, i, xi_max, 3 if on2 else 2)
        dirty[i] = False
    warm_n = float(st[i, ST_WARM_N])
    nn = float(tl[i, T_N, POINT])  # (the members learn the same steps)
    bar0 = bar1 = bar2 = math.inf
    if nn >= warm_n:
        log_n = math.log(max(nn, 1.0))
        bar0 = _bar(tl, POINT, i, tail_start, log_n)
        bar1 = _bar(tl, SHIFT, i, tail_start, log_n)
        if on2:
            bar2 = _bar(tl, SPREAD, i, tail_start, log_n)
    return bar0, bar1, bar2, nn < warm_n


@inline
def point_bar(
    tl: NDArray[Any], i: int, bar0: float, scored: bool, warmup_alarm: float,
    warmup_outlier: float,
) -> float:  # fmt: skip
    """The bar the point member pages against: its bar, or in the warm-up ``warmup_outlier`` ×
    its iid bar where ``warmup_alarm`` is on (the tails still see ``bar0``: not yet learnt)."""
    page0 = bar0
    if warmup_alarm > 0.0 and scored and not math.isfinite(bar0):
        page0 = warmup_outlier * tl[i, T_FLOOR, POINT]
    return page0


@inline
def learn_tails(
    tl: NDArray[Any], dirty: NDArray[np.bool_], i: int, lag: float,
    scores: tuple[float, float, float], bars: tuple[float, float, float], learn: bool,
    drop: bool, novel: bool, tail_start: float, warmup_outlier: float, on2: bool,
) -> None:  # fmt: skip
    """Each member's tail learns its score (:class:`detectors.spot.PeaksOverThreshold`): in
    normal time (``learn``) a peak waits ``lag`` quiet values in quarantine before it joins
    the tail; ``drop`` (an alarm) empties the quarantine; a ``novel`` day type's scores
    count as 0. In the warm-up a peak beyond ``warmup_outlier`` × the member's iid bar waits
    for ever."""
    for j in range(3 if on2 else 2):
        s_j = 0.0 if novel else (scores[0] if j == 0 else (scores[1] if j == 1 else scores[2]))
        bar = bars[0] if j == 0 else (bars[1] if j == 1 else bars[2])
        peak = float(tl[i, T_PEAK, j])
        if learn and tl[i, T_PC, j] > 0:
            tl[i, T_AGE, j] += 1.0
        above = s_j > tail_start
        admit = bar
        if math.isfinite(warmup_outlier) and not math.isfinite(bar):
            admit = warmup_outlier * tl[i, T_FLOOR, j]
        if learn and not above and peak > tail_start and peak < admit:
            e = peak - tail_start
            tl[i, T_PC, j] += 1.0
            tl[i, T_PE, j] += e
            tl[i, T_PE2, j] += e * e
        commit = learn and tl[i, T_PC, j] > 0 and tl[i, T_AGE, j] >= lag
        if commit:
            tl[i, T_CLUSTERS, j] += tl[i, T_PC, j]
            tl[i, T_EXCESS, j] += tl[i, T_PE, j]
            tl[i, T_EXCESS_SQ, j] += tl[i, T_PE2, j]
            dirty[i] = True
        if commit or drop:
            tl[i, T_PC, j] = 0.0
            tl[i, T_PE, j] = 0.0
            tl[i, T_PE2, j] = 0.0
            tl[i, T_AGE, j] = 0.0
        if learn:
            tl[i, T_PEAK, j] = max(peak, s_j) if above else 0.0
            tl[i, T_N, j] += 1.0
        elif drop:
            tl[i, T_PEAK, j] = 0.0


@inline
def vote(
    point: float, shift: float, spread: float, page0: float, bar1: float, bar2: float,
    shift_gate: float, votes: float, on2: bool,
) -> tuple[float, float, float]:  # fmt: skip
    """The ensemble score, the ``votes``-th largest of the members' ratios to their bars (the
    shift member's counts once the point member's reaches ``shift_gate``), and the point and
    shift members' ratios."""
    r0 = point / page0
    r1 = shift / bar1 if r0 >= shift_gate else 0.0
    if not on2:
        sc = max(r0, r1) if votes <= 1 else min(r0, r1)
    else:  # the votes-th largest of three
        r2 = spread / bar2
        if votes <= 1:
            sc = max(max(r0, r1), r2)
        elif votes == 2:
            sc = max(min(r0, r1), min(max(r0, r1), r2))
        else:
            sc = min(min(r0, r1), r2)
    return sc, r0, r1


@inline
def alert(
    st: NDArray[Any], firing: NDArray[np.bool_], i: int, sc: float, min_duration: float,
    burst: float, release: float, clear_after: float, refractory: float,
) -> tuple[bool, bool, bool]:  # fmt: skip
    """The alerter on score ``sc`` (:class:`detectors.alerting.Alerter`: minimum duration,
    burst, hysteresis, refractory period): whether the series fires, and whether an alarm
    opened or closed."""
    f = firing[i]
    run0, cool0 = float(st[i, ST_RUN]), float(st[i, ST_COOL])
    cooling = not f and cool0 > 0
    run_nf = run0 + 1.0 if sc >= 1.0 else 0.0
    op = not f and not cooling and (run_nf >= min_duration or sc >= burst)
    run_f = run0 + 1.0 if sc < release else 0.0
    cl = f and run_f >= clear_after
    run = run_f if f else (0.0 if cooling else run_nf)
    if op or cl:
        run = 0.0
    st[i, ST_RUN] = run
    st[i, ST_COOL] = refractory if cl else cool0 - (1.0 if cooling else 0.0)
    fire = (f and not cl) or op
    firing[i] = fire
    return fire, op, cl
