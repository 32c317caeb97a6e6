"""RCA on hand-built incidents: each fault class ranks first, benign incidents give no_fault."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import pytest

from knowledge.pack import Pack, load_pack
from knowledge.rules import fixture_findings
from knowledge.topology import Topology, load_inventory
from noc_assistant.models import Diagnosis, Finding, Incident
from noc_assistant.triage.rca import diagnose
from tests.builders import make_finding

PACK = load_pack()


@pytest.fixture(scope="module")
def topo() -> Topology:
    return load_inventory(PACK.fixture_path("inventory.yaml"), PACK)


def _incident(findings: Sequence[Finding]) -> Incident:
    ts = [f.ts for f in findings] or [0.0]
    return Incident(
        id="inc-1",
        fingerprint="fp",
        opened_at=min(ts),
        updated_at=max(ts),
        entities=sorted({f.entity for f in findings}),
        finding_ids=[f.id for f in findings],
    )


def _findings(pack: Pack, rule_id: str, index: int, topo: Topology) -> list[Finding]:
    fixture = pack.rules[rule_id].tests[index]
    return [
        Finding(
            id=f.id,
            detector="test",
            kpi=f.kpi,
            entity=f.entity,
            entity_type=f.entity_type,
            ts=f.ts,
            score=f.score,
            observed=f.observed,
            expected_low=f.expected_low,
            expected_high=f.expected_high,
            direction=f.direction,
            labels=f.labels,
        )
        for f in fixture_findings(rule_id, index, fixture, topo)
    ]


def _cases() -> list[tuple[str, int, str, str]]:
    out = []
    for rule in PACK.rules.values():
        for i, t in enumerate(rule.tests):
            if t.expect is not None and t.rank1:
                out.append((rule.id, i, t.expect.fault, t.expect.entity))
    return out


def _check_grounded(d: Diagnosis, findings: Sequence[Finding]) -> None:
    by_id = {f.id: f for f in findings}
    for h in d.hypotheses:
        for ev in (*h.evidence_ids, *h.refuted_by):
            item = d.evidence_by_id(ev)
            assert item is not None, ev
            if item.kind == "finding":
                assert item.finding_id in by_id
                assert item.values[0] == by_id[item.finding_id].observed
        assert set(h.references) <= set(PACK.references)


@pytest.mark.parametrize(("rule_id", "index", "fault", "entity"), _cases())
def test_expected_hypothesis_ranks_first(
    topo: Topology, rule_id: str, index: int, fault: str, entity: str
) -> None:
    findings = _findings(PACK, rule_id, index, topo)
    d = diagnose(_incident(findings), findings, topo, PACK)
    assert (d.top.fault, d.top.entity) == (fault, entity), d.hypotheses
    assert d.verdict == ("no_fault" if fault == "no_fault" else "fault")
    confidences = [h.confidence for h in d.hypotheses]
    assert confidences == sorted(confidences, reverse=True)
    assert any(h.fault == "no_fault" for h in d.hypotheses)
    if fault != "no_fault":
        assert d.top.evidence_ids and d.top.references and d.top.checks
    _check_grounded(d, findings)


def test_every_fault_class_is_diagnosed() -> None:
    faults = {c[2] for c in _cases()}
    assert set(PACK.faults) <= faults


def test_roaming_names_the_partner(topo: Topology) -> None:
    findings = _findings(PACK, "roaming-partner-registration", 0, topo)
    d = diagnose(_incident(findings), findings, topo, PACK)
    assert d.top.partner == "262-01"
    assert any(d.evidence_by_id(e).kind == "inventory" for e in d.top.evidence_ids)  # type: ignore[union-attr]


def test_root_without_metrics_found_through_topology(topo: Topology) -> None:
    findings = _findings(PACK, "udm-timeout", 0, topo)
    d = diagnose(_incident(findings), findings, topo, PACK)
    assert d.top.entity == "udm-01"
    assert all(f.entity != "udm-01" for f in findings)


def test_competitors_say_what_refutes_them(topo: Topology) -> None:
    findings = _findings(PACK, "kv-cache-saturation", 1, topo)  # long prompts fill the cache
    d = diagnose(_incident(findings), findings, topo, PACK)
    assert d.top.fault == "long_context_kv_cost"
    kv = next(h for h in d.hypotheses if h.fault == "kv_cache_saturation")
    assert kv.refuted_by
    notes = [d.evidence_by_id(e).summary for e in kv.refuted_by]  # type: ignore[union-attr]
    assert any("long-context" in n for n in notes)


def test_benign_and_empty_incidents_give_no_fault(topo: Topology) -> None:
    f = make_finding(
        "gpu-requests-waiting",
        "gpu-srv-01",
        3,
        (0, 2),
        entity_type="gpu_server",
        ts=10.0,
        score=0.7,
    )
    d = diagnose(_incident([f]), [f], topo, PACK)
    assert d.verdict == "no_fault" and d.top.fault == "no_fault"
    assert d.top.evidence_ids and d.evidence_by_id(d.top.evidence_ids[0]) is not None
    empty = diagnose(_incident([]), [], topo, PACK)
    assert empty.top.fault == "no_fault" and empty.top.confidence == 1.0


def test_only_the_incidents_findings_are_used(topo: Topology) -> None:
    findings = _findings(PACK, "pfcp-association-loss", 0, topo)
    other = make_finding(
        "gpu-xid-last", "gpu-srv-01", 79, (0, 0), id="other", entity_type="gpu_server", ts=1.0
    )
    d = diagnose(_incident(findings), [*findings, other], topo, PACK)
    assert d.top.fault == "pfcp_association_loss"
    assert all(h.fault != "gpu_xid_error" for h in d.hypotheses)


def test_works_without_inventory() -> None:
    findings = [
        make_finding("sbi-udm-latency", "amf-1", 3, (0, 0.1), id="a", entity_type="amf", ts=1.0),
        make_finding(
            "sbi-udm-error-share", "amf-1", 0.4, (0, 0.01), id="b", entity_type="amf", ts=61.0
        ),
    ]
    topo = Topology.infer({"amf-1": "amf"}, PACK)
    d = diagnose(_incident(findings), findings, topo, PACK)
    assert d.top.fault == "udm_timeout" and d.top.entity == "udm"


@pytest.mark.parametrize("prior", [0.35, 5.0])
def test_a_candidate_rule_never_outranks_no_fault(topo: Topology, prior: float) -> None:
    """Weak signs (``candidate: true``) are listed under a no-fault answer, whatever their
    prior and support: an ordinary busy hour must not become a compressed-weights claim."""
    rule = PACK.rules["compressed-weights-step-slowdown"]
    assert rule.candidate
    pack = replace(PACK, rules={**PACK.rules, rule.id: rule.model_copy(update={"prior": prior})})
    findings = _findings(pack, rule.id, 0, topo)
    d: Diagnosis = diagnose(_incident(findings), findings, topo, pack)
    assert d.verdict == "no_fault"
    faults = [h.fault for h in d.hypotheses]
    assert faults[0] == "no_fault" and "compressed_weights_high_concurrency" in faults[1:3]
    # the same rule without the flag and with a strong prior would claim it
    strong = rule.model_copy(update={"prior": 5.0, "candidate": False})
    claimed = replace(PACK, rules={**PACK.rules, rule.id: strong})
    assert diagnose(_incident(findings), findings, topo, claimed).verdict == "fault"
