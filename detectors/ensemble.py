"""The per-series ensemble: member scores → rate-controlled bars → vote → alarm with hysteresis."""

from __future__ import annotations

import math
from dataclasses import dataclass

from detectors.alerting import Alerter, Transition
from detectors.params import (
    GRACE_CLIP_AFTER,
    SPREAD_MEAN0,
    SPREAD_VAR0,
    SPREAD_Z_CLIP,
    STEP_MOVE,
    STEP_RATE,
    EnsembleParams,
    resolution,
    resolution_floor,
)
from detectors.robust_zscore import RobustZScore, directional
from detectors.seasonal import SeasonalProfile
from detectors.spot import PeaksOverThreshold, cusum_bar, gaussian_bar, risk_per_sample

__all__ = ["MEMBERS", "Ensemble"]

#: Member ids, in the order of :attr:`Ensemble.member_scores_`.
MEMBERS = ("point", "shift")


@dataclass(kw_only=True, eq=False)
class Ensemble(EnsembleParams):
    """Watch one series with two members (three with ``spread``) and page within a budget.

    Members (both z-like):

    - ``point``: deviation from the daily or the weekly profile (:class:`SeasonalProfile`:
      per-period bin levels, interpolated, used once both neighbouring bins were seen in two
      separate periods; each moved by its steady lag behind a trend, ``follow_trend`` and
      ``week_follow_trend``) when it explains the series better than the EW robust level
      (:class:`RobustZScore`) does, else from the level: the reference with the smallest
      series-wide deviation among those ready at ``t``, chosen per step from the data, no
      labels (weekday and weekend traffic differ; ``week_bins = 0`` drops the weekly one).
      Once the bars are live, a profile is ready only after it has predicted a daily cycle
      (:meth:`cycle_n`): its deviation, learnt over the first night alone, is the quiet
      hours'.
      A third profile keeps working days and weekend days apart (``day_types``,
      ``weekend``): mature by the first weekend's second day where the weekly one needs
      weeks, it is chosen only where its deviation is under ``day_type_margin`` × the best
      other's (a finer model also fits noise). All three follow the network's wall clock
      (``tz`` or ``utc_offset``: :class:`~detectors.clock.LocalClock`), so a change of clocks
      leaves the busy hour in its bins;
    - ``shift``: two-sided CUSUM (allowance ``shift_k``) of the same clipped z, divided by the
      long-run factor ``√((1 + ρ) / (1 − ρ))`` of its lag-1 autocorrelation ``ρ`` (learnt in
      normal time), so overlapping KPI windows do not pass for a shift;
    - ``spread`` (``spread_share`` > 0; off by default and in the NOC, on in ``noc eval
      nab``): the short EWMA (``spread_alpha``) of the point member's |z|, over its slow
      normal-time mean and spread: a series whose noise grows with no one value far enough
      off to page (a host thrashing, a sensor failing). Its ratio votes with the other two
      (``spread_ratio_``); ``ratios_`` keeps the point and shift members'.

    **Bars from a rate.** ``target_rate`` is the false-alarm budget per series-day. With the
    scrape interval (a streaming median of the timestamp steps, see
    :data:`~detectors.params.STEP_RATE`; ``interval`` without timestamps) it becomes a
    per-sample risk ``q``, split over the members (the shift member gets ``shift_share`` of
    it, the spread member ``spread_share``, the point member the rest). Each member's bar is
    a :class:`~detectors.spot.PeaksOverThreshold` (SPOT) bar for ``q`` over its normal-time
    score clusters, floored by the iid Gaussian bar (point, spread) or the Siegmund CUSUM bar
    (shift) for the same ``q``. Nothing alarms during the first ``grace`` values (the
    level settles) and the next warm-up: ``warmup`` scored values, or ``warmup_s`` seconds of
    them when ``warmup`` is None (at least ``min_warmup``).

    **Ratios of counts.** ``update`` takes the ``support`` (events) behind each value. When
    the values are proportions of counts (in [0, 1], ``value × support`` a whole number: see
    :attr:`proportion_`), the scale of both references is floored by the sampling noise
    ``√(p̃(1 − p̃) / support)`` with ``p̃ = (expected · support + ½) / (support + 1)``: a
    low-volume ratio stuck at 1.0 does not page on its first failure. A normal peak joins a
    bar's tail only after ``tail_lag_s`` of quiet (:class:`PeaksOverThreshold`), and the CUSUM
    restarts when an alarm closes.

    **Practical effect.** A member only scores when ``|x − expected|`` is at least
    ``max(min_effect · |expected|, min_abs_effect)``: a statistically clear but tiny change of a
    huge-volume series does not page.

    **The shift member confirms.** Its ratio counts only while the point member's ratio is at
    least ``shift_gate`` (half its bar by default): a CUSUM drifting up on ordinary noise,
    with every value inside the normal band, does not page on its own; a sustained shift whose
    values sit clearly off the level (≥ ``shift_gate`` of the point bar) pages earlier than
    the point member would. ``shift_gate = 0`` lets the shift member page alone.

    **An incident in the warm-up need not become normal.** Before the bars exist, a peak
    beyond ``warmup_outlier`` × the member's iid bar is not learnt into its tail (after the
    warm-up SPOT leaves out what passed the bar). Otherwise a fault in the warm-up is learnt
    as a normal peak: the only tail cluster of a steady gauge (PFCP peers) or of an error share
    that is ~0 when healthy, and a bar tens to millions of z high for ever after.
    :class:`~detectors.monitor.SeriesMonitor` (the NOC's one-hour warm-up) sets 4. The default
    here (inf) learns every warm-up peak: over NAB's days-long probation the extreme peaks of
    spiky series are mostly normal ones (10 cost 6 points of NAB standard score).

    **A first weekend in the warm-up need not set the bars.** Until the day-type profile has
    seen a weekend, the other references measure it against working days; its peaks are then
    kept out of the tails (the values still count toward the warm-up). A 9-day probation
    holding the first weekend of an hourly KPI had taught the bars weekend-sized peaks for good.

    Member scores are divided by their bars; the ensemble score is the ``votes``-th largest
    ratio, and an :class:`Alerter` on it (threshold 1) applies minimum duration, burst,
    hysteresis and a refractory period. The models learn every value (Huber-clipped); the bars
    and ``ρ`` learn only while no alarm is open.

    Examples
    --------
    >>> import random
    >>> rng = random.Random(5)
    >>> ens = Ensemble(warmup=300, min_duration=2)
    >>> out = [ens.update(50 + rng.gauss(0, 1)) for _ in range(600)]
    >>> [o for o in out if o is not None]
    []
    >>> [ens.update(80.0) for _ in range(3)]
    [None, 'open', None]
    >>> round(ens.score_, 1) > 1.0
    True
    """

    #: scored values before the bars exist (None: ``warmup_s`` seconds of them)
    warmup: int | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        self.level_ = RobustZScore(
            alpha=self.alpha,
            grace=self.grace,
            grace_clip=self.grace_clip,
            grace_after=GRACE_CLIP_AFTER,
        )
        self.seasonal_ = SeasonalProfile(
            period=self.period,
            n_bins=self.n_bins,
            alpha=self.seasonal_alpha,
            follow_trend=self.follow_trend,
            tz=self.tz,
            utc_offset=self.utc_offset,
        )
        self.weekly_ = (
            SeasonalProfile(
                period=self.week_period,
                n_bins=self.week_bins,
                alpha=self.seasonal_alpha,
                min_days=self.week_min,
                follow_trend=self.week_follow_trend,
                tz=self.tz,
                utc_offset=self.utc_offset,
            )
            if self.week_bins > 0
            else None
        )
        self.daytype_ = (
            SeasonalProfile(
                period=self.period,
                n_bins=self.n_bins,
                alpha=self.seasonal_alpha,
                follow_trend=self.follow_trend,
                day_types=True,
                weekend=self.weekend,
                tz=self.tz,
                utc_offset=self.utc_offset,
            )
            if self.day_types
            else None
        )
        self.tails_ = (
            PeaksOverThreshold(start=self.tail_start, xi_max=self.xi_max),
            PeaksOverThreshold(start=self.tail_start, xi_max=self.xi_max),
        )
        #: the spread member (``spread_share``): its tail, short EWMA of |z|, the slow mean
        #: and variance of that EWMA, and its last ratio
        self.spread_tail_ = PeaksOverThreshold(start=self.tail_start, xi_max=self.xi_max)
        self.spread_m_ = 0.0
        self.spread_mu_ = SPREAD_MEAN0
        self.spread_var_ = SPREAD_VAR0
        self.spread_ratio_ = 0.0
        self.alerter_ = Alerter(
            1.0, self.min_duration, self.clear_after, self.release, self.burst, self.refractory
        )
        self.up_ = 0.0
        self.down_ = 0.0
        self.z_prev_ = 0.0
        self.x_prev_ = math.nan
        #: smallest non-zero step between consecutive values seen in the warm-up (or always:
        #: ``resolution_always``) and how often: :func:`detectors.params.resolution_floor`
        self.resolution_ = 0.0
        self.resolution_n_ = 0.0
        self.cov_ = 0.0
        self.var_ = 0.0
        self.rho_n_ = 0
        self.last_t_: float | None = None
        self.interval_ = math.inf
        self.step_est_ = math.inf
        self.expected_ = 0.0
        self.scale_ = 0.0
        self.counted_ = 0
        self.whole_ = 0
        self.bars_ = (math.inf, math.inf)
        self.member_scores_ = (0.0, 0.0)
        self.ratios_ = (0.0, 0.0)
        self.score_ = 0.0

    @property
    def firing(self) -> bool:
        return self.alerter_.firing_

    @property
    def proportion_(self) -> bool:
        """Whether the values are proportions of counts: declared so (``update``'s
        ``proportion``), or in [0, 1] with ``value × support`` a whole number (at least 99 %
        of the values that came with a support)."""
        return self.counted_ > 0 and self.whole_ >= 0.99 * self.counted_

    def _step(self) -> float:
        """The scrape interval: the streaming estimate once there is one, else ``interval``."""
        return self.interval_ if math.isfinite(self.interval_) else self.interval

    def risk(self) -> tuple[float, float]:
        """Per-sample risk of the point and the shift member for the current interval
        estimate: the budget's risk split ``1 − shift_share − spread_share`` /
        ``shift_share`` (the spread member's is :meth:`spread_risk`)."""
        step = self._step()
        q = risk_per_sample(self.target_rate, step)
        return q * (1.0 - self.shift_share - self.spread_share), q * self.shift_share

    def spread_risk(self) -> float:
        """Per-sample risk of the spread member: ``spread_share`` of the budget's."""
        return risk_per_sample(self.target_rate, self._step()) * self.spread_share

    def _spread(self, z: float, scored: bool) -> tuple[float, float, float]:
        """The spread member's score after ``z`` (its short EWMA moves while ``scored``),
        its iid floor and bar (inf while off or in the warm-up)."""
        if self.spread_share <= 0.0:
            return 0.0, math.inf, math.inf
        if scored:
            self.spread_m_ += self.spread_alpha * (min(abs(z), SPREAD_Z_CLIP) - self.spread_m_)
        sd = math.sqrt(max(self.spread_var_, 1e-12))
        score = max((self.spread_m_ - self.spread_mu_) / sd, 0.0)
        q = self.spread_risk()
        floor = gaussian_bar(q)
        return score, floor, self.spread_tail_.bar(q, floor, self.warmup_n())

    def warmup_n(self) -> int:
        """Scored values before the bars exist."""
        if self.warmup is not None:
            return self.warmup
        step = self._step()
        return max(self.min_warmup, math.ceil(self.warmup_s / step))

    def cycle_n(self) -> int:
        """Mature predictions a profile needs, once the bars are live, before its deviation
        is trusted: a daily cycle's (``period`` of them). Learnt over the first night alone,
        a profile's deviation is the quiet hours' and pages the busy hour's ordinary noise.
        In the warm-up nothing pages, and a young profile's larger scores teach the tails
        higher (safer) bars: its own 30 residuals do there."""
        step = self._step()
        return math.ceil(self.period / step)

    def tail_lag_n(self) -> int:
        """Scores a normal peak waits before it joins a bar's tail (``tail_lag_s`` of them)."""
        step = self._step()
        return math.ceil(self.tail_lag_s / step)

    def floors(self) -> tuple[float, float]:
        """The iid bars of the two members for the current risk."""
        qp, qs = self.risk()
        both = self.bad_direction == "both"
        return gaussian_bar(qp, both), cusum_bar(qs, self.shift_k, both)

    def bars(self, floors: tuple[float, float] | None = None) -> tuple[float, float]:
        """Current bars of the two members (inf during grace and warm-up); ``floors``: the
        :meth:`floors` of this step when the caller has them."""
        (qp, qs), warm = self.risk(), self.warmup_n()
        fp, fs = floors if floors is not None else self.floors()
        return self.tails_[0].bar(qp, fp, warm), self.tails_[1].bar(qs, fs, warm)

    def _point_bar(self, bar: float, floor: float) -> float:
        """The bar the point member is judged against: its bar, or in the warm-up (after the
        grace) ``warmup_outlier`` × its iid bar ``floor`` where ``warmup_alarm`` is on."""
        if math.isfinite(bar) or not self.warmup_alarm or self.level_.n_ < self.grace:
            return bar
        return self.warmup_outlier * floor

    def _noise_floor(self, ref: float, support: float | None) -> float:
        """Floor of the scale: the resolution's rounding noise
        (:func:`detectors.params.resolution_floor`) and, for a ratio of counts backed by
        ``support``, its sampling noise."""
        res = resolution_floor(self.resolution_, self.resolution_n_)
        if support is None or support <= 0 or not self.proportion_:
            return res
        p = min(max((ref * support + 0.5) / (support + 1.0), 0.0), 1.0)
        return max(math.sqrt(p * (1.0 - p) / support), res)

    def _point(
        self, x: float, t: float | None, support: float | None = None
    ) -> tuple[float, float, float]:
        """Signed z of ``x``, the value it is measured against and the scale used."""
        lvl = self.level_
        ref, scale, best = lvl.mean_, lvl.scale_, lvl.mad_
        if t is not None:
            need = self.cycle_n() if self.tails_[0].n_ >= self.warmup_n() else 0
            for prof, margin in (
                (self.seasonal_, 1.0),
                (self.weekly_, 1.0),
                (self.daytype_, self.day_type_margin),
            ):
                if (
                    prof is not None
                    and prof.both_ready(t)
                    and prof.res_total_ >= need
                    and prof.global_mad_ < margin * best
                ):
                    pred = prof.predict(t)
                    if pred is not None:
                        (ref, scale), best = pred, prof.global_mad_
        if lvl.n_ < self.grace:
            return 0.0, ref, scale
        scale = max(scale, self._noise_floor(ref, support))
        return (x - ref) / scale, ref, scale

    def _shift(self, z: float) -> tuple[float, float, float]:
        zc = max(-self.z_clip, min(self.z_clip, z))
        rho = max(0.0, min(self.rho_max, self.cov_ / max(self.var_, 1e-30)))
        u = zc / math.sqrt((1.0 + rho) / (1.0 - rho))
        return zc, max(0.0, self.up_ + u - self.shift_k), max(0.0, self.down_ - u - self.shift_k)

    def member_scores(
        self, x: float, t: float | None = None, support: float | None = None
    ) -> tuple[float, float]:
        """Raw (unscaled) member scores of ``x`` without learning it."""
        z, ref, _ = self._point(x, t, support)
        if abs(x - ref) < max(self.min_effect * abs(ref), self.min_abs_effect):
            return 0.0, 0.0
        _, up, down = self._shift(z)
        bd = self.bad_direction
        shift = up if bd == "up" else down if bd == "down" else max(up, down)
        return directional(z, bd), shift

    def update(
        self,
        x: float,
        t: float | None = None,
        support: float | None = None,
        hold: bool = False,
        proportion: bool = False,
    ) -> Transition:
        """Score, vote, alarm, then learn ``x`` (backed by ``support`` events when it is a ratio
        of counts); return the alarm transition if any. With ``hold`` (another series of the
        same entity is alarming) its peak is kept out of the tails as if this series were
        alarming: SPOT learns normal time only, and a fault that moves this KPI less than its
        bar is still not normal (at a 15-min PM period, faults at a few a day had taught
        the GPU KPIs bars of 20–100 z). With ``proportion`` a supported value is a share of
        its support whether or not ``value × support`` is a whole number (:attr:`proportion_`)."""
        if math.isnan(x):
            return None
        self._count(x, support, proportion)
        if t is not None:
            self._track_interval(t)
        z, ref, scale = self._point(x, t, support)
        self.expected_ = ref
        self.scale_ = scale
        scores = self.member_scores(x, t, support)
        floors = self.floors()
        bars = self.bars(floors)
        point_bar = self._point_bar(bars[0], floors[0])
        point = scores[0] / point_bar
        shift = scores[1] / bars[1] if point >= self.shift_gate else 0.0
        ratios = (point, shift)
        scored = self.level_.n_ >= self.grace
        spread, spread_floor, spread_bar = self._spread(z, scored)
        self.spread_ratio_ = spread / spread_bar
        votes = (*ratios, self.spread_ratio_) if self.spread_share > 0.0 else ratios
        self.member_scores_ = scores
        self.bars_ = (point_bar, bars[1])
        self.ratios_ = ratios
        self.score_ = sorted(votes, reverse=True)[min(self.votes, len(votes)) - 1]
        transition = self.alerter_.update(self.score_)
        zc, self.up_, self.down_ = self._shift(z)
        if transition == "close":  # the episode is over: restart the CUSUM (no re-paging)
            self.up_ = self.down_ = 0.0
        held = self.alerter_.firing_ or hold
        # in the warm-up, a day type never seen before (a series' first weekend) is measured
        # against the other kind of day: its peaks say nothing of later ones and stay out of
        # the tails (the values still count; after the warm-up the bar keeps faults out)
        novel = (
            math.isinf(bars[0])
            and t is not None
            and self.daytype_ is not None
            and self.daytype_.new_day_type(t)
        )
        self._learn_models(x, t, support, ref, held and scored)
        if scored:
            if not held:
                spread_member = (spread, spread_floor, spread_bar)
                self._learn_normal(zc, scores, bars, floors, spread_member, novel)
            else:
                for tail in (*self.tails_, self.spread_tail_):
                    tail.drop_run()
        self.z_prev_ = zc
        if self.resolution_always or math.isinf(bars[0]):  # see detectors.params
            self.resolution_, self.resolution_n_ = resolution(
                abs(x - self.x_prev_), self.resolution_, self.resolution_n_
            )
        self.x_prev_ = x
        return transition

    def _count(self, x: float, support: float | None, proportion: bool) -> None:
        """Count a value that came with a support, and whether it was a share of that support
        (declared, or in [0, 1] with ``value × support`` a whole number: :attr:`proportion_`)."""
        if support is not None and support > 0:
            self.counted_ += 1
            xs = x * support
            if proportion or (0.0 <= x <= 1.0 and abs(xs - round(xs)) <= 1e-6 * max(1.0, support)):
                self.whole_ += 1

    def _track_interval(self, t: float) -> None:
        """Move the streaming median of the timestamp steps on to ``t``; the interval follows
        it once it moved by more than :data:`~detectors.params.STEP_MOVE`."""
        if self.last_t_ is not None and t > self.last_t_:
            gap = t - self.last_t_
            est = self.step_est_
            if math.isfinite(est):
                sign = (gap > est) - (gap < est)
                est = est * (1.0 + STEP_RATE * sign)
            else:
                est = gap
            self.step_est_ = est
            if not math.isfinite(self.interval_) or abs(est - self.interval_) > (
                STEP_MOVE * self.interval_
            ):
                self.interval_ = est
        self.last_t_ = t

    def _learn_models(
        self, x: float, t: float | None, support: float | None, ref: float, clip_young: bool
    ) -> None:
        """The level and the profiles learn ``x`` (``ref``: what it was measured against).
        With ``clip_young`` (an alarm's value) a profile too young to predict learns it
        clipped as the level clips it: a fault on the first day must not become that hour's
        normal."""
        lvl = self.level_
        level_floor = self._noise_floor(lvl.mean_, support)
        young = x
        if clip_young:
            lim = self.seasonal_.clip * max(lvl.scale_, level_floor)
            young = min(max(x, lvl.mean_ - lim), lvl.mean_ + lim)
        lvl.learn_one(x, level_floor)
        floor = self._noise_floor(ref, support)
        self.seasonal_.learn_one(x, t, floor, young)
        for prof in (self.weekly_, self.daytype_):
            if prof is not None:
                prof.learn_one(x, t, floor, young)

    def _learn_normal(
        self,
        zc: float,
        scores: tuple[float, float],
        bars: tuple[float, float],
        floors: tuple[float, float],
        spread_member: tuple[float, float, float],
        novel: bool,
    ) -> None:
        """What learns in normal time only: the lag-1 correlation of the clipped z ``zc``,
        the members' tails (a ``novel`` day type's peaks as 0; in the warm-up, with no bar
        yet, a peak beyond ``warmup_outlier`` × its iid bar waits) and the spread member's
        slow mean and variance (``spread_member``: its score, iid floor and bar)."""
        self.rho_n_ += 1
        a = max(self.rho_alpha, 1.0 / self.rho_n_)
        self.cov_ += a * (zc * self.z_prev_ - self.cov_)
        self.var_ += a * (zc * zc - self.var_)
        lag = self.tail_lag_n()
        admit = tuple(
            b if math.isfinite(b) else self.warmup_outlier * f
            for b, f in zip(bars, floors, strict=True)
        )
        for s, b, tail in zip(scores, admit, self.tails_, strict=True):
            tail.learn_one(0.0 if novel else s, b, lag)
        if self.spread_share > 0.0:
            spread, spread_floor, spread_bar = spread_member
            b = spread_bar if math.isfinite(spread_bar) else (self.warmup_outlier * spread_floor)
            self.spread_tail_.learn_one(0.0 if novel else spread, b, lag)
            self.spread_mu_ += self.spread_slow * (self.spread_m_ - self.spread_mu_)
            d = self.spread_m_ - self.spread_mu_
            self.spread_var_ += self.spread_slow * (d * d - self.spread_var_)
