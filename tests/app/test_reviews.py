"""What the NOC did with its incidents: acknowledgements and verdicts (writes need the token
and a name, and keep a history), the live report they make (the false-alarm share of what
production paged, RCA against the confirmed causes), and the verdicts as a labels file that
`noc eval run` scores the same recording against."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from test_drafting import IMSI, PACK, case

from evals.live import labels_from_reviews, live_report
from evals.rca import load_labels
from knowledge.topology import load_inventory
from noc_assistant.api.app import create_app
from noc_assistant.cli import run
from noc_assistant.errors import ReviewError
from noc_assistant.models import Incident, Review
from noc_assistant.store import SqliteStore, Store
from noc_assistant.stream.replay import run_replay
from noc_assistant.triage.drafting import Drafter
from tests.builders import make_finding

TOKEN = "t0ken-for-reviews"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
ROAMING = "inc-roaming-partner-registration-0"
NRF = "inc-nrf-discovery-failure-0"


@pytest.fixture()
def store(tmp_path: Path) -> Iterator[Store]:
    s = SqliteStore(tmp_path / "noc.db")
    topo = load_inventory(PACK.fixture_path("inventory.yaml"), PACK)
    for rule in ("roaming-partner-registration", "nrf-discovery-failure"):
        inc, diagnosis, findings = case(rule, 0, topo)
        s.save_incident(inc)
        s.save_findings(findings, incident_id=inc.id)
        s.save_diagnosis(diagnosis)
    # a third page, on nothing: a KPI that blipped
    t = s.get_incident(NRF).opened_at + 86400.0  # type: ignore[union-attr]
    blip = make_finding(
        "amf-reg-success",
        "amf-01",
        0.9,
        (0.97, 1.0),
        id="f-blip",
        detector="ensemble",
        ts=t,
        score=9.0,
    )
    s.save_incident(
        Incident(
            id="inc-blip", fingerprint="b", opened_at=t, updated_at=t + 60, entities=["amf-01"]
        )
    )
    s.save_findings([blip], incident_id="inc-blip")
    yield s
    s.close()


def _client(store: Store, token: str | None = TOKEN) -> TestClient:
    topo = load_inventory(PACK.fixture_path("inventory.yaml"), PACK)
    return TestClient(create_app(store, drafter=Drafter(PACK, topo), api_token=token))


def test_a_verdict_holds_together() -> None:
    r = Review(incident_id="i")
    with pytest.raises(ReviewError, match="both the fault class and the entity"):
        r.judged("fault", "ana", 1.0, fault="udm_timeout")
    with pytest.raises(ReviewError, match="goes with the verdict 'fault'"):
        r.judged("no_fault", "ana", 1.0, fault="udm_timeout", entity="udm-1")
    r = r.acknowledged("ana", 10.0).acknowledged("bo", 20.0)  # handed over
    assert (r.acknowledged_by, r.acknowledged_at) == ("bo", 10.0)
    judged = Review(incident_id="i").judged("maintenance", "cy", 30.0)
    assert (judged.acknowledged_by, judged.acknowledged_at) == ("cy", 30.0)  # seen, so taken


def test_acknowledge_and_judge_need_the_token_a_name_and_a_known_fault(store: Store) -> None:
    c = _client(store)
    url = f"/api/incidents/{NRF}"
    assert c.post(f"{url}/ack", json={"by": "ana"}).status_code == 401
    assert (
        _client(store, None).post(f"{url}/ack", headers=AUTH, json={"by": "a"}).status_code == 503
    )
    assert c.post(f"{url}/ack", headers=AUTH, json={}).status_code == 422
    assert c.post("/api/incidents/nope/ack", headers=AUTH, json={"by": "ana"}).status_code == 404
    r = c.post(f"{url}/ack", headers=AUTH, json={"by": "ana"})
    assert r.status_code == 200 and r.json()["acknowledged_by"] == "ana"
    bad = {"by": "ana", "verdict": "fault", "fault": "gremlins", "entity": "nrf-01"}
    r = c.post(f"{url}/verdict", headers=AUTH, json=bad)
    assert r.status_code == 422 and "gremlins" in r.json()["detail"]
    half = {"by": "ana", "verdict": "fault", "fault": "nrf_discovery_failure"}
    assert c.post(f"{url}/verdict", headers=AUTH, json=half).status_code == 422
    good = {**half, "entity": "nrf-01", "note": "NRF restarted at 10:40"}
    r = c.post(f"{url}/verdict", headers=AUTH, json=good)
    assert r.status_code == 200
    review = c.get(f"{url}/review").json()
    assert (review["verdict"], review["fault"], review["entity"]) == (
        "fault",
        "nrf_discovery_failure",
        "nrf-01",
    )
    assert [(e["action"], e["by"]) for e in review["history"]] == [
        ("acknowledged", "ana"),
        ("judged", "ana"),
    ]
    page = c.get(f"/incidents/{NRF}").text
    assert "Taken by <strong>ana</strong>" in page and "NRF restarted at 10:40" in page
    assert c.get("/api/incidents/nope/review").status_code == 404


def test_the_live_report_counts_what_the_engineers_judged(store: Store) -> None:
    c = _client(store)
    roaming = store.get_diagnosis(ROAMING)
    assert roaming is not None
    top = roaming.top
    verdicts = [
        (ROAMING, {"verdict": "fault", "fault": top.fault, "entity": top.entity}),
        (NRF, {"verdict": "fault", "fault": "udm_timeout", "entity": "udm-01"}),  # RCA was wrong
        ("inc-blip", {"verdict": "no_fault", "note": "a KPI blip"}),
    ]
    for incident_id, v in verdicts:
        r = c.post(f"/api/incidents/{incident_id}/verdict", headers=AUTH, json={"by": "ana", **v})
        assert r.status_code == 200, r.text
    since = "2000-01-01T00:00:00Z"
    rep = c.get("/api/eval/live", params={"since": since, "until": "2100-01-01T00:00:00Z"}).json()
    assert (rep["incidents_total"], rep["reviewed"], rep["unreviewed"]) == (3, 3, 0)
    assert (rep["true_positives"], rep["false_positives"]) == (2, 1)
    assert rep["false_alarm_share"] == pytest.approx(1 / 3)
    low, high = rep["false_alarm_share_ci95"]
    assert 0.0 < low < 1 / 3 < high < 1.0
    assert rep["rca_ac1"] == 0.5 and rep["rca_noop_accuracy"] in (0.0, 1.0)
    assert rep["rca_failures"] == [f"{NRF}: udm_timeout on udm-01 -> {_top(store, NRF)}"]
    assert rep["false_alert_list"] == ["inc-blip"]
    assert next(iter(rep["per_kpi"])) == "amf-reg-success"  # the noisiest KPI first
    assert rep["per_kpi"]["amf-reg-success"]["false_positives"] == 1
    assert rep["entities"] and rep["false_alerts_per_entity_day"] > 0
    assert rep["time_to_acknowledge_s_p50"] is not None  # judged, so acknowledged
    assert rep["time_to_resolve_s_p50"] is None  # none of them resolved
    assert c.get("/api/eval/live", params={"since": "last week"}).status_code == 422
    page = c.get("/eval", params={"since": since, "until": "2100-01-01T00:00:00Z"})
    assert page.status_code == 200
    assert 'id="false-share">33.3 %<' in page.text and "<td>amf-reg-success</td>" in page.text
    assert f"{NRF}: udm_timeout on udm-01" in page.text
    index = c.get("/").text
    assert "false alarms: 1 of 3 judged" in index and "no fault" in index
    labels = c.get("/api/eval/labels", params={"since": since}).json()
    assert [i["id"] for i in labels["incidents"]] == sorted([ROAMING, NRF])
    assert [w["id"] for w in labels["no_fault"]] == ["inc-blip"]


def _top(store: Store, incident_id: str) -> str:
    d = store.get_diagnosis(incident_id)
    assert d is not None
    return f"{d.top.fault} on {d.top.entity}"


def test_verdicts_become_labels_that_rescore_the_recording(tmp_path: Path) -> None:
    """A day of telemetry runs through the pipeline into a store; the engineers judge every
    incident (here from the simulator's ground truth: the root cause of the fault it overlaps,
    else no fault); the verdicts, written as a labels file, score the same recording with
    `noc eval run` as the live report scored production: every fault found, the pages judged
    false are its false positives, and the RCA figure is the same."""
    sim = tmp_path / "sc"
    faults = "udm_timeout,pfcp_association_loss,kv_cache_saturation"
    args = ["--days", "1", "--interval", "60", "--seed", "5", "--faults", faults]
    assert run(["simulate", "--out", str(sim), *args]) == 0
    telemetry, inventory = sim / "telemetry.jsonl", sim / "inventory.json"
    truth = load_labels(sim / "labels.json")
    result = run_replay(telemetry, inventory=inventory)
    store = SqliteStore(tmp_path / "noc.db")
    by_id = {f.id: f for f in result.findings}
    for inc in result.incidents:
        store.save_incident(inc)
        store.save_findings([by_id[i] for i in inc.finding_ids if i in by_id], incident_id=inc.id)
        if inc.id in result.diagnoses:
            store.save_diagnosis(result.diagnoses[inc.id])
    judged_false = 0
    for inc in result.incidents:
        hit = [
            lab
            for lab in truth.incidents
            if lab.start <= inc.opened_at <= lab.end
            and set(inc.entities) & {*lab.affected, lab.root_cause.entity}
        ]
        review = Review(incident_id=inc.id)
        if hit:
            rc = hit[0].root_cause
            review = review.judged(
                "fault", "ana", inc.opened_at + 300, fault=rc.fault, entity=rc.entity
            )
        else:
            review = review.judged("no_fault", "ana", inc.opened_at + 300)
            judged_false += 1
        store.save_review(review)
    since, until = result.first_ts - 1, result.last_ts + 1
    live = live_report(store, since, until, entities=len(result.entities))
    assert live["incidents_total"] == len(result.incidents) > 0
    assert live["false_positives"] == judged_false and live["unreviewed"] == 0
    assert live["time_to_resolve_s_p50"] > 0  # the faults resolved within the day

    labels = tmp_path / "labels-from-verdicts.json"
    labels.write_text(json.dumps(labels_from_reviews(store, since, until)))
    rep_path = tmp_path / "report.json"
    cmd = ["eval", "run", "--telemetry", str(telemetry), "--labels", str(labels)]
    assert run([*cmd, "--inventory", str(inventory), "--out", str(rep_path)]) == 0
    rep = json.loads(rep_path.read_text())
    assert rep["incidents_total"] == live["true_positives"] > 0
    assert rep["incident_recall"] == 1.0  # every confirmed fault was paged, by construction
    assert rep["false_positives"] >= judged_false  # reopenings of a false one page again
    assert rep["rca_ac1"] == pytest.approx(live["rca_ac1"])


def test_the_cli_acknowledges_judges_and_reports(
    tmp_path: Path, store: Store, use_store: Callable[..., None], capsys: pytest.CaptureFixture[str]
) -> None:
    use_store(store)
    assert run(["incident", "ack", NRF, "--by", "ana"]) == 0
    assert run(["incident", "verdict", NRF, "--by", "ana", "--verdict", "maybe"]) == 2
    assert "is not fault, no_fault or maintenance" in capsys.readouterr().err
    cause = ["--fault", "nrf_discovery_failure", "--entity", "nrf-01"]
    assert run(["incident", "verdict", NRF, "--by", "ana", "--verdict", "fault", *cause]) == 0
    assert run(["incident", "verdict", "inc-blip", "--by", "bo", "--verdict", "no_fault"]) == 0
    assert (
        run(["incident", "verdict", "inc-blip", "--by", "bo", "--verdict", "no_fault", *cause]) == 2
    )
    capsys.readouterr()
    assert run(["incident", "list"]) == 0
    listed = capsys.readouterr().out
    assert "fault: nrf_discovery_failure" in listed and "no_fault" in listed
    out = tmp_path / "live.json"
    since = ["--since", "2000-01-01T00:00:00Z", "--until", "2100-01-01T00:00:00Z"]
    assert run(["eval", "live", *since, "--out", str(out)]) == 0
    rep = json.loads(out.read_text())
    assert (rep["false_positives"], rep["true_positives"], rep["unreviewed"]) == (1, 1, 1)
    assert rep["unreviewed_list"] == [ROAMING]
    labels = tmp_path / "labels.json"
    assert run(["eval", "labels", *since, "--out", str(labels)]) == 0
    doc = load_labels(labels)
    assert [i.root_cause.fault for i in doc.incidents] == ["nrf_discovery_failure"]
    assert "1 not judged" in capsys.readouterr().out
    assert run(["eval", "live", "--since", "yesterday"]) == 2


def test_a_verdict_heads_the_report_and_governs_the_partner_email(store: Store) -> None:
    """The report opens with what the NOC decided; a partner is told nothing about an
    incident judged no fault, or whose confirmed root cause is not theirs."""
    c = _client(store)
    emails = f"/api/incidents/{ROAMING}/emails"
    verdict = f"/api/incidents/{ROAMING}/verdict"
    note = f"subscriber imsi-{IMSI} confirmed fine"
    judged = {"by": "ana", "verdict": "no_fault", "note": note}
    assert c.post(verdict, headers=AUTH, json=judged).status_code == 200
    body = c.get(f"/api/incidents/{ROAMING}/report").json()["body"]
    assert "**Verdict of the NOC: no fault**, by ana: subscriber imsi-" in body
    assert IMSI not in body  # an engineer's note is masked like the rest
    r = c.post(emails, headers=AUTH)
    assert r.status_code == 409 and "judged no_fault by ana" in r.json()["detail"]
    assert "Draft an e-mail to partner" not in c.get(f"/incidents/{ROAMING}").text
    other = {"by": "bo", "verdict": "fault", "fault": "udm_timeout", "entity": "udm-01"}
    assert c.post(verdict, headers=AUTH, json=other).status_code == 200
    r = c.post(emails, headers=AUTH)
    assert r.status_code == 409 and "bo confirmed udm_timeout on udm-01" in r.json()["detail"]
    wrong_partner = {**other, "fault": "roaming_partner_outage", "entity": "sepp-01"}
    wrong_partner["partner"] = "310-260"
    assert c.post(verdict, headers=AUTH, json=wrong_partner).status_code == 200
    assert c.post(emails, headers=AUTH).status_code == 409
    theirs = {**wrong_partner, "partner": "262-01"}
    assert c.post(verdict, headers=AUTH, json=theirs).status_code == 200
    assert "Draft an e-mail to partner 262-01" in c.get(f"/incidents/{ROAMING}").text
    assert c.post(emails, headers=AUTH).status_code == 201
    assert store.list_emails(ROAMING)[0].to == ["noc@partner-a.example"]
