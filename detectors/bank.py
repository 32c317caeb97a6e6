"""The ensemble of :mod:`detectors.ensemble` over many series at once (numpy over series)."""

from __future__ import annotations

import math
from dataclasses import KW_ONLY, dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, DTypeLike, NDArray

from detectors.params import STEP_MOVE, STEP_RATE, EnsembleParams
from detectors.robust_zscore import MAD_TO_SIGMA
from detectors.spot import cusum_bar, gaussian_bar

__all__ = ["BankResult", "EnsembleBank"]

Arr = NDArray[Any]
F64 = NDArray[np.float64]
Bool = NDArray[np.bool_]

_CLIP = 3.0
_REL_FLOOR = 1e-6
_MIN_RESIDUALS = 30
_SEASON_KEYS = ("level", "mad", "days", "resn", "sum", "cnt", "cday")


@dataclass(frozen=True)
class BankResult:
    """Scores and alarm transitions of :meth:`EnsembleBank.run` (shape series × time)."""

    score: Arr
    opened: Bool
    closed: Bool


class _Level:
    """Vectorised :class:`detectors.robust_zscore.RobustZScore` state."""

    def __init__(self, n: int, alpha: float, grace: int, dtype: DTypeLike) -> None:
        self.alpha, self.grace = alpha, grace
        self.n = np.zeros(n, dtype)
        self.m = np.zeros(n, dtype)
        self.d = np.zeros(n, dtype)
        self.ds = np.zeros(n, dtype)

    def scale(self) -> Arr:
        s = np.maximum(MAD_TO_SIGMA * self.d, (0.5 * MAD_TO_SIGMA) * self.ds)
        np.maximum(s, _REL_FLOOR * np.abs(self.m), out=s)
        return np.maximum(s, 1e-12, out=s)

    def learn(self, x: Arr, v: Bool | None, scale: Arr) -> None:
        """Learn ``x`` where ``v`` (all series when ``v`` is None)."""
        n1 = self.n + 1.0
        inv = 1.0 / n1
        a = np.maximum(inv, self.alpha)
        a_slow = np.maximum(inv, 0.1 * self.alpha)
        limit = np.where(n1 > self.grace, _CLIP * scale, np.inf)
        r = x - self.m
        dev = np.minimum(np.abs(r), limit)
        first = n1 == 1.0
        m = self.m + a * np.clip(r, -limit, limit)
        d = self.d + a * (dev - self.d)
        ds = self.ds + a_slow * (dev - self.ds)
        if first.any():
            m = np.where(first, x, m)
            d = np.where(first, self.d, d)
            ds = np.where(first, self.ds, ds)
        if v is not None:
            m, d, ds, n1 = (
                np.where(v, new, old)
                for new, old in ((m, self.m), (d, self.d), (ds, self.ds), (n1, self.n))
            )
        self.m, self.d, self.ds, self.n = m, d, ds, n1


class _Season:
    """Vectorised :class:`detectors.seasonal.SeasonalProfile` state: one (bins × series) row
    per key, allocated with the first timestamp."""

    def __init__(
        self, n: int, period: float, n_bins: int, alpha: float, min_days: int, dtype: Any
    ) -> None:
        self.n, self.period, self.n_bins, self.alpha, self.dtype = n, period, n_bins, alpha, dtype
        self.min_days = float(min_days)
        self.s: dict[str, Arr] = {}
        self.gmad = np.zeros(n, dtype)
        self.rtotal = np.zeros(n, dtype)

    def arrays(self) -> list[Arr]:
        """Every state array (for memory accounting)."""
        return [self.gmad, self.rtotal, *self.s.values()]

    def rows(self, key: str, b: int | NDArray[np.int64]) -> Arr:
        arr = self.s[key]
        return arr[b] if isinstance(b, int) else arr[b, np.arange(self.n)]

    def put(self, key: str, b: int | NDArray[np.int64], val: Arr) -> None:
        if isinstance(b, int):
            self.s[key][b] = val
        else:
            self.s[key][b, np.arange(self.n)] = val

    def folded(self, b: int | NDArray[np.int64], day: Arr | float) -> tuple[Arr, Arr]:
        """Vectorised :meth:`SeasonalProfile._folded`: level and day count of bin ``b``."""
        lvl, days = self.rows("level", b), self.rows("days", b)
        cnt, cday = self.rows("cnt", b), self.rows("cday", b)
        pending = (cnt > 0) & (cday < day)
        if not pending.any():
            return lvl, days
        mean = self.rows("sum", b) / np.where(cnt > 0, cnt, 1.0)
        a = np.maximum(self.alpha, 1.0 / (days + 1.0))
        bscale = MAD_TO_SIGMA * np.maximum(self.rows("mad", b), self.gmad)
        lim = np.where(
            (days + 1.0 >= self.min_days) & (self.rows("resn", b) > 0), _CLIP * bscale, np.inf
        )
        r = np.clip(mean - lvl, -lim, lim)
        new = np.where(days == 0, mean, lvl + a * r)
        return np.where(pending, new, lvl), np.where(pending, days + 1.0, days)

    def predict(self, t: F64) -> tuple[Arr, Arr, Bool]:
        """Expected value, scale and maturity of the profile at ``t``."""
        n, nb, dt = self.n, self.n_bins, self.dtype
        if not self.s:
            self.s = {k: np.zeros((nb, n), dt) for k in _SEASON_KEYS}
            self.s["cday"][:] = -1.0
        period = self.period
        if t.ndim == 0:
            pos = (float(t) % period) / period * nb - 0.5
            lo = math.floor(pos)
            b0: int | NDArray[np.int64] = lo % nb
            b1: int | NDArray[np.int64] = (lo + 1) % nb
            w: Arr | float = pos - lo
            day: Arr | float = float(math.floor(float(t) / period))
        else:
            posa = np.mod(t, period) / period * nb - 0.5
            loa = np.floor(posa)
            b0 = loa.astype(np.int64) % nb
            b1 = (loa.astype(np.int64) + 1) % nb
            w = posa - loa
            day = np.floor(t / period)
        l0, d0 = self.folded(b0, day)
        l1, d1 = self.folded(b1, day)
        ok = np.minimum(d0, d1) + 1.0 >= self.min_days
        mid = (1.0 - w) * l0 + w * l1
        mad = np.maximum((1.0 - w) * self.rows("mad", b0) + w * self.rows("mad", b1), self.gmad)
        scale = np.maximum(MAD_TO_SIGMA * mad, _REL_FLOOR * np.abs(mid))
        return mid.astype(dt, copy=False), np.maximum(scale, 1e-12).astype(dt, copy=False), ok

    def learn(
        self, x: Arr, t: F64, v: Bool | None, mid: Arr, scale: Arr, ok: Bool, floor: Arr
    ) -> None:
        """Vectorised :meth:`SeasonalProfile.learn_one` (``mid``, ``scale``, ``ok``: its
        prediction at ``t``, computed before)."""
        nb, period = self.n_bins, self.period
        if t.ndim == 0:
            b: int | NDArray[np.int64] = int((float(t) % period) / period * nb) % nb
            day: Arr | float = float(math.floor(float(t) / period))
        else:
            b = (np.mod(t, period) / period * nb).astype(np.int64) % nb
            day = np.floor(t / period)
        lvl, days = self.folded(b, day)
        cday = self.rows("cday", b)
        new_day = cday != day
        ssum = np.where(new_day, 0.0, self.rows("sum", b))
        cnt = np.where(new_day, 0.0, self.rows("cnt", b))
        resn, mad = self.rows("resn", b), self.rows("mad", b)
        limit = np.where(resn > 0, _CLIP * np.maximum(scale, floor), np.inf)
        r = x - mid
        dev = np.minimum(np.abs(r), limit)
        ssum = ssum + np.where(ok, mid + np.clip(r, -limit, limit), x)
        cnt = cnt + 1.0
        resn1 = resn + ok
        mad = np.where(resn == 0, self.gmad, mad)
        mad = np.where(ok, mad + 0.02 * (dev - mad), self.rows("mad", b))
        rt = self.rtotal + ok
        gmad = self.gmad + np.where(
            ok, np.maximum(0.01, 1.0 / np.maximum(rt, 1.0)) * (dev - self.gmad), 0.0
        )
        new = {
            "level": lvl,
            "days": days,
            "cday": np.where(new_day, day, cday),
            "sum": ssum,
            "cnt": cnt,
            "resn": resn1,
            "mad": mad,
        }
        for key, val in new.items():
            if v is not None:
                val = np.where(v, val, self.rows(key, b))
            self.put(key, b, val)
        if v is not None:
            rt, gmad = np.where(v, rt, self.rtotal), np.where(v, gmad, self.gmad)
        self.rtotal, self.gmad = (
            rt.astype(self.dtype, copy=False),
            gmad.astype(self.dtype, copy=False),
        )


@dataclass(eq=False)
class EnsembleBank(EnsembleParams):
    """:class:`detectors.ensemble.Ensemble` for ``n_series`` series, one numpy step per time.

    Same parameters and, within float tolerance, the same scores and alarms as one
    :class:`~detectors.ensemble.Ensemble` per series (tested in float64). ``warmup`` may be
    one value per series. A NaN value leaves that series untouched for the step (a gap).
    Timestamps may be one per step (all series aligned: the fast path) or one per series;
    without them the daily and weekly profiles are off and ``interval`` is the scrape interval.
    ``dtype=np.float32`` halves memory and speeds the step up; timestamps stay float64.

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
        n, warmup = self.n_series, self.warmup
        dt = np.dtype(self.dtype)
        self.dtype_ = dt
        self.level_ = _Level(n, self.alpha, self.grace, dt)
        self.up_ = np.zeros(n, dt)
        self.down_ = np.zeros(n, dt)
        self.z_prev_ = np.zeros(n, dt)
        self.cov_ = np.zeros(n, dt)
        self.var_ = np.zeros(n, dt)
        self.rho_n_ = np.zeros(n, dt)
        # daily and weekly profiles, (n_bins, n): one contiguous row per bin
        self.seasons_ = [_Season(n, self.period, self.n_bins, self.seasonal_alpha, 2, dt)]
        if self.week_bins > 0:
            self.seasons_.append(
                _Season(n, self.week_period, self.week_bins, self.seasonal_alpha, self.week_min, dt)
            )
        self.counted_ = np.zeros(n, dt)
        self.whole_ = np.zeros(n, dt)
        self.last_t_ = np.full(n, np.nan)
        self.interval_ = np.full(n, np.inf)
        self.step_est_ = np.full(n, np.inf)
        if warmup is None:
            self.warmup_ = np.full(n, -1.0)
        else:
            self.warmup_ = np.broadcast_to(np.asarray(warmup, np.float64), (n,)).copy()
        # per member (rows: point, shift): POT state and the risk-dependent quantities
        self.t_n_ = np.zeros((2, n), dt)
        self.t_clusters_ = np.zeros((2, n), dt)
        self.t_excess_ = np.zeros((2, n), dt)
        self.t_excess_sq_ = np.zeros((2, n), dt)
        self.t_peak_ = np.zeros((2, n), dt)
        self.t_pc_ = np.zeros((2, n), dt)  # quarantined peaks: count, Σ excess, Σ excess², age
        self.t_pe_ = np.zeros((2, n), dt)
        self.t_pe2_ = np.zeros((2, n), dt)
        self.t_age_ = np.zeros((2, n), dt)
        self.tail_lag_n_ = np.zeros(n, dt)
        self.log_q_ = np.zeros((2, n), dt)
        self.floors_ = np.zeros((2, n), dt)
        # cached tail fit, refreshed where ``t_dirty_`` (a cluster committed, the risk moved)
        self.t_dirty_ = np.ones(n, np.bool_)
        self.b_lc_ = np.zeros((2, n), dt)
        self.b_sigma_ = np.zeros((2, n), dt)
        self.b_xi_ = np.zeros((2, n), dt)
        self.b_heavy_ = False
        self.warm_n_ = np.zeros(n, dt)
        self._refresh(np.ones(n, np.bool_))
        self.firing_ = np.zeros(n, np.bool_)
        self.run_ = np.zeros(n, dt)
        self.cool_ = np.zeros(n, dt)
        self.score_ = np.zeros(n, dt)

    def _refresh(self, which: Bool) -> None:
        """Recompute risk, floors and warm-up length of the series in ``which``."""
        step = np.where(np.isfinite(self.interval_), self.interval_, self.interval)[which]
        q = self.target_rate * step / 86400.0
        qp, qs = q * (1.0 - self.shift_share), q * self.shift_share
        both = self.bad_direction == "both"
        fp = np.empty(len(q))
        fs = np.empty(len(q))
        for u in np.unique(q):
            sel = q == u
            fp[sel] = gaussian_bar(float(u) * (1.0 - self.shift_share), both)
            fs[sel] = cusum_bar(float(u) * self.shift_share, self.shift_k, both)
        self.t_dirty_[which] = True
        self.log_q_[0, which] = np.log(qp)
        self.log_q_[1, which] = np.log(qs)
        self.floors_[0, which] = fp
        self.floors_[1, which] = fs
        auto = np.maximum(self.min_warmup, np.ceil(self.warmup_s / step))
        w = self.warmup_[which]
        self.warm_n_[which] = np.where(w >= 0, w, auto)
        self.tail_lag_n_[which] = np.ceil(self.tail_lag_s / step)

    def _directional(self, z: Arr) -> Arr:
        if self.bad_direction == "up":
            return np.maximum(z, 0.0)
        if self.bad_direction == "down":
            return np.maximum(-z, 0.0)
        return np.abs(z)

    def _noise_floor(self, ref: Arr, support: Arr | None) -> Arr:
        """Vectorised :meth:`Ensemble._noise_floor`."""
        if support is None:
            return np.zeros_like(ref)
        prop = (self.counted_ > 0) & (self.whole_ >= 0.99 * self.counted_) & (support > 0)
        sup = np.where(prop, support, 1.0)
        p = np.clip((ref * sup + 0.5) / (sup + 1.0), 0.0, 1.0)
        return np.where(prop, np.sqrt(p * (1.0 - p) / sup), 0.0)

    def step(
        self, x: ArrayLike, t: ArrayLike | None = None, support: ArrayLike | None = None
    ) -> tuple[Arr, Bool, Bool]:
        """Feed one value per series (and, for ratios of counts, the events behind each, NaN
        where unknown); return (score, opened, closed) for this step."""
        dt = self.dtype_
        x = np.asarray(x, dt)
        valid = ~np.isnan(x)
        v: Bool | None = None if valid.all() else valid
        if v is not None:
            x = np.where(valid, x, 0.0).astype(dt, copy=False)
        sup: Arr | None = None
        if support is not None:
            sup = np.asarray(support, np.float64)
            has = valid & (sup > 0)
            sup = np.where(has, sup, 0.0)
            xs = x * sup
            whole = (
                has
                & (x >= 0)
                & (x <= 1)
                & (np.abs(xs - np.round(xs)) <= 1e-6 * np.maximum(sup, 1.0))
            )
            self.counted_ = self.counted_ + has
            self.whole_ = self.whole_ + whole
        lvl = self.level_
        tt: F64 | None = None
        if t is not None:
            tt = np.asarray(t, np.float64)
            if tt.ndim == 0 and v is not None:
                tt = np.full(self.n_series, float(tt))
            gap = tt - self.last_t_
            has = gap > 0
            if v is not None:
                has &= valid
            est = self.step_est_
            fin = np.isfinite(est)
            moved_est = np.where(fin, est * (1.0 + STEP_RATE * np.sign(gap - est)), gap)
            est = np.where(has, moved_est, est)
            self.step_est_ = est
            cur = self.interval_
            with np.errstate(invalid="ignore"):  # inf - inf where nothing is known yet
                moved = has & (~np.isfinite(cur) | (np.abs(est - cur) > STEP_MOVE * cur))
            if moved.any():
                self.interval_ = np.where(moved, est, cur)
                self._refresh(moved)
            self.last_t_ = (
                np.where(valid, tt, self.last_t_)
                if v is not None
                else (np.broadcast_to(tt, (self.n_series,)).astype(np.float64))
            )
        # point member: level (or the profile that is mature, ready and fits best)
        l_scale = lvl.scale()
        scored = lvl.n >= self.grace
        ref, scale, best = lvl.m, l_scale, lvl.d
        preds = []
        if tt is not None:
            for season in self.seasons_:
                mid, s_scale, ok = season.predict(tt)
                preds.append((mid, s_scale, ok))
                use = ok & (season.rtotal >= _MIN_RESIDUALS) & (season.gmad < best)
                ref = np.where(use, mid, ref)
                scale = np.where(use, s_scale, scale)
                best = np.where(use, season.gmad, best)
        scale = np.maximum(scale, self._noise_floor(ref, sup))
        z = np.where(scored, (x - ref) / scale, 0.0).astype(dt, copy=False)
        eff = np.maximum(self.min_effect * np.abs(ref), self.min_abs_effect)
        big = np.abs(x - ref) >= eff
        point = np.where(big, self._directional(z), 0.0)
        # shift member: CUSUM of the clipped z over its long-run (lag-1) factor
        zc = np.clip(z, -self.z_clip, self.z_clip)
        rho = np.clip(self.cov_ / np.maximum(self.var_, 1e-30), 0.0, self.rho_max)
        u = zc * np.sqrt((1.0 - rho) / (1.0 + rho))
        up = np.maximum(self.up_ + u - self.shift_k, 0.0)
        down = np.maximum(self.down_ - u - self.shift_k, 0.0)
        if self.bad_direction == "up":
            shift = up
        elif self.bad_direction == "down":
            shift = down
        else:
            shift = np.maximum(up, down)
        shift = np.where(big, shift, 0.0)
        # bars (SPOT with floors) and ratios
        scores = np.stack([point, shift]).astype(dt, copy=False)
        bars = self._bars()
        ratios = scores / bars
        ratios[1] = np.where(ratios[0] >= self.shift_gate, ratios[1], 0.0)
        score = ratios.max(axis=0) if self.votes <= 1 else ratios.min(axis=0)
        # alert
        f = self.firing_
        cooling = ~f & (self.cool_ > 0)
        over = score >= 1.0
        run_nf = np.where(over, self.run_ + 1.0, 0.0)
        opened = ~f & ~cooling & ((run_nf >= self.min_duration) | (score >= self.burst))
        run_f = np.where(score < self.release, self.run_ + 1.0, 0.0)
        closed = f & (run_f >= self.clear_after)
        run = np.where(f, run_f, np.where(cooling, 0.0, run_nf))
        run = np.where(opened | closed, 0.0, run)
        cool = np.where(closed, float(self.refractory), self.cool_ - cooling)
        firing = (f & ~closed) | opened
        if v is not None:
            opened &= valid
            closed &= valid
            run = np.where(valid, run, self.run_)
            cool = np.where(valid, cool, self.cool_)
            firing = np.where(valid, firing, f)
            score = np.where(valid, score, self.score_)
        self.run_, self.cool_, self.firing_ = (
            run.astype(dt, copy=False),
            cool.astype(dt, copy=False),
            firing,
        )
        # learn
        if tt is not None:
            floor = self._noise_floor(ref, sup)
            for season, (mid, s_scale, ok) in zip(self.seasons_, preds, strict=True):
                season.learn(x, tt, v, mid, s_scale, ok, floor)
        lvl.learn(x, v, np.maximum(l_scale, self._noise_floor(lvl.m, sup)))
        up = np.where(closed, 0.0, up)
        down = np.where(closed, 0.0, down)
        if v is not None:
            up, down = np.where(valid, up, self.up_), np.where(valid, down, self.down_)
        self.up_, self.down_ = up.astype(dt, copy=False), down.astype(dt, copy=False)
        w = scored & ~firing
        if v is not None:
            w &= valid
        self._learn_rho(zc, w)
        self._learn_tails(scores, bars, w, scored & firing & valid)
        self.z_prev_ = zc if v is None else np.where(valid, zc, self.z_prev_)
        self.score_ = score.astype(dt, copy=False)
        return self.score_, opened, closed

    def _tail_params(self) -> None:
        """Refresh the cached tail fit (``log(λ/q)`` up to ``−log n``, ``σ``, ``ξ``) of the
        series whose clusters or risk changed since the last step."""
        cols = np.flatnonzero(self.t_dirty_)
        self.t_dirty_[:] = False
        c = self.t_clusters_[:, cols]
        e = self.t_excess_[:, cols]
        has = c > 0
        safe_c = np.where(has, c, 1.0)
        m = e / safe_c
        var = self.t_excess_sq_[:, cols] / safe_c - m * m
        xi = 0.5 * (1.0 - m * m / np.where(var > 0, var, 1.0))
        xi = np.where((c >= 2) & (var > 0), np.clip(xi, 0.0, self.xi_max), 0.0)
        self.b_lc_[:, cols] = np.log(safe_c) - self.log_q_[:, cols]
        self.b_sigma_[:, cols] = np.where(has, m * (1.0 - xi), 0.0)
        self.b_xi_[:, cols] = xi
        self.b_heavy_ = bool((self.b_xi_ > 1e-9).any())

    def _bars(self) -> Arr:
        if self.t_dirty_.any():
            self._tail_params()
        n = self.t_n_
        lr = np.log(np.maximum(n, 1.0))
        np.subtract(self.b_lc_, lr, out=lr)
        np.maximum(lr, 0.0, out=lr)
        if self.b_heavy_:
            xi = self.b_xi_
            heavy = xi > 1e-9
            lr = np.where(heavy, np.expm1(xi * lr) / np.where(heavy, xi, 1.0), lr)
        lr *= self.b_sigma_
        lr += self.tail_start
        np.maximum(lr, self.floors_, out=lr)
        np.putmask(lr, n < self.warm_n_, np.inf)
        return lr.astype(self.dtype_, copy=False)

    def _learn_rho(self, zc: Arr, w: Bool) -> None:
        m = self.rho_n_ + 1.0
        a = np.maximum(1.0 / m, self.rho_alpha)
        cov = self.cov_ + a * (zc * self.z_prev_ - self.cov_)
        var = self.var_ + a * (zc * zc - self.var_)
        self.cov_ = np.where(w, cov, self.cov_)
        self.var_ = np.where(w, var, self.var_)
        self.rho_n_ = np.where(w, m, self.rho_n_)

    def _learn_tails(self, s: Arr, bars: Arr, w: Bool, drop: Bool) -> None:
        """Vectorised :meth:`PeaksOverThreshold.learn_one` (with its quarantine) / ``drop_run``
        (in place: the state rows are updated without temporaries of the full state)."""
        start = self.tail_start
        peak = self.t_peak_
        pc, pe, pe2, age = self.t_pc_, self.t_pe_, self.t_pe2_, self.t_age_
        age += w & (pc > 0)
        above = s > start
        admit = bars
        if math.isfinite(self.warmup_outlier):  # (the default, inf, costs nothing)
            admit = np.where(np.isfinite(bars), bars, self.warmup_outlier * self.floors_)
        closes = w & ~above & (peak > start) & (peak < admit)
        exc = peak - start
        exc *= closes
        pc += closes
        pe += exc
        exc *= exc
        pe2 += exc
        commit = w & (pc > 0) & (age >= self.tail_lag_n_)
        if commit.any():
            self.t_clusters_ += pc * commit
            self.t_excess_ += pe * commit
            self.t_excess_sq_ += pe2 * commit
            self.t_dirty_ |= commit.any(axis=0)
        keep = ~(commit | drop)
        pc *= keep
        pe *= keep
        pe2 *= keep
        age *= keep
        new_peak = np.maximum(peak, s)
        new_peak *= above
        peak *= ~drop
        self.t_peak_ = np.where(w, new_peak, peak).astype(self.dtype_, copy=False)
        self.t_n_ += w

    def run(
        self, x: ArrayLike, t: ArrayLike | None = None, support: ArrayLike | None = None
    ) -> BankResult:
        """Feed a (series × time) matrix; ``t`` is per step (time,) or per value (series × time);
        ``support`` (series × time, NaN where unknown) backs ratios of counts."""
        xs = np.asarray(x, self.dtype_)
        n, steps = xs.shape
        ts = None if t is None else np.asarray(t, np.float64)
        sp = None if support is None else np.asarray(support, np.float64)
        score = np.empty((n, steps), self.dtype_)
        opened = np.empty((n, steps), np.bool_)
        closed = np.empty((n, steps), np.bool_)
        for j in range(steps):
            tj = None if ts is None else (ts[j] if ts.ndim == 1 else ts[:, j])
            score[:, j], opened[:, j], closed[:, j] = self.step(
                xs[:, j], tj, None if sp is None else sp[:, j]
            )
        return BankResult(score, opened, closed)
