"""Compiled passes of :meth:`detectors.monitor.MonitorBank.observe_columns` around a bank's
step: what were a few dozen numpy calls of a microsecond or more each, every tick.

:func:`scatter` lays a tick's rows out as the bank's series (the step's inputs);
:func:`after_step` keeps each series' reported score and works out each row's transition as
a count gate's code (:data:`~detectors.count_bank.NONE`, ``OPEN``, ``UPDATE``, ``CLOSE``).
Each does what the numpy expressions it replaced did, element for element, in their order.

>>> n, sel, idx = 3, np.array([0, 2]), np.array([2, 0])
>>> x, sup, hold, prop, t = np.empty(n), np.empty(n), np.empty(n, np.bool_), np.empty(
...     n, np.bool_), np.empty(n)
>>> no = np.zeros(3, np.bool_)
>>> flags = scatter(sel, idx, np.array([1.0, 2.0, 3.0]), np.full(3, 5.0), no, no, no,
...                 np.full(3, 60.0), 60.0, x, sup, hold, prop, t)
>>> x.tolist(), flags
([3.0, nan, 1.0], (False, False, False))
"""

from __future__ import annotations

from typing import Any, TypeVar, cast

import numba
import numpy as np

from detectors.count_bank import CLOSE, NONE, OPEN, UPDATE

__all__ = ["after_step", "scatter", "usable"]

_F = TypeVar("_F")


def _compiled(f: _F) -> _F:
    return cast(_F, numba.njit(cache=True, nogil=True)(f))


@_compiled
def usable(
    value: Any, support: Any, has_support: Any, min_support: Any, bank: Any, rows: Any
) -> tuple[int, int]:
    """The rows with a value backed by enough events (where it has a support) into
    ``rows``, in order. Returns how many, and how many of them sit in no ``bank`` yet."""
    n = fresh = 0
    for r in range(len(value)):
        if value[r] != value[r] or (has_support[r] and not support[r] >= min_support[r]):
            continue
        rows[n] = r
        n += 1
        fresh += bank[r] < 0
    return n, fresh


@_compiled
def scatter(
    sel: Any, idx: Any, value: Any, support: Any, has_support: Any, hold_col: Any,
    prop_col: Any, ts_col: Any, ts: float, x: Any, sup: Any, hold: Any, prop: Any, t: Any,
) -> tuple[bool, bool, bool]:  # fmt: skip
    """Rows ``sel`` of a tick's columns into series ``idx`` of the bank's arrays (the rest:
    no value, no support, neither held nor a share, at the tick's time ``ts``; a row's
    support only where it ``has_support``). Returns whether a row is held, is a share, and
    was scraped off the tick."""
    x[:] = np.nan
    sup[:] = np.nan
    hold[:] = False
    prop[:] = False
    t[:] = ts
    any_hold = any_prop = off = False
    for j in range(len(sel)):
        r, i = sel[j], idx[j]
        x[i] = value[r]
        sup[i] = support[r] if has_support[r] else np.nan
        hold[i] = hold_col[r]
        prop[i] = prop_col[r]
        t[i] = ts_col[r]
        any_hold |= hold_col[r]
        any_prop |= prop_col[r]
        off |= ts_col[r] != ts
    return any_hold, any_prop, off


@_compiled
def after_step(
    score: Any, opened: Any, closed: Any, firing: Any, reported: Any, update_factor: float,
    sel: Any, idx: Any, cols: tuple[Any, Any, Any, Any], row_gate: Any, code: Any, g: Any,
    g_gate: Any, g_t: Any, g_count: Any, g_window: Any, g_code: Any, g_firing: Any,
) -> tuple[int, int]:  # fmt: skip
    """After a step: each series' reported score (an opening's score, NaN once closed, and
    a firing series seen this tick whose score grew to ``update_factor`` times it), and each
    row's transition ``code`` in the order of precedence open, close, update. The rows of
    count series (``cols``: the tick's values, times, count scales and windows; a scale
    > 0) are listed for their gates: position ``g``, gate (``row_gate`` of the row, -1:
    none yet), time, count (value × scale), window, code and whether the series fires.
    Returns how many rows count, and how many of them have no gate yet."""
    value, ts, count_scale, window_s = cols
    n = len(score)
    for i in range(n):
        if opened[i]:
            reported[i] = score[i]
        if closed[i]:
            reported[i] = np.nan
    grew = np.zeros(n, np.bool_)
    for j in range(len(idx)):
        i = idx[j]
        if firing[i] and not opened[i] and score[i] >= update_factor * reported[i]:
            grew[i] = True
    for i in range(n):
        if grew[i]:
            reported[i] = score[i]
    n_counted = n_missing = 0
    for j in range(len(sel)):
        i, r = idx[j], sel[j]
        code[j] = OPEN if opened[i] else CLOSE if closed[i] else UPDATE if grew[i] else NONE
        if not count_scale[r] > 0.0:
            continue
        k = n_counted
        g[k] = j
        g_gate[k] = row_gate[r]
        n_missing += row_gate[r] < 0
        g_t[k] = ts[r]
        g_count[k] = value[r] * count_scale[r]
        g_window[k] = window_s[r]
        g_code[k] = code[j]
        g_firing[k] = firing[i]
        n_counted += 1
    return n_counted, n_missing
