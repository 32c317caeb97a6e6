"""NAB v1.1: scoring (three profiles, null = 0, perfect = 100) and a run; the corpus is read
by :mod:`evals.nab_corpus` (:func:`load_corpus`, :class:`NabSeries`, re-exported here).

Scoring follows the Numenta Anomaly Benchmark v1.1 rules (``nab/sweeper.py``), re-implemented:

- each file's first ``min(floor(0.15·n), 750)`` rows are a probation period and are not scored;
- a detection is a row whose alarm is 1. Inside a labelled window the *best* (earliest)
  detection counts once, worth ``A_TP · σ(pos) / σ(−1)`` with
  ``σ(x) = 2 / (1 + e^{5x}) − 1`` and ``pos = −(right − i + 1) / width`` (so ``1`` at the left
  edge); a window without detection costs ``A_FN``;
- a detection outside every window costs ``A_FP · σ(d)`` (``σ`` negative there), where ``d`` is
  the distance past the preceding window's right edge in units of that window's width − 1
  (``d = 3``, i.e. a full ``A_FP``, before the first window);
- per profile the raw corpus score is normalised to ``100 · (raw − null) / (perfect − null)``,
  where the null detector never fires (``−A_FN`` per window) and the perfect one fires at the
  first scored row of each window.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from evals.nab_corpus import NabSeries, load_corpus

__all__ = [
    "NAB_MIN_DURATION",
    "NAB_REFRACTORY_S",
    "NAB_TARGET_RATE",
    "PROFILES",
    "NabSeries",
    "Profile",
    "SeriesScore",
    "days_scored",
    "detect",
    "governed_alarms",
    "load_corpus",
    "normalised_score",
    "probation_length",
    "run_bank",
    "score_series",
    "write_scores",
]

F64 = NDArray[np.float64]
Bool = NDArray[np.bool_]


@dataclass(frozen=True)
class Profile:
    """NAB cost weights (magnitudes: ``A_FP`` and ``A_FN`` are costs)."""

    name: str
    tp: float
    fp: float
    fn: float


PROFILES = {
    "standard": Profile("standard", 1.0, 0.11, 1.0),
    "reward_low_FP_rate": Profile("reward_low_FP_rate", 1.0, 0.22, 1.0),
    "reward_low_FN_rate": Profile("reward_low_FN_rate", 1.0, 0.11, 2.0),
}
_REPORT_KEYS = {
    "standard": "nab_score_standard",
    "reward_low_FP_rate": "nab_score_low_fp",
    "reward_low_FN_rate": "nab_score_low_fn",
}


def _stamp(seconds: float) -> str:
    """NAB's way of writing a window edge (UTC).

    >>> _stamp(1396310700.0)
    '2014-04-01 00:05:00'
    """
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%S")


def probation_length(n: int) -> int:
    """Rows of NAB's probation period for a file of ``n`` rows."""
    return int(min(math.floor(0.15 * n), 0.15 * 5000))


def _sigma(pos: F64) -> F64:
    return np.where(pos >= 3.0, -1.0, 2.0 / (1.0 + np.exp(np.minimum(5.0 * pos, 700.0))) - 1.0)


@dataclass(frozen=True)
class SeriesScore:
    """NAB bookkeeping of one series under one profile."""

    raw: float
    null: float
    perfect: float
    windows: int
    windows_detected: int
    false_alarms: int
    scored_days: float
    missed: tuple[int, ...] = ()
    """Indices (into the series' windows) of the scored windows with no alarm."""


def score_series(
    timestamps: F64, alarms: Bool, windows: Sequence[tuple[float, float]], profile: Profile
) -> SeriesScore:
    """Score the alarm rows of one series against its windows (see module docstring).

    >>> ts = np.arange(100.0)
    >>> alarms = np.zeros(100, bool)
    >>> alarms[40] = True                         # at the left edge of [40, 49]
    >>> s = score_series(ts, alarms, [(40.0, 49.0)], PROFILES["standard"])
    >>> round(s.raw, 6), s.null, s.perfect
    (1.0, -1.0, 1.0)
    """
    n = len(timestamps)
    prob = probation_length(n)
    timestamps = np.maximum.accumulate(timestamps)  # tolerate a repeated hour (see loader)
    edges = []
    where = []
    for at, (start, end) in enumerate(windows):
        left = int(np.searchsorted(timestamps, start, "left"))
        right = int(np.searchsorted(timestamps, end, "right")) - 1
        if left <= right:
            edges.append((left, right))
            where.append(at)
    max_tp = float(_sigma(np.array([-1.0]))[0])
    idx = np.flatnonzero(alarms)
    idx = idx[idx >= prob]
    in_window = np.zeros(len(idx), np.bool_)
    raw = null = perfect = 0.0
    n_windows = detected = 0
    missed = []
    for at, (left, right) in zip(where, edges, strict=True):
        width = right - left + 1
        if right < prob:
            continue
        n_windows += 1
        null -= profile.fn
        first = max(left, prob)
        perfect += profile.tp * float(_sigma(np.array([-(right - first + 1) / width]))[0]) / max_tp
        inside = (idx >= left) & (idx <= right)
        in_window |= inside
        if inside.any():
            detected += 1
            i = int(idx[inside][0])
            raw += profile.tp * float(_sigma(np.array([-(right - i + 1) / width]))[0]) / max_tp
        else:
            raw -= profile.fn
            missed.append(at)
    fps = idx[~in_window]
    if len(fps):
        rights = np.array([r for _, r in edges], np.int64)
        widths = np.array([r - lft + 1 for lft, r in edges], np.float64)
        k = np.searchsorted(rights, fps, "left") - 1  # last window ending before the alarm
        pos = np.full(len(fps), 3.0)
        has = k >= 0
        pos[has] = np.abs(rights[k[has]] - fps[has]) / np.maximum(widths[k[has]] - 1.0, 1.0)
        raw += float(np.sum(profile.fp * _sigma(pos)))
    days = (timestamps[-1] - timestamps[min(prob, n - 1)]) / 86400.0
    return SeriesScore(
        raw, null, perfect, n_windows, detected, len(fps), float(days), tuple(missed)
    )


def normalised_score(scores: Sequence[SeriesScore]) -> float:
    """``100 · (raw − null) / (perfect − null)`` over a corpus (0 when there are no windows)."""
    raw = sum(s.raw for s in scores)
    null = sum(s.null for s in scores)
    perfect = sum(s.perfect for s in scores)
    if perfect - null <= 0:
        return 0.0
    return 100.0 * (raw - null) / (perfect - null)


#: NAB's false-alarm budget per series-day, fixed a priori (the brief's operating target of
#: ≤ 0.1 false alarms per series-day), not fitted to the NAB labels.
NAB_TARGET_RATE = 0.1

#: NAB's alarm policy: an alarm opens on the first score at the bar (``min_duration`` 1) and
#: no further alarm is raised for ``NAB_REFRACTORY_S`` after it (NAB credits only the first
#: detection of a window and charges every later one). Chosen by leave-one-category-out
#: cross-validation over ``min_duration ∈ {1, 2}`` × refractory ``∈ {0, 6, 12, 24, 48} h``
#: (bench/bench_detectors.py reports the cross-validated score, where each category is scored
#: with the knobs chosen on the other six); every fold chose ``min_duration`` 1 and 12 h
#: (with the governor's allowance in the grid; 6 h before it).
NAB_MIN_DURATION = 1
NAB_REFRACTORY_S = 12 * 3600.0

#: The alarm-rate governor (:func:`governed_alarms`): once a series has raised more than
#: ``GOVERNOR_SLACK + GOVERNOR_EXCESS × budget × days`` alarms, its bar is multiplied by
#: ``NAB_GOVERNOR`` at each further alarm (1.0 switches it off). The slack is fixed a priori
#: (three free alarms); the allowance (in budgets, over ``{1, 2, 5}``) and the factor (over
#: ``{1, 1.25, 1.5, 2}``) are policy knobs chosen like the two above: in the joint grid six of
#: seven folds chose an allowance of one budget (a series may page at its budget's pace, no
#: faster) and 1.25; on this module's bank parameters five chose one budget, two chose two,
#: all 1.25 (until 2026-12-02 the allowance was fixed at five budgets and the folds chose 2:
#: a loose allowance wanted a steep factor).
GOVERNOR_SLACK = 3
GOVERNOR_EXCESS = 1.0
NAB_GOVERNOR = 1.25

#: The bank's POT start (peaks over ``z = 3`` instead of 2 feed the tail fit) and smallest
#: deviation worth an alarm (3 % of the expected value instead of 1 %) on NAB. Chosen, with the
#: policy knobs, by leave-one-category-out cross-validation over start ``∈ {2, 3, 3.5, 4}`` ×
#: effect ``∈ {0.01, 0.03, 0.05}`` × shift share ``∈ {0.5, 0.7}`` (bench/bench_detectors.py;
#: the headline is that cross-validated score): six of seven folds chose start 3 and effect
#: 0.03 on 2026-12-01. Since the governor's allowance joined the grid, five folds choose start
#: 3.5, effect 0.01 and share 0.7; those lift NAB's full corpus (69.1 → 70.9, labels seen)
#: but cost the synthetic KPI corpora 4–6 points where the level grows (bench/kpi_results.md),
#: and with these values kept, the policy alone cross-validates higher (67.6 against the
#: joint grid's 66.9), so they stay. The NOC defaults of
#: :class:`~detectors.ensemble.Ensemble` stay as they are (2 and 0.01): a success ratio at
#: 0.995 must page on a 2-point drop.
NAB_TAIL_START = 3.0
NAB_MIN_EFFECT = 0.03

#: The spread member on NAB (``EnsembleParams.spread_share``, off in the NOC): a tenth of the
#: budget for a series whose noise grows, its short EWMA over 36 values (3 h at 5 min).
#: Chosen like the knobs above, over off or 10 / 20 % × 12 / 36 values
#: (``bench_detectors.CV_SPREAD``): on the bank parameters above every fold chose 10 % and 36
#: values; NAB's full corpus 69.1 → 72.2 (labels seen) and the synthetic KPI corpora, not
#: used to choose, 87.3 / 86.4 / 78.9 → 88.8 / 86.3 / 79.2 (bench/kpi_results.md).
NAB_SPREAD_SHARE = 0.1
NAB_SPREAD_ALPHA = 1.0 / 36.0

#: Whether an upward crossing of the bar opens an alarm even while the bank's alerter still
#: holds the last one open (its hysteresis keeps one alarm per episode, as a NOC wants; NAB
#: scores each window's first detection, so a new episode must be able to page once the
#: refractory period is over). A policy knob cross-validated like the ones above.
NAB_CROSS = True


def days_scored(s: NabSeries) -> F64:
    """Per row, the days since the end of the probation period (0 inside it)."""
    k = len(s.timestamps)
    start = min(probation_length(k), k - 1)
    out: F64 = np.maximum(s.timestamps - s.timestamps[start], 0.0) / 86400.0
    return out


def governed_alarms(
    ratio: F64,
    opened: Bool,
    days: F64,
    refractory: float,
    factor: float,
    cross: bool = False,
    budget: float = NAB_TARGET_RATE,
    slack: int = GOVERNOR_SLACK,
    excess: float = GOVERNOR_EXCESS,
    t: F64 | None = None,
) -> Bool:
    """Alarm openings under a refractory period and an alarm-rate governor.

    ``ratio`` is the ensemble score over its bar, ``opened`` the bank's alarm openings and
    ``days`` the time since scoring began (per row). An opening is kept when more than
    ``refractory`` passed since the last kept alarm (in the units of the timestamps ``t``, in
    rows without them: NAB files are irregular, so the period is measured on the clock, not
    in rows of the smallest step) and the ratio is at least the
    series' multiplier ``m`` (1 at first). A series that pages far beyond its budget (more than
    ``slack + excess × budget × days`` kept alarms) has a tail the bar's model underestimates
    (bursty counts, a drifting level): each further alarm then multiplies ``m`` by ``factor``,
    and once ``m > 1`` an upward crossing of ``m`` also opens an alarm (with ``cross``, any
    upward crossing does). Label-free: it sees the scores and the budget only. ``factor = 1``
    without ``cross`` is a plain refractory period over the bank's openings:

    >>> o = np.array([1, 0, 1, 0, 0, 1, 1], bool)
    >>> governed_alarms(o.astype(float), o, np.zeros(7), 3, 1.0).astype(int).tolist()
    [1, 0, 0, 0, 0, 1, 0]
    >>> r = np.array([0, 2, 0, 2, 0, 2, 0, 2, 0, 2, 0, 3.5, 0], float)
    >>> d = np.zeros(13)
    >>> governed_alarms(r, r >= 1, d, 0, 1.0).astype(int).tolist()
    [0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0]
    >>> governed_alarms(r, r >= 1, d, 0, 1.5, slack=2).astype(int).tolist()  # m: 1.5, 2.25
    [0, 1, 0, 1, 0, 1, 0, 1, 0, 0, 0, 1, 0]
    """
    out = np.zeros(len(ratio), np.bool_)
    clock = np.arange(len(ratio), dtype=np.float64) if t is None else t
    m, kept, last = 1.0, 0, -math.inf
    for j in np.flatnonzero(ratio >= 1.0).tolist():
        if clock[j] - last <= refractory or ratio[j] < m:
            continue
        crossing = (cross or m > 1.0) and (j == 0 or ratio[j - 1] < m)
        if not (opened[j] or crossing):
            continue
        out[j] = True
        last = float(clock[j])
        kept += 1
        if factor > 1.0 and kept > slack + excess * budget * float(days[j]):
            m *= factor
    return out


def run_bank(corpus: Sequence[NabSeries], **params: Any) -> list[tuple[F64, Bool]]:
    """Run the label-free ensemble bank over all series at once.

    Returns per series the ensemble ratio ``r`` (1 at the rate-derived bar) and the bank's own
    alarm openings. The warm-up of each series' bars is NAB's probation period (known before
    scoring, not a label); the bars follow from a budget of ``target_rate`` (default
    :data:`NAB_TARGET_RATE`) false alarms per series-day and each file's own sampling
    interval. The shift member pages on its own here (``shift_gate`` 0, as before the gate
    existed: in NAB a level shift is itself an anomaly); the POT start and minimum effect are
    :data:`NAB_TAIL_START` and :data:`NAB_MIN_EFFECT`, the spread member
    :data:`NAB_SPREAD_SHARE` and :data:`NAB_SPREAD_ALPHA`, unless given.
    """
    from detectors.bank import EnsembleBank

    n = len(corpus)
    steps = max(len(s.values) for s in corpus)
    x = np.full((n, steps), np.nan)
    t = np.zeros((n, steps))
    for i, s in enumerate(corpus):
        x[i, : len(s.values)] = s.values
        t[i, : len(s.values)] = s.timestamps
    params = dict(params)
    params.setdefault("target_rate", NAB_TARGET_RATE)
    params.setdefault("min_duration", NAB_MIN_DURATION)
    params.setdefault("shift_gate", 0.0)
    params.setdefault("tail_start", NAB_TAIL_START)
    params.setdefault("min_effect", NAB_MIN_EFFECT)
    params.setdefault("spread_share", NAB_SPREAD_SHARE)
    params.setdefault("spread_alpha", NAB_SPREAD_ALPHA)
    warmup = [max(probation_length(len(s.values)) - params.get("grace", 30), 50) for s in corpus]
    bank = EnsembleBank(n, warmup=params.pop("warmup", warmup), **params)
    res = bank.run(x, t)
    return [
        (res.score[i, : len(s.values)].astype(np.float64), res.opened[i, : len(s.values)])
        for i, s in enumerate(corpus)
    ]


def detect(
    corpus: Sequence[NabSeries],
    refractory_s: float = NAB_REFRACTORY_S,
    governor: float = NAB_GOVERNOR,
    cross: bool = NAB_CROSS,
    excess: float = GOVERNOR_EXCESS,
    **params: Any,
) -> list[tuple[F64, Bool]]:
    """:func:`run_bank` under the NAB alarm policy.

    Returns per series ``(score in [0, 1], alarm)``: ``score = r / (1 + r)`` of the ensemble
    ratio ``r`` (0.5 at the rate-derived bar) and ``alarm`` 1 at each alarm opening that
    comes more than ``refractory_s`` after the previous alarm, under the alarm-rate governor
    ``governor`` (:func:`governed_alarms`; 1 switches it off), which acts once a series has
    raised more than ``GOVERNOR_SLACK + excess × budget × days`` alarms; with ``cross`` every
    upward crossing of the bar may open an alarm. ``params`` go to :func:`run_bank`.
    """
    rate = float(params.get("target_rate", NAB_TARGET_RATE))
    out = []
    for s, (r, opened) in zip(corpus, run_bank(corpus, **params), strict=True):
        alarms = governed_alarms(
            r,
            opened,
            days_scored(s),
            refractory_s,
            governor,
            cross,
            rate,
            excess=excess,
            t=s.timestamps,
        )
        out.append((r / (1.0 + r), alarms))
    return out


def write_scores(
    root: Path, corpus: Sequence[NabSeries], results: Sequence[tuple[F64, Bool]]
) -> None:
    """Write ``root/<name>`` CSVs with ``timestamp,value,score,alarm`` (FORMATS §5)."""
    for s, (score, alarm) in zip(corpus, results, strict=True):
        path = root / s.name
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh)
            w.writerow(["timestamp", "value", "score", "alarm"])
            for ts, val, sc, al in zip(s.raw_timestamps, s.raw_values, score, alarm, strict=True):
                w.writerow([ts, val, f"{sc:.6f}", int(al)])


def report(corpus: Sequence[NabSeries], results: Sequence[tuple[F64, Bool]]) -> dict[str, Any]:
    """FORMATS §5 keys for ``noc eval nab`` plus per-category and per-series breakdowns (a
    file's windows, detections, false alarms and the windows it missed, by their edges)."""
    out: dict[str, Any] = {}
    per_cat: dict[str, dict[str, Any]] = {}
    for pname, profile in PROFILES.items():
        scores = [
            score_series(s.timestamps, alarm, s.windows, profile)
            for s, (_, alarm) in zip(corpus, results, strict=True)
        ]
        out[_REPORT_KEYS[pname]] = normalised_score(scores)
        cats: dict[str, list[SeriesScore]] = {}
        for s, sc in zip(corpus, scores, strict=True):
            cats.setdefault(s.category, []).append(sc)
        for cat, group in cats.items():
            entry = per_cat.setdefault(cat, {"series": len(group)})
            entry[_REPORT_KEYS[pname]] = normalised_score(group)
            if pname == "standard":
                entry["windows_detected"] = sum(g.windows_detected for g in group)
                entry["windows_total"] = sum(g.windows for g in group)
                entry["false_alarms"] = sum(g.false_alarms for g in group)
        if pname == "standard":
            out["per_series"] = {
                s.name: {
                    "windows_total": sc.windows,
                    "windows_detected": sc.windows_detected,
                    "false_alarms": sc.false_alarms,
                    "missed_windows": [[_stamp(v) for v in s.windows[k]] for k in sc.missed],
                }
                for s, sc in zip(corpus, scores, strict=True)
            }
            out["windows_detected"] = sum(s.windows_detected for s in scores)
            out["windows_total"] = sum(s.windows for s in scores)
            days = sum(s.scored_days for s in scores)
            out["false_alarms"] = sum(s.false_alarms for s in scores)
            out["false_alarms_per_series_day"] = out["false_alarms"] / days if days > 0 else 0.0
            out["series_days_scored"] = days
    out["threshold_source"] = "label_free"
    out["series"] = len(corpus)
    out["per_category"] = per_cat
    return out
