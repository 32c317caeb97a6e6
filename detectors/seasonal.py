"""Robust daily (or any period) profile of one KPI series: what is normal at this time of day."""

from __future__ import annotations

import math
from dataclasses import dataclass

from detectors.clock import LocalClock
from detectors.robust_zscore import MAD_TO_SIGMA, Direction, directional

__all__ = [
    "TREND_DAY",
    "SeasonalProfile",
    "check_day_types",
    "day_type_base",
    "trend_fold",
    "trend_ratio",
    "weekend_mask",
]

#: the trend term's accounting unit: a day's residuals make one observation of the lag
TREND_DAY = 86400.0
#: weight of a new day's ratio in the trend term's running mean and variance (a week)
TREND_ALPHA = 1.0 / 7.0
#: days of residuals before the trend term may move a prediction
TREND_MIN_DAYS = 5.0
#: how clear (in standard errors) the days' mean lag must be to be used in full
TREND_T = 3.0
#: largest relative lag one day may report (a fault's day is Huber-clipped already)
TREND_MAX = 0.5
#: 1970-01-01, day 0 of the epoch, was a Thursday: weekday 3 with Monday 0 (``datetime``'s)
EPOCH_WEEKDAY = 3


def weekend_mask(days: tuple[int, ...]) -> int:
    """Bit mask of the weekend's weekdays (Monday 0 … Sunday 6, as ``datetime.weekday``).

    >>> weekend_mask((5, 6)), weekend_mask((4, 5))   # Saturday–Sunday, Friday–Saturday
    (96, 48)
    """
    mask = 0
    for d in days:
        if not 0 <= d <= 6:
            raise ValueError(f"weekend: weekday {d} is not 0 (Monday) … 6 (Sunday)")
        mask |= 1 << d
    return mask


def check_day_types(period: float) -> None:
    """Refuse day types on a profile whose period is not one day (a day type is a day's)."""
    if period != 86400.0:
        raise ValueError(f"day_types needs a period of one day (86400 s), got {period}")


def day_type_base(u: float, mask: int, n_bins: int) -> int:
    """First bin of the day type of ``u`` (local wall-clock seconds,
    :meth:`detectors.clock.LocalClock.local`) in a day-type profile: 0 on a working day,
    ``n_bins`` on a weekend day (``mask``: :func:`weekend_mask`).

    >>> day_type_base(0.0, 96, 48)                   # 1970-01-01, a Thursday
    0
    >>> day_type_base(2 * 86400.0, 96, 48)           # Saturday
    48
    >>> day_type_base(2 * 86400.0 - 600 + 3600, 96, 48)   # 23:50 UTC Friday at +1 h: Saturday
    48
    """
    wd = (math.floor(u / 86400.0) + EPOCH_WEEKDAY) % 7
    return n_bins if (mask >> int(wd)) & 1 else 0


def trend_fold(
    m: float, v: float, k: float, tsum: float, tden: float
) -> tuple[float, float, float]:
    """Fold one day's relative lag ``tsum / tden`` into the running mean ``m``, variance ``v``
    and day count ``k`` of the trend term (a day without mature predictions changes nothing).

    >>> m = v = k = 0.0
    >>> for _ in range(6):
    ...     m, v, k = trend_fold(m, v, k, 5.0, 100.0)
    >>> round(m, 3), round(v, 6), k
    (0.05, 0.0, 6.0)
    """
    if not tden > 0.0:
        return m, v, k
    d = min(max(tsum / tden, -TREND_MAX), TREND_MAX)
    k += 1.0
    a = max(TREND_ALPHA, 1.0 / k)
    diff = d - m
    m += a * diff
    v = (1.0 - a) * (v + a * diff * diff)
    return m, v, k


def trend_ratio(m: float, v: float, k: float) -> float:
    """Relative correction of a profile's prediction: the days' mean lag ``m`` shrunk toward 0
    by its standard error (``m · max(0, 1 − T² se² / m²)``, :data:`TREND_T`), 0 before
    :data:`TREND_MIN_DAYS` days. A series that trends lags its profile by the same share every
    day (a small ``se``); a wandering or noisy one does not, and keeps its profile as it is.

    >>> trend_ratio(0.08, 0.0001, 10.0) > 0.07   # a steady 8 % lag: corrected
    True
    >>> trend_ratio(0.02, 0.01, 10.0)            # days scattered ±10 %: left alone
    0.0
    >>> trend_ratio(0.08, 0.0, 3.0)              # too few days
    0.0
    """
    if k < TREND_MIN_DAYS or m == 0.0:
        return 0.0
    n_eff = min(k, (2.0 - TREND_ALPHA) / TREND_ALPHA)
    return m * max(0.0, 1.0 - TREND_T * TREND_T * v / (n_eff * m * m))


@dataclass(eq=False)
class SeasonalProfile:
    """Per time-of-day bin, the level learnt across *days*; score = deviation in scales.

    Traffic KPIs follow the day: a registration rate that is normal at 18:00 is a storm at
    04:00. The period is cut into ``n_bins`` bins by timestamp (any scrape interval works).
    Within one visit of a bin (one day) the values are averaged; when the bin is visited again
    on a later day, that day's mean is folded into the bin's level with weight
    ``max(alpha, 1 / days)`` (Huber-clipped at ``clip`` scales once the bin is mature). So a
    bin's level is a *per-day* estimate whatever the scrape interval, not the last few samples
    of yesterday's bin.

    The expected value at ``t`` is interpolated linearly between the levels of the two nearest
    bin centres (a smooth daily trend is not a staircase), and it exists only when both bins
    were visited on ``min_days`` separate days (today counted): otherwise the profile is not
    :meth:`mature` and scores 0 (callers fall back to a level detector). A bin the series never
    visits (hourly values fill every other half-hour bin) leaves its neighbour to predict
    alone once that one was seen on ``min_days`` days (today counted). The scale is the
    larger of the series-wide and the (interpolated) per-bin deviation of the values from the
    expected value, learnt from mature predictions only; the profile is :meth:`ready` once
    ``min_residuals`` of them were seen. The score is linear in the deviation (no saturation).

    **A trend term.** A per-day EWMA trails a growing series: at 3 % a day a bin's level sits
    ~10 % low, that lag enters the scale, and short dips hide under the bar. Each day the
    profile's Huber-clipped residuals are summed against its predictions into one relative
    lag; the days' running mean, shrunk toward 0 by its standard error (:func:`trend_ratio`:
    used in full only when the lag is steady, several standard errors from 0, over at least
    :data:`TREND_MIN_DAYS` days), raises or lowers every prediction by that share, and a
    bin's new day is clipped around it. A series that wanders from day to day (no steady
    sign) keeps its profile untouched. The lag is measured per day for any period, so a
    weekly profile (five weeks behind a trend at the default ``alpha``) is corrected by its
    own, larger lag. ``follow_trend = False`` leaves the term out.

    **Local time.** The bins, the days and the weekend are the network's wall clock's
    (:class:`~detectors.clock.LocalClock`: the IANA zone ``tz``, daylight saving included, or a
    fixed ``utc_offset``; UTC by default): traffic follows its subscribers' day, and where the
    clocks change the busy hour moves by an hour in UTC but stays in its bin. The day the
    clocks go forward skips an hour's bins; the day they go back sees one hour twice (both
    visits are that day's).

    **Day types.** With ``day_types`` the profile keeps two sets of ``n_bins`` bins, one for
    working days and one for the ``weekend`` days (local). Weekend traffic differs from
    weekday traffic; a weekly profile learns that too, but needs ``min_days`` weeks, where
    this one is mature by the second weekend day. Each day type has its own trend term (its
    local days): a weekend bin, seen two days a week, trails a trend further than a weekday
    one. The period must then be a day.

    Parameters
    ----------
    period
        Length of the season in seconds (a day by default).
    n_bins
        Bins per period.
    alpha
        Weight of a new day's mean in its bin's level.
    min_days
        Separate days a bin must have been visited on (today included) before it is used.
    clip
        Huber clipping, in scales, of a day's mean into the level and of deviations.
    min_residuals
        Mature predictions seen before the scale is trusted (:meth:`ready`).
    bad_direction
        ``"up"``, ``"down"`` or ``"both"``.
    rel_floor
        Floor of the scale relative to the expected value.
    follow_trend
        Learn and apply the trend term (:meth:`trend`).
    day_types
        Keep working days and weekend days apart.
    weekend
        Weekdays of the weekend (Monday 0 … Sunday 6), with ``day_types``.
    tz
        IANA time zone of the network (``"Europe/Berlin"``); None: ``utc_offset``.
    utc_offset
        Local time's fixed offset from UTC in seconds (east positive), without ``tz``.

    Examples
    --------
    >>> import math, random
    >>> rng = random.Random(1)
    >>> det = SeasonalProfile(n_bins=24)
    >>> day = lambda t: 100 + 50 * math.sin(2 * math.pi * t / 86400)
    >>> det.learn_one(day(0.0), t=0.0)
    >>> det.mature(3600.0)                # one day seen: not yet
    False
    >>> for t in range(600, 5 * 86400, 600):
    ...     det.learn_one(day(t) + rng.gauss(0, 2), t=t)
    >>> t = 5 * 86400 + 6 * 3600          # the daily peak is normal ...
    >>> det.mature(t), det.score_one(day(t), t=t) < 3
    (True, True)
    >>> t = 5 * 86400 + 18 * 3600         # ... but the peak's value at the trough is not
    >>> det.score_one(150.0, t=t) > 10
    True
    """

    period: float = 86400.0
    n_bins: int = 48
    alpha: float = 0.2
    min_days: int = 2
    clip: float = 3.0
    min_residuals: int = 30
    bad_direction: Direction = "both"
    rel_floor: float = 1e-6
    follow_trend: bool = True
    day_types: bool = False
    weekend: tuple[int, ...] = (5, 6)
    utc_offset: float = 0.0
    tz: str | None = None

    def __post_init__(self) -> None:
        if self.day_types:
            check_day_types(self.period)
        self.weekend = tuple(self.weekend)
        self.clock_ = LocalClock(self.tz, self.utc_offset)
        self.mask_ = weekend_mask(self.weekend) if self.day_types else 0
        nb = self.n_bins * (2 if self.day_types else 1)
        self.level_ = [0.0] * nb
        self.mad_ = [0.0] * nb
        self.days_ = [0] * nb
        self.res_n_ = [0] * nb
        self.cur_sum_ = [0.0] * nb
        self.cur_n_ = [0] * nb
        self.cur_day_ = [-1.0] * nb
        self.global_mad_ = 0.0
        self.res_total_ = 0
        self.n_ = 0
        # the trend term: today's (TREND_DAY) clipped residuals and predictions, and the
        # running mean, variance and count of the days' relative lags (trend_fold): one set
        # per day type (a weekend bin, seen two days a week, trails a trend further)
        self.trend_ = [[-math.inf, 0.0, 0.0, 0.0, 0.0, 0.0] for _ in range(nb // self.n_bins)]
        #: mature predictions per day type (working days, weekend days: :meth:`both_ready`)
        self.type_res_ = [0, 0]

    # the methods whose time is ``u`` take local wall-clock seconds (``self.clock_.local``)

    def _base(self, u: float) -> int:
        """First bin of ``u``'s day type (0 without day types)."""
        if not self.day_types:
            return 0
        return day_type_base(u, self.mask_, self.n_bins)

    def _kind(self, u: float) -> int:
        """``u``'s day type: 0 a working day (or no day types), 1 a weekend day."""
        return 1 if self._base(u) else 0

    def _bin(self, u: float) -> int:
        return self._base(u) + int((u % self.period) / self.period * self.n_bins) % self.n_bins

    def _day(self, u: float) -> float:
        return math.floor(u / self.period)

    def _bin_scale(self, b: int) -> float:
        return max(MAD_TO_SIGMA * self.mad_[b], MAD_TO_SIGMA * self.global_mad_)

    def _folded(self, b: int, day: float, trend: float = 0.0) -> tuple[float, int]:
        """Level and day count of bin ``b`` as seen on ``day`` (an earlier visit folded in;
        ``trend``: the relative lag the Huber clip is centred on, :meth:`trend`)."""
        lvl, days = self.level_[b], self.days_[b]
        n = self.cur_n_[b]
        if n == 0 or self.cur_day_[b] >= day:
            return lvl, days
        mean = self.cur_sum_[b] / n
        if days == 0:
            return mean, 1
        a = max(self.alpha, 1.0 / (days + 1))
        r = mean - lvl
        if days + 1 >= self.min_days and self.res_n_[b] > 0:
            # a trending series' day sits off the level by the lag: clip around it
            off = trend * abs(lvl)
            limit = self.clip * self._bin_scale(b)
            r = off + max(-limit, min(limit, r - off))
        return lvl + a * r, days + 1

    def _neighbours(self, u: float) -> tuple[int, int, float]:
        """The two bins around ``u`` (within its day type: midnight wraps to the same day
        type's evening) and the weight of the second."""
        base = self._base(u)
        pos = (u % self.period) / self.period * self.n_bins - 0.5
        lo = math.floor(pos)
        return base + lo % self.n_bins, base + (lo + 1) % self.n_bins, pos - lo

    def trend(self, t: float) -> float:
        """Relative correction of the predictions at ``t`` (:func:`trend_ratio`), the days
        before ``t``'s folded in (those of ``t``'s day type in a day-type profile)."""
        return self._trend(self.clock_.local(t))

    def _trend(self, u: float) -> float:
        if not self.follow_trend:
            return 0.0
        day, _, _, m, v, k = st = self._trend_state(u)
        if day < math.floor(u / TREND_DAY):
            return trend_ratio(*self._trend_folded(st))
        return trend_ratio(m, v, k)

    def _trend_state(self, u: float) -> list[float]:
        """The trend term's state for ``u``: its day (local), that day's clipped residuals and
        predictions, the days' running mean, variance and count."""
        return self.trend_[self._kind(u)]

    @staticmethod
    def _trend_folded(st: list[float]) -> tuple[float, float, float]:
        """The trend term's running mean, variance and day count with today's lag folded in."""
        return trend_fold(st[3], st[4], st[5], st[1], st[2])

    def new_day_type(self, t: float) -> bool:
        """Whether ``t``'s day type is new to a :meth:`ready` day-type profile: its bin was
        seen on no earlier day while the other day type was (a series' first weekend). The
        other references measure such a day against the wrong kind of day."""
        if not self.day_types or not self.ready():
            return False
        u = self.clock_.local(t)
        b = self._bin(u)
        return self.days_[b] == 0 and not (self.cur_n_[b] > 0 and self.cur_day_[b] < self._day(u))

    def predict(self, t: float) -> tuple[float, float] | None:
        """Expected value and scale at ``t``; None while the profile is not mature there."""
        pred = self._predict(self.clock_.local(t))
        return None if pred is None else pred[:2]

    def _predict(self, u: float) -> tuple[float, float, float] | None:
        """:meth:`predict` at local time ``u`` and the trend term's part of the expected
        value."""
        day = self._day(u)
        trend = self._trend(u)
        b0, b1, w = self._neighbours(u)
        l0, d0 = self._folded(b0, day, trend)
        l1, d1 = self._folded(b1, day, trend)
        # a bin the series skips (an hourly series has a value in every other half-hour bin)
        # leaves its neighbour alone once that one was seen on min_days days (today counted)
        if self.cur_n_[b1] == 0 and d0 + 1 >= self.min_days:
            w = 0.0
        elif self.cur_n_[b0] == 0 and d1 + 1 >= self.min_days:
            w = 1.0
        elif min(d0, d1) + 1 < self.min_days:
            return None
        raw = (1.0 - w) * l0 + w * l1
        off = trend * abs(raw)
        mid = raw + off
        mad = max((1.0 - w) * self.mad_[b0] + w * self.mad_[b1], self.global_mad_)
        scale = max(MAD_TO_SIGMA * mad, self.rel_floor * abs(mid), 1e-12)
        return mid, scale, off

    def learn_one(
        self, x: float, t: float | None = None, floor: float = 0.0, young: float | None = None
    ) -> None:
        """Learn ``x`` at ``t``; ``floor`` bounds the clipping scale from below (see
        :meth:`detectors.robust_zscore.RobustZScore.learn_one`). Where the profile cannot
        predict yet, ``young`` (default ``x``) is learnt instead: the caller's clipped value
        while an alarm is open (:meth:`detectors.ensemble.Ensemble.update`)."""
        if t is None or math.isnan(x):
            return
        u = self.clock_.local(t)
        pred = self._predict(u)
        tday = math.floor(u / TREND_DAY)
        st = self._trend_state(u)
        if self.follow_trend and tday > st[0]:
            st[3], st[4], st[5] = self._trend_folded(st)
            st[0], st[1], st[2] = tday, 0.0, 0.0
        day = self._day(u)
        b = self._bin(u)
        self.level_[b], self.days_[b] = self._folded(b, day, self._trend(u))
        if self.cur_day_[b] != day:
            self.cur_sum_[b], self.cur_n_[b], self.cur_day_[b] = 0.0, 0, day
        self.n_ += 1
        if pred is None:
            self.cur_sum_[b] += x if young is None else young
            self.cur_n_[b] += 1
            return
        mid, scale, off = pred
        limit = self.clip * max(scale, floor) if self.res_n_[b] > 0 else math.inf
        r = x - mid
        dev = min(abs(r), limit)
        rc = max(-limit, min(limit, r))
        self.cur_sum_[b] += mid + rc
        st[1] += off + rc
        st[2] += abs(mid - off)
        self.cur_n_[b] += 1
        if self.res_n_[b] == 0:  # a bin's own deviation starts from the series-wide one
            self.mad_[b] = self.global_mad_
        self.res_n_[b] += 1
        self.mad_[b] += 0.02 * (dev - self.mad_[b])
        self.res_total_ += 1
        self.type_res_[self._kind(u)] += 1
        self.global_mad_ += max(0.01, 1.0 / self.res_total_) * (dev - self.global_mad_)

    def both_ready(self, t: float) -> bool:
        """:meth:`ready`, and in a day-type profile, the day type other than ``t``'s predicted
        too: before it has seen both a weekend and working days, a day-type profile knows no
        more than the daily one with fewer days, and its deviation, learnt over other hours
        than the daily profile's, compares with nothing."""
        if not self.day_types:
            return self.ready()
        return self.ready() and self.type_res_[1 - self._kind(self.clock_.local(t))] > 0

    def ready(self) -> bool:
        """Whether enough mature predictions were seen to trust the scale."""
        return self.res_total_ >= self.min_residuals

    def mature(self, t: float) -> bool:
        """Whether the profile gives an expected value at ``t``."""
        return self.predict(t) is not None

    def signed_score(self, x: float, t: float | None = None) -> float:
        """Signed deviation from the expected value in scales; 0 where not mature, and
        everywhere until the scale is trusted (:meth:`ready`): a first mature bin with a
        handful of residuals behind its scale would score a routine value in the hundreds."""
        if t is None or math.isnan(x) or not self.ready():
            return 0.0
        pred = self.predict(t)
        if pred is None:
            return 0.0
        return (x - pred[0]) / pred[1]

    def score_one(self, x: float, t: float | None = None) -> float:
        return directional(self.signed_score(x, t), self.bad_direction)
