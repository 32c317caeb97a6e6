"""RCA metric code of evals/rca.py on hand-made cases."""

from __future__ import annotations

import math

import pytest

from evals.rca import (
    Labels,
    RcaCase,
    cases_from_run,
    evidence_resolution,
    reliability_table,
    report_keys,
    score_rca,
)
from noc_assistant.models import Diagnosis, Evidence, Finding, Hypothesis, Incident


def h(fault: str, entity: str, conf: float, partner: str | None = None) -> Hypothesis:
    return Hypothesis(fault=fault, entity=entity, confidence=conf, partner=partner)


def test_ac1_ac3_and_noop() -> None:
    cases = [
        RcaCase("a", "udm_timeout", "udm-1", [h("udm_timeout", "udm-1", 0.9)]),
        RcaCase(
            "b",
            "n2_sctp_loss",
            "amf-1",
            [
                h("registration_storm", "amf-1", 0.5),
                h("no_fault", "", 0.3),
                h("n2_sctp_loss", "amf-1", 0.2),
            ],
        ),
        RcaCase(
            "c",
            "nccl_hang",
            "gpu-1",
            [
                h("nccl_hang", "gpu-2", 0.5),
                h("a", "x", 0.2),
                h("b", "x", 0.1),
                h("nccl_hang", "gpu-1", 0.1),
            ],
        ),
        RcaCase("d", "upf_gtpu_drop", "upf-1", []),
        RcaCase("e", None, None, [h("no_fault", "", 0.8)]),
        RcaCase("f", None, None, []),
        RcaCase("g", None, None, [h("kv_cache_saturation", "gpu-1", 0.6)]),
    ]
    s = score_rca(cases)
    assert (s.fault_cases, s.noop_cases) == (4, 3)
    assert s.ac1 == 0.25
    assert s.ac3 == 0.5
    assert s.noop_accuracy == pytest.approx(2 / 3)
    assert len(s.failures) == 4
    keys = report_keys(s)
    assert keys["rca_ac1"] == 0.25 and keys["rca_noop_accuracy"] == pytest.approx(2 / 3)
    assert keys["rca_by_fault"]["n2_sctp_loss"] == {"cases": 1, "ac1": 0.0, "ac3": 1.0}
    assert keys["rca_by_fault"]["no_fault"]["ac1"] == pytest.approx(2 / 3)
    assert len(keys["rca_failures"]) == 4


def test_partner_match_counts_for_roaming() -> None:
    case = RcaCase(
        "r",
        "roaming_partner_outage",
        "sepp-9",
        [h("roaming_partner_outage", "sepp-1", 0.9, partner="262-01")],
        partner="262-01",
    )
    assert case.correct_at(1)


def test_reliability_and_calibration() -> None:
    table = reliability_table([0.95, 0.92, 0.15, 0.55], [True, False, False, True], bins=10)
    assert [(b.low, b.count) for b in table] == [(0.1, 1), (0.5, 1), (0.9, 2)]
    top = table[-1]
    assert top.accuracy == 0.5 and top.mean_confidence == pytest.approx(0.935)
    perfect = score_rca(
        [
            RcaCase("a", "f", "e", [h("f", "e", 1.0)]),
            RcaCase("b", None, None, [h("no_fault", "", 1.0)]),
        ]
    )
    assert perfect.ece == 0.0 and perfect.brier == 0.0
    assert math.isnan(score_rca([]).ac1)


def _finding(fid: str, entity: str, ts: float, observed: float) -> Finding:
    return Finding(
        id=fid,
        detector="t",
        kpi="k",
        entity=entity,
        ts=ts,
        score=1,
        observed=observed,
        expected_low=0,
        expected_high=1,
        direction="up",
    )


def _diag(inc: str, hyp: Hypothesis, evidence: list[Evidence]) -> Diagnosis:
    verdict = "no_fault" if hyp.fault == "no_fault" else "fault"
    return Diagnosis(incident_id=inc, verdict=verdict, hypotheses=[hyp], evidence=evidence)


def test_evidence_resolution_checks_ids_and_values() -> None:
    f = _finding("f1", "upf-1", 100, 0.2)
    good = Evidence(
        id="ev-f1", finding_id="f1", entity="upf-1", start=100, end=100, values=(0.2, 0, 1)
    )
    wrong_value = Evidence(
        id="ev-x", finding_id="f1", entity="upf-1", start=100, end=100, values=(0.3,)
    )
    hyp = Hypothesis(
        fault="upf_gtpu_drop",
        entity="upf-1",
        confidence=0.9,
        evidence_ids=("ev-f1", "ev-x", "ev-missing"),
    )
    assert evidence_resolution(_diag("i", hyp, [good, wrong_value]), {"f1": f}) == (1, 3)


def test_cases_from_run_pairs_labels_with_incidents() -> None:
    labels = Labels.model_validate(
        {
            "incidents": [
                {
                    "id": "L1",
                    "start": "2026-11-29T10:00:00Z",
                    "end": "2026-11-29T10:30:00Z",
                    "root_cause": {"entity": "upf-3", "fault": "pfcp_association_loss"},
                    "affected": ["smf-1", "upf-3"],
                    "partner": None,
                }
            ],
            "no_fault": [
                {"id": "N1", "start": 1_800_000_000, "end": 1_800_003_600},
                {"id": "N2", "start": 1_900_000_000, "end": 1_900_003_600},
            ],
        }
    )
    t0 = labels.incidents[0].start
    inc_a = Incident(
        id="A",
        fingerprint="a",
        opened_at=t0 + 60,
        updated_at=t0 + 600,
        entities=["smf-1"],
        finding_ids=["f1"],
    )
    inc_b = Incident(
        id="B", fingerprint="b", opened_at=t0 + 30, updated_at=t0 + 600, entities=["amf-1"]
    )
    inc_c = Incident(
        id="C",
        fingerprint="c",
        opened_at=1_800_000_100,
        updated_at=1_800_000_200,
        entities=["amf-1"],
    )
    ev = Evidence(id="ev-f1", finding_id="f1", entity="smf-1", start=t0, end=t0, values=(1.0,))
    diagnoses = {
        "A": _diag(
            "A",
            Hypothesis(
                fault="pfcp_association_loss",
                entity="upf-3",
                confidence=0.8,
                evidence_ids=("ev-f1",),
            ),
            [ev],
        ),
        "B": _diag("B", h("registration_storm", "amf-1", 0.7), []),
        "C": _diag("C", h("no_fault", "", 0.7), []),
    }
    cases = cases_from_run(
        labels, [inc_a, inc_b, inc_c], diagnoses, [_finding("f1", "smf-1", t0, 1.0)]
    )
    by_id = {c.case_id: c for c in cases}
    assert by_id["L1"].correct_at(1)
    assert (by_id["L1"].evidence_resolved, by_id["L1"].evidence_cited) == (1, 1)
    assert by_id["N1"].correct_at(1) and by_id["N2"].correct_at(1)
    s = score_rca(cases)
    assert s.ac1 == 1.0 and s.noop_accuracy == 1.0 and s.evidence_resolution_rate == 1.0
