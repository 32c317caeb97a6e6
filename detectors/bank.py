"""The ensemble of :mod:`detectors.ensemble` over many series at once (numpy over series)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, DTypeLike, NDArray

from detectors.ensemble import MEMBERS
from detectors.robust_zscore import MAD_TO_SIGMA, Direction
from detectors.spot import cusum_bar, gaussian_bar

__all__ = ["BankResult", "EnsembleBank"]

Arr = NDArray[Any]
F64 = NDArray[np.float64]
Bool = NDArray[np.bool_]

_CLIP = 3.0
_REL_FLOOR = 1e-6
_MIN_COUNT = 2


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


class EnsembleBank:
    """:class:`detectors.ensemble.Ensemble` for ``n_series`` series, one numpy step per time.

    Same parameters and, within float tolerance, the same scores and alarms as one
    :class:`~detectors.ensemble.Ensemble` per series (tested in float64). ``warmup`` may be
    one value per series. A NaN value leaves that series untouched for the step (a gap).
    Timestamps may be one per step (all series aligned: the fast path) or one per series;
    without them the daily profile is off and ``interval`` is the scrape interval.
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

    def __init__(
        self,
        n_series: int,
        bad_direction: Direction = "both",
        target_rate: float = 0.005,
        interval: float = 60.0,
        alpha: float = 0.02,
        grace: int = 30,
        shift_k: float = 0.5,
        z_clip: float = 4.0,
        rho_alpha: float = 0.005,
        rho_max: float = 0.9,
        period: float = 86400.0,
        n_bins: int = 48,
        seasonal_alpha: float = 0.2,
        warmup: int | ArrayLike | None = None,
        warmup_s: float = 3600.0,
        min_warmup: int = 30,
        tail_start: float = 2.0,
        xi_max: float = 0.5,
        min_effect: float = 0.01,
        min_abs_effect: float = 0.0,
        votes: int = 1,
        min_duration: int = 2,
        clear_after: int = 4,
        release: float = 0.5,
        burst: float = math.inf,
        refractory: int = 0,
        dtype: DTypeLike = np.float64,
    ) -> None:
        self.n_series = n_series
        self.bad_direction = bad_direction
        self.target_rate = target_rate
        self.interval = interval
        self.alpha = alpha
        self.grace = grace
        self.shift_k = shift_k
        self.z_clip = z_clip
        self.rho_alpha = rho_alpha
        self.rho_max = rho_max
        self.period = period
        self.n_bins = n_bins
        self.seasonal_alpha = seasonal_alpha
        self.warmup = warmup
        self.warmup_s = warmup_s
        self.min_warmup = min_warmup
        self.tail_start = tail_start
        self.xi_max = xi_max
        self.min_effect = min_effect
        self.min_abs_effect = min_abs_effect
        self.votes = votes
        self.min_duration = min_duration
        self.clear_after = clear_after
        self.release = release
        self.burst = burst
        self.refractory = refractory
        self.dtype = dtype
        n = n_series
        dt = np.dtype(dtype)
        self.dtype_ = dt
        self.level_ = _Level(n, alpha, grace, dt)
        self.up_ = np.zeros(n, dt)
        self.down_ = np.zeros(n, dt)
        self.z_prev_ = np.zeros(n, dt)
        self.cov_ = np.zeros(n, dt)
        self.var_ = np.zeros(n, dt)
        self.rho_n_ = np.zeros(n, dt)
        self.s_level_: Arr | None = None  # (n_bins, n): one contiguous row per bin
        self.s_mad_: Arr | None = None
        self.s_count_: Arr | None = None
        self.s_gmad_ = np.zeros(n, dt)
        self.s_n_ = np.zeros(n, dt)
        self.last_t_ = np.full(n, np.nan)
        self.interval_ = np.full(n, np.inf)
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
        self.log_q_ = np.zeros(n, dt)
        self.floors_ = np.zeros((2, n), dt)
        self.warm_n_ = np.zeros(n, dt)
        self._refresh(np.ones(n, np.bool_))
        self.firing_ = np.zeros(n, np.bool_)
        self.run_ = np.zeros(n, dt)
        self.cool_ = np.zeros(n, dt)
        self.score_ = np.zeros(n, dt)

    def _refresh(self, which: Bool) -> None:
        """Recompute risk, floors and warm-up length of the series in ``which``."""
        step = np.where(np.isfinite(self.interval_), self.interval_, self.interval)[which]
        q = self.target_rate * step / 86400.0 / len(MEMBERS)
        both = self.bad_direction == "both"
        fp = np.empty(len(q))
        fs = np.empty(len(q))
        for u in np.unique(q):
            sel = q == u
            fp[sel] = gaussian_bar(float(u), both)
            fs[sel] = cusum_bar(float(u), self.shift_k, both)
        self.log_q_[which] = np.log(q)
        self.floors_[0, which] = fp
        self.floors_[1, which] = fs
        auto = np.maximum(self.min_warmup, np.ceil(self.warmup_s / step))
        w = self.warmup_[which]
        self.warm_n_[which] = np.where(w >= 0, w, auto)

    def _directional(self, z: Arr) -> Arr:
        if self.bad_direction == "up":
            return np.maximum(z, 0.0)
        if self.bad_direction == "down":
            return np.maximum(-z, 0.0)
        return np.abs(z)

    def _seasonal(self, x: Arr, t: F64, v: Bool | None) -> tuple[Arr, Arr, Bool]:
        """Seasonal signed score, bin level and maturity at ``t``; learns ``x`` into its bin."""
        n, nb, dt = self.n_series, self.n_bins, self.dtype_
        if self.s_level_ is None or self.s_mad_ is None or self.s_count_ is None:
            self.s_level_ = np.zeros((nb, n), dt)
            self.s_mad_ = np.zeros((nb, n), dt)
            self.s_count_ = np.zeros((nb, n), dt)
        period = self.period
        aligned = t.ndim == 0
        if aligned:
            bs = int((float(t) % period) / period * nb) % nb
            lv, md, c = self.s_level_[bs].copy(), self.s_mad_[bs], self.s_count_[bs]
        else:
            b = (np.mod(t, period) / period * nb).astype(np.int64) % nb
            cols = np.arange(n)
            lv, md, c = self.s_level_[b, cols], self.s_mad_[b, cols], self.s_count_[b, cols]
        scale = np.maximum(MAD_TO_SIGMA * md, (0.5 * MAD_TO_SIGMA) * self.s_gmad_)
        np.maximum(scale, _REL_FLOOR * np.abs(lv), out=scale)
        np.maximum(scale, 1e-12, out=scale)
        mature = c >= _MIN_COUNT
        r = x - lv
        z = np.where(mature, r / scale, 0.0)
        # learn
        c1 = c + 1.0
        first = c == 0
        a = np.maximum(1.0 / c1, self.seasonal_alpha)
        limit = np.where(mature, _CLIP * scale, np.inf)
        dev = np.minimum(np.abs(r), limit)
        new_lv = np.where(first, x, lv + a * np.clip(r, -limit, limit))
        new_md = np.where(first, md, md + a * (dev - md))
        sn = self.s_n_ + 1.0
        ga = np.where(first, 0.0, np.maximum(1.0 / sn, 0.01))
        gmad = self.s_gmad_ + ga * (dev - self.s_gmad_)
        if v is not None:
            new_lv, new_md = np.where(v, new_lv, lv), np.where(v, new_md, md)
            c1 = np.where(v, c1, c)
            gmad, sn = np.where(v, gmad, self.s_gmad_), np.where(v, sn, self.s_n_)
        if aligned:
            self.s_level_[bs], self.s_mad_[bs], self.s_count_[bs] = new_lv, new_md, c1
        else:
            self.s_level_[b, cols], self.s_mad_[b, cols], self.s_count_[b, cols] = (
                new_lv,
                new_md,
                c1,
            )
        self.s_gmad_, self.s_n_ = gmad, sn
        return z, lv, mature

    def step(self, x: ArrayLike, t: ArrayLike | None = None) -> tuple[Arr, Bool, Bool]:
        """Feed one value per series; return (score, opened, closed) for this step."""
        dt = self.dtype_
        x = np.asarray(x, dt)
        valid = ~np.isnan(x)
        v: Bool | None = None if valid.all() else valid
        if v is not None:
            x = np.where(valid, x, 0.0).astype(dt)
        lvl = self.level_
        tt: F64 | None = None
        if t is not None:
            tt = np.asarray(t, np.float64)
            if tt.ndim == 0 and v is not None:
                tt = np.full(self.n_series, float(tt))
            gap = tt - self.last_t_
            shorter = (gap > 0) & (gap < self.interval_)
            if v is not None:
                shorter &= valid
            if shorter.any():
                self.interval_ = np.where(shorter, gap, self.interval_)
                self._refresh(shorter)
            self.last_t_ = (
                np.where(valid, tt, self.last_t_)
                if v is not None
                else (np.broadcast_to(tt, (self.n_series,)).astype(np.float64))
            )
        # point member: level (or the daily profile where it is mature and fits better)
        l_scale = lvl.scale()
        scored = lvl.n >= self.grace
        z = np.where(scored, (x - lvl.m) / l_scale, 0.0).astype(dt)
        ref = lvl.m
        if tt is not None:
            better = self.s_gmad_ < lvl.d
            zs, lv, mature = self._seasonal(x, tt, v)
            use = mature & better
            z = np.where(use, zs, z)
            ref = np.where(use, lv, ref)
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
        scores = np.stack([point, shift]).astype(dt)
        bars = self._bars()
        ratios = scores / bars
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
        self.run_, self.cool_, self.firing_ = run.astype(dt), cool.astype(dt), firing
        # learn
        lvl.learn(x, v, l_scale)
        if v is not None:
            up, down = np.where(valid, up, self.up_), np.where(valid, down, self.down_)
        self.up_, self.down_ = up.astype(dt), down.astype(dt)
        w = scored & ~firing
        if v is not None:
            w &= valid
        self._learn_rho(zc, w)
        self._learn_tails(scores, bars, w, scored & firing & valid)
        self.z_prev_ = zc if v is None else np.where(valid, zc, self.z_prev_)
        self.score_ = score.astype(dt)
        return self.score_, opened, closed

    def _bars(self) -> Arr:
        n, c, e = self.t_n_, self.t_clusters_, self.t_excess_
        has = c > 0
        safe_c = np.where(has, c, 1.0)
        m = e / safe_c
        var = self.t_excess_sq_ / safe_c - m * m
        xi = 0.5 * (1.0 - m * m / np.where(var > 0, var, 1.0))
        xi = np.where((c >= 2) & (var > 0), np.clip(xi, 0.0, self.xi_max), 0.0)
        sigma = m * (1.0 - xi)
        log_ratio = np.maximum(np.log(safe_c) - np.log(np.maximum(n, 1.0)) - self.log_q_, 0.0)
        heavy = xi > 1e-9
        growth = np.where(heavy, np.expm1(xi * log_ratio) / np.where(heavy, xi, 1.0), log_ratio)
        tail = self.tail_start + np.where(has, sigma * growth, 0.0)
        bars = np.maximum(tail, self.floors_)
        return np.where(n >= self.warm_n_, bars, np.inf).astype(self.dtype_)

    def _learn_rho(self, zc: Arr, w: Bool) -> None:
        m = self.rho_n_ + 1.0
        a = np.maximum(1.0 / m, self.rho_alpha)
        cov = self.cov_ + a * (zc * self.z_prev_ - self.cov_)
        var = self.var_ + a * (zc * zc - self.var_)
        self.cov_ = np.where(w, cov, self.cov_)
        self.var_ = np.where(w, var, self.var_)
        self.rho_n_ = np.where(w, m, self.rho_n_)

    def _learn_tails(self, s: Arr, bars: Arr, w: Bool, drop: Bool) -> None:
        start = self.tail_start
        peak = self.t_peak_
        above = s > start
        closes = w & ~above & (peak > start) & (peak < bars)
        self.t_clusters_ = self.t_clusters_ + closes
        exc = peak - start
        self.t_excess_ = np.where(closes, self.t_excess_ + exc, self.t_excess_)
        self.t_excess_sq_ = np.where(closes, self.t_excess_sq_ + exc * exc, self.t_excess_sq_)
        new_peak = np.where(above, np.maximum(peak, s), 0.0)
        new_peak = np.where(w, new_peak, np.where(drop, 0.0, peak))
        self.t_peak_ = new_peak.astype(self.dtype_)
        self.t_n_ = self.t_n_ + w

    def run(self, x: ArrayLike, t: ArrayLike | None = None) -> BankResult:
        """Feed a (series × time) matrix; ``t`` is per step (time,) or per value (series × time)."""
        xs = np.asarray(x, self.dtype_)
        n, steps = xs.shape
        ts = None if t is None else np.asarray(t, np.float64)
        score = np.empty((n, steps), self.dtype_)
        opened = np.empty((n, steps), np.bool_)
        closed = np.empty((n, steps), np.bool_)
        for j in range(steps):
            tj = None if ts is None else (ts[j] if ts.ndim == 1 else ts[:, j])
            score[:, j], opened[:, j], closed[:, j] = self.step(xs[:, j], tj)
        return BankResult(score, opened, closed)
