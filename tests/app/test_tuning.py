"""Raised bars: the verdicts propose them, a person declares them (CLI, API with the token),
the store keeps them, a running pipeline takes them at its next round, and a finding under one
is kept as evidence instead of paging; a silent target and a finding over the bar still page."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from test_drafting import PACK
from test_reviews import AUTH, _client

from knowledge.pack import load_pack
from noc_assistant.cli import run
from noc_assistant.cli._live import IncidentOutput
from noc_assistant.errors import TuningError
from noc_assistant.ingest.reader import read_replay
from noc_assistant.inventory import load_topology
from noc_assistant.models import LIVENESS_DETECTOR, Finding, Incident, Review, Tuning
from noc_assistant.ops.raised_bars import MAX_TUNING_S, new_rule, opening_finding, suggest
from noc_assistant.settings import Settings
from noc_assistant.simulate import ScenarioConfig, build_scenario, write_scenario
from noc_assistant.store import SqliteStore, Store
from noc_assistant.stream.pipeline import REPLAY_LATENESS_INTERVALS, Pipeline

KPI = "amf-registration-success"


@pytest.fixture()
def store(tmp_path: Path) -> Iterator[Store]:
    s = SqliteStore(tmp_path / "noc.db")
    yield s
    s.close()


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("tuning")
    return write_scenario(
        build_scenario(ScenarioConfig(days=1, faults="all", seed=8, interval_s=300)), out
    )


def _replay(scenario: dict[str, Path], rules: tuple[Tuning, ...] = ()) -> Pipeline:
    pack = load_pack()
    pipe = Pipeline(
        pack=pack,
        topology=load_topology(scenario["inventory"], pack),
        lateness_intervals=REPLAY_LATENESS_INTERVALS,
    )
    pipe.correlator.tuning = rules
    return pipe.replay(read_replay(scenario["telemetry"]))


def _openings(pipe: Pipeline) -> dict[str, Finding]:
    by_id = {f.id: f for f in pipe.findings}
    out = {}
    for inc in pipe.correlator.incidents.values():
        first = opening_finding([by_id[i] for i in inc.finding_ids if i in by_id])
        assert first is not None
        out[inc.id] = first
    return out


def test_a_finding_under_a_raised_bar_is_evidence_and_pages_nobody(
    scenario: dict[str, Path],
) -> None:
    reference = _replay(scenario)
    openings = _openings(reference)
    # the KPI and entity that opened the most incidents, not a silent target
    counts: dict[tuple[str, str], list[Finding]] = {}
    for f in openings.values():
        if f.detector != LIVENESS_DETECTOR:
            counts.setdefault((f.kpi, f.entity), []).append(f)
    (kpi, entity), opened = max(counts.items(), key=lambda kv: (len(kv[1]), kv[0]))
    scores = sorted(f.score for f in opened)
    top = max(f.score for f in reference.findings if (f.kpi, f.entity) == (kpi, entity))
    start, end = reference.first_ts or 0.0, (reference.first_ts or 0.0) + 2 * 86400
    over_all = Tuning(
        id="tn-all", kpi=kpi, entity=entity[:-1] + "*", min_score=top * 1.01, start=start,
        end=end, by="ana", reason="test", created_at=start,
    )  # fmt: skip
    held = _replay(scenario, (over_all,))
    assert not [f for f in _openings(held).values() if (f.kpi, f.entity) == (kpi, entity)]
    # nothing is lost: the same findings, those of the KPI there kept as evidence
    assert [f.id for f in held.findings] == [f.id for f in reference.findings]
    mine = [f for f in held.findings if (f.kpi, f.entity) == (kpi, entity)]
    assert mine and all(f.evidence_only for f in mine)
    assert {f.held_by for f in mine if not f.update} == {"tn-all"}
    # the faults behind them page through their other symptoms; the held findings join
    # those incidents as evidence for the diagnosis
    assert set(held.correlator.incidents) != set(reference.correlator.incidents)
    joined = {i for inc in held.correlator.incidents.values() for i in inc.finding_ids}
    assert {f.id for f in mine} & joined

    # a bar between the weakest and the strongest opening: the strong one still pages
    if len(scores) > 1 and scores[0] < scores[-1]:
        middle = over_all.model_copy(update={"min_score": (scores[0] + scores[-1]) / 2})
        some = [
            f for f in _openings(_replay(scenario, (middle,))).values()
            if (f.kpi, f.entity) == (kpi, entity)
        ]  # fmt: skip
        assert some and all(f.score >= middle.min_score for f in some)
    # over, or on another entity: nothing changes
    for other in (
        over_all.model_copy(update={"start": end, "end": end + 60}),
        over_all.model_copy(update={"entity": "nobody-*"}),
    ):
        again = _replay(scenario, (other,))
        assert set(again.correlator.incidents) == set(reference.correlator.incidents)


def test_a_silent_target_is_never_held() -> None:
    pipe = Pipeline(pack=PACK)
    rule = Tuning(
        id="tn-1", kpi="target-up", min_score=50.0, start=0.0, end=1e12, by="a", reason="r",
        created_at=0.0,
    )  # fmt: skip
    pipe.correlator.tuning = (rule,)
    silent = Finding(
        id="f-1", detector=LIVENESS_DETECTOR, kpi="target-up", entity="upf-1", ts=100.0,
        score=1.0, observed=0.0, expected_low=1.0, expected_high=1.0, direction="down",
    )  # fmt: skip
    assert pipe.correlator.held(silent) is None
    assert pipe.correlator.held(silent.model_copy(update={"detector": "ensemble:point"})) == rule


def test_a_raised_bar_must_hold_together() -> None:
    kpis = {KPI}
    with pytest.raises(TuningError, match="kpi: 'amf-nope' is not a KPI"):
        new_rule("amf-nope", "ana", 0.0, min_score=2, reason="r", kpis=kpis)
    with pytest.raises(TuningError, match="not above the detectors' own bar"):
        new_rule(KPI, "ana", 0.0, min_score=1.0, reason="r")
    with pytest.raises(TuningError, match="switch the KPI's rule off"):
        new_rule(KPI, "ana", 0.0, min_score=500, reason="r")
    with pytest.raises(TuningError, match="reason: missing"):
        new_rule(KPI, "ana", 0.0, min_score=2, reason="  ")
    with pytest.raises(TuningError, match="90 days"):
        new_rule(KPI, "ana", 0.0, min_score=2, reason="r", duration_s=MAX_TUNING_S + 1)
    with pytest.raises(TuningError, match="min_score: nan"):
        new_rule(KPI, "ana", 0.0, min_score=float("nan"), reason="r")


def _judged(store: Store, pages: list[tuple[str, float, str]], at: float) -> None:
    """Incidents opened by ``KPI`` on each (entity, score, verdict), an hour apart."""
    for i, (entity, score, verdict) in enumerate(pages):
        ts = at + 3600.0 * i
        f = Finding(
            id=f"f-{i}", detector="ensemble:point", kpi=KPI, entity=entity, ts=ts, score=score,
            observed=0.9, expected_low=0.97, expected_high=1.0, direction="down",
        )  # fmt: skip
        inc = Incident(
            id=f"inc-{i}", fingerprint="x", opened_at=ts, updated_at=ts, entities=[entity],
            finding_ids=[f.id],
        )  # fmt: skip
        store.save_incident(inc)
        store.save_findings([f], incident_id=inc.id)
        store.save_review(Review(incident_id=inc.id).judged(verdict, "ana", at=ts + 60))


def test_the_verdicts_suggest_bars_with_their_cost(store: Store) -> None:
    pages = [
        ("amf-1", 1.3, "no_fault"),
        ("amf-1", 2.0, "no_fault"),
        ("amf-1", 2.2, "fault"),  # a real one the bar would have held
        ("amf-1", 9.0, "fault"),
        ("amf-2", 1.5, "no_fault"),  # once: not enough
        ("amf-2", 1.6, "maintenance"),  # not a false page
    ]
    _judged(store, pages, at=1_000_000.0)
    (s,) = suggest(store, 0.0, 2_000_000.0)
    assert (s.kpi, s.entity, s.false_pages, s.max_false_score) == (
        KPI,
        "amf-1",
        ["inc-0", "inc-1"],
        2.0,
    )
    assert (s.min_score, s.confirmed, s.would_hold) == (2.5, ["inc-2", "inc-3"], ["inc-2"])
    assert [x.entity for x in suggest(store, 0.0, 2_000_000.0, min_false=1)] == ["amf-1", "amf-2"]
    assert suggest(store, 0.0, 1_000_000.0) == []  # none opened in the period
    rule = new_rule(KPI, "ana", 1_000_000.0, min_score=2.5, entity="amf-*", reason="r")
    (covered,) = suggest(store, 0.0, 1_010_000.0, rules=[rule])
    assert covered.covered_by == rule.id


def test_the_cli_suggests_declares_lists_and_ends(
    store: Store,
    use_store: Callable[..., None],
    capsys: pytest.CaptureFixture[str],
) -> None:
    import time

    use_store(store)
    _judged(store, [("amf-1", 1.3, "no_fault"), ("amf-1", 2.0, "no_fault")], time.time() - 86400)
    assert run(["tune", "suggest"]) == 0
    out = capsys.readouterr().out
    assert "amf-1" in out and f"noc tune add {KPI} --entity amf-1 --min-score 2.5" in out
    assert run(["tune", "suggest", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["would_hold"] == []
    args = ["tune", "add", KPI, "--entity", "amf-1", "--min-score", "2.5", "--by", "ana"]
    assert run([*args, "--reason", "inc-0, inc-1", "--for", "7d"]) == 0
    assert run(["tune", "add", "amf-nope", *args[3:], "--reason", "r"]) == 2
    assert "kpi: 'amf-nope' is not a KPI of the knowledge pack" in capsys.readouterr().err
    assert run([*args, "--reason", "r", "--for", "soon"]) == 2
    assert "--for: 'soon' is not a duration" in capsys.readouterr().err
    (rule,) = store.tuning_rules()
    assert (rule.min_score, rule.end - rule.start, rule.reason) == (2.5, 7 * 86400, "inc-0, inc-1")
    assert run(["tune", "suggest"]) == 0
    assert f"in force: {rule.id}" in capsys.readouterr().out
    assert run(["tune", "list"]) == 0
    assert "in force" in capsys.readouterr().out
    assert run(["tune", "end", rule.id, "--by", "bo"]) == 0
    assert run(["tune", "end", "tn-nope", "--by", "bo"]) == 2
    capsys.readouterr()
    assert run(["tune", "list"]) == 0
    assert rule.id not in capsys.readouterr().out
    assert run(["tune", "list", "--all"]) == 0
    assert "ended by bo" in capsys.readouterr().out
    held = store.findings_for("inc-1")[0].model_copy(
        update={"id": "f-held", "evidence_only": True, "held_by": rule.id}
    )
    store.save_findings([held], incident_id="inc-1")
    assert run(["incident", "show", "inc-1"]) == 0
    assert f"under raised bar {rule.id}" in " ".join(capsys.readouterr().out.split())


def test_declare_suggest_and_end_over_http(store: Store) -> None:
    c = _client(store)
    body = {"kpi": KPI, "entity": "amf-*", "min_score": 3, "by": "ana", "reason": "inc-1, inc-4"}
    assert c.post("/api/tuning", json=body).status_code == 401
    r = c.post("/api/tuning", headers=AUTH, json={**body, "kpi": "amf-nope"})
    assert r.status_code == 422 and "not a KPI" in r.json()["detail"]
    assert c.post("/api/tuning", headers=AUTH, json={**body, "min_score": 0.5}).status_code == 422
    assert c.post("/api/tuning", headers=AUTH, json={**body, "reason": ""}).status_code == 422
    r = c.post("/api/tuning", headers=AUTH, json=body)
    assert r.status_code == 201
    rule = r.json()
    assert [t["id"] for t in c.get("/api/tuning").json()] == [rule["id"]]
    assert c.get("/api/tuning/suggestions").json() == []
    page = c.get("/").text
    assert "Raised bars" in page and "inc-1, inc-4" in page and rule["id"] in page
    # an incident with a finding held under the bar says so on its page
    _judged(store, [("amf-1", 1.3, "no_fault"), ("amf-1", 2.0, "no_fault")], rule["start"] - 9000)
    held = store.findings_for("inc-1")[0].model_copy(
        update={"id": "f-held", "evidence_only": True, "held_by": rule["id"]}
    )
    store.save_findings([held], incident_id="inc-1")
    assert f"under raised bar {rule['id']}" in c.get("/incidents/inc-1").text
    (s,) = c.get("/api/tuning/suggestions?min_false=2").json()
    assert (s["entity"], s["min_score"], s["covered_by"]) == ("amf-1", 2.5, rule["id"])
    url = f"/api/tuning/{rule['id']}/end"
    assert c.post(url, json={"by": "bo"}).status_code == 401
    r = c.post(url, headers=AUTH, json={"by": "bo"})
    assert r.status_code == 200 and r.json()["ended_by"] == "bo"
    assert c.get("/api/tuning").json() == []
    assert [t["id"] for t in c.get("/api/tuning?all=true").json()] == [rule["id"]]
    assert c.post("/api/tuning/tn-nope/end", headers=AUTH, json={"by": "bo"}).status_code == 404


def test_a_running_pipeline_takes_the_stores_bars_at_its_next_round(store: Store) -> None:
    pipe = Pipeline(pack=PACK)
    output = IncidentOutput(Settings(alertmanager_url=None), store, lambda: pipe)
    now = 1_800_000_000.0
    rule = new_rule(KPI, "ana", now, min_score=3.0, entity="amf-*", reason="r")
    store.save_tuning(rule)
    assert output.refresh_maintenance()  # the round's read of the store: windows and bars
    finding = Finding(
        id="f-1", detector="ensemble:point", kpi=KPI, entity="amf-01", ts=now + 60, score=2.0,
        observed=0.9, expected_low=0.97, expected_high=1.0, direction="down",
    )  # fmt: skip
    assert pipe.correlator.held(finding) == rule
    store.save_tuning(rule.ended("bo", now + 120))  # ended early
    output.sync_tuning(now + 121)
    assert pipe.correlator.held(finding.model_copy(update={"ts": now + 180})) is None
