"""A whole entity that stops answering its scrapes is a finding (``up()``, detector liveness);
a missed scrape, a silence of the whole feed or of a target seen too briefly is not."""

from __future__ import annotations

from noc_assistant.ingest import Point
from noc_assistant.models import LIVENESS_DETECTOR, Finding
from noc_assistant.stream.correlate import Correlator, MaintenanceWindow
from noc_assistant.stream.pipeline import Pipeline

T0 = 1_795_910_400.0  # 2026-11-29T00:00:00Z
STEP = 15.0
ENTITIES = {"amf-1": "amf", "smf-1": "smf", "upf-1": "upf"}


def points(
    hours: float = 3.0,
    *,
    silent: dict[str, tuple[float, float]] | None = None,
    blank: dict[str, tuple[float, float]] | None = None,
    feed_gap: tuple[float, float] | None = None,
    step: float = STEP,
) -> list[Point]:
    """Three NFs, each scraped at its own phase; ``silent``: entity → (start, end) seconds after
    T0 with no line at all; ``blank``: lines whose value is missing (NaN / null); ``feed_gap``:
    nothing from anybody."""
    out: list[Point] = []
    for i in range(int(hours * 3600 / step)):
        for k, (entity, nf) in enumerate(ENTITIES.items()):
            t = i * step + k * step / 4
            if feed_gap and feed_gap[0] <= t < feed_gap[1]:
                continue
            span = (silent or {}).get(entity)
            if span and span[0] <= t < span[1]:
                continue
            gone = (blank or {}).get(entity)
            value = None if gone and gone[0] <= t < gone[1] else 5.0
            labels = (("instance", entity), ("nf", nf))
            out.append(Point(T0 + t, "process_open_fds", labels, value, "gauge"))
    return out


def run(pts: list[Point], maintenance: list[MaintenanceWindow] | None = None) -> Pipeline:
    pipe = Pipeline()
    pipe.correlator.maintenance.extend(maintenance or [])
    return pipe.replay(pts)


def test_a_silent_entity_is_down_once_and_clears_when_it_answers() -> None:
    start, end = 3600.0, 3600.0 + 300.0
    pipe = run(points(silent={"upf-1": (start, end)}))
    assert [(f.detector, f.kpi, f.entity, f.direction) for f in pipe.findings] == [
        ("liveness", "target-up", "upf-1", "down")
    ]
    f = pipe.findings[0]
    last = T0 + start - STEP / 2  # its phase is half an interval into each step
    # two missed scrapes and half an interval for jitter, judged on the next tick
    assert last + 2.5 * STEP <= f.ts <= last + 2.5 * STEP + STEP
    assert (f.observed, f.expected_low, f.expected_high) == (0.0, 1.0, 1.0)
    assert f.score >= 1.0
    (incident,) = pipe.correlator.incidents.values()
    assert incident.state == "resolved"
    assert incident.resolved_at is not None and incident.resolved_at >= T0 + end
    diag = pipe.diagnoses[incident.id]
    assert (diag.top.fault, diag.top.entity) == ("target_down", "upf-1")


def test_a_short_silence_is_a_notice_a_long_one_pages_when_the_hold_ends() -> None:
    # the finding opens after two missed scrapes; the incident is a notice for the pack's
    # silence_hold_s (300 s) and pages only if the target is still silent then
    short = run(points(silent={"upf-1": (3600.0, 3600.0 + 240.0)}))
    (notice,) = short.correlator.incidents.values()
    assert notice.severity == "info" and notice.escalated_at == []
    assert short.diagnoses[notice.id].top.fault == "target_down"
    long = run(points(silent={"upf-1": (3600.0, 3600.0 + 900.0)}))
    (page,) = long.correlator.incidents.values()
    assert page.severity == "page"
    (promoted,) = page.escalated_at
    assert promoted - page.opened_at >= 300.0
    assert promoted - page.opened_at <= 300.0 + 2 * STEP


def test_blank_values_are_silence_too() -> None:
    pipe = run(points(blank={"amf-1": (3600.0, 3900.0)}))
    assert [(f.kpi, f.entity) for f in pipe.findings] == [("target-up", "amf-1")]


def test_a_missed_scrape_is_not_a_page_two_are() -> None:
    assert run(points(silent={"smf-1": (3600.0, 3600.0 + STEP)})).findings == []
    # two in a row: down on the tick half an interval after the second was due
    two = run(points(silent={"smf-1": (3600.0, 3600.0 + 2 * STEP)}))
    assert [(f.kpi, f.entity) for f in two.findings] == [("target-up", "smf-1")]


def test_a_silence_of_the_whole_feed_is_not_a_target_down() -> None:
    pipe = run(points(feed_gap=(3600.0, 3600.0 + 1200.0)))
    assert pipe.findings == []


def test_an_entity_that_stays_silent_after_a_feed_gap_is_down() -> None:
    # the feed stops for 20 minutes; the UPF does not come back with the others
    pipe = run(points(feed_gap=(3600.0, 4800.0), silent={"upf-1": (3600.0, 4800.0 + 600.0)}))
    assert [(f.kpi, f.entity) for f in pipe.findings] == [("target-up", "upf-1")]
    # its grace counts from the feed's return, not from its last sample before the gap
    assert pipe.findings[0].ts >= T0 + 4800.0 + 2.5 * STEP


def test_pm_periods_forgive_one_missed_period() -> None:
    step = 300.0
    one = run(points(hours=24, step=step, silent={"upf-1": (36000.0, 36000.0 + step)}))
    assert one.findings == []
    two = run(points(hours=24, step=step, silent={"upf-1": (36000.0, 36000.0 + 2 * step)}))
    assert [(f.kpi, f.entity) for f in two.findings] == [("target-up", "upf-1")]


def test_a_silence_inside_maintenance_pages_nobody() -> None:
    window = MaintenanceWindow(entity="upf-1", start=T0 + 3500.0, end=T0 + 4000.0)
    pipe = run(points(silent={"upf-1": (3600.0, 3900.0)}), maintenance=[window])
    assert pipe.correlator.incidents == {}
    assert [f.kpi for f in pipe.correlator.suppressed] == ["target-up"]


def test_still_silent_when_maintenance_ends_is_a_page() -> None:
    window = MaintenanceWindow(entity="upf-1", start=T0 + 3500.0, end=T0 + 4000.0)
    pipe = run(points(silent={"upf-1": (3600.0, 4600.0)}), maintenance=[window])
    assert [f.kpi for f in pipe.correlator.suppressed] == ["target-up"]
    (incident,) = pipe.correlator.incidents.values()
    assert T0 + 4000.0 <= incident.opened_at <= T0 + 4000.0 + STEP
    assert incident.resolved_at is not None and incident.resolved_at >= T0 + 4600.0


def test_an_entity_seen_too_briefly_is_not_judged() -> None:
    # a target that answered twice and went away: its interval is not known
    pts = points(hours=1.0)
    labels = (("instance", "nrf-1"), ("nf", "nrf"))
    pts += [Point(T0 + 60.0 + k * STEP, "process_open_fds", labels, 1.0, "gauge") for k in (0, 1)]
    pts.sort(key=lambda p: p.ts)
    assert run(pts).findings == []


def _finding(
    fid: str, entity: str, ts: float, kpi: str, evidence_only: bool = False, down: bool = False
) -> Finding:
    live = evidence_only or down
    return Finding(
        id=fid,
        detector=LIVENESS_DETECTOR if live else "ensemble:point",
        kpi=kpi,
        entity=entity,
        ts=ts,
        score=1.0 if live else 9.0,
        observed=0.0,
        expected_low=1.0,
        expected_high=1.0,
        direction="down",
        evidence_only=evidence_only,
    )


def test_evidence_only_findings_join_incidents_and_never_open_one() -> None:
    c = Correlator(window_s=600.0, resolve_after_s=300.0)
    quiet = _finding("q1", "gpu-1", 0.0, "gpu-engine-metrics-present", evidence_only=True)
    assert c.add_finding(quiet) == []
    assert c.incidents == {}
    # an incident on the same entity within the window takes it as evidence
    (opened,) = c.add_finding(_finding("f1", "gpu-1", 300.0, "gpu-generation-throughput"))
    assert opened.kind == "opened" and opened.incident.finding_ids == ["f1", "q1"]
    # a second one on the open incident joins without holding it open or paging
    (ev,) = c.add_finding(
        _finding("q2", "gpu-1", 400.0, "gpu-engine-metrics-present", evidence_only=True)
    )
    assert ev.kind == "updated" and "q2" in ev.incident.finding_ids
    c.clear("gpu-generation-throughput", "gpu-1", 450.0)
    assert [e.kind for e in c.tick(300.0 + 300.0)] == ["resolved"]
    # an old one is not taken by a later incident
    c.add_finding(_finding("q3", "gpu-2", 1000.0, "gpu-engine-metrics-present", True))
    (late,) = c.add_finding(_finding("f2", "gpu-2", 1000.0 + 700.0, "gpu-requests-waiting"))
    assert late.incident.finding_ids == ["f2"]


def test_a_target_down_during_an_open_incident_of_its_entity_joins_it() -> None:
    """An Xid error pages; the node reboots twenty minutes later, past the grouping window:
    the silence is that fault's consequence, not a second page. Elsewhere, or once the
    incident has resolved, a target down still pages."""
    c = Correlator(window_s=600.0, resolve_after_s=300.0)
    (first,) = c.add_finding(_finding("x1", "gpu-1", 0.0, "gpu-xid-errors"))
    (down,) = c.add_finding(_finding("d1", "gpu-1", 1200.0, "target-up", down=True))
    assert down.kind == "updated" and down.incident is first.incident
    assert down.incident.finding_ids == ["x1", "d1"]
    # another entity's silence that far from the incident is its own page
    (other,) = c.add_finding(_finding("d2", "gpu-2", 1300.0, "target-up", down=True))
    assert other.kind == "opened"
    # a symptom of another KPI that late on the same entity is a new incident, as before
    (late,) = c.add_finding(_finding("k1", "gpu-1", 1900.0, "gpu-requests-waiting"))
    assert late.kind == "opened" and late.incident is not first.incident
    # once resolved, a silence of the entity pages again (here: its incident reopens, flapping)
    for sid, ent in [
        ("gpu-xid-errors", "gpu-1"),
        ("target-up", "gpu-1"),
        ("target-up", "gpu-2"),
        ("gpu-requests-waiting", "gpu-1"),
    ]:
        c.clear(sid, ent, 2000.0)
    assert sorted(e.kind for e in c.tick(2300.0)) == ["resolved"] * 3
    (again,) = c.add_finding(_finding("d3", "gpu-1", 2400.0, "target-up", down=True))
    assert again.kind == "reopened" and again.incident is first.incident


def test_one_missed_scrape_at_pm_periods_is_evidence_not_a_page() -> None:
    """A vLLM exporter that misses single 5-min scrapes while DCGM answers: its presence KPI
    stays 1 (no page); each miss is an evidence-only finding."""
    step = 300.0
    out: list[Point] = []
    lab = (("instance", "gpu-srv-1"),)
    misses = {40, 90, 150, 200}
    for i in range(288):
        ts = T0 + i * step
        out.append(Point(ts, "DCGM_FI_DEV_GPU_TEMP", (*lab, ("gpu", "0")), 60.0, "gauge"))
        if i not in misses:
            out.append(Point(ts, "vllm:num_requests_running", lab, 4.0, "gauge"))
        other = (("instance", "amf-1"), ("nf", "amf"))
        out.append(Point(ts + 30.0, "process_open_fds", other, 5.0, "gauge"))
    pipe = run(out)
    assert pipe.correlator.incidents == {}
    quiet = [f for f in pipe.findings if f.evidence_only]
    assert {round((f.ts - T0) / step) for f in quiet} == misses
    assert all(f.kpi == "gpu-engine-metrics-present" and f.observed == 0.0 for f in quiet)
    assert [f for f in pipe.findings if not f.evidence_only] == []
