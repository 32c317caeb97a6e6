"""The KPI formulas of one entity compiled into one program, run over the store's rings.

A :class:`~knowledge.formula.Formula` evaluated through
:class:`~noc_assistant.ingest.series.EntityView` makes a Python call per node and per series;
the pipeline evaluates every KPI of every entity at every tick, and that was the largest part
of its time. Here the formulas of an entity's KPI series (each label group's value and, where
the KPI has one, its support) become one postfix program over its leaves (a selector and the
series it reads, resolved once while the entity's series stay the same). The programs of a
tick's entities are joined (:meth:`Program.concat`), and one compiled call evaluates every
row, each at its entity's own scrape time (:func:`run_rows`).

The values are those of :meth:`Formula.evaluate` over an ``EntityView``, bit for bit: the same
operations in the same order (the increments newest first, the series in store order, ``None``
kept apart from NaN, which ``first``/``min``/``max`` do not skip), checked against the view
in ``tests/stream/test_kpi_program.py``.
"""

from __future__ import annotations

import ast
import hashlib
import inspect
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from knowledge.formula import Formula
from noc_assistant.errors import ConfigError
from noc_assistant.ingest import rings as rings_module
from noc_assistant.ingest.rings import Rings, kernel, ring_increase, ring_late
from noc_assistant.ingest.series import EntityView, SeriesState

__all__ = ["RINGS_DIGEST", "Program", "compile_rows", "rings_digest"]

I64 = NDArray[np.int64]
F64 = NDArray[np.float64]

# opcodes (argument: a constant's index, a leaf's index, or how many operands)
_CONST, _LEAF, _NEG, _ADD, _SUB, _MUL, _DIV, _FIRST, _MIN, _MAX = range(10)
_BINOPS = {ast.Add: _ADD, ast.Sub: _SUB, ast.Mult: _MUL, ast.Div: _DIV}
_FOLDS = {"first": _FIRST, "min": _MIN, "max": _MAX}
# selectors
_FNS = {
    "increase": 0, "rate": 1, "gauge": 2, "gauge_mean": 3, "gauge_max": 4, "gauge_min": 5,
    "hist_mean": 6, "present": 7,
}  # fmt: skip
#: the deepest stack a program may need
_STACK = 64

#: numba's on-disk cache of the kernels below is keyed on this file alone, but they compile in
#: ``ring_increase`` and ``ring_late`` of :mod:`noc_assistant.ingest.rings`: after a change
#: there the cached machine code would run stale until this file changes too. The tests
#: recompute :func:`rings_digest` and fail until it is updated here.
RINGS_DIGEST = "6ec28c9efcb9c4bc"


def rings_digest() -> str:
    """Digest of the source of :mod:`noc_assistant.ingest.rings`."""
    return hashlib.sha256(inspect.getsource(rings_module).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Program:
    """Postfix programs of rows (value and support formulas of an entity's KPI series) over
    leaves (a selector and its lists of series). Row ``r``'s code is
    ``ops[row_ptr[r]:row_ptr[r+1]]`` (empty: no formula, the value is None); leaf ``k`` reads
    the lists ``leaf_list[k]`` on (four for a histogram mean, else one), list ``m`` the rows
    of the rings ``sids[list_ptr[m]:list_ptr[m+1]]``."""

    row_ptr: I64
    ops: I64
    args: I64
    consts: F64
    leaf_fn: I64
    leaf_list: I64
    list_ptr: I64
    sids: I64

    def run(
        self, rings: Rings, windows: F64, at: float | F64, since: float | F64, grace: float | F64
    ) -> tuple[F64, NDArray[np.bool_]]:
        """Each row's value and whether it has one, at ``at`` with the rows' KPI windows (a
        value where its row has none is undefined). ``at``, ``since`` and ``grace`` are one
        number for every row, or one per row (rows of several entities: :meth:`concat`)."""
        rings.flush()
        rows = len(self.row_ptr) - 1
        out = np.empty(rows)
        ok = np.empty(rows, np.bool_)
        run_rows(
            _per_row(at, rows), _per_row(since, rows), _per_row(grace, rows), rings.horizon_s,
            windows, self.row_ptr, self.ops, self.args, self.consts, self.leaf_fn,
            self.leaf_list, self.list_ptr, self.sids, rings.last_ts, rings.last_value,
            rings.has_value, rings.r_prev, rings.r_ts, rings.r_inc, rings.r_reset, rings.head,
            rings.size, out, ok,
        )  # fmt: skip
        return out, ok

    @classmethod
    def concat(cls, programs: Sequence[Program]) -> Program:
        """One program of the rows of ``programs``, in order (one compiled call for a tick's
        entities instead of one each): each part's offsets moved past the parts before it."""
        row_ptr, ops, args, consts, leaf_fn, leaf_list, list_ptr, sids = ([] for _ in range(8))
        n_ops = n_consts = n_leaves = n_lists = n_sids = 0
        for p in programs:
            row_ptr.append(p.row_ptr[1:] + n_ops)
            ops.append(p.ops)
            args.append(
                p.args + np.where(p.ops == _CONST, n_consts, np.where(p.ops == _LEAF, n_leaves, 0))
            )
            consts.append(p.consts)
            leaf_fn.append(p.leaf_fn)
            leaf_list.append(p.leaf_list + n_lists)
            list_ptr.append(p.list_ptr[1:] + n_sids)
            sids.append(p.sids)
            n_ops += len(p.ops)
            n_consts += len(p.consts)
            n_leaves += len(p.leaf_fn)
            n_lists += len(p.list_ptr) - 1
            n_sids += len(p.sids)

        def joined(parts: list[Any], dtype: type, first: list[int] | None = None) -> Any:
            return np.concatenate([np.array(first or [], dtype), *parts]).astype(dtype)

        return cls(
            joined(row_ptr, np.int64, [0]), joined(ops, np.int64), joined(args, np.int64),
            joined(consts, np.float64), joined(leaf_fn, np.int64), joined(leaf_list, np.int64),
            joined(list_ptr, np.int64, [0]), joined(sids, np.int64),
        )  # fmt: skip


def _per_row(x: float | F64, rows: int) -> F64:
    """``x`` for each of ``rows`` rows: a number repeated, or the array itself."""
    if np.ndim(x) == 0:
        return np.full(rows, float(x))
    return np.ascontiguousarray(x, np.float64)


class _Builder:
    """Collects the rows of one entity's program."""

    def __init__(self) -> None:
        self.row_ptr = [0]
        self.ops: list[int] = []
        self.args: list[int] = []
        self.consts: list[float] = []
        self.leaf_fn: list[int] = []
        self.leaf_list: list[int] = []
        self.list_ptr = [0]
        self.sids: list[int] = []
        #: each distinct leaf's index: a selector over the same series is one leaf (a KPI's
        #: value and support, and KPIs of one counter, read the same increase)
        self._leaves: dict[tuple[int, tuple[tuple[int, ...], ...]], int] = {}

    def row(self, formula: Formula | None, view: EntityView) -> None:
        if formula is not None:
            depth = self._emit(formula.tree, view)
            if depth > _STACK:
                raise ConfigError(f"formula {formula.text!r} nests deeper than {_STACK}")
        self.row_ptr.append(len(self.ops))

    def _op(self, op: int, arg: int = 0) -> None:
        self.ops.append(op)
        self.args.append(arg)

    def _emit(self, node: ast.expr, view: EntityView) -> int:
        """Code of ``node`` (checked by the formula's parser); the stack depth it needs."""
        if isinstance(node, ast.Constant):
            self.consts.append(float(node.value))  # type: ignore[arg-type]
            self._op(_CONST, len(self.consts) - 1)
            return 1
        if isinstance(node, ast.UnaryOp):
            depth = self._emit(node.operand, view)
            self._op(_NEG)
            return depth
        if isinstance(node, ast.BinOp):
            left = self._emit(node.left, view)
            right = self._emit(node.right, view)
            self._op(_BINOPS[type(node.op)])
            return max(left, 1 + right)
        assert isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
        name = node.func.id
        if name in _FOLDS:
            depth = max(k + self._emit(a, view) for k, a in enumerate(node.args))
            self._op(_FOLDS[name], len(node.args))
            return depth
        metric = str(node.args[0].value)  # type: ignore[attr-defined]
        matchers = {str(kw.arg): str(kw.value.value) for kw in node.keywords}  # type: ignore[attr-defined]
        self._leaf(name, view.resolve(name, metric, matchers))
        return 1

    def _leaf(self, fn: str, lists: Sequence[list[SeriesState]]) -> None:
        if fn not in _FNS:
            raise ConfigError(f"selector {fn}() is not evaluated per series")
        key = (_FNS[fn], tuple(tuple(st.sid for st in states) for states in lists))
        found = self._leaves.get(key)
        if found is None:
            found = self._leaves[key] = len(self.leaf_fn)
            self.leaf_fn.append(_FNS[fn])
            self.leaf_list.append(len(self.list_ptr) - 1)
            for sids in key[1]:
                self.sids.extend(sids)
                self.list_ptr.append(len(self.sids))
        self._op(_LEAF, found)

    def program(self) -> Program:
        def ints(xs: list[int]) -> I64:
            return np.array(xs, np.int64)

        return Program(
            ints(self.row_ptr), ints(self.ops), ints(self.args), np.array(self.consts),
            ints(self.leaf_fn), ints(self.leaf_list), ints(self.list_ptr), ints(self.sids),
        )  # fmt: skip


def compile_rows(
    views: Sequence[EntityView], formulas: Sequence[tuple[Formula, Formula | None]]
) -> Program:
    """One program for rows of (value formula, support formula or None), two rows each (the
    value's, then the support's), each resolved through its view (the entity and its label
    group's matchers)."""
    b = _Builder()
    for view, (value, support) in zip(views, formulas, strict=True):
        b.row(value, view)
        b.row(support, view)
    return b.program()


# -- the compiled evaluation --------------------------------------------------------------


@kernel
def _sum_increase(
    list_ptr: I64, sids: I64, m: int, at: float, start: float, since: float, grace: float,
    ring: Any,
) -> tuple[float, bool]:  # fmt: skip
    """Summed increase of list ``m``'s series over ``(start, at]``; False: None (a late
    series or a reset partly inside is a gap, and no sample there is no value). ``ring``:
    the rings' ``last_ts, r_prev, r_ts, r_inc, r_reset, head, size``."""
    last_ts, r_prev, r_ts, r_inc, r_reset, head, size = ring
    total = 0.0
    seen = False
    for p in range(list_ptr[m], list_ptr[m + 1]):
        i = sids[p]
        if ring_late(last_ts, size, i, at, since, grace):
            return 0.0, False
        inc, known = ring_increase(r_prev, r_ts, r_inc, r_reset, head, size, i, start, at)
        if known == 2 or (known == 1 and math.isnan(inc)):
            return 0.0, False
        if known == 1:
            total = inc if not seen else total + inc
            seen = True
    return total, seen


@kernel
def _latest(
    fn: int, list_ptr: I64, sids: I64, m: int, at: float, window: float, grace: float,
    horizon: float, last_ts: F64, last_value: F64, has_value: Any,
) -> tuple[float, bool]:  # fmt: skip
    """``present`` (fn 7) or a gauge (2 to 5) of list ``m``, as ``EntityView.select``."""
    lo, hi = list_ptr[m], list_ptr[m + 1]
    if fn == 7:
        gone = at - max(horizon, 4 * window)
        since = at - max(window, grace)
        n = 0
        answered = 0
        for p in range(lo, hi):
            t = last_ts[sids[p]]
            if t > gone:
                n += 1
                if t > since:
                    answered += 1
        return (answered / n, True) if n > 0 else (0.0, False)
    stale_before = at - 2 * window
    n = 0
    acc = 0.0
    for p in range(lo, hi):
        i = sids[p]
        if not has_value[i] or last_ts[i] <= stale_before:
            continue
        v = last_value[i]
        if n == 0:
            acc = 0.0 + v if fn in (2, 3) else v
        elif fn in (2, 3):
            acc = acc + v
        elif fn == 4:
            acc = v if v > acc else acc
        else:
            acc = v if v < acc else acc
        n += 1
    if n == 0:
        return 0.0, False
    if fn == 3:
        return acc / n, True
    return acc, True


@kernel
def _leaf(
    k: int, window: float, at: float, since: float, grace: float, horizon: float,
    leaf_fn: I64, leaf_list: I64, list_ptr: I64, sids: I64, last_ts: F64, last_value: F64,
    has_value: Any, r_prev: F64, r_ts: F64, r_inc: F64, r_reset: Any, head: I64, size: I64,
) -> tuple[float, bool]:  # fmt: skip
    """Value of leaf ``k`` (a selector over its series); False: None."""
    fn = leaf_fn[k]
    m = leaf_list[k]
    start = at - window
    if fn <= 1 or fn == 6:
        ring = (last_ts, r_prev, r_ts, r_inc, r_reset, head, size)
        v, ok = _sum_increase(list_ptr, sids, m, at, start, since, grace, ring)
        if fn == 6:  # a histogram's mean: its parts, else its _sum and _count series
            d, dok = _sum_increase(list_ptr, sids, m + 1, at, start, since, grace, ring)
            if not ok or not dok:
                v, ok = _sum_increase(list_ptr, sids, m + 2, at, start, since, grace, ring)
                d, dok = _sum_increase(list_ptr, sids, m + 3, at, start, since, grace, ring)
            if not ok or not dok or d == 0:
                return 0.0, False
            return v / d, True
        if ok and fn == 1:
            return v / window, True
        return v, ok
    return _latest(fn, list_ptr, sids, m, at, window, grace, horizon, last_ts, last_value,
                   has_value)  # fmt: skip


@kernel
def run_rows(
    at_r: F64, since_r: F64, grace_r: F64, horizon: float, windows: F64, row_ptr: I64,
    ops: I64, args: I64, consts: F64, leaf_fn: I64, leaf_list: I64, list_ptr: I64,
    sids: I64, last_ts: F64, last_value: F64, has_value: Any, r_prev: F64, r_ts: F64,
    r_inc: F64, r_reset: Any, head: I64, size: I64, out: F64, ok: Any,
) -> None:  # fmt: skip
    """Run every row's program (``windows``: each row's KPI window; ``at_r``, ``since_r``,
    ``grace_r``: its entity's scrape time, last evaluation and liveness grace) into ``out``
    and ``ok`` (False: None, as a formula's NaN or infinite result is)."""
    stack = np.empty(64)
    has = np.empty(64, np.bool_)
    # each leaf's value at the window it was last read with (a leaf is read by the rows of one
    # entity, so at one time, last evaluation and grace): read again, not worked out again
    seen_w = np.full(len(leaf_fn), np.nan)
    seen_v = np.empty(len(leaf_fn))
    seen_ok = np.empty(len(leaf_fn), np.bool_)
    for r in range(len(row_ptr) - 1):
        w = windows[r]
        at, since, grace = at_r[r], since_r[r], grace_r[r]
        sp = 0
        for c in range(row_ptr[r], row_ptr[r + 1]):
            op = ops[c]
            a = args[c]
            if op == 0:
                stack[sp] = consts[a]
                has[sp] = True
                sp += 1
            elif op == 1:
                if seen_w[a] != w:
                    seen_v[a], seen_ok[a] = _leaf(
                        a, w, at, since, grace, horizon, leaf_fn, leaf_list, list_ptr, sids,
                        last_ts, last_value, has_value, r_prev, r_ts, r_inc, r_reset, head,
                        size,
                    )  # fmt: skip
                    seen_w[a] = w
                stack[sp], has[sp] = seen_v[a], seen_ok[a]
                sp += 1
            elif op == 2:
                stack[sp - 1] = -stack[sp - 1]
            elif op <= 6:
                sp -= 1
                x, y = stack[sp - 1], stack[sp]
                if not has[sp - 1] or not has[sp] or (op == 6 and y == 0):
                    has[sp - 1] = False
                elif op == 3:
                    stack[sp - 1] = x + y
                elif op == 4:
                    stack[sp - 1] = x - y
                elif op == 5:
                    stack[sp - 1] = x * y
                else:
                    stack[sp - 1] = x / y
            else:  # first, min, max over the top ``a`` entries, skipping those without one
                base = sp - a
                found = False
                acc = 0.0
                for q in range(base, sp):
                    if not has[q]:
                        continue
                    v = stack[q]
                    if not found:
                        acc = v
                        found = True
                        if op == 7:
                            break
                    elif op == 8:
                        acc = v if v < acc else acc
                    else:
                        acc = v if v > acc else acc
                sp = base + 1
                stack[base] = acc
                has[base] = found
        if sp == 0:
            ok[r] = False
            out[r] = 0.0
        else:
            v = stack[0]
            out[r] = v
            ok[r] = has[0] and not math.isnan(v) and not math.isinf(v)
