"""The count gates of a :class:`~detectors.monitor.MonitorBank`, as arrays.

A bank keeps a :class:`~detectors.counts.CountGate` for each count series, and every tick
each gate judges its monitor's transition and learns its count: a few microseconds of Python
a series, which at 10⁵ series was a tenth of the pipeline. :class:`CountGates` holds the
gates' state in arrays, one row per gate, and steps a tick's gates in one compiled pass
(:func:`_fast_steps`) for what is most of every tick: no alarm opening or withheld, and no
new bar to work out. A row that needs either goes through :class:`CountGate` itself (its
state read out of the arrays and written back), so there is one definition of what a gate
does; the compiled pass repeats its arithmetic operation for operation, and
``tests/detectors/test_count_bank.py`` holds the two to the same state, bit for bit.

>>> gates = CountGates(target_rate=0.005)
>>> rows = gates.rows(["a", "b"])
>>> shown = gates.step(rows, np.array([60.0, 60.0]), np.array([0.0, 3.0]), np.full(2, 60.0),
...                    np.array([NONE, OPEN], np.int8), np.array([False, True]))
>>> shown.tolist(), gates["b"].n_
([0, 1], 0)
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Iterator, Mapping
from typing import Any, Literal, TypeVar, cast

import numba
import numpy as np
import numpy.typing as npt

from detectors.counts import (
    PRIOR_EVENTS,
    PRIOR_WINDOWS,
    SPARSE_MEAN,
    WHOLE_SHARE,
    WHOLE_TOL,
    CountGate,
)
from detectors.params import STEP_MOVE, STEP_RATE

__all__ = ["CLOSE", "FIELDS", "NONE", "OPEN", "UPDATE", "CountGates"]

_F = TypeVar("_F")
F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]

#: a transition as a code (:meth:`CountGates.step`)
NONE, OPEN, UPDATE, CLOSE = 0, 1, 2, 3
_KINDS: tuple[Literal["open", "update", "close"] | None, ...] = (None, "open", "update", "close")
_CODES = {kind: code for code, kind in enumerate(_KINDS)}

#: a gate's state: the attributes of :class:`CountGate`, in arrays of this type (None, where
#: an attribute may be None, is NaN)
FIELDS: dict[str, Any] = {
    "target_rate": np.float64, "tau_s": np.float64, "n_": np.int64, "whole_": np.int64,
    "s0_": np.float64, "s1_": np.float64, "s2_": np.float64, "last_t_": np.float64,
    "step_est_": np.float64, "step_": np.float64, "clip_": np.float64,
    "clip_t_": np.float64, "gated_": np.bool_, "clip_alarm_": np.bool_,
}  # fmt: skip
_OPTIONAL = ("last_t_", "clip_t_")


class CountGates(Mapping[Hashable, CountGate]):
    """The count gate of each count series (module doc); as a mapping, each key's gate as
    a :class:`CountGate` (a copy of its state)."""

    def __init__(self, target_rate: float = 0.005) -> None:
        self.target_rate = target_rate
        self._index: dict[Hashable, int] = {}
        self._state: dict[str, npt.NDArray[Any]] = {
            name: np.zeros(0, dtype) for name, dtype in FIELDS.items()
        }

    @classmethod
    def of(cls, gates: Mapping[Hashable, CountGate], target_rate: float) -> CountGates:
        """The gates of a snapshot that kept a :class:`CountGate` per key."""
        out = cls(target_rate)
        for key, gate in gates.items():
            out._put(out.rows([key])[0], gate)
        return out

    # -- the mapping ---------------------------------------------------------------------

    def __getitem__(self, key: Hashable) -> CountGate:
        return self._get(self._index[key])

    def __iter__(self) -> Iterator[Hashable]:
        return iter(self._index)

    def __len__(self) -> int:
        return len(self._index)

    def gated(self, key: Hashable) -> bool:
        """Whether ``key``'s gate withholds its monitor's open alarm (False: no gate)."""
        row = self._index.get(key)
        return row is not None and bool(self._state["gated_"][row])

    # -- rows ----------------------------------------------------------------------------

    def rows(self, keys: Iterable[Hashable]) -> I64:
        """The row of each key's gate (a fresh gate for a key met for the first time)."""
        index = self._index
        out = []
        for key in keys:
            row = index.get(key)
            if row is None:
                row = index[key] = len(index)
                self._room(row + 1)
                self._put(row, CountGate(self.target_rate))
            out.append(row)
        return np.array(out, np.int64)

    def _room(self, rows: int) -> None:
        have = len(self._state["n_"])
        if rows <= have:
            return
        extra = max(rows - have, have, 16)
        for name, arr in self._state.items():
            self._state[name] = np.concatenate([arr, np.zeros(extra, arr.dtype)])

    def _get(self, row: int) -> CountGate:
        gate = CountGate.__new__(CountGate)
        state = self._state
        for name, dtype in FIELDS.items():
            value = state[name][row].item()
            if value != value:  # None, or the gate's NaN (math.nan, as CountGate sets it)
                value = None if name in _OPTIONAL else math.nan
            vars(gate)[name] = value if dtype is not np.int64 else int(value)
        return gate

    def _put(self, row: int, gate: CountGate) -> None:
        state = self._state
        for name in FIELDS:
            value = getattr(gate, name)
            state[name][row] = math.nan if value is None else value

    # -- a tick --------------------------------------------------------------------------

    def judge(
        self,
        keys: Iterable[Hashable],
        t: F64,
        count: F64,
        window_s: F64,
        moves: tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_], npt.NDArray[np.bool_]],
        firing: npt.NDArray[np.bool_],
    ) -> npt.NDArray[np.int8]:
        """:meth:`step` of the gates of ``keys`` (made for a key met the first time), each
        transition given as the monitor's (opened, closed, grew) flags, in that order of
        precedence."""
        opened, closed, grew = moves
        code = np.where(opened, OPEN, np.where(closed, CLOSE, np.where(grew, UPDATE, NONE)))
        return self.step(self.rows(keys), t, count, window_s, code.astype(np.int8), firing)

    def step(
        self,
        rows: I64,
        t: F64,
        count: F64,
        window_s: F64,
        transition: npt.NDArray[np.int8],
        firing: npt.NDArray[np.bool_],
    ) -> npt.NDArray[np.int8]:
        """:meth:`CountGate.step` of each row's gate (each row once): the transition each
        shows, as a code (:data:`NONE`, :data:`OPEN`, ...)."""
        s = self._state
        shown = np.zeros(len(rows), np.int8)
        slow = np.zeros(len(rows), np.bool_)
        _fast_steps(
            rows, t, count, window_s, transition, firing, shown, slow,
            s["tau_s"], s["n_"], s["whole_"], s["s0_"], s["s1_"], s["s2_"], s["last_t_"],
            s["step_est_"], s["step_"], s["clip_"], s["clip_t_"], s["gated_"],
            s["clip_alarm_"],
        )  # fmt: skip
        for j in np.flatnonzero(slow).tolist():
            row = int(rows[j])
            gate = self._get(row)
            kind = gate.step(
                float(t[j]), float(count[j]), float(window_s[j]),
                _KINDS[int(transition[j])], bool(firing[j]),
            )  # fmt: skip
            self._put(row, gate)
            shown[j] = _CODES[kind]
        return shown


def _compiled(f: _F) -> _F:
    return cast(_F, numba.njit(cache=True, nogil=True)(f))


@_compiled
def _fast_steps(
    rows: Any, t: Any, count: Any, window_s: Any, transition: Any, firing: Any, shown: Any,
    slow: Any, tau_s: Any, n_: Any, whole_: Any, s0_: Any, s1_: Any, s2_: Any, last_t_: Any,
    step_est_: Any, step_: Any, clip_: Any, clip_t_: Any, gated_: Any, clip_alarm_: Any,
) -> None:  # fmt: skip
    """:meth:`CountGate.step` of each row whose gate neither judges (no open, none
    withheld) nor works out a new bar; the others are marked ``slow``, untouched. The
    arithmetic is :meth:`CountGate.learn`'s and :meth:`CountGate._clip`'s, in their order."""
    for j in range(len(rows)):
        g = rows[j]
        kind = transition[j]
        if kind == 1 or gated_[g]:  # judge has something to test
            slow[j] = True
            continue
        tj = t[j]
        c = count[j]
        win = window_s[j]
        fire = firing[j]
        # learn: the interval
        last = last_t_[g]
        est = step_est_[g]
        stp = step_[g]
        has_dt = False
        dt = 0.0
        if last == last and tj > last:
            has_dt = True
            dt = tj - last
            sign = (dt > est) - (dt < est)
            est = est * (1.0 + STEP_RATE * sign) if math.isfinite(est) else dt
            if not math.isfinite(stp) or abs(est - stp) > STEP_MOVE * stp:
                stp = est
        valid = math.isfinite(c) and c >= -WHOLE_TOL
        n = n_[g]
        whole = whole_[g]
        if not fire:
            n += 1
            if valid and abs(c - round(c)) <= WHOLE_TOL:
                whole += 1
        # _clip
        alarm = clip_alarm_[g]
        if valid and not fire:  # _clip's first line (it is not called without a count)
            alarm = False
        learn = valid
        k = 0.0
        if valid:
            k = max(0.0, c)
            mean = (PRIOR_EVENTS + s1_[g]) / (PRIOR_WINDOWS + s0_[g])
            sparse = n > 0 and whole >= WHOLE_SHARE * n and mean <= SPARSE_MEAN
            if sparse and not k <= mean:
                if fire and alarm:
                    if not k <= clip_[g]:
                        learn = False
                else:
                    held = clip_t_[g] == clip_t_[g] and tj - clip_t_[g] < win
                    if not held:  # a new bar: CountGate works it out
                        slow[j] = True
                        continue
                    k = min(k, clip_[g])
        shown[j] = kind
        if has_dt:
            step_est_[g] = est
            step_[g] = stp
        last_t_[g] = tj
        n_[g] = n
        whole_[g] = whole
        clip_alarm_[g] = alarm
        if not learn:
            continue
        window = win if win > 0.0 else (dt if has_dt else 0.0)
        w = 1.0 if not has_dt or window <= 0.0 else min(dt, window) / window
        decay = 1.0 if not has_dt else math.exp(-dt / tau_s[g])
        s0_[g] = decay * s0_[g] + w
        s1_[g] = decay * s1_[g] + w * k
        s2_[g] = decay * s2_[g] + w * k * k
