"""The ensemble of :mod:`detectors.ensemble` over many series at once (numpy state over series,
laid out in :mod:`detectors._bank_kernel_state`; one compiled pass per step:
:mod:`detectors._bank_kernel`)."""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass, fields
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, DTypeLike, NDArray

from detectors import _bank_kernel as kernel
from detectors import _bank_kernel_state as layout
from detectors.clock import LocalClock
from detectors.params import SPREAD_MEAN0, SPREAD_VAR0, EnsembleParams
from detectors.robust_zscore import Direction
from detectors.seasonal import check_day_types, weekend_mask
from detectors.spot import cusum_bar, gaussian_bar

__all__ = ["DETAIL", "BankResult", "EnsembleBank"]

Arr = NDArray[Any]
F64 = NDArray[np.float64]
Bool = NDArray[np.bool_]

_DIRECTIONS = {"both": 0.0, "up": 1.0, "down": 2.0}
#: columns of ``EnsembleBank.detail_``
DETAIL = layout.DETAIL
_EMPTY = np.zeros(0, np.float64)
_NO_FLAGS = np.zeros(0, np.bool_)
#: the per-series state arrays (series first), grown together by ``EnsembleBank.extend``
_PER_SERIES = (
    "level_", "state_", "tails_", "last_t_", "interval_", "step_est_", "warmup_", "t_dirty_",
    "firing_", "score_", "detail_", "_moved",
)  # fmt: skip


@dataclass(frozen=True)
class BankResult:
    """Scores and alarm transitions of :meth:`EnsembleBank.run` (shape series × time)."""

    score: Arr
    opened: Bool
    closed: Bool


@dataclass(eq=False)
class EnsembleBank(EnsembleParams):
    """:class:`detectors.ensemble.Ensemble` for ``n_series`` series, one compiled pass per step.

    Same parameters and, within float tolerance, the same scores and alarms as one
    :class:`~detectors.ensemble.Ensemble` per series (tested in float64). ``warmup`` may be
    one value per series. A NaN value leaves that series untouched for the step (a gap).
    Timestamps may be one per step (all series aligned: the fast path) or one per series;
    without them the daily and weekly profiles are off and ``interval`` is the scrape interval.
    Timestamps are UTC; the profiles place them on the bank's wall clock (``tz`` or
    ``utc_offset``, one for all its series: a network spread over several zones has one bank
    per zone, as :class:`detectors.monitor.MonitorBank` keeps them).
    ``dtype=np.float32`` halves memory (the compiled step runs at about the same speed);
    timestamps stay float64. The first step compiles the kernel (seconds; cached on disk after).

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> x = 50 + rng.normal(0, 1, size=(3, 800))
    >>> x[1, 700:] += 30                     # a level shift in series 1 only
    >>> res = EnsembleBank(3, warmup=300).run(x)
    >>> res.opened.sum(axis=1).tolist()
    [0, 1, 0]
    >>> int(np.argmax(res.opened[1]))
    701
    """

    n_series: int
    _: KW_ONLY
    #: scored values before the bars exist: one value, one per series, or None (``warmup_s``)
    warmup: int | ArrayLike | None = None
    dtype: DTypeLike = np.float64

    def __post_init__(self) -> None:
        super().__post_init__()
        n, warmup = self.n_series, self.warmup
        #: the network's wall clock, on which the profiles place each (UTC) timestamp
        self.clock_ = LocalClock(self.tz, self.utc_offset)
        dt = np.dtype(self.dtype)
        self.dtype_ = dt
        #: per series (one contiguous row each): level n, mean, mean absolute deviation, slow one
        self.level_ = np.zeros((n, len(layout.LEVEL_KEYS)), dt)
        #: per series: the columns named in :data:`detectors._bank_kernel_state.STATE_KEYS`
        self.state_ = np.zeros((n, len(layout.STATE_KEYS)), dt)
        self.state_[:, layout.ST_X_PREV] = np.nan
        self.state_[:, layout.ST_SPREAD_MU] = SPREAD_MEAN0
        self.state_[:, layout.ST_SPREAD_VAR] = SPREAD_VAR0
        self.state_[:, layout.ST_DIR] = _DIRECTIONS[self.bad_direction]
        self.state_[:, layout.ST_RES_ALWAYS] = float(self.resolution_always)
        #: per series: :data:`detectors._bank_kernel_state.TAIL_KEYS` × member (point, shift,
        #: spread)
        self.tails_ = np.zeros((n, len(layout.TAIL_KEYS), 3), dt)
        # daily, weekly and day-type profiles, (bins, series, keys) and series-wide (series,
        # keys), allocated with the first timestamp: period, bins, days a bin needs, and trend
        # terms (a day-type profile has one per day type)
        self.seasons_: list[tuple[float, int, float, int]] = [(self.period, self.n_bins, 2.0, 1)]
        if self.week_bins > 0:
            self.seasons_.append((self.week_period, self.week_bins, float(self.week_min), 1))
        if self.day_types:
            check_day_types(self.period)
            self.seasons_.append((self.period, 2 * self.n_bins, 2.0, 2))
        self.profiles_: list[tuple[Arr, Arr]] = []
        self.last_t_ = np.full(n, np.nan)
        self.interval_ = np.full(n, np.inf)
        self.step_est_ = np.full(n, np.inf)
        if warmup is None:
            self.warmup_ = np.full(n, -1.0)
        else:
            self.warmup_ = np.broadcast_to(np.asarray(warmup, np.float64), (n,)).copy()
        # cached tail fit, refreshed where ``t_dirty_`` (a cluster committed, the risk moved)
        self.t_dirty_ = np.ones(n, np.bool_)
        self._refresh(np.ones(n, np.bool_))
        self.firing_ = np.zeros(n, np.bool_)
        self.score_ = np.zeros(n, dt)
        #: per series, at its last scored value: expected value, scale, point bar, member ratios
        self.detail_ = np.zeros((n, len(DETAIL)), dt)
        self._moved = np.zeros(n, np.bool_)
        self._params = self._kernel_params()
        self._no_profile = self._new_profile(1, 0)  # what the kernel gets without timestamps

    def _kernel_params(self) -> kernel.KernelParams:
        s0 = self.seasons_[0]
        s1 = self.seasons_[1 if self.week_bins > 0 else 0]
        return kernel.KernelParams(
            alpha=self.alpha,
            grace=float(self.grace),
            grace_clip=self.grace_clip,
            seasonal_alpha=self.seasonal_alpha,
            min_effect=self.min_effect,
            min_abs_effect=self.min_abs_effect,
            z_clip=self.z_clip,
            rho_max=self.rho_max,
            rho_alpha=self.rho_alpha,
            shift_k=self.shift_k,
            direction=_DIRECTIONS[self.bad_direction],
            shift_gate=self.shift_gate,
            votes=float(self.votes),
            min_duration=float(self.min_duration),
            burst=self.burst,
            release=self.release,
            clear_after=float(self.clear_after),
            refractory=float(self.refractory),
            tail_start=self.tail_start,
            xi_max=self.xi_max,
            warmup_outlier=self.warmup_outlier,
            warmup_alarm=float(self.warmup_alarm),
            res_always=float(self.resolution_always),
            n_seasons=2.0 if self.week_bins > 0 else 1.0,
            period0=s0[0],
            bins0=float(s0[1]),
            min_days0=s0[2],
            period1=s1[0],
            bins1=float(s1[1]),
            min_days1=s1[2],
            trend0=float(self.follow_trend),
            trend1=float(self.week_follow_trend),
            day_types=float(self.day_types),
            weekend_mask=float(weekend_mask(self.weekend)),
            day_type_margin=self.day_type_margin,
            spread_share=self.spread_share,
            spread_alpha=self.spread_alpha,
            spread_slow=self.spread_slow,
        )

    def __setstate__(self, state: dict[str, Any]) -> None:
        """A snapshot from before the compact bins (every count in float32) restores into
        today's layout: the counts are whole numbers, so the conversion is exact. One from
        before each series kept its bad direction and resolution rule gets the bank's."""
        dtype = layout.season_dtype(state["dtype_"])
        state["profiles_"] = [
            (s if s.dtype == dtype else _compact(s, dtype), g) for s, g in state["profiles_"]
        ]
        st = state["state_"]
        if st.shape[1] < len(layout.STATE_KEYS):
            rule = [_DIRECTIONS[state["bad_direction"]], float(state["resolution_always"])]
            state["state_"] = np.concatenate(
                [st, np.tile(np.array(rule, st.dtype), (len(st), 1))], 1
            )
        self.__dict__.update(state)

    def set_rules(
        self, series: list[int], bad_direction: list[Direction], resolution_always: list[bool]
    ) -> None:
        """Each of ``series`` (fresh: no value yet) alarms in its ``bad_direction`` and learns
        its resolution always or not (:attr:`resolution_always`), whatever the bank's: one
        bank holds series of every direction and rule."""
        self.state_[series, layout.ST_DIR] = [_DIRECTIONS[d] for d in bad_direction]
        self.state_[series, layout.ST_RES_ALWAYS] = np.asarray(resolution_always, np.float64)
        which = np.zeros(self.n_series, np.bool_)
        which[series] = True
        self._refresh(which)

    @property
    def nbytes(self) -> int:
        """Bytes of state (profiles included once allocated)."""
        arrays: list[Arr] = [getattr(self, name) for name in _PER_SERIES]
        arrays += [a for pair in self.profiles_ for a in pair]
        return sum(a.nbytes for a in arrays)

    def extend(self, k: int, warmup: int | ArrayLike | None = None) -> None:
        """Add ``k`` new series at the end (fresh state, as if the bank had been made with
        them; ``warmup`` as in the constructor, for the new series)."""
        if k <= 0:
            return
        new = EnsembleBank(k, **{**self._param_values(), "warmup": warmup, "dtype": self.dtype})
        if self.profiles_ and not new.profiles_:
            new.profiles_ = new._profiles(k)
        for name in _PER_SERIES:
            setattr(self, name, np.concatenate([getattr(self, name), getattr(new, name)]))
        self.profiles_ = [
            (np.concatenate([s, ns], axis=1), np.concatenate([g, ng]))
            for (s, g), (ns, ng) in zip(self.profiles_, new.profiles_, strict=True)
        ]
        self.n_series += k

    def _profiles(self, n: int) -> list[tuple[Arr, Arr]]:
        """Fresh state of every profile for ``n`` series."""
        return [self._new_profile(bins, n, trends) for _, bins, _, trends in self.seasons_]

    def _new_profile(self, bins: int, n: int, trends: int = 1) -> tuple[Arr, Arr]:
        """Fresh state of one profile: ``(bins, n)`` records (no day seen yet) and the
        series-wide ``(n, len(SERIES_KEYS))`` state
        (:data:`detectors._bank_kernel_state.SERIES_KEYS`; ``trends``: 2 for a day-type
        profile, whose second trend term takes ``TREND_COLS`` more columns, followed by its two
        counts of mature predictions from ``TYPE_RES`` on)."""
        s = np.zeros((bins, n), layout.season_dtype(self.dtype_))
        s["cday"] = -1.0
        cols = layout.TYPE_RES + 2 if trends == 2 else len(layout.SERIES_KEYS)
        g = np.zeros((n, cols), self.dtype_)
        g[:, [layout.G_TDAY + k * layout.TREND_COLS for k in range(trends)]] = -np.inf
        return s, g

    def _param_values(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(EnsembleParams)}

    def _refresh(self, which: Bool) -> None:
        """Recompute risk, floors and warm-up length of the series in ``which``."""
        step = np.where(np.isfinite(self.interval_), self.interval_, self.interval)[which]
        q = self.target_rate * step / 86400.0
        share_p = 1.0 - self.shift_share - self.spread_share
        qp, qs = q * share_p, q * self.shift_share
        both = self.state_[which, layout.ST_DIR] == _DIRECTIONS["both"]
        spread = self.spread_share > 0.0
        fp = np.empty(len(q))
        fs = np.empty(len(q))
        fd = np.full(len(q), np.inf)
        for u in np.unique(q):
            at_q = q == u
            if spread:
                fd[at_q] = gaussian_bar(float(u) * self.spread_share)
            for two in (False, True):
                sel = at_q & (both == two)
                if sel.any():
                    fp[sel] = gaussian_bar(float(u) * share_p, two)
                    fs[sel] = cusum_bar(float(u) * self.shift_share, self.shift_k, two)
        tl = self.tails_
        self.t_dirty_[which] = True
        tl[which, layout.T_LOG_Q, layout.POINT] = np.log(qp)
        tl[which, layout.T_LOG_Q, layout.SHIFT] = np.log(qs)
        tl[which, layout.T_LOG_Q, layout.SPREAD] = np.log(q * self.spread_share) if spread else 0.0
        tl[which, layout.T_FLOOR, layout.POINT] = fp
        tl[which, layout.T_FLOOR, layout.SHIFT] = fs
        tl[which, layout.T_FLOOR, layout.SPREAD] = fd
        auto = np.maximum(self.min_warmup, np.ceil(self.warmup_s / step))
        w = self.warmup_[which]
        self.state_[which, layout.ST_WARM_N] = np.where(w >= 0, w, auto)
        self.state_[which, layout.ST_TAIL_LAG_N] = np.ceil(self.tail_lag_s / step)
        self.state_[which, layout.ST_CYCLE_N] = np.ceil(self.period / step)

    def step(
        self,
        x: ArrayLike,
        t: ArrayLike | None = None,
        support: ArrayLike | None = None,
        hold: ArrayLike | None = None,
        proportion: ArrayLike | None = None,
    ) -> tuple[Arr, Bool, Bool]:
        """Feed one value per series (and, for ratios of counts, the events behind each, NaN
        where unknown; ``hold``: the series whose peaks stay out of the tails this step, see
        :meth:`detectors.ensemble.Ensemble.update`; ``proportion``: the series whose supported
        values are shares of their support, declared); return (score, opened, closed) for
        this step."""
        n = self.n_series
        xs = _per_series(x, self.dtype_, n)
        valid = ~np.isnan(xs)
        sup = _EMPTY if support is None else _per_series(support, np.float64, n)
        held = _NO_FLAGS if hold is None else _per_series(hold, np.bool_, n)
        prop = _NO_FLAGS if proportion is None else _per_series(proportion, np.bool_, n)
        tt = _EMPTY
        if t is not None:
            tt = np.ascontiguousarray(np.asarray(t, np.float64).reshape(-1))
            if tt.shape[0] not in (1, n):
                raise ValueError(f"t: expected one timestamp or {n}, got {tt.shape[0]}")
            if kernel.interval_step(
                tt, valid, self.last_t_, self.step_est_, self.interval_, self._moved
            ):
                self._refresh(self._moved)
            if not self.profiles_:
                self.profiles_ = self._profiles(n)
            tt = self.clock_.local_array(tt)
        none = self._no_profile
        prof = self.profiles_
        s0, g0 = prof[0] if prof else none
        s1, g1 = prof[1] if prof and self.week_bins > 0 else (s0, g0)
        s2, g2 = prof[-1] if prof and self.day_types else none
        score = self.score_.copy()
        opened = np.empty(n, np.bool_)
        closed = np.empty(n, np.bool_)
        kernel.ensemble_step(
            xs, valid, tt, sup, held, prop, self._params, self.level_, self.state_, self.tails_,
            self.t_dirty_, self.firing_, s0, g0, s1, g1, s2, g2, score, opened, closed,
            self.detail_,
        )  # fmt: skip
        self.score_ = score
        return score, opened, closed

    def run(
        self,
        x: ArrayLike,
        t: ArrayLike | None = None,
        support: ArrayLike | None = None,
        hold: ArrayLike | None = None,
        proportion: ArrayLike | None = None,
    ) -> BankResult:
        """Feed a (series × time) matrix; ``t`` is per step (time,) or per value (series × time);
        ``support`` (series × time, NaN where unknown) backs ratios of counts; ``hold``
        (series × time) marks the values whose peaks stay out of the tails, ``proportion``
        (per series) the series of declared shares (:meth:`step`)."""
        xs = np.asarray(x, self.dtype_)
        n, steps = xs.shape
        ts = None if t is None else np.asarray(t, np.float64)
        sp = None if support is None else np.asarray(support, np.float64)
        hd = None if hold is None else np.asarray(hold, np.bool_)
        score = np.empty((n, steps), self.dtype_)
        opened = np.empty((n, steps), np.bool_)
        closed = np.empty((n, steps), np.bool_)
        for j in range(steps):
            tj = None if ts is None else (ts[j] if ts.ndim == 1 else ts[:, j])
            score[:, j], opened[:, j], closed[:, j] = self.step(
                xs[:, j],
                tj,
                None if sp is None else sp[:, j],
                None if hd is None else hd[:, j],
                proportion,
            )
        return BankResult(score, opened, closed)


def _per_series(a: ArrayLike, dtype: DTypeLike, n: int) -> Arr:
    """``a`` as ``n`` values of ``dtype`` in a C-contiguous, read-only array, as a broadcast
    makes it (the compiled step is typed on that). An array that already is that is viewed,
    not broadcast: the pipeline passes those at every step, and a broadcast costs more."""
    if type(a) is np.ndarray and a.shape == (n,) and a.dtype == dtype and a.flags.c_contiguous:
        view = a.view()
        view.flags.writeable = False
        return view
    return np.ascontiguousarray(np.broadcast_to(np.asarray(a, dtype), (n,)))


def _compact(season: Arr, dtype: np.dtype[np.void]) -> Arr:
    """A profile's bins in ``dtype``, the counts saturated where its fields stop."""
    out = np.empty(season.shape, dtype)
    for name in dtype.names or ():
        value = season[name]
        if name == "days":
            value = np.minimum(value, layout.DAYS_CAP)
        elif name == "resn":
            value = np.minimum(value, layout.RESN_CAP)
        out[name] = value
    return out
