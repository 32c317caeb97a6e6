"""The pipeline end to end on hand-made telemetry: resets, gaps and a real fault."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from detectors.monitor import MonitorEvent
from noc_assistant.ingest import Point
from noc_assistant.stream.pipeline import Pipeline
from noc_assistant.stream.replay import run_replay

T0 = 1_795_910_400.0  # 2026-11-29T00:00:00Z
STEP = 15.0


def amf_points(
    hours: float = 6,
    *,
    reset_at: float | None = None,
    fault: tuple[float, float] | None = None,
    gap: tuple[float, float] | None = None,
    seed: int = 1,
    fault_ratio: float = 0.5,
    onset: tuple[float, float] | None = None,
) -> list[Point]:
    """An AMF with ~20 registrations/s at 99.5% success, optionally a restart, fault or gap;
    ``onset`` (seconds, success ratio): the fault's first seconds fail less."""
    rng = random.Random(seed)
    labels = (("instance", "amf-1"), ("nf", "amf"))
    req = succ = 0.0
    out: list[Point] = []
    for i in range(int(hours * 3600 / STEP)):
        ts = T0 + i * STEP
        if reset_at is not None and abs(ts - reset_at) < STEP / 2:
            req = succ = 0.0  # clean process restart: counters start again from zero
        n = rng.randint(270, 330)
        ok_ratio = fault_ratio if fault and fault[0] <= ts < fault[1] else 0.995
        if fault and onset and fault[0] <= ts < fault[0] + onset[0]:
            ok_ratio = onset[1]
        ok = sum(1 for _ in range(n) if rng.random() < ok_ratio)
        req += n
        succ += ok
        if gap and gap[0] <= ts < gap[1]:
            values: tuple[float | None, float | None] = (None, None)
        else:
            values = (req, succ)
        out.append(Point(ts, "fivegs_amffunction_rm_reginitreq", labels, values[0], "counter"))
        out.append(Point(ts, "fivegs_amffunction_rm_reginitsucc", labels, values[1], "counter"))
        out.append(Point(ts, "gnb", labels, 12.0, "gauge"))
    return out


def run(points: list[Point]) -> Pipeline:
    return Pipeline().replay(points)


def test_counter_reset_alone_raises_no_alert() -> None:
    pipe = run(amf_points(reset_at=T0 + 3 * 3600))
    assert pipe.findings == []
    assert pipe.correlator.incidents == {}
    state = next(
        s for (m, _), s in pipe.store._series.items() if m == "fivegs_amffunction_rm_reginitreq"
    )
    assert pipe.store.rings.resets[state.sid] == 1


def test_gap_is_not_read_as_zero() -> None:
    pipe = run(amf_points(gap=(T0 + 3 * 3600, T0 + 3 * 3600 + 600)))
    assert pipe.findings == []
    hist = pipe.kpi_history[("amf-registration-success", "amf-1")]
    assert min(v for _, v in hist) > 0.9


def test_a_lost_line_of_one_counter_is_no_drop_of_its_ratio() -> None:
    """Lines lost (quarantined) for the success counter alone: at the next evaluations its
    window lacks an interval the request counter has, which read as a success ratio of 3/4
    and paged. The KPI waits for the counter instead (a gap of one scrape)."""
    points = amf_points()
    lost = {T0 + 3 * 3600, T0 + 4 * 3600, T0 + 4 * 3600 + STEP, T0 + 5 * 3600}
    kept = [
        p for p in points if not (p.metric == "fivegs_amffunction_rm_reginitsucc" and p.ts in lost)
    ]
    assert len(points) - len(kept) == len(lost)
    pipe = run(kept)
    assert pipe.findings == []
    hist = dict(pipe.kpi_history[("amf-registration-success", "amf-1")])
    assert min(hist.values()) > 0.97  # no evaluation saw a window short of an interval
    assert not set(hist) & lost  # those evaluations waited for the counter
    assert T0 + 5 * 3600 + STEP in hist  # and the next scrape made the window whole again


def test_success_ratio_drop_opens_and_resolves_one_incident() -> None:
    start, end = T0 + 4 * 3600, T0 + 4 * 3600 + 1200
    pipe = run(amf_points(fault=(start, end)))
    incidents = list(pipe.correlator.incidents.values())
    assert len(incidents) == 1
    inc = incidents[0]
    assert inc.entities == ["amf-1"]
    assert "amf-registration-success" in inc.kpis
    assert start <= inc.opened_at <= start + 4 * STEP
    assert inc.state == "resolved" and inc.resolved_at is not None and inc.resolved_at > end
    finding = pipe.findings[0]
    assert finding.direction == "down" and finding.observed < 0.8 < finding.expected_low


def test_a_reading_that_grows_while_alarming_is_reported_again() -> None:
    """The fault's first readings hold only part of it (90 % success for a minute, then 5 %):
    the alarm opens on them, and the full drop is reported as a further finding of the same
    KPI in the same incident (a MonitorBank ``update``), which the diagnosis then sees."""
    start = T0 + 4 * 3600
    pipe = run(amf_points(fault=(start, start + 1200), fault_ratio=0.05, onset=(60, 0.9)))
    (inc,) = pipe.correlator.incidents.values()
    mine = [f for f in pipe.findings if f.kpi == "amf-registration-success"]
    assert len(mine) >= 2 and all(f.id in inc.finding_ids for f in mine)
    first, *later = mine
    assert first.observed > 0.9 and min(f.observed for f in later) < 0.5
    assert all(f.score >= 2 * first.score for f in later[:1])
    assert not first.update and all(f.update for f in later)
    assert pipe.diagnoses[inc.id] is not None


def test_a_reading_that_turned_the_other_way_is_a_new_symptom() -> None:
    """A further reading is marked ``update`` only where the correlator holds the series
    alarming the same way: the monitor's ``update`` of a drop become a surge is a new symptom
    for the correlator, and the finding says so (the RCA scorer reads the mark)."""
    pipe = Pipeline()
    kpi = pipe.kpis["amf-registration-success"]

    def event(kind: str, ts: float, score: float, direction: str) -> MonitorEvent:
        return MonitorEvent(kind, ts, score, 0.5, 0.9, 1.0, direction, "d")  # type: ignore[arg-type]

    pipe._on_monitor(kpi, "amf-1", (), event("open", T0, 3.0, "down"))
    pipe._on_monitor(kpi, "amf-1", (), event("update", T0 + 15, 7.0, "down"))
    pipe._on_monitor(kpi, "amf-1", (), event("update", T0 + 30, 20.0, "up"))
    pipe._on_monitor(kpi, "amf-1", (), event("update", T0 + 45, 50.0, "up"))
    assert [f.update for f in pipe.findings] == [False, True, False, True]
    (inc,) = pipe.correlator.incidents.values()
    assert len(inc.finding_ids) == 4


def test_interval_is_inferred_from_the_data() -> None:
    pipe = run(amf_points(hours=1))
    assert pipe.interval_s == STEP


def test_run_replay_reads_a_file_and_reports_quarantine(tmp_path: Path) -> None:
    start = T0 + 4 * 3600
    points = amf_points(fault=(start, start + 1200))
    path = tmp_path / "telemetry.jsonl"
    with path.open("w") as fh:
        for i, p in enumerate(points):
            fh.write(
                json.dumps(
                    {
                        "ts": p.ts,
                        "metric": p.metric,
                        "labels": dict(p.labels),
                        "value": p.value,
                        "type": p.type,
                    }
                )
                + "\n"
            )
            if i == 10:
                fh.write("garbage\n")
    result = run_replay(path)
    assert result.samples == len(points)
    assert result.quarantined == 1
    assert result.quarantine.records[0].line == 12
    assert (tmp_path / "telemetry.jsonl.quarantine.jsonl").exists()
    assert len(result.incidents) == 1


def test_unaligned_scrapes_keep_the_true_interval() -> None:
    """Exporters scraped at different offsets: the interval is per series, not between any two
    timestamps, and a fault is still found."""
    offsets = {
        "fivegs_amffunction_rm_reginitreq": 3.0,
        "fivegs_amffunction_rm_reginitsucc": 8.0,
        "gnb": 11.0,
    }
    start = T0 + 4 * 3600
    points = [
        p._replace(ts=p.ts + offsets[p.metric]) for p in amf_points(fault=(start, start + 1200))
    ]
    points.sort(key=lambda p: p.ts)
    pipe = run(points)
    assert pipe.interval_s == STEP
    assert len(pipe.correlator.incidents) == 1


def test_an_entity_scraped_off_the_tick_is_judged_at_its_own_scrape() -> None:
    """Targets are scraped at their own phases: amf-2 on the minute, amf-1 23 s after it.
    amf-1's KPIs are evaluated at its own latest scrape (windows end there, so they hold whole
    scrape intervals), and its gNB drop pages at the scrape that showed it, not a tick later;
    a tick without a new scrape of an entity evaluates nothing for it."""
    points = []
    for k in range(300):
        for name, off in (("amf-2", 0.0), ("amf-1", 23.0)):
            lab = (("instance", name), ("nf", "amf"))
            value = 20.0 if name == "amf-1" and k >= 200 else 40.0
            if not (name == "amf-1" and 100 <= k < 103):  # three missed scrapes
                points.append(Point(T0 + 60.0 * k + off, "gnb", lab, value, "gauge"))
    pipe = run(points)
    times = [t for t, _ in pipe.kpi_history[("amf-gnb-associations", "amf-1")]]
    assert all((t - T0) % 60.0 == 23.0 for t in times)
    assert len(times) == len(set(times)) >= 290  # once per scrape (the first few learn the
    assert not any(T0 + 6000 < t < T0 + 6180 for t in times)  # interval), none in the gap
    first = min(f.ts for f in pipe.findings if f.entity == "amf-1" and f.kpi != "target-up")
    assert first in (T0 + 60.0 * 200 + 23.0, T0 + 60.0 * 201 + 23.0)
    # the three missed scrapes: amf-1 was down, judged on the clock (amf-2 kept answering)
    (down,) = [f for f in pipe.findings if f.kpi == "target-up"]
    assert down.entity == "amf-1" and T0 + 6000 < down.ts < T0 + 6180


def test_pm_periods_give_the_monitor_a_faster_level() -> None:
    """At 10-min periods the monitors' level and scale keep a two-hour memory (0.08 per value),
    not fifty values (eight hours); at 15 s they keep 0.02 per value."""
    from detectors.params import monitor_alpha

    labels = (("instance", "amf-1"), ("nf", "amf"))
    for step, want in ((600.0, 0.08), (15.0, 0.02)):
        pipe = run([Point(T0 + i * step, "gnb", labels, 12.0, "gauge") for i in range(40)])
        assert pipe.monitors is not None
        assert pipe.monitors._params["alpha"] == monitor_alpha(step) == pytest.approx(want, 1e-3)


def test_hourly_pm_periods_watch_a_deployment_from_its_first_half_day() -> None:
    """At 60-min periods a monitor settles in 6 + 6 values (half a day), not 12 + 12 (a whole
    day of blindness, and more with the hours it takes to learn the interval): a registration
    failure in the 20th hour of the data pages."""
    step = 3600.0
    rng = random.Random(3)
    labels = (("instance", "amf-1"), ("nf", "amf"))
    req = succ = 0.0
    pts: list[Point] = []
    for i in range(30):
        ts = T0 + i * step
        n = rng.randint(60_000, 80_000)
        ratio = 0.6 if i == 20 else 0.995 + rng.uniform(-0.001, 0.001)
        req, succ = req + n, succ + round(n * ratio)
        pts.append(Point(ts, "fivegs_amffunction_rm_reginitreq", labels, req, "counter"))
        pts.append(Point(ts, "fivegs_amffunction_rm_reginitsucc", labels, succ, "counter"))
    pipe = run(pts)
    assert pipe.monitors is not None and pipe.monitors._params["grace"] == 6
    opened = [f for f in pipe.findings if f.kpi == "amf-registration-success"]
    assert [f.ts for f in opened] == [T0 + 20 * step]


def test_the_networks_local_time_reaches_the_day_type_profiles(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``NOC_LOCAL_UTC_OFFSET_H`` and ``NOC_WEEKEND_DAYS`` place the weekend of every
    monitored series (a Friday–Saturday weekend three hours east of UTC here); a weekday
    outside 0–6 is refused when the settings are read."""
    from noc_assistant.settings import Settings, get_settings

    monkeypatch.setenv("NOC_LOCAL_UTC_OFFSET_H", "3")
    monkeypatch.setenv("NOC_WEEKEND_DAYS", "[4, 5]")
    get_settings.cache_clear()
    try:
        pipe = run(amf_points(0.5))
        assert pipe.monitors is not None
        banks = list(pipe.monitors._banks.values())
        assert banks and all(b.utc_offset == 10800.0 and b.weekend == (4, 5) for b in banks)
        monkeypatch.setenv("NOC_WEEKEND_DAYS", "[5, 7]")
        with pytest.raises(ValueError, match="weekend_days"):
            Settings()
    finally:
        get_settings.cache_clear()


def test_a_sites_time_zone_reaches_its_series(monkeypatch: pytest.MonkeyPatch) -> None:
    """``NOC_LOCAL_TZ`` is the network's wall clock (daylight saving included); an inventory
    entity's ``tz`` puts its series on its own site's clock (a bank of their own). An unknown
    zone is refused with the setting's or the inventory field's name."""
    from noc_assistant.errors import InventoryError
    from noc_assistant.inventory import topology_from_dict
    from noc_assistant.settings import Settings, get_settings

    monkeypatch.setenv("NOC_LOCAL_TZ", "Europe/Berlin")
    get_settings.cache_clear()
    try:
        inventory = {"entities": [{"id": "amf-1", "type": "amf", "tz": "America/Chicago"}]}
        pipe = Pipeline(topology=topology_from_dict(inventory)).replay(amf_points(0.5))
        assert pipe.monitors is not None
        zones = {which[2]: bank.clock_.tz for which, bank in pipe.monitors._banks.items()}
        assert zones == {"America/Chicago": "America/Chicago"}
        plain = run(amf_points(0.5))
        assert plain.monitors is not None
        assert {b.clock_.tz for b in plain.monitors._banks.values()} == {"Europe/Berlin"}
        monkeypatch.setenv("NOC_LOCAL_TZ", "Europe/Berlyn")
        with pytest.raises(ValueError, match="local_tz"):
            Settings()
        bad = {"entities": [{"id": "amf-1", "type": "amf", "tz": "Mars/Olympus"}]}
        with pytest.raises(InventoryError, match=r"entities\.0\.tz"):
            topology_from_dict(bad)
    finally:
        get_settings.cache_clear()


def test_a_label_group_that_appears_later_is_watched_too() -> None:
    """A roaming partner whose subscribers first register hours into the feed gets its own
    per-PLMN series: a new label value of a metric the AMF already exports is a new group."""
    pipe = Pipeline(lateness_s=0.0)

    def scrape(t: float, plmns: list[str]) -> list[Point]:
        base = (("instance", "amf-1"), ("nf", "amf"))
        return [
            Point(t, "fivegs_amffunction_rm_registeredsubnbr", (*base, ("plmnid", p)), 500.0)
            for p in plmns
        ]

    for k in range(40):
        pipe.feed_all(scrape(15.0 * k, ["26201"] if k < 20 else ["26201", "20810"]))
    pipe.finish()
    keys = {sid for sid, entity in pipe.kpi_history if entity == "amf-1"}
    assert keys == {
        "amf-registered-subscribers-by-plmn{plmnid=26201}",
        "amf-registered-subscribers-by-plmn{plmnid=20810}",
    }
