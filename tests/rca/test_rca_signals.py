"""RCA semantics that decide between look-alike faults and no_fault on live-like findings."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from evals.rca import Labels, cases_from_run
from knowledge.pack import load_pack
from knowledge.rules import evaluate
from knowledge.topology import Topology, load_inventory
from noc_assistant.models import Diagnosis, Direction, Finding, Hypothesis, Incident
from noc_assistant.triage.rca import diagnose

PACK = load_pack()
T0 = 1_790_000_000.0


@pytest.fixture(scope="module")
def topo() -> Topology:
    return load_inventory(PACK.fixture_path("inventory.yaml"), PACK)


def f(
    fid: str,
    kpi: str,
    entity: str,
    direction: Direction,
    observed: float,
    t: float = 0.0,
    low: float = 0.0,
    high: float = 0.0,
    **labels: str,
) -> Finding:
    return Finding(
        id=fid,
        detector="t",
        kpi=kpi,
        entity=entity,
        ts=T0 + t,
        score=1.0,
        observed=observed,
        expected_low=low,
        expected_high=high,
        direction=direction,
        labels=tuple(sorted(labels.items())),
    )


def incident(findings: Sequence[Finding], iid: str = "inc-1") -> Incident:
    ts = [x.ts for x in findings]
    return Incident(
        id=iid,
        fingerprint="fp",
        opened_at=min(ts),
        updated_at=max(ts),
        entities=sorted({x.entity for x in findings}),
        finding_ids=[x.id for x in findings],
    )


def top(findings: Sequence[Finding], topo: Topology) -> tuple[str, str]:
    d = diagnose(incident(findings), findings, topo, PACK)
    return d.top.fault, d.top.entity


def test_lone_anchor_is_not_corroborated(topo: Topology) -> None:
    # one consumer's UDM latency, nothing else: noise explains it as well as a fault
    lone = [f("a", "sbi-udm-latency", "amf-01", "up", 0.0064, low=-0.1, high=0.15)]
    assert top(lone, topo) == ("no_fault", "")
    match = next(m for m in evaluate(lone, topo, PACK) if m.rule.id == "udm-timeout")
    assert match.coverage == 0.0


def test_second_consumer_corroborates_udm_timeout(topo: Topology) -> None:
    two = [
        f("a", "sbi-udm-latency", "amf-01", "up", 0.02, high=0.01),
        f("b", "sbi-udm-latency", "smf-01", "up", 0.02, t=15, high=0.01),
    ]
    assert top(two, topo) == ("udm_timeout", "udm-01")


def test_other_scope_excludes_the_anchor(topo: Topology) -> None:
    one = [
        f("a", "sbi-udm-latency", "amf-01", "up", 0.02, high=0.01),
        f("b", "sbi-udm-error-share", "amf-01", "up", 0.3, t=60),
    ]
    match = next(m for m in evaluate(one, topo, PACK) if m.rule.id == "udm-timeout")
    seen = {(h.part, h.index) for h in match.hits}
    assert ("support", 1) not in seen  # "several consumers" needs another consumer
    assert ("support", 0) in seen


def test_storm_slowing_its_own_calls_is_not_a_udm_fault(topo: Topology) -> None:
    storm = [
        f("a", "amf-registration-attempts", "amf-01", "up", 24, low=5, high=13),
        f("b", "sbi-udm-latency", "amf-01", "up", 0.011, t=180, high=0.009),
        f("c", "amf-registration-success", "amf-01", "down", 0.54, t=390, low=0.9, high=1),
    ]
    assert top(storm, topo) == ("registration_storm", "amf-01")


def test_cache_fuller_than_usual_is_not_saturated(topo: Topology) -> None:
    busy = [
        f("a", "gpu-tokens-per-running-request", "gpu-srv-01", "down", 19, low=30, high=60),
        f("b", "gpu-requests-running", "gpu-srv-01", "up", 250, t=90, high=115),
        f("c", "gpu-requests-waiting", "gpu-srv-01", "up", 15, t=135),
        f("d", "gpu-kv-cache-usage", "gpu-srv-01", "up", 0.67, t=150, high=0.5),
    ]
    assert top(busy, topo) == ("compressed_weights_high_concurrency", "gpu-srv-01")
    full = [
        *busy,
        f("e", "gpu-kv-cache-usage", "gpu-srv-01", "up", 0.99, t=200, high=0.5),
        f("g", "gpu-preemption-rate", "gpu-srv-01", "up", 1.4, t=200),
    ]
    assert top(full, topo) == ("kv_cache_saturation", "gpu-srv-01")


def test_per_plmn_dips_of_every_plmn_are_not_a_partner_outage(topo: Topology) -> None:
    onset = [
        f(
            "a",
            "amf-registration-success-by-plmn",
            "amf-01",
            "down",
            0.92,
            low=0.95,
            high=1.05,
            plmnid="26201",
        )
    ]
    assert top(onset, topo)[0] == "no_fault"  # one dip of one ratio: uncorroborated
    every = [
        *onset,
        f(
            "b",
            "amf-registered-subscribers-by-plmn",
            "amf-01",
            "down",
            1209,
            low=1210,
            high=1260,
            plmnid="26201",
        ),
        f(
            "c",
            "amf-registered-subscribers-by-plmn",
            "amf-01",
            "down",
            157400,
            low=158000,
            high=164000,
            plmnid="99970",
        ),
    ]
    assert top(every, topo)[0] == "no_fault"
    partner = every[:2]  # the partner's success and its registered roamers fall together
    assert top(partner, topo) == ("roaming_partner_outage", "sepp-01")


def test_idle_tensor_pipes_with_a_queue_are_a_hang(topo: Topology) -> None:
    hang = [
        f("a", "gpu-requests-waiting", "gpu-srv-01", "up", 80),
        f("b", "gpu-tensor-active-min", "gpu-srv-01", "down", 0.009, low=0.0, high=0.4),
    ]
    assert top(hang, topo) == ("nccl_hang", "gpu-srv-01")
    assert top(hang[1:], topo)[0] == "no_fault"


# ------------------------------------------------------------ pairing in evals/rca.py


def _diag(inc: str, fault: str, entity: str) -> Diagnosis:
    hyp = Hypothesis(fault=fault, entity=entity, confidence=0.9)
    return Diagnosis(
        incident_id=inc, verdict="no_fault" if fault == "no_fault" else "fault", hypotheses=[hyp]
    )


def test_stale_incident_does_not_answer_for_a_later_fault_or_window() -> None:
    labels = Labels.model_validate(
        {
            "incidents": [
                {
                    "id": "L1",
                    "start": T0 + 7200,
                    "end": T0 + 8400,
                    "root_cause": {"entity": "amf-2", "fault": "n2_sctp_loss"},
                    "affected": ["amf-2"],
                }
            ],
            "no_fault": [{"id": "N1", "start": T0 + 3600, "end": T0 + 5400}],
        }
    )
    # an earlier UDM incident still open (a series never cleared) across both windows
    old = [
        f("o1", "sbi-udm-latency", "amf-2", "up", 1.0),
        f("o2", "sbi-udm-latency", "amf-1", "up", 1.0, t=30),
    ]
    stale = incident(old, "STALE")
    stale.resolved_at = T0 + 9000
    new = [f("n1", "amf-gnb-associations", "amf-2", "down", 16, t=7215, low=40, high=40)]
    fresh = incident(new, "NEW")
    diagnoses = {
        "STALE": _diag("STALE", "udm_timeout", "udm-1"),
        "NEW": _diag("NEW", "n2_sctp_loss", "amf-2"),
    }
    cases = {c.case_id: c for c in cases_from_run(labels, [stale, fresh], diagnoses, old + new)}
    assert cases["L1"].correct_at(1)
    assert cases["N1"].correct_at(1)  # nothing happened inside the window
    # without the run's findings, time overlap alone decides (the stale incident answers)
    blind = {c.case_id: c for c in cases_from_run(labels, [stale, fresh], diagnoses)}
    assert not blind["N1"].correct_at(1)


# ------------------------------------------------------------ correlation feeding the RCA


def test_new_symptom_after_resolve_opens_a_new_incident() -> None:
    from noc_assistant.stream.correlate import Correlator

    c = Correlator(window_s=600, resolve_after_s=300, flap_s=900)
    pfcp = f("p1", "smf-pfcp-peers", "smf-01", "down", 1, low=2, high=2)
    assert [e.kind for e in c.add_finding(pfcp)] == ["opened"]
    c.clear("smf-pfcp-peers", "smf-01", T0 + 600)
    assert [e.kind for e in c.tick(T0 + 900)] == ["resolved"]
    # 5 minutes later: the same series flaps -> the same incident reopens
    again = f("p2", "smf-pfcp-peers", "smf-01", "down", 1, t=1200, low=2, high=2)
    assert [e.kind for e in c.add_finding(again)] == ["reopened"]
    assert c.incidents[next(iter(c.incidents))].reopened_at == [T0 + 1200]  # it pages again
    c.clear("smf-pfcp-peers", "smf-01", T0 + 1300)
    assert [e.kind for e in c.tick(T0 + 1600)] == ["resolved"]
    # a different symptom on the same SMF (UDM calls failing) is another fault: a new incident
    udm = f("u1", "sbi-udm-error-share", "smf-01", "up", 0.5, t=1800)
    events = c.add_finding(udm)
    assert [e.kind for e in events] == ["opened"]
    assert events[0].incident.finding_ids == ["u1"]


def test_maintenance_inhibits_the_entity_and_its_neighbours(topo: Topology) -> None:
    from noc_assistant.stream.correlate import Correlator, MaintenanceWindow

    window = MaintenanceWindow("smf-01", T0, T0 + 3000)
    c = Correlator(window_s=600, related=topo.related, maintenance=[window])
    own = f("m1", "smf-pfcp-peers", "smf-01", "down", 1, t=60, low=2, high=2)
    upf = topo.entities_of_type("upf")[0]
    assert topo.related(upf, "smf-01")
    neighbour = f("m2", "upf-sessions", upf, "down", 2400, t=60, low=6000, high=8600)
    assert c.add_finding(own) == [] and c.add_finding(neighbour) == []
    assert [x.id for x in c.suppressed] == ["m1", "m2"]
    # an entity unrelated to the SMF pages as usual; so does the UPF after the window
    other = topo.entities_of_type("gnb")[0]
    assert not topo.related(other, "smf-01")
    assert [e.kind for e in c.add_finding(f("m3", "gnb-ue", other, "down", 1, t=90))] == ["opened"]
    late = f("m4", "upf-sessions", upf, "down", 2400, t=3600, low=6000, high=8600)
    assert [e.kind for e in c.add_finding(late)] == ["opened"]


def test_partner_findings_on_every_amf_share_one_incident() -> None:
    from noc_assistant.stream.pipeline import Pipeline

    pipe = Pipeline(pack=PACK, rca=False)
    a1 = f("a", "amf-registration-success-by-plmn", "amf-01", "down", 0.8, plmnid="26201")
    a2 = f("b", "amf-registered-subscribers-by-plmn", "amf-02", "down", 1180, t=30, plmnid="26201")
    home = f("c", "amf-registration-success", "amf-02", "down", 0.8, t=30)
    assert pipe._scope(a1) == pipe._scope(a2) == "plmn:26201"
    assert pipe._scope(home) is None
    assert pipe._scope(f("d", "sbi-udm-latency", "amf-01", "up", 1.0)) == "nf:udm"
    [opened] = pipe.correlator.add_finding(a1)
    [joined] = pipe.correlator.add_finding(a2)
    assert joined.kind == "updated" and joined.incident is opened.incident


def test_clean_restart_is_no_fault_with_evidence(topo: Topology) -> None:
    restart = [f("r", "nf-process-start-time", "amf-01", "up", T0, low=T0 - 9e6, high=T0 - 9e6)]
    d = diagnose(incident(restart), restart, topo, PACK)
    assert d.top.fault == "no_fault" and d.top.rule_id == "clean-restart"
    assert "ev-r" in d.top.evidence_ids
    lost = [
        *restart,
        f("g", "amf-gnb-associations", "amf-01", "down", 0, t=15, low=2, high=2),
        f("u", "amf-ran-ue", "amf-01", "down", 10, t=30, low=900, high=1100),
    ]
    assert top(lost, topo) == ("n2_sctp_loss", "amf-01")


def test_cert_step_first_read_mid_window_is_cert_expiry(topo: Topology) -> None:
    # the window of the first reading still holds calls answered before the step: ~0.46, not 1.0
    step = [
        f("a", "amf-registration-success", "amf-01", "down", 0.55, low=0.97, high=1.02),
        f("b", "sbi-ausf-error-share", "amf-01", "up", 0.46, high=0.006),
        f("c", "sbi-ausf-error-share", "amf-02", "up", 0.45, high=0.007),
    ]
    assert top(step, topo) == ("sbi_cert_expiry", "ausf-01")
    # a timeout's first errors are a small share after a latency rise: not a TLS failure
    slow = [
        f("a", "sbi-ausf-latency", "amf-01", "up", 0.5, high=0.02),
        f("b", "sbi-ausf-error-share", "amf-01", "up", 0.3, t=300, high=0.006),
    ]
    assert top(slow, topo)[0] != "sbi_cert_expiry"


def test_stopped_generation_with_a_queue_is_a_hang_without_tensor_gauge(topo: Topology) -> None:
    hang = [
        f("a", "gpu-requests-waiting", "gpu-srv-01", "up", 61.0),
        f("b", "gpu-generation-throughput", "gpu-srv-01", "down", 314.0, low=474, high=917),
        f("c", "gpu-energy-per-token", "gpu-srv-01", "up", 1.6, high=0.82),
        f("d", "gpu-tokens-per-running-request", "gpu-srv-01", "down", 12.5, t=15),
    ]
    assert top(hang, topo) == ("nccl_hang", "gpu-srv-01")
    # the queue grew because the KV cache filled with long prompts: not a hang
    kv = [
        *hang[:2],
        f("e", "gpu-mean-prompt-tokens", "gpu-srv-01", "up", 4000.0),
        f("g", "gpu-kv-cache-usage", "gpu-srv-01", "up", 0.7),
        f("h", "gpu-preemption-rate", "gpu-srv-01", "up", 0.3),
    ]
    assert top(kv, topo)[0] != "nccl_hang"


def test_one_partners_roamers_decaying_on_every_amf_is_a_partner_outage(topo: Topology) -> None:
    decay = [
        f(
            "a",
            "amf-registered-subscribers-by-plmn",
            "amf-01",
            "down",
            2272.0,
            low=2294,
            high=2477,
            plmnid="26201",
        ),
        f(
            "b",
            "amf-registered-subscribers-by-plmn",
            "amf-02",
            "down",
            2298.0,
            t=15,
            low=2332,
            high=2570,
            plmnid="26201",
        ),
    ]
    d = diagnose(incident(decay), decay, topo, PACK)
    assert (d.top.fault, d.top.entity, d.top.partner) == (
        "roaming_partner_outage",
        "sepp-01",
        "262-01",
    )
    # the home PLMN decaying is no partner's fault
    home = [
        f("a", "amf-registered-subscribers-by-plmn", "amf-01", "down", 150000.0, plmnid="99970"),
        f("b", "amf-registered-subscribers-by-plmn", "amf-02", "down", 150000.0, plmnid="99970"),
    ]
    assert top(home, topo)[0] == "no_fault"


def test_batch_queueing_with_kv_room_is_compressed_weights(topo: Topology) -> None:
    batch = [
        f("a", "gpu-requests-running", "gpu-srv-02", "up", 21.0, low=3.5, high=17.9),
        f("b", "gpu-power-max", "gpu-srv-02", "up", 352.0),
        f("c", "gpu-kv-cache-usage", "gpu-srv-02", "up", 0.11, t=75, high=0.1),
        f("d", "gpu-ttft-mean", "gpu-srv-02", "up", 0.23, t=240, high=0.08),
        f("e", "gpu-requests-waiting", "gpu-srv-02", "up", 2.0, t=240),
    ]
    assert top(batch, topo) == ("compressed_weights_high_concurrency", "gpu-srv-02")
    preempted = [*batch, f("g", "gpu-preemption-rate", "gpu-srv-02", "up", 2.0, t=250)]
    assert top(preempted, topo)[0] != "compressed_weights_high_concurrency"


def test_a_much_stronger_finding_escalates_an_open_incident() -> None:
    """A marginal alert, then a real fault on the same entity a scrape later: the fault's
    findings join the open incident, and the first one at least twice as strong as what the
    on-call was told of pages again (ESCALATED); findings of the same evaluation round (within
    ``notice_s``) belong to the notice they follow."""
    from noc_assistant.stream.correlate import Correlator

    def scored(fid: str, kpi: str, t: float, score: float) -> Finding:
        return f(fid, kpi, "gpu-srv-2", "down", 0.2, t=t).model_copy(update={"score": score})

    c = Correlator(window_s=600, resolve_after_s=300, notice_s=270)
    assert [e.kind for e in c.add_finding(scored("a", "gpu-tensor-active-min", 0, 1.06))] == [
        "opened"
    ]
    # same round (another target's phase, 100 s later): part of the first notice, however strong
    assert [e.kind for e in c.add_finding(scored("b", "gpu-power-max", 100, 2.5))] == ["updated"]
    # next scrape: 4.0 is not twice 2.5 (the strongest the on-call saw) -> no new page
    assert [e.kind for e in c.add_finding(scored("c", "gpu-itl-mean", 300, 4.0))] == ["updated"]
    # a finding twice as strong as that notice's -> escalated, and the bar moves with it
    assert [e.kind for e in c.add_finding(scored("d", "gpu-spec-accept", 600, 5.2))] == [
        "escalated"
    ]
    # the same series reading 12 (over twice 5.2): evidence for the diagnosis, not a new page
    assert [e.kind for e in c.add_finding(scored("e", "gpu-spec-accept", 900, 12.0))] == ["updated"]
    inc = next(iter(c.incidents.values()))
    assert inc.escalated_at == [T0 + 600] and inc.finding_ids == ["a", "b", "c", "d", "e"]


def test_a_still_alarming_series_reports_into_its_incident_after_the_window() -> None:
    """At 15-min PM periods the next reading of an alarming KPI comes 900 s later, past the
    600 s grouping window: it still joins the incident its series alarms in (not a new page)."""
    from noc_assistant.stream.correlate import Correlator

    c = Correlator(window_s=600, resolve_after_s=300)
    first = f("a", "amf-registration-success", "amf-01", "down", 0.9)
    assert [e.kind for e in c.add_finding(first)] == ["opened"]
    later = f("b", "amf-registration-success", "amf-01", "down", 0.1, t=900)
    assert [e.kind for e in c.add_finding(later)] == ["updated"]
    # readings do not move the grouping window, and a reading turned the other way is a new
    # symptom (a drop become a surge): past the window it opens its own incident
    flip = f("c", "amf-registration-success", "amf-01", "up", 1.5, t=1000)
    assert [e.kind for e in c.add_finding(flip)] == ["opened"]
    c.clear("amf-registration-success", "amf-01", T0 + 1100)
    assert [e.kind for e in c.tick(T0 + 1500)] == ["resolved", "resolved"]
    assert len(c.incidents) == 2


def test_an_upstream_nf_scope_is_per_site() -> None:
    """Each site has its own UDM: SBI errors towards 'the UDM' on two sites' AMFs are two
    incidents; so is a PLMN's scope per site (the next test)."""
    from knowledge.topology import Topology
    from noc_assistant.stream.pipeline import Pipeline

    inventory = {
        "entities": [
            {"id": "amf-01", "type": "amf", "site": "north"},
            {"id": "amf-02", "type": "amf", "site": "south"},
            {"id": "amf-03", "type": "amf", "site": "south"},
        ]
    }
    pipe = Pipeline(pack=PACK, topology=Topology.from_inventory(inventory, PACK), rca=False)
    north = f("n", "sbi-udm-latency", "amf-01", "up", 1.0)
    south = f("s", "sbi-udm-error-share", "amf-02", "up", 0.5, t=30)
    also = f("t", "sbi-udm-latency", "amf-03", "up", 1.0, t=60)
    assert pipe._scope(north) == "nf:udm@north" and pipe._scope(south) == "nf:udm@south"
    partner = f("p", "amf-registration-success-by-plmn", "amf-02", "down", 0.8, plmnid="26201")
    assert pipe._scope(partner) == "plmn:26201@south"
    kinds = [e.kind for x in (north, south, also) for e in pipe.correlator.add_finding(x)]
    assert kinds == ["opened", "opened", "updated"]


def test_a_partner_outage_at_two_sites_is_one_incident_a_local_fault_is_not() -> None:
    """With sites named, a PLMN's findings group per site (a site's own UDM failing rejects
    every PLMN there), unless the open incident is diagnosed as that partner's outage: then
    the same PLMN failing at another site joins it."""
    from knowledge.topology import Topology
    from noc_assistant.models import Hypothesis
    from noc_assistant.stream.pipeline import Pipeline

    inventory = {
        "entities": [
            {"id": "amf-01", "type": "amf", "site": "north"},
            {"id": "amf-02", "type": "amf", "site": "south"},
            {"id": "amf-03", "type": "amf", "site": "south"},
        ]
    }
    topology = Topology.from_inventory(inventory, PACK)
    kpi = "amf-registration-success-by-plmn"
    north = f("n", kpi, "amf-01", "down", 0.8, plmnid="26201")
    south = f("s", "amf-registered-subscribers-by-plmn", "amf-02", "down", 9, t=60,
              plmnid="26201")  # fmt: skip
    other = f("o", kpi, "amf-03", "down", 0.8, t=30, plmnid="31026")
    for diagnosed in (False, True):
        pipe = Pipeline(pack=PACK, topology=topology, rca=False)
        assert pipe._scope(north) == "plmn:26201@north"
        [opened] = pipe.correlator.add_finding(north)
        assert [e.kind for e in pipe.correlator.add_finding(other)] == ["opened"]
        if diagnosed:
            opened.incident.hypotheses = [
                Hypothesis(
                    fault="roaming_partner_outage",
                    entity="sepp-01",
                    partner="262-01",
                    confidence=0.9,
                )
            ]
        [event] = pipe.correlator.add_finding(south)
        assert (event.incident is opened.incident) is diagnosed
