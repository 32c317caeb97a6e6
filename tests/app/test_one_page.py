"""One page per fault: findings of one cause join one incident, and what only says "more load"
with a confident no-fault diagnosis is a notice (severity info), not a page (issue 36)."""

from __future__ import annotations

import json

import httpx

from knowledge.pack import load_pack
from knowledge.topology import Topology, load_inventory
from noc_assistant.integrations.alertmanager import AlertmanagerSink
from noc_assistant.models import Finding, Hypothesis, Incident
from noc_assistant.stream.correlate import Correlator
from noc_assistant.triage.rca import diagnose

PACK = load_pack()
TOPO: Topology = load_inventory(PACK.fixture_path("inventory.yaml"), PACK)


def _f(fid: str, kpi: str, entity: str, ts: float, direction: str, score: float = 9.0) -> Finding:
    return Finding(
        id=fid,
        detector="test",
        kpi=kpi,
        entity=entity,
        entity_type=TOPO.type_of(entity),
        ts=ts,
        score=score,
        observed=1.0,
        expected_low=0.0,
        expected_high=0.5,
        direction=direction,
    )


def _diagnose(inc: Incident, findings: list[Finding]) -> None:
    """What the pipeline does on each event: diagnose, keep the hypotheses on the incident."""
    inc.hypotheses = list(diagnose(inc, findings, TOPO, PACK).hypotheses)


def _severity(inc: Incident) -> str:
    return inc.severity


def _correlator() -> Correlator:
    return Correlator(window_s=600, resolve_after_s=300, related=TOPO.related)


def test_a_later_symptom_of_a_diagnosed_fault_joins_it_past_the_window() -> None:
    c = _correlator()
    [opened] = c.add_finding(_f("f1", "gpu-requests-waiting", "gpu-srv-02", 0, "up"))
    inc = opened.incident
    inc.hypotheses = [Hypothesis(fault="nccl_hang", entity="gpu-srv-02", confidence=0.97)]
    # twelve minutes on (past the 10-min window) the engine goes silent: the same hang
    [ev] = c.add_finding(_f("f2", "gpu-engine-metrics-present", "gpu-srv-02", 720, "down"))
    assert ev.kind == "updated" and ev.incident is inc
    # a diagnosis that is no fault, or not confident, holds nothing open past the window
    inc.hypotheses = [Hypothesis(fault="nccl_hang", entity="gpu-srv-02", confidence=0.3)]
    [late] = c.add_finding(_f("f3", "gpu-sm-clock-min", "gpu-srv-02", 1400, "down"))
    assert late.kind == "opened"


def test_a_server_engine_going_silent_joins_its_open_incident_undiagnosed() -> None:
    """The demo day's NCCL hang: requests queue on gpu-srv-02 and the first findings do not yet
    make a confident diagnosis; twelve minutes on, past the grouping window, the serving
    engine stops answering (a KPI reading ``present()`` drops). That is part of the open
    incident, as a silent target is, not a second page; a KPI that does not read presence,
    or the same drop on another server, is not."""
    from noc_assistant.stream.pipeline import Pipeline

    pipe = Pipeline(pack=PACK, topology=TOPO)
    c = pipe.correlator
    [opened] = c.add_finding(_f("f1", "gpu-requests-waiting", "gpu-srv-02", 0, "up"))
    inc = opened.incident
    inc.hypotheses = [Hypothesis(fault="no_fault", entity="", confidence=0.65)]
    silent = _f("f2", "gpu-engine-metrics-present", "gpu-srv-02", 720, "down")
    assert pipe._aftermath(silent, inc)
    [ev] = c.add_finding(silent)
    assert ev.kind == "updated" and ev.incident is inc
    elsewhere = _f("f3", "gpu-engine-metrics-present", "gpu-srv-01", 720, "down")
    assert not pipe._aftermath(elsewhere, inc)
    assert not pipe._aftermath(_f("f4", "gpu-sm-clock-min", "gpu-srv-02", 720, "down"), inc)


def test_a_stronger_symptom_of_a_diagnosed_fault_does_not_page_again() -> None:
    """Paged for a KV-cache fault on gpu-srv-02, the on-call is not paged again as the fault
    grows (a symptom three times as strong); with no confident diagnosis, or one on another
    entity, the same finding escalates, as a marginal alert followed by a real fault must."""

    def grown(hypothesis: Hypothesis | None) -> str:
        c = Correlator(window_s=600, resolve_after_s=300, related=TOPO.related, notice_s=54)
        first = _f("f1", "gpu-requests-waiting", "gpu-srv-02", 0, "up", score=2.0)
        [opened] = c.add_finding(first)
        opened.incident.hypotheses = [hypothesis] if hypothesis else []
        [ev] = c.add_finding(_f("f2", "gpu-preemption-rate", "gpu-srv-02", 120, "up", score=6.0))
        assert ev.incident is opened.incident
        return ev.kind

    kv = "kv_cache_saturation"
    assert grown(Hypothesis(fault=kv, entity="gpu-srv-02", confidence=0.9)) == "updated"
    assert grown(None) == "escalated"
    assert grown(Hypothesis(fault=kv, entity="gpu-srv-02", confidence=0.3)) == "escalated"
    assert grown(Hypothesis(fault="no_fault", entity="gpu-srv-02", confidence=0.9)) == "escalated"


def test_a_stronger_symptom_soon_after_a_page_updates_it() -> None:
    """A storm's first symptom pages on amf-01 (no fault diagnosed yet); its rejects a scrape
    later are five times as strong. Sooner than ``repage_after_s`` after the page they update
    it (and raise what the on-call was told of); a much stronger symptom after it pages again."""
    c = Correlator(window_s=600, resolve_after_s=300, notice_s=54, repage_after_s=300)
    [opened] = c.add_finding(_f("f1", "amf-auth-failure", "amf-01", 0, "up", score=2.0))
    inc = opened.incident
    inc.hypotheses = [Hypothesis(fault="no_fault", entity="amf-01", confidence=1.0)]
    soon = _f("f2", "amf-registration-success", "amf-01", 60, "down", score=11.0)
    assert [ev.kind for ev in c.add_finding(soon)] == ["updated"]
    # 2x the 11 folded into the page, after the 300 s: a new page
    late = _f("f3", "amf-congestion-reject-share", "amf-01", 360, "up", score=23.0)
    assert [ev.kind for ev in c.add_finding(late)] == ["escalated"]
    assert inc.escalated_at == [360]
    # with no quiet time (the correlator's default) the first one escalates, as before
    c0 = Correlator(window_s=600, resolve_after_s=300, notice_s=54)
    [first] = c0.add_finding(_f("g1", "amf-auth-failure", "amf-01", 0, "up", score=2.0))
    first.incident.hypotheses = list(inc.hypotheses)
    again = _f("g2", "amf-registration-success", "amf-01", 60, "down", score=11.0)
    assert [ev.kind for ev in c0.add_finding(again)] == ["escalated"]


def test_a_diagnosed_incident_does_not_take_a_fault_long_after_it() -> None:
    """A held-out day: an NCCL hang on gpu-srv-2, diagnosed with confidence, keeps one series
    alarming; three quarters of an hour after its last new symptom compressed weights slow the
    same server. That is a second fault and pages on its own: the diagnosed incident reaches
    ``diagnosed_reach`` grouping windows past its last new symptom, no further."""
    c = _correlator()
    [opened] = c.add_finding(_f("f1", "gpu-requests-waiting", "gpu-srv-02", 0, "up"))
    inc = opened.incident
    inc.hypotheses = [Hypothesis(fault="nccl_hang", entity="gpu-srv-02", confidence=0.97)]
    reach = c.diagnosed_reach * c.window_s
    [near] = c.add_finding(_f("f2", "gpu-ttft-mean", "gpu-srv-02", reach - 60, "up"))
    assert near.kind == "updated" and near.incident is inc
    later = reach - 60 + reach + 60
    [far] = c.add_finding(_f("f3", "gpu-kv-cache-usage", "gpu-srv-02", later, "up"))
    assert far.kind == "opened" and far.incident is not inc


def test_a_peer_failing_towards_the_diagnosed_root_joins() -> None:
    c = _correlator()
    [opened] = c.add_finding(_f("f1", "sbi-pcf-error-share", "smf-01", 0, "up"))
    opened.incident.hypotheses = [
        Hypothesis(fault="sbi_cert_expiry", entity="pcf-01", confidence=0.99)
    ]
    # smf-02 depends on pcf-01: its failing sessions are the same certificate's
    [ev] = c.add_finding(_f("f2", "smf-pdu-session-success", "smf-02", 0, "down"))
    assert ev.incident is opened.incident
    # a GPU server is nothing to the PCF
    [other] = c.add_finding(_f("f3", "gpu-ttft-mean", "gpu-srv-01", 0, "up"))
    assert other.kind == "opened"


def test_the_same_symptom_on_peers_is_one_incident() -> None:
    c = _correlator()
    events = [
        ev
        for i, amf in enumerate(["amf-01", "amf-02"])
        for ev in c.add_finding(_f(f"f{i}", "amf-registration-attempts", amf, 30.0 * i, "up"))
    ]
    assert [ev.kind for ev in events] == ["opened", "updated"]
    # the other way, or past the window, is not the same symptom
    c1 = _correlator()
    c1.add_finding(_f("h1", "amf-registration-attempts", "amf-01", 0, "up"))
    [down] = c1.add_finding(_f("h2", "amf-registration-attempts", "amf-02", 60, "down"))
    assert down.kind == "opened"
    c2 = _correlator()
    c2.add_finding(_f("g1", "amf-registration-attempts", "amf-01", 0, "up"))
    [late] = c2.add_finding(_f("g2", "amf-registration-attempts", "amf-02", 900, "up"))
    assert late.kind == "opened"


def test_a_mass_registration_surge_is_one_notice_until_service_suffers() -> None:
    c = _correlator()
    found: dict[str, Finding] = {}
    incidents = set()
    for i, amf in enumerate(["amf-01", "amf-02"]):
        f = _f(f"f{i}", "amf-registration-attempts", amf, 15.0 * i, "up")
        found[f.id] = f
        for ev in c.add_finding(f):
            incidents.add(ev.incident.id)
            _diagnose(ev.incident, list(found.values()))
    [inc] = [c.incidents[i] for i in incidents]
    assert _severity(inc) == "info" and inc.escalated_at == []
    # registrations start failing: the notice becomes a page now
    bad = _f("f9", "amf-registration-success", "amf-01", 120, "down")
    found[bad.id] = bad
    [ev] = c.add_finding(bad)
    assert ev.kind == "updated"  # a notice is not escalated by score: its diagnosis decides
    _diagnose(inc, list(found.values()))
    assert _severity(inc) == "page" and inc.escalated_at == [120]
    assert inc.noticed_at == inc.opened_at  # so its first page is the promotion, not the opening
    # and a page stays a page
    _diagnose(inc, [found["f0"]])
    assert _severity(inc) == "page"


def test_a_confident_no_fault_on_a_service_kpi_still_pages() -> None:
    # a lone uncorroborated anchor is no_fault too: a failing service KPI must page
    f = _f("f1", "amf-registered-subscribers-by-plmn", "amf-01", 0, "down")
    inc = Incident(id="i", fingerprint="x", opened_at=0, updated_at=0, finding_ids=["f1"])
    d = diagnose(inc, [f], TOPO, PACK)
    assert d.top.fault == "no_fault" and d.top.confidence >= 0.9
    assert inc.severity == "page"
    assert inc.noticed_at is None


def test_alertmanager_labels_a_notice_info_and_ends_it_when_it_pages() -> None:
    sent: list[list[dict[str, object]]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(json.loads(request.content))
        return httpx.Response(200)

    sink = AlertmanagerSink("http://am", transport=httpx.MockTransport(handler))
    inc = Incident(id="inc-1", fingerprint="x", opened_at=0, updated_at=0, entities=["amf-01"])
    inc.severity = "info"
    assert sink.labels(inc)["severity"] == "info"
    sink.track([inc])
    inc.severity = "page"
    inc.hypotheses = [Hypothesis(fault="registration_storm", entity="amf-01", confidence=0.9)]
    sink.track([inc])
    last = {(a["labels"]["alertname"], a["labels"]["severity"]): a for a in sent[-1]}  # type: ignore[index]
    assert ("NocIncident", "critical") in last
    assert ("NocIncident", "info") in last  # the notice's alert, ended
    assert str(last[("NocIncident", "info")]["endsAt"]) <= str(
        last[("NocIncident", "critical")]["endsAt"]
    )


def test_stored_incidents_without_a_severity_read_as_pages() -> None:
    old = {"id": "i", "fingerprint": "x", "opened_at": 0.0, "updated_at": 0.0}
    assert Incident.model_validate_json(json.dumps(old)).severity == "page"


def test_the_same_symptom_at_two_sites_is_two_incidents() -> None:
    """The peer rule stays within a site where the inventory names sites: two regions' AMFs
    surging together are two incidents; an AMF the inventory places nowhere still joins."""
    topo = Topology.from_inventory(
        {
            "entities": [
                {"id": "amf-01", "type": "amf", "site": "north"},
                {"id": "amf-02", "type": "amf", "site": "south"},
                {"id": "amf-03", "type": "amf"},
            ]
        },
        PACK,
    )
    c = Correlator(window_s=600, related=topo.related, same_site=topo.same_site)
    kinds = [
        ev.kind
        for i, amf in enumerate(["amf-01", "amf-02", "amf-03"])
        for ev in c.add_finding(_f(f"f{i}", "amf-registration-attempts", amf, 30.0 * i, "up"))
    ]
    assert kinds == ["opened", "opened", "updated"]
    assert sorted(len(i.entities) for i in c.incidents.values()) == [1, 2]
