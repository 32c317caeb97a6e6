"""NAB scorer on hand-made cases with known scores; loader bad input; the CLI end to end."""

from __future__ import annotations

import csv
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from evals import nab
from evals.nab_run import evaluate
from noc_assistant.cli import run as cli_run
from noc_assistant.errors import BadInputError

T0 = datetime(2020, 1, 1, tzinfo=UTC)


def _ts(i: int) -> str:
    return (T0 + timedelta(minutes=5 * i)).strftime("%Y-%m-%d %H:%M:%S")


def _corpus(tmp: Path, n: int = 2000, windows: tuple[tuple[int, int], ...] = ((800, 900),)) -> Path:
    rng = np.random.default_rng(1)
    (tmp / "data" / "cat").mkdir(parents=True)
    (tmp / "labels").mkdir()
    values = 10 + rng.normal(0, 1, n)
    for lo, hi in windows:
        values[(lo + hi) // 2 :] += 25
    with (tmp / "data" / "cat" / "s.csv").open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["timestamp", "value"])
        for i, v in enumerate(values):
            w.writerow([_ts(i), f"{v:.4f}"])
    labels = {"cat/s.csv": [[_ts(lo) + ".000000", _ts(hi) + ".000000"] for lo, hi in windows]}
    (tmp / "labels" / "combined_windows.json").write_text(json.dumps(labels))
    return tmp


WINDOWS = [(1000.0, 1099.0), (3000.0, 3199.0)]
TS = np.arange(5000.0)


def _score(alarm_idx: list[int], profile: str = "standard") -> float:
    alarms = np.zeros(len(TS), bool)
    alarms[alarm_idx] = True
    s = nab.score_series(TS, alarms, WINDOWS, nab.PROFILES[profile])
    return nab.normalised_score([s])


@pytest.mark.parametrize("profile", sorted(nab.PROFILES))
def test_perfect_null_and_everywhere(profile: str) -> None:
    assert _score([1000, 3000], profile) == pytest.approx(100.0)
    assert _score([], profile) == pytest.approx(0.0)
    assert _score(list(range(len(TS))), profile) < -500


def test_missed_windows_are_named() -> None:
    """Each series' score says which of its windows went without an alarm (by index)."""
    standard = nab.PROFILES["standard"]
    scored = lambda idx: nab.score_series(TS, np.isin(TS, idx), WINDOWS, standard)  # noqa: E731
    assert scored([1000, 3000]).missed == ()
    assert scored([]).missed == (0, 1)
    assert scored([3100]).missed == (0,) and scored([1050, 2000]).missed == (1,)


def test_late_detection_and_false_positive_values() -> None:
    # the middle of the window: σ(pos)/σ(−1) of the window credit
    mid = _score([1049, 3000])
    sig = lambda p: 2 / (1 + np.exp(5 * p)) - 1  # noqa: E731
    expected = 100 * (sig(-0.51) / sig(-1) + 1 + 2) / 4  # pos = -(1099 - 1049 + 1) / 100
    assert mid == pytest.approx(expected, rel=1e-9)
    # one false positive long before any window costs exactly A_FP
    fp = nab.score_series(
        TS, np.isin(np.arange(5000), [800, 1000, 3000]), WINDOWS, nab.PROFILES["standard"]
    )
    assert fp.raw == pytest.approx(2 - 0.11)
    # alarms inside the probation period (first 750 rows here) are ignored
    assert _score([10, 1000, 3000]) == pytest.approx(100.0)
    assert nab.probation_length(5000) == 750 and nab.probation_length(1000) == 150


def test_false_positive_right_after_a_window_is_cheaper() -> None:
    near = nab.score_series(TS, np.isin(TS, [1000, 1105]), WINDOWS, nab.PROFILES["standard"])
    far = nab.score_series(TS, np.isin(TS, [1000, 2500]), WINDOWS, nab.PROFILES["standard"])
    assert far.raw < near.raw < 0  # both cost, the later one more (window 2 is missed: −1)


@pytest.mark.parametrize(
    ("body", "line", "needle"),
    [
        ("time,value\n2020-01-01 00:00:00,1\n", 1, "header"),
        ("timestamp,value\n2020-01-01 00:00:00,1\n2020-01-01 00:05:00,abc\n", 3, "finite"),
        ("timestamp,value\n2020-01-02 00:00:00,1\n2020-01-01 00:05:00,2\n", 3, "out of order"),
        ("timestamp,value\n2020-01-01 00:00:00,1\n2020-01-01 00:05:00,inf\n", 3, "finite"),
        ("timestamp,value\n2020-01-01 00:00:00,1\nyesterday,2\n", 3, "epoch seconds"),
        ("timestamp,value\n2020-01-01 00:00:00,1\nnan,2\n", 3, "epoch seconds"),
    ],
)
def test_bad_input_names_file_and_line(tmp_path: Path, body: str, line: int, needle: str) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "labels").mkdir()
    (tmp_path / "data" / "x.csv").write_text(body)
    (tmp_path / "labels" / "combined_windows.json").write_text('{"x.csv": []}')
    with pytest.raises(BadInputError) as exc:
        nab.load_corpus(tmp_path)
    assert exc.value.line == line and exc.value.source and exc.value.source.endswith("x.csv")
    assert needle in str(exc.value)
    assert cli_run(["eval", "nab", "--data", str(tmp_path)]) == 2


def test_epoch_timestamps_and_missing_values_load(tmp_path: Path) -> None:
    """Public KPI series beyond NAB carry epoch seconds and leave values out: the same
    series written that way scores the same, and a missing value is a gap (NaN), not 0."""
    root = _corpus(tmp_path / "iso")
    (series,) = nab.load_corpus(root)
    epoch = tmp_path / "epoch"
    (epoch / "data" / "cat").mkdir(parents=True)
    (epoch / "labels").mkdir()
    (epoch / "labels" / "combined_windows.json").write_text(
        (root / "labels" / "combined_windows.json").read_text()
    )
    rows = [f"{t:.0f},{float(v)!r}" for t, v in zip(series.timestamps, series.values, strict=True)]
    rows[1500] = rows[1500].split(",")[0] + ","
    (epoch / "data" / "cat" / "s.csv").write_text("timestamp,value\n" + "\n".join(rows) + "\n")
    (again,) = nab.load_corpus(epoch)
    assert np.array_equal(again.timestamps, series.timestamps)
    assert np.isnan(again.values[1500]) and np.array_equal(
        again.values[:1500], series.values[:1500]
    )
    assert again.windows == series.windows
    a, b = evaluate(root), evaluate(epoch)
    assert b["windows_detected"] == a["windows_detected"] == 1


def test_cli_end_to_end(tmp_path: Path) -> None:
    root = _corpus(tmp_path / "nab")
    out, scores = tmp_path / "report.json", tmp_path / "scores"
    args = ["eval", "nab", "--data", str(root), "--out", str(out), "--scores-out", str(scores)]
    assert cli_run(args) == 0
    rep = json.loads(out.read_text())
    for key in (
        "nab_score_standard",
        "nab_score_low_fp",
        "nab_score_low_fn",
        "windows_detected",
        "windows_total",
        "false_alarms_per_series_day",
    ):
        assert isinstance(rep[key], int | float)
    assert rep["threshold_source"] == "label_free"
    assert rep["windows_total"] == 1 and rep["windows_detected"] == 1
    assert rep["per_series"]["cat/s.csv"]["windows_detected"] == 1
    assert rep["per_series"]["cat/s.csv"]["missed_windows"] == []
    # a labelled window where nothing happens is named in the report, as labelled
    labels = root / "labels" / "combined_windows.json"
    labels.write_text(
        json.dumps({"cat/s.csv": [[_ts(800), _ts(900)], [_ts(1500) + ".000000", _ts(1600)]]})
    )
    assert cli_run(["eval", "nab", "--data", str(root), "--out", str(out)]) == 0
    series = json.loads(out.read_text())["per_series"]["cat/s.csv"]
    assert series["windows_total"] == 2 and series["windows_detected"] == 1
    assert series["missed_windows"] == [[_ts(1500), _ts(1600)]]
    assert rep["nab_score_standard"] > 50
    rows = list(csv.DictReader((scores / "cat" / "s.csv").open()))
    assert list(rows[0]) == ["timestamp", "value", "score", "alarm"] and len(rows) == 2000
    assert all(0.0 <= float(r["score"]) <= 1.0 and r["alarm"] in {"0", "1"} for r in rows)
    zoned = tmp_path / "zoned.json"
    assert (
        cli_run(["eval", "nab", "--data", str(root), "--out", str(zoned), "--tz", "Asia/Tokyo"])
        == 0
    )
    assert json.loads(zoned.read_text())["windows_detected"] == 1
    assert cli_run(["eval", "nab", "--data", str(root), "--tz", "Asia/Tokio"]) == 2


def test_cli_budget_sets_the_bars_and_is_reported(tmp_path: Path) -> None:
    """``--budget`` is the false-alarm rate the bars are set for: a budget of 50 a day on a
    quiet series pages far more often than the default 0.1, and the report says which budget
    made it; a budget that is not a positive number exits 2."""
    root = _corpus(tmp_path / "nab", n=3000, windows=((800, 900), (1200, 1300)))
    reports = {}
    for name, extra in (("default", []), ("loose", ["--budget", "50"])):
        out = tmp_path / f"{name}.json"
        assert cli_run(["eval", "nab", "--data", str(root), "--out", str(out), *extra]) == 0
        reports[name] = json.loads(out.read_text())
    assert reports["default"]["false_alarm_budget_per_series_day"] == nab.NAB_TARGET_RATE
    assert reports["loose"]["false_alarm_budget_per_series_day"] == 50.0
    assert reports["loose"]["false_alarms"] > reports["default"]["false_alarms"]
    for bad in ("0", "-1", "nan", "inf"):
        assert cli_run(["eval", "nab", "--data", str(root), "--budget", bad]) == 2


def test_detect_keeps_alarms_a_refractory_apart(tmp_path: Path) -> None:
    """The NAB alarm policy: after an alarm, no other alarm for ``refractory_s`` (on the
    clock); without the refractory the same run alarms more often."""
    corpus = nab.load_corpus(_corpus(tmp_path, n=3000, windows=((800, 900), (1200, 1300))))
    t = corpus[0].timestamps
    policy = {"target_rate": 50.0, "governor": 1.0, "cross": False}
    free = nab.detect(corpus, refractory_s=0.0, **policy)[0][1]
    gated = nab.detect(corpus, refractory_s=6 * 3600.0, **policy)[0][1]
    idx = np.flatnonzero(gated)
    assert len(idx) >= 1 and len(np.flatnonzero(free)) > len(idx)
    assert (np.diff(t[idx]) > 6 * 3600.0).all()
    assert np.isin(idx, np.flatnonzero(free)).all()  # it only drops alarms, never adds one


def test_governor_raises_the_bar_of_a_series_paging_beyond_budget() -> None:
    """Spikes at 2× the bar twice a day (20× the 0.1/day budget) page a few times, then the
    series' bar has risen past them; a 10× spike late in the run still pages. Without the
    governor (factor 1, no crossings) the policy is the plain refractory one."""
    rows = 1000  # 10 rows a day, 100 days
    days = np.arange(rows) / 10.0
    ratio = np.zeros(rows)
    ratio[::5] = 2.0
    ratio[903] = 10.0
    opened = ratio >= 1.0
    plain = nab.governed_alarms(ratio, opened, days, 0, 1.0)
    assert (plain == opened).all() and plain.sum() == 201  # no refractory: every opening
    governed = nab.governed_alarms(ratio, opened, days, 0, 1.5)
    assert 3 < governed.sum() <= 10 and governed[903]
    assert not governed[500:900].any()
    # within budget nothing changes: the same spikes once every 20 days
    sparse = np.zeros(rows)
    sparse[::200] = 2.0
    assert (nab.governed_alarms(sparse, sparse >= 1, days, 0, 1.5) == (sparse >= 1)).all()


def test_governor_allowance_is_a_multiple_of_the_budget() -> None:
    """Spikes at 2× the bar every 6.7 days page at 1.5× the 0.1/day budget: within an
    allowance of five budgets every one pages; with an allowance of one budget the series
    pages at its budget's pace, then its bar rises past them."""
    days = np.arange(1000) / 10.0
    ratio = np.zeros(1000)
    ratio[::67] = 2.0
    opened = ratio >= 1.0
    loose = nab.governed_alarms(ratio, opened, days, 0, 1.5, excess=5.0)
    assert (loose == opened).all() and loose.sum() == 15
    tight = nab.governed_alarms(ratio, opened, days, 0, 1.5, excess=1.0)
    kept = np.flatnonzero(tight)
    assert 3 < len(kept) < 15 and np.isin(kept, np.flatnonzero(opened)).all()
    assert tight[: kept[-1] + 1].sum() == opened[: kept[-1] + 1].sum()  # only the last drop
    assert len(kept) <= 3 + 1.0 * 0.1 * days[kept[-1]] + 2  # the budget's pace, two over


def test_crossings_re_alarm_while_the_bank_holds_an_alarm_open() -> None:
    """The bank's hysteresis reports one opening per episode; with ``cross`` a new upward
    crossing of the bar after the refractory period pages again."""
    ratio = np.array([0, 3, 3, 0.8, 3, 3, 0.8, 3], float)
    opened = np.array([0, 1, 0, 0, 0, 0, 0, 0], bool)  # one long episode for the bank
    days = np.zeros(8)
    assert nab.governed_alarms(ratio, opened, days, 1, 1.0).astype(int).tolist() == [
        0,
        1,
        0,
        0,
        0,
        0,
        0,
        0,
    ]
    assert nab.governed_alarms(ratio, opened, days, 1, 1.0, cross=True).astype(int).tolist() == [
        0,
        1,
        0,
        0,
        1,
        0,
        0,
        1,
    ]


def test_refractory_is_measured_on_the_clock() -> None:
    """An irregular file (one 60 s step among 5-min ones, as in NAB's realTraffic): 6 h of
    refractory is 6 h, not 6 h of rows of the smallest step (30 h here)."""
    t = np.concatenate([[0.0, 60.0], 60.0 + 300.0 * np.arange(1, 200)])
    ratio = np.zeros(len(t))
    ratio[[10, 10 + 73, 10 + 80]] = 2.0  # 6 h 5 min and 6 h 40 min after the first
    days = np.zeros(len(t))
    kept = nab.governed_alarms(ratio, ratio >= 1, days, 6 * 3600.0, 1.0, t=t)
    assert np.flatnonzero(kept).tolist() == [10, 83]


@pytest.mark.parametrize("name", ["cusum", "robust_zscore", "forecast_residual"])
def test_cli_scores_one_detector_alone(tmp_path: Path, name: str) -> None:
    """``--detector NAME`` scores one library detector under the same label-free rules: a
    level shift of 25 σ is found, the report names the detector, and the per-point scores
    are written as for the ensemble."""
    root = _corpus(tmp_path / "nab")
    out, scores = tmp_path / "report.json", tmp_path / "scores"
    args = ["eval", "nab", "--data", str(root), "--out", str(out), "--scores-out", str(scores)]
    assert cli_run([*args, "--detector", name]) == 0
    rep = json.loads(out.read_text())
    assert rep["detector"] == name and rep["threshold_source"] == "label_free"
    assert rep["windows_detected"] == 1
    rows = list(csv.DictReader((scores / "cat" / "s.csv").open()))
    assert len(rows) == 2000 and any(r["alarm"] == "1" for r in rows)
    assert rep["false_alarm_budget_per_series_day"] == nab.NAB_TARGET_RATE
    assert cli_run([*args, "--detector", name, "--budget", "50"]) == 0
    loose = json.loads(out.read_text())
    assert loose["false_alarm_budget_per_series_day"] == 50.0
    assert loose["false_alarms"] > rep["false_alarms"]
    assert cli_run([*args, "--detector", "holt_winters_typo"]) == 2


def test_cli_detector_choices_are_the_evaluations() -> None:
    from evals.single import DETECTORS
    from noc_assistant.cli.eval import _SINGLE_DETECTORS

    assert sorted(_SINGLE_DETECTORS) == sorted(DETECTORS)
