"""What a person is paged for: duplicate pages, notices, pages per fault, the days of data."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace as NS
from typing import Any

import pytest

from evals.live import live_report
from evals.scenario import Alert, alerts_raised, score_scenario
from noc_assistant.cli import run as cli_run
from noc_assistant.cli._console import console
from noc_assistant.models import Hypothesis, Incident, Review
from noc_assistant.settings import get_settings
from noc_assistant.store import SqliteStore

H = 3600.0
LABELS = {
    "incidents": [
        {
            "id": "i1",
            "start": 10 * H,
            "end": 12 * H,
            "root_cause": {"entity": "upf-3", "fault": "pfcp_association_loss"},
            "affected": ["smf-1", "upf-3"],
        }
    ],
    "no_fault": [],
    "maintenance": [],
}
ENTITIES = ["amf-1", "smf-1", "upf-3"]
SPAN = (0.0, 48 * H)
NORMAL_DAYS = (3 * 48 - 2 * 2) / 24  # smf-1 and upf-3 lose i1's two hours


def _incident(iid: str, at: float, entity: str, **extra: Any) -> NS:
    """An incident as :func:`alerts_raised` reads it (``extra``: severity, hypotheses...)."""
    fields: dict[str, Any] = {"reopened_at": [], "escalated_at": [], "hypotheses": []}
    fields |= extra
    return NS(id=iid, opened_at=at, entities=[entity], finding_ids=[], **fields)


def test_two_incidents_for_one_fault_page_once_too_often() -> None:
    """The correlator split one PFCP loss into two incidents (on the UPF, then the SMF) and
    one of them escalated: three pages for one fault, two of them duplicates, counted with
    the false page in the headline rate (before, the report said 1 false page and showed
    nothing of the other two)."""
    incidents = [
        _incident("inc-a", 10 * H + 60, "upf-3", escalated_at=[10 * H + 900]),
        _incident("inc-b", 10 * H + 300, "smf-1"),
        _incident("inc-c", 30 * H, "amf-1"),  # outside every window: false
    ]
    r = score_scenario(alerts_raised(incidents, []), LABELS, ENTITIES, SPAN)
    assert (r["alerts_total"], r["false_positives"], r["duplicate_pages"]) == (4, 1, 2)
    assert [d["alert"] for d in r["duplicate_page_list"]] == ["inc-b", "inc-a^1"]
    assert r["duplicate_page_list"][0]["incidents"] == ["i1"]
    assert r["false_alerts_per_entity_day"] == pytest.approx(3 / NORMAL_DAYS)
    assert r["false_alerts_excluding_duplicates_per_entity_day"] == pytest.approx(1 / NORMAL_DAYS)
    assert (r["pages_per_labelled_fault_mean"], r["pages_per_labelled_fault_max"]) == (3.0, 3)
    assert r["incident_recall"] == 1.0


def test_one_page_per_fault_has_no_duplicate() -> None:
    r = score_scenario([Alert("upf-3", 10 * H + 60, (), "inc-a")], LABELS, ENTITIES, SPAN)
    assert r["duplicate_pages"] == 0 and r["false_alerts_per_entity_day"] == 0.0
    assert r["pages_per_labelled_fault_mean"] == 1.0


def test_a_page_for_two_overlapping_faults_is_not_a_duplicate() -> None:
    """One page on an entity two labelled faults share answers both: it is no duplicate,
    and a later page for the second fault alone is."""
    labels = {
        "incidents": [
            *LABELS["incidents"],
            {
                "id": "i2",
                "start": 11 * H,
                "end": 13 * H,
                "root_cause": {"entity": "smf-1", "fault": "udm_timeout"},
            },
        ]
    }
    alerts = [Alert("smf-1", 11 * H + 60, (), "a1"), Alert("smf-1", 12 * H + 600, (), "a2")]
    r = score_scenario(alerts, labels, ENTITIES, SPAN)
    assert r["duplicate_pages"] == 1
    assert [(d["alert"], d["incidents"]) for d in r["duplicate_page_list"]] == [("a2", ["i2"])]


def test_a_notice_pages_no_one() -> None:
    """An incident marked as a notice (severity ``info``) is on the console, not on anyone's
    phone: it is neither a false page nor a duplicate, and the recall without it is a miss."""
    incidents = [
        _incident("inc-n", 10 * H + 60, "upf-3", severity="info"),  # the fault, as a notice
        _incident("inc-m", 30 * H, "amf-1", severity="info"),  # a false notice
    ]
    r = score_scenario(alerts_raised(incidents, []), LABELS, ENTITIES, SPAN)
    assert (r["alerts_total"], r["notices_total"]) == (0, 2)
    assert (r["false_positives"], r["duplicate_pages"]) == (0, 0)
    assert r["false_alerts_per_entity_day"] == 0.0
    assert (r["incident_recall"], r["incident_recall_with_notices"]) == (0.0, 1.0)
    # the same fault paged after the notice: its first page, no duplicate
    paged = [*incidents, _incident("inc-p", 10 * H + 600, "smf-1")]
    r = score_scenario(alerts_raised(paged, []), LABELS, ENTITIES, SPAN)
    assert (r["alerts_total"], r["duplicate_pages"], r["incident_recall"]) == (1, 0, 1.0)


def test_pages_whose_own_cause_is_no_fault_are_listed() -> None:
    nothing = [Hypothesis(fault="no_fault", entity="", confidence=0.9)]
    cause = [Hypothesis(fault="pfcp_association_loss", entity="upf-3", confidence=0.8)]
    incidents = [
        _incident("inc-a", 10 * H + 60, "upf-3", hypotheses=cause),
        _incident("inc-z", 30 * H, "amf-1", hypotheses=nothing, reopened_at=[31 * H]),
        _incident("inc-q", 35 * H, "amf-1", hypotheses=nothing, severity="info"),  # no page
    ]
    r = score_scenario(alerts_raised(incidents, []), LABELS, ENTITIES, SPAN)
    assert r["no_fault_pages"] == ["inc-z"] and r["no_fault_pages_total"] == 2


def _saved(store: SqliteStore, iid: str, at: float, **extra: Any) -> None:
    store.save_incident(
        Incident(id=iid, fingerprint=iid, opened_at=at, updated_at=at + 600, **extra)
    )


def test_live_counts_duplicate_pages_over_the_days_of_data() -> None:
    """A day of data asked for over a week: the rate is per day of data. Two incidents the
    engineers confirmed as the same PFCP loss, one escalated, and a false page."""
    store = SqliteStore(":memory:")
    _saved(store, "inc-a", 0.0, resolved_at=1800.0, escalated_at=[300.0], entities=["upf-3"])
    _saved(store, "inc-b", 900.0, entities=["smf-1"])  # opened while inc-a was open
    _saved(store, "inc-c", 7200.0, entities=["upf-3"])  # the same cause, hours later
    _saved(store, "inc-z", 86400.0 - 600.0, entities=["amf-1"])  # the day's last record
    _saved(store, "inc-n", 3600.0, entities=["amf-1"], severity="info")  # a notice: no page
    cause = {"fault": "pfcp_association_loss", "entity": "upf-3"}
    for iid in ("inc-a", "inc-b", "inc-c"):
        store.save_review(Review(incident_id=iid).judged("fault", "ana", at=1e4, **cause))
    store.save_review(Review(incident_id="inc-z").judged("no_fault", "ana", at=1e5))
    r = live_report(store, since=-6 * 86400.0, until=86400.0, entities=10)
    assert r["days"] == pytest.approx(1.0) and r["data_since"] == "1970-01-01T00:00:00Z"
    assert (r["alerts_total"], r["false_pages"], r["duplicate_pages"]) == (5, 1, 2)
    assert (r["incidents_total"], r["notices_total"]) == (5, 1)
    assert (r["pages_per_labelled_fault_mean"], r["pages_per_labelled_fault_max"]) == (2.0, 3)
    assert r["false_alerts_per_entity_day"] == pytest.approx(3 / 10)
    assert r["false_alerts_excluding_duplicates_per_entity_day"] == pytest.approx(1 / 10)
    assert r["false_alerts_per_day"] == pytest.approx(3.0)


@pytest.fixture()
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    url = f"sqlite:///{tmp_path / 'noc.db'}"
    monkeypatch.setenv("NOC_DB_URL", url)
    monkeypatch.setattr(console, "width", 80)  # narrow: a wrapped line would break the JSON
    get_settings.cache_clear()
    yield url
    get_settings.cache_clear()


def test_eval_live_json_is_json_alone(db: str, capsys: pytest.CaptureFixture[str]) -> None:
    store = SqliteStore(db.removeprefix("sqlite:///"))
    _saved(store, "inc-a", 1.8e9, entities=["upf-3"], title="a long title " * 20)
    store.save_review(Review(incident_id="inc-a").judged("no_fault", "ana", at=1.8e9 + 60))
    capsys.readouterr()
    since = ["--since", "2020-01-01T00:00:00Z", "--until", "2030-01-01T00:00:00Z"]
    assert cli_run(["eval", "live", *since, "--json"]) == 0
    out, err = capsys.readouterr()
    rep = json.loads(out)
    assert rep["false_pages"] == 1 and rep["days"] == pytest.approx(600 / 86400)
    assert "1 incidents" in err and "duplicate" in err


def test_eval_run_json_is_json_alone(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tel = tmp_path / "t.jsonl"
    rows = [
        {
            "ts": 1.8e9 + 15 * i,
            "metric": "fivegs_amffunction_rm_reginitreq",
            "labels": {"instance": "amf-1", "nf": "amf"},
            "value": 1000.0 + 10 * i,
            "type": "counter",
        }
        for i in range(120)
    ]
    tel.write_text("".join(json.dumps(r) + "\n" for r in rows))
    labels = tmp_path / "l.json"
    labels.write_text(json.dumps({"incidents": [], "no_fault": [], "maintenance": []}))
    out_file = tmp_path / "r.json"
    args = ["eval", "run", "--telemetry", str(tel), "--labels", str(labels), "--json"]
    assert cli_run([*args, "--out", str(out_file)]) == 0
    out, err = capsys.readouterr()
    rep = json.loads(out)
    assert rep == json.loads(out_file.read_text())
    for key in ("duplicate_pages", "false_alerts_excluding_duplicates_per_entity_day"):
        assert key in rep
    assert rep["no_fault_pages"] == [] and rep["pages_per_labelled_fault_mean"] is None
    assert "report written to" in err and "pages" in err


def test_a_promoted_notice_pages_once_at_its_promotion() -> None:
    """An incident that opened as a notice and became a page (an escalation) was paged once:
    its opening is no page and its promotion no duplicate."""
    from types import SimpleNamespace as NS

    from evals.scenario import alerts_raised

    inc = NS(
        id="i1",
        opened_at=100.0,
        entities=["amf-1"],
        finding_ids=[],
        reopened_at=[],
        escalated_at=[160.0],
        severity="page",
        noticed_at=100.0,
    )
    alerts = alerts_raised([inc], [])
    assert [(a.opened_at, a.page) for a in alerts] == [(100.0, False), (160.0, True)]
