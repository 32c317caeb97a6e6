"""KPI series watched end to end: ensemble score → calibrated alarm transitions.

:class:`SeriesMonitor` watches one series; :class:`MonitorBank` watches all of a network's
series at once on the compiled bank (the pipeline's path) with the same events. Values backed
by too few events (``support < min_support``) and gaps are neither learnt nor scored: a ratio
of tiny counts is noise, and a missing sample is not a zero.

A bank takes a tick's values as :class:`Observation` objects, or as :class:`Columns` (arrays,
a row per series: the pipeline's path, with no object per value), where each row sits in
the banks kept from tick to tick (:class:`Slots`).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import KW_ONLY, dataclass
from typing import Any, Literal, NamedTuple

import numpy as np
import numpy.typing as npt

from detectors import _monitor_kernel as _kernel
from detectors.bank import EnsembleBank
from detectors.count_bank import OPEN, CountGates
from detectors.counts import CountGate
from detectors.ensemble import MEMBERS, Ensemble
from detectors.robust_zscore import Direction

#: one bank per time zone (``Observation.tz``; None: the monitor's), keyed (None, None, zone):
#: each series keeps its own bad direction and resolution rule (``Observation.counts``) in
#: it (:meth:`EnsembleBank.set_rules`). A snapshot from before kept a bank per direction,
#: rule and zone, keyed by them; its series stay there, new ones go to the zone's bank.
_BankKey = tuple[Direction | None, bool | None, str | None]

__all__ = ["Columns", "MonitorBank", "MonitorEvent", "Observation", "SeriesMonitor", "Slots"]


@dataclass(frozen=True)
class MonitorEvent:
    """An alarm transition of one series, or ``update``: while it stays open, a score at
    least ``update_factor`` times the one last reported (the fault grew, or the first reading
    held only part of it: a PM period that began before the fault)."""

    kind: Literal["open", "update", "close"]
    ts: float
    score: float
    observed: float
    expected_low: float
    expected_high: float
    direction: Literal["up", "down", "both"]
    detector: str


@dataclass(eq=False)
class SeriesMonitor:
    """Score one KPI series with the label-free :class:`~detectors.ensemble.Ensemble` and raise /
    clear alarms within a false-alarm budget.

    ``target_rate`` is the budget of false alarms per series-day on stationary data; the bars
    follow from it and the scrape interval, which is inferred from ``ts`` (see
    :class:`~detectors.ensemble.Ensemble`). Nothing alarms in the first ``grace`` values (the
    level settles) and the warm-up after them: ``warmup`` scored values, or ``warmup_s``
    seconds of them (at least ``min_warmup``) when ``warmup`` is None. At 15–60 s scrapes the
    hour rules; at PM periods the counts do: 12 + 12 values are two hours at 5 min and six at
    15 min (30 + 30, the ensemble's defaults, were five and fifteen hours of blindness, and the
    first incidents of a 10-day run at 5 min went unseen); the pipeline shortens both to six
    at 60-min periods (:func:`detectors.params.monitor_settle`).
    ``min_effect`` (relative to the expected value) and ``min_abs_effect`` (in KPI units, e.g.
    ``0.02`` for a success ratio) set the smallest deviation worth a page. A peak beyond
    ``warmup_outlier`` × the iid bar during the warm-up is taken for an incident, not for a
    normal peak (a PFCP association lost or an NRF failing in the first hour must not blind the
    series for good), and with ``warmup_alarm`` (on) it pages: the point member's bar is that
    multiple of its iid bar until the tail fit exists, so a gross fault is seen in the first
    hour, and at a 60-min PM period in hours 6 to 12. ``grace_clip`` (off by default) clips
    the level's updates in the grace:
    at a 15-min PM period the grace is seven hours, and a fault in it, learnt as it comes,
    inflates the scale for days; but at 8 scales it made the roaming-PLMN success ratios (1.0
    but for the odd failure of a handful of registrations) page 50 times in 20 days at 900 s,
    so it stays off until it copes with such tails. ``score`` in events is the ensemble ratio
    (1 = at the bar). While the alarm is open, a value scoring at least ``update_factor`` times
    the last reported score is reported again (an ``update`` event): a fault that began late in
    a 5-min period shows a few percent of its size in the first reading, and the diagnosis
    must see the next one. ``tz`` (an IANA zone, daylight saving included) or ``utc_offset``
    (seconds east of UTC) is the network's wall clock, on which the ensemble's profiles place
    the time of day and the ``weekend`` days (Monday 0). ``spread_share`` and ``spread_alpha``
    switch on the ensemble's spread member (a series whose noise grows); it stays off here:
    on the tuning seeds 53–55 (21 days at 900 s, weekend 0.7) it caught no incident the
    others missed and raised 43 false alerts at 36 values against 40 without it (103 at 12
    values), see bench/detectors_notes.md.

    >>> mon = SeriesMonitor(bad_direction="down", warmup=100)
    >>> events = [mon.observe(60.0 * t, 0.99 + 0.001 * (t % 3)) for t in range(300)]
    >>> [e for e in events if e is not None]
    []
    >>> events = [mon.observe(60.0 * (300 + t), 0.9) for t in range(3)]
    >>> [(e.kind, e.direction) for e in events if e is not None]
    [('open', 'down')]
    >>> mon.firing
    True
    >>> [e.kind for e in [mon.observe(60.0 * 303, 0.5), mon.observe(60.0 * 304, 0.49)] if e]
    ['update']
    """

    detector_id = "ensemble"

    bad_direction: Literal["up", "down", "both"] = "both"
    min_support: float = 0.0
    _: KW_ONLY
    target_rate: float = 0.005
    min_effect: float = 0.01
    min_abs_effect: float = 0.0
    min_duration: int = 2
    clear_after: int = 4
    refractory: int = 0
    warmup: int | None = None
    warmup_s: float = 3600.0
    period: float = 86400.0
    shift_gate: float = 0.5
    shift_share: float = 0.5
    spread_share: float = 0.0
    spread_alpha: float = 1.0 / 12.0
    warmup_outlier: float = 4.0
    warmup_alarm: bool = True
    resolution_always: bool = False
    grace_clip: float = math.inf
    grace: int = 12
    min_warmup: int = 12
    update_factor: float = 2.0
    alpha: float = 0.02
    utc_offset: float = 0.0
    weekend: tuple[int, ...] = (5, 6)
    tz: str | None = None

    def __post_init__(self) -> None:
        self.weekend = tuple(self.weekend)
        self.ensemble_ = Ensemble(bad_direction=self.bad_direction, **self.ensemble_params())
        #: the score of the last open or update event (NaN while closed)
        self.reported_ = math.nan
        #: the count gate of a count series (made by its first count, see :meth:`observe`)
        self.counts_: CountGate | None = None

    def __setstate__(self, state: dict[str, Any]) -> None:
        """A snapshot from before the count gates restores with none."""
        state.setdefault("counts_", None)
        self.__dict__.update(state)

    def ensemble_params(self) -> dict[str, Any]:
        """The ensemble parameters this monitor sets (all but the bad direction)."""
        return {
            "target_rate": self.target_rate,
            "min_effect": self.min_effect,
            "min_abs_effect": self.min_abs_effect,
            "warmup": self.warmup,
            "warmup_s": self.warmup_s,
            "min_duration": self.min_duration,
            "clear_after": self.clear_after,
            "refractory": self.refractory,
            "period": self.period,
            "shift_gate": self.shift_gate,
            "shift_share": self.shift_share,
            "spread_share": self.spread_share,
            "spread_alpha": self.spread_alpha,
            "warmup_outlier": self.warmup_outlier,
            "warmup_alarm": self.warmup_alarm,
            "resolution_always": self.resolution_always,
            "grace_clip": self.grace_clip,
            "grace": self.grace,
            "min_warmup": self.min_warmup,
            "alpha": self.alpha,
            "utc_offset": self.utc_offset,
            "weekend": self.weekend,
            "tz": self.tz,
        }

    @property
    def firing(self) -> bool:
        """Whether the alarm is open and shown (not withheld by the count gate)."""
        gated = self.counts_ is not None and self.counts_.gated_
        return self.ensemble_.firing and not gated

    def observe(
        self,
        ts: float,
        value: float | None,
        support: float | None = None,
        hold: bool = False,
        proportion: bool = False,
        count_scale: float = 0.0,
        window_s: float = 0.0,
    ) -> MonitorEvent | None:
        """Feed one derived value; return an event when the alarm opens or closes. ``hold``
        and ``proportion``: see :meth:`~detectors.ensemble.Ensemble.update`. A count series
        (``value × count_scale`` events in a ``window_s`` window; ``count_scale`` 0: not one)
        shows its alarms through its :class:`~detectors.counts.CountGate`."""
        if not _usable(value, support, self.min_support):
            return None
        assert value is not None
        ens = self.ensemble_
        transition: Literal["open", "update", "close"] | None
        transition = ens.update(value, ts, support, hold, proportion)
        if transition == "open":
            self.reported_ = ens.score_
        elif transition == "close":
            self.reported_ = math.nan
        elif ens.firing and ens.score_ >= self.update_factor * self.reported_:
            self.reported_ = ens.score_
            transition = "update"
        if count_scale > 0.0:
            if self.counts_ is None:
                self.counts_ = CountGate(self.target_rate)
            count = value * count_scale
            transition = self.counts_.step(ts, count, window_s, transition, ens.firing)
            if transition == "open":
                self.reported_ = ens.score_
        if transition is None:
            return None
        return _event(transition, ts, value, ens.score_, ens.expected_, ens.scale_, ens.bars_[0],
                      ens.ratios_)  # fmt: skip


def _usable(value: float | None, support: float | None, min_support: float) -> bool:
    """Whether a value is learnt and scored: not a gap, and backed by ``min_support`` events
    when its support is known."""
    if value is None or math.isnan(value):
        return False
    return support is None or support >= min_support


def _event(
    kind: Literal["open", "update", "close"],
    ts: float,
    value: float,
    score: float,
    mid: float,
    scale: float,
    bar: float,
    ratios: Sequence[float],
) -> MonitorEvent:
    """The event of an alarm transition: the expected band is the point member's bar."""
    k = bar if math.isfinite(bar) else 0.0
    member = max(range(len(ratios)), key=lambda i: ratios[i])
    return MonitorEvent(
        kind=kind,
        ts=ts,
        score=score,
        observed=value,
        expected_low=mid - k * scale,
        expected_high=mid + k * scale,
        direction="up" if value > mid else "down",
        detector=f"{SeriesMonitor.detector_id}:{MEMBERS[member]}",
    )


class Observation(NamedTuple):
    """One derived value for :meth:`MonitorBank.observe` (a named tuple: the pipeline makes
    one per KPI value, and a frozen dataclass cost more to make than its value to judge)."""

    key: Hashable
    value: float | None
    support: float | None = None
    bad_direction: Direction = "both"
    min_support: float = 0.0
    #: the value counts events (a counter's increase or rate): see
    #: :attr:`~detectors.params.EnsembleParams.resolution_always`
    counts: bool = False
    #: another series of the same entity is alarming: keep this value's peak out of the
    #: tails (:meth:`~detectors.ensemble.Ensemble.update`)
    hold: bool = False
    #: the value is a share of ``support`` events (a success or failure ratio), declared:
    #: see :meth:`~detectors.ensemble.Ensemble.update`
    proportion: bool = False
    #: the time of the value when it is not the tick's (an entity scraped at its own phase:
    #: its latest scrape, which the KPI windows end at)
    ts: float | None = None
    #: the IANA time zone of the entity's site where it is not the network's (the monitor's
    #: ``tz``): its traffic follows that wall clock
    tz: str | None = None
    #: the value times this is a number of events (the KPI window in s for a counter's
    #: ``rate``, 1 for its ``increase``); 0: not a count. A count series' alarms pass its
    #: :class:`~detectors.counts.CountGate` (a sparse counter's single events do not page)
    count_scale: float = 0.0
    #: the window (s) the count is over (consecutive windows overlap at fast scrapes)
    window_s: float = 0.0


class Columns(NamedTuple):
    """A tick's values for :meth:`MonitorBank.observe_columns`, a row per series: the fields
    of :class:`Observation` as arrays of one length (a caller with many series makes no
    object per value). ``value`` NaN: no value; ``support`` counts where ``has_support``;
    ``ts``: each value's time (the tick's where it has none of its own)."""

    keys: Sequence[Hashable]
    value: npt.NDArray[np.float64]
    support: npt.NDArray[np.float64]
    has_support: npt.NDArray[np.bool_]
    direction: Sequence[Direction]
    min_support: npt.NDArray[np.float64]
    counts: npt.NDArray[np.bool_]
    hold: npt.NDArray[np.bool_]
    proportion: npt.NDArray[np.bool_]
    ts: npt.NDArray[np.float64]
    tz: Sequence[str | None]
    count_scale: npt.NDArray[np.float64]
    window_s: npt.NDArray[np.float64]


@dataclass(eq=False)
class Slots:
    """Where each row of :class:`Columns` sits in ``owner``'s banks (which bank, in their
    order of creation, and which series of it; bank -1: not yet seen with a value), and
    the row of its count gate (-1: none yet)."""

    owner: MonitorBank
    bank: npt.NDArray[np.int64]
    index: npt.NDArray[np.int64]
    gate: npt.NDArray[np.int64]


#: a count gate's transition code (:mod:`detectors.count_bank`) as the event kind
_SHOWN: tuple[Literal["open", "update", "close"] | None, ...] = (None, "open", "update", "close")


class MonitorBank:
    """Many :class:`SeriesMonitor` at once, on compiled :class:`~detectors.bank.EnsembleBank`
    steps: the same events as one monitor per key (tested), at bank speed.

    Keys are added as they first appear (one bank per time zone, grown by doubling: one
    compiled step a zone and tick). ``monitor_kwargs`` are :class:`SeriesMonitor`'s keyword
    parameters; each observation brings its own bad direction, minimum support, whether it
    counts events and, for a site in another time zone, its zone; a series keeps the
    direction and resolution rule it first came with in its bank. All values of one
    :meth:`observe` share its timestamp (one evaluation tick).

    >>> bank = MonitorBank(warmup=100)
    >>> for t in range(300):
    ...     out = bank.observe(60.0 * t, [Observation("ok", 0.99 + 0.001 * (t % 3), None, "down")])
    >>> [e.kind for _, e in bank.observe(18000.0, [Observation("ok", 0.5, None, "down")])]
    []
    >>> [(k, e.kind, e.direction) for k, e in bank.observe(18060.0, [Observation("ok", 0.5)])]
    [('ok', 'open', 'down')]
    >>> bank.firing("ok")
    True
    """

    def __init__(self, **monitor_kwargs: Any) -> None:
        proto = SeriesMonitor(**monitor_kwargs)
        self._params = proto.ensemble_params()
        self._update_factor = proto.update_factor
        self._banks: dict[_BankKey, EnsembleBank] = {}
        #: per bank, the score of each series' last open or update event (NaN while closed)
        self._reported: dict[_BankKey, npt.NDArray[np.float64]] = {}
        self._slots: dict[Hashable, tuple[_BankKey, int]] = {}
        self._used: dict[_BankKey, int] = {}
        self._keys: dict[_BankKey, list[Hashable]] = {}
        self._target_rate = float(self._params["target_rate"])
        #: the count gate of each count series (``Observation.count_scale``), as arrays
        self._gates = CountGates(self._target_rate)

    def __setstate__(self, state: dict[str, Any]) -> None:
        """A snapshot from before the count gates restores with none, and one that kept a
        :class:`CountGate` per key with them as arrays (:meth:`CountGates.of`)."""
        state.setdefault("_target_rate", float(state["_params"]["target_rate"]))
        gates = state.get("_gates", {})
        if not isinstance(gates, CountGates):
            state["_gates"] = CountGates.of(gates, state["_target_rate"])
        self.__dict__.update(state)

    def __len__(self) -> int:
        return len(self._slots)

    def __contains__(self, key: object) -> bool:
        return key in self._slots

    def firing(self, key: Hashable) -> bool:
        """Whether ``key``'s alarm is open."""
        which, i = self._slots[key]
        return bool(self._banks[which].firing_[i]) and not self._gates.gated(key)

    def firing_keys(self) -> list[Hashable]:
        """The keys whose alarm is open (and shown: not withheld by a count gate)."""
        out: list[Hashable] = []
        for which, keys in self._keys.items():
            firing = self._banks[which].firing_
            out.extend(keys[i] for i in np.flatnonzero(firing[: len(keys)]).tolist())
        gated = self._gates.gated
        return [k for k in out if not gated(k)]

    def _bank(self, which: _BankKey, room: int) -> EnsembleBank:
        """Bank ``which`` (made if new), with room for ``room`` more series: grown at once
        to what a tick's new series need, by a quarter of its size at least (a large bank
        doubled for a few new series would take twice the memory it needs)."""
        bank = self._banks.get(which)
        if bank is None:
            params = dict(self._params)
            if which[2] is not None:
                params["tz"] = which[2]
            size = max(8, room)
            bank = self._banks[which] = EnsembleBank(size, **params)
            self._reported[which] = np.full(size, np.nan)
            return bank
        short = self._used.get(which, 0) + room - bank.n_series
        if short > 0:
            extra = max(short, bank.n_series // 4, 8)
            self._reported[which] = np.concatenate([self._reported[which], np.full(extra, np.nan)])
            bank.extend(extra, self._params["warmup"])
        return bank

    def _slot(self, key: Hashable, tz: str | None) -> tuple[_BankKey, int, bool]:
        """Where ``key`` sits: its bank, series, and whether the slot is new (its rule to be
        set: :meth:`EnsembleBank.set_rules`). A new key's bank has room for it
        (:meth:`_new_slots` grew it)."""
        found = self._slots.get(key)
        if found is not None:
            return (*found, False)
        which: _BankKey = (None, None, tz)
        used = self._used.get(which, 0)
        self._used[which] = used + 1
        self._slots[key] = (which, used)
        self._keys.setdefault(which, []).append(key)
        return which, used, True

    def _new_slots(self, cols: Columns, fresh: list[int], slots: Slots) -> None:
        """Slots for the rows ``fresh`` of ``cols`` (first seen with a value in these
        columns): each bank grown once for the tick's new keys, the new series' rules set
        together."""
        new: dict[_BankKey, set[Hashable]] = {}
        for r in fresh:
            if cols.keys[r] not in self._slots:
                new.setdefault((None, None, cols.tz[r]), set()).add(cols.keys[r])
        for which, keys in new.items():
            self._bank(which, len(keys))
        made: list[_BankKey] = []
        rules: dict[_BankKey, tuple[list[int], list[Direction], list[bool]]] = {}
        always = bool(self._params["resolution_always"])
        for r in fresh:
            which, i, is_new = self._slot(cols.keys[r], cols.tz[r])
            slots.index[r] = i
            made.append(which)
            if is_new:  # a monitor-wide ``resolution_always`` holds for every series
                idx, dirs, res = rules.setdefault(which, ([], [], []))
                idx.append(i)
                dirs.append(cols.direction[r])
                res.append(bool(cols.counts[r]) or always)
        for which, (idx, dirs, res) in rules.items():
            self._banks[which].set_rules(idx, dirs, res)
        ordinal = {which: n for n, which in enumerate(self._banks)}
        slots.bank[fresh] = [ordinal[which] for which in made]

    def slots(self, rows: int) -> Slots:
        """Room for where ``rows`` rows of :class:`Columns` sit in this monitor's banks."""
        return Slots(
            self, np.full(rows, -1, np.int64), np.zeros(rows, np.int64), np.full(rows, -1, np.int64)
        )

    def observe(
        self, ts: float, observations: Sequence[Observation]
    ) -> list[tuple[Hashable, MonitorEvent]]:
        """Feed one tick of values; return the alarm transitions, in ``observations`` order.
        A missing value, or one backed by fewer than ``min_support`` events, is neither learnt
        nor scored. A key keeps the bad direction (and time zone) it first came with."""
        obs = observations

        def floats(xs: Sequence[float | None]) -> npt.NDArray[np.float64]:
            return np.array([math.nan if x is None else x for x in xs], np.float64)

        def flags(xs: Sequence[bool]) -> npt.NDArray[np.bool_]:
            return np.array(xs, np.bool_)

        cols = Columns(
            keys=[ob.key for ob in obs],
            value=floats([ob.value for ob in obs]),
            support=floats([ob.support for ob in obs]),
            has_support=flags([ob.support is not None for ob in obs]),
            direction=[ob.bad_direction for ob in obs],
            min_support=floats([ob.min_support for ob in obs]),
            counts=flags([ob.counts for ob in obs]),
            hold=flags([ob.hold for ob in obs]),
            proportion=flags([ob.proportion for ob in obs]),
            ts=floats([ts if ob.ts is None else ob.ts for ob in obs]),
            tz=[ob.tz for ob in obs],
            count_scale=floats([ob.count_scale for ob in obs]),
            window_s=floats([ob.window_s for ob in obs]),
        )
        return [(obs[row].key, ev) for row, ev in self.observe_columns(ts, cols)]

    def observe_columns(
        self, ts: float, cols: Columns, slots: Slots | None = None
    ) -> list[tuple[int, MonitorEvent]]:
        """:meth:`observe` of a tick's values as columns: the alarm transitions as (row,
        event), in row order. ``slots`` (from :meth:`slots`) keeps where each row's key sits
        from one tick to the next, for a caller whose rows stay the same."""
        if slots is None or slots.owner is not self or len(slots.bank) != len(cols.value):
            slots = self.slots(len(cols.value))
        rows = np.empty(len(cols.value), np.int64)
        n, fresh = _kernel.usable(
            cols.value, cols.support, cols.has_support, cols.min_support, slots.bank, rows
        )
        rows = rows[:n]
        if fresh:
            self._new_slots(cols, rows[slots.bank[rows] < 0].tolist(), slots)
        names = list(self._banks)
        events: list[tuple[int, MonitorEvent]] = []
        for b, name in enumerate(names):
            sel = rows if len(names) == 1 else rows[slots.bank[rows] == b]
            if len(sel):
                events += self._step_bank(name, ts, cols, sel, slots)
        events.sort(key=lambda e: e[0])
        return events

    def _step_bank(
        self, which: _BankKey, ts: float, cols: Columns, sel: npt.NDArray[np.int64], slots: Slots
    ) -> list[tuple[int, MonitorEvent]]:
        """One step of bank ``which`` on rows ``sel`` of a tick (compiled passes around the
        step, :mod:`detectors._monitor_kernel`): its alarm transitions, each count series'
        judged by its gate."""
        bank = self._banks[which]
        n = bank.n_series
        idx = slots.index[sel]
        x, sup, t = np.empty(n), np.empty(n), np.empty(n)
        hold, prop = np.empty(n, np.bool_), np.empty(n, np.bool_)
        any_hold, any_prop, off = _kernel.scatter(
            sel, idx, cols.value, cols.support, cols.has_support, cols.hold, cols.proportion,
            cols.ts, ts, x, sup, hold, prop, t,
        )  # fmt: skip
        score, opened, closed = bank.step(
            x, t if off else ts, sup, hold if any_hold else None, prop if any_prop else None
        )
        reported = self._reported[which]
        m = len(sel)
        code, g, gate = np.empty(m, np.int8), np.empty(m, np.int64), np.empty(m, np.int64)
        g_t, g_count, g_window = np.empty(m), np.empty(m), np.empty(m)
        g_code, g_firing = np.empty(m, np.int8), np.empty(m, np.bool_)
        counted, missing = _kernel.after_step(
            score, opened, closed, bank.firing_, reported, self._update_factor, sel, idx,
            (cols.value, cols.ts, cols.count_scale, cols.window_s), slots.gate, code, g, gate,
            g_t, g_count, g_window, g_code, g_firing,
        )  # fmt: skip
        if counted:  # each count series' gate judges its transition, then learns
            g, gate = g[:counted], gate[:counted]
            if missing:  # a gate made for a key met the first time, kept in the slots
                new = sel[g[gate < 0]]
                gate[gate < 0] = slots.gate[new] = self._gates.rows([cols.keys[r] for r in new])
            gated = self._gates.step(
                gate, g_t[:counted], g_count[:counted], g_window[:counted], g_code[:counted],
                g_firing[:counted],
            )  # fmt: skip
            code[g] = gated
            opening = idx[g[gated == OPEN]]
            reported[opening] = score[opening]
        events: list[tuple[int, MonitorEvent]] = []
        for j in np.flatnonzero(code).tolist():
            r, i = int(sel[j]), int(idx[j])
            kind = _SHOWN[code[j]]
            assert kind is not None
            v, at = float(cols.value[r]), float(cols.ts[r])
            events.append((r, self._event(which, i, kind, at, v, score)))
        return events

    def _event(
        self,
        which: _BankKey,
        i: int,
        kind: Literal["open", "update", "close"],
        at: float,
        value: float,
        score: npt.NDArray[np.float64],
    ) -> MonitorEvent:
        """The event of series ``i`` of bank ``which`` from the bank's detail of this step."""
        d = self._banks[which].detail_
        return _event(kind, at, value, float(score[i]), float(d[i, 0]), float(d[i, 1]),
                      float(d[i, 2]), (float(d[i, 3]), float(d[i, 4])))  # fmt: skip
