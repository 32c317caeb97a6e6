"""What an entity is and what it sends, when the inventory or the telemetry says it another way.

An EPC inventory that types Open5GS's SMF and UPF daemons as PGWs (PGW-C, PGW-U; FORMATS §4
lists `pgw`): the pack's `acts_as` gives them the SMF's and the UPF's KPIs and rules, each only
the role its own metrics show, so a lost PFCP association is still blamed on the user plane.
Without an inventory and without the `nf` label (a CSV replay need not carry it), the type
comes from the id's prefix or from the metrics only one type's KPIs read."""

from __future__ import annotations

import random

from knowledge.pack import load_pack
from knowledge.topology import Topology
from noc_assistant.ingest import Point
from noc_assistant.stream.pipeline import Pipeline

T0 = 1_795_910_400.0  # 2026-11-29T00:00:00Z
STEP = 60.0
HOURS = 8

INVENTORY = {
    "entities": [
        {"id": "pgwc-1", "type": "pgw", "peers": ["pgwu-1", "pgwu-2"]},
        {"id": "pgwu-1", "type": "pgw"},
        {"id": "pgwu-2", "type": "pgw"},
        {"id": "hss-1", "type": "hss"},
    ]
}


def pgw_points(*, n4_loss: tuple[float, float] | None = None, nf: bool = True) -> list[Point]:
    """A PGW-C (Open5GS smfd: PFCP peers, N4 and session counters) with two PGW-Us (upfd:
    PFCP peer, sessions, N3 packets), ~20 session requests/s; ``n4_loss``: PGW-U 2 loses its
    association over that span (the PGW-C sees one peer, half its N4 requests fail, PGW-U 2
    holds no sessions). Seconds after ``T0``. Without ``nf`` the series carry no ``nf`` label.
    """
    rng = random.Random(5)

    def labels(instance: str, kind: str) -> tuple[tuple[str, str], ...]:
        return (("instance", instance), ("nf", kind)) if nf else (("instance", instance),)

    c = labels("pgwc-1", "smf")
    u = {k: labels(k, "upf") for k in ("pgwu-1", "pgwu-2")}
    req = succ = n4 = n4_fail = 0.0
    pkts = {k: 0.0 for k in u}
    out: list[Point] = []
    for i in range(int(HOURS * 3600 / STEP)):
        t = i * STEP
        ts = T0 + t
        lost = bool(n4_loss and n4_loss[0] <= t < n4_loss[1])
        n = rng.randint(1100, 1300)
        fail = sum(1 for _ in range(n) if rng.random() < (0.5 if lost else 0.002))
        req, succ = req + n, succ + n - fail
        n4, n4_fail = n4 + n, n4_fail + fail
        out += [
            Point(ts, "pfcp_peers_active", c, 1.0 if lost else 2.0, "gauge"),
            Point(ts, "fivegs_smffunction_sm_pdusessioncreationreq", c, req, "counter"),
            Point(ts, "fivegs_smffunction_sm_pdusessioncreationsucc", c, succ, "counter"),
            Point(ts, "fivegs_smffunction_sm_n4sessionestabreq", c, n4, "counter"),
            Point(ts, "fivegs_smffunction_sm_n4sessionestabfail", c, n4_fail, "counter"),
        ]
        for k, own in u.items():
            down = lost and k == "pgwu-2"
            pkts[k] += 0.0 if down else rng.randint(90_000, 110_000)
            sessions = 0.0 if down else float(rng.randint(4800, 5200))
            out += [
                Point(ts, "pfcp_peers_active", own, 0.0 if down else 1.0, "gauge"),
                Point(ts, "fivegs_upffunction_upf_sessionnbr", own, sessions, "gauge"),
                Point(ts, "fivegs_ep_n3_gtp_indatapktn3upf", own, pkts[k], "counter"),
            ]
    return out


def run(points: list[Point]) -> Pipeline:
    topo = Topology.from_inventory(INVENTORY, load_pack())
    return Pipeline(topology=topo).replay(points)


def test_each_pgw_gets_the_kpis_of_the_role_its_metrics_show() -> None:
    pipe = run(pgw_points())
    assert pipe.findings == []
    kpis = {e: {k for k, ent in pipe.kpi_history if ent == e} for e in ("pgwc-1", "pgwu-1")}
    assert {"smf-pfcp-peers", "smf-n4-establishment-failure"} <= kpis["pgwc-1"]
    assert "upf-pfcp-peers" not in kpis["pgwc-1"]  # the shared gauge read as the SMF's only
    assert {"upf-pfcp-peers", "upf-sessions"} <= kpis["pgwu-1"]
    assert "smf-pfcp-peers" not in kpis["pgwu-1"]


def test_a_lost_pfcp_association_is_blamed_on_the_pgw_u() -> None:
    start, end = 5 * 3600.0, 5 * 3600.0 + 1200.0
    pipe = run(pgw_points(n4_loss=(start, end)))
    (incident,) = pipe.correlator.incidents.values()
    assert set(incident.entities) == {"pgwc-1", "pgwu-2"}
    diag = pipe.diagnoses[incident.id]
    assert (diag.top.fault, diag.top.entity) == ("pfcp_association_loss", "pgwu-2")


def test_a_pgw_plays_the_smf_and_upf_roles_in_the_topology() -> None:
    topo = Topology.from_inventory(INVENTORY, load_pack())
    assert topo.plays("pgwu-1", "upf") and topo.plays("pgwc-1", "smf")
    assert not topo.plays("hss-1", "upf")
    # the PGW-C's PFCP peers narrow its UPF dependency, as an SMF's do
    assert topo.upstream_candidates("pgwc-1", "upf", max_depth=1) == ["pgwu-1", "pgwu-2"]
    assert topo.entities_of_type("upf") == ["pgwc-1", "pgwu-1", "pgwu-2"]


def test_without_inventory_or_nf_label_the_metrics_tell_the_type() -> None:
    start, end = 5 * 3600.0, 5 * 3600.0 + 1200.0
    pipe = Pipeline().replay(pgw_points(n4_loss=(start, end), nf=False))
    # "pgwc" and "pgwu" are no type's prefix: the SMF's and the UPF's own metrics decide
    assert [pipe.entity_type(e) for e in ("pgwc-1", "pgwu-1")] == ["smf", "upf"]
    (incident,) = pipe.correlator.incidents.values()
    diag = pipe.diagnoses[incident.id]
    assert (diag.top.fault, diag.top.entity) == ("pfcp_association_loss", "pgwu-2")


def test_an_id_prefix_names_the_type_before_the_metrics() -> None:
    pipe = Pipeline().replay(
        [Point(T0, "pfcp_peers_active", (("instance", "upf-7"),), 1.0, "gauge")]
    )
    assert pipe.entity_type("upf-7") == "upf"  # the shared gauge alone would say nothing


def test_types_in_capitals_are_the_packs_types() -> None:
    topo = Topology.from_inventory({"entities": [{"id": "x-1", "type": "PGW"}]}, load_pack())
    assert topo.type_of("x-1") == "pgw" and topo.plays("x-1", "upf")
    pipe = Pipeline().replay(
        [Point(T0, "pfcp_peers_active", (("instance", "y-1"), ("nf", "SMF")), 1.0, "gauge")]
    )
    assert pipe.entity_type("y-1") == "smf"


def plmn_points(outage: tuple[float, float]) -> list[Point]:
    """An AMF serving its home PLMN 999-70 (~100,000 subscribers, ~50 registrations/s) and
    roamers of partner 262-01 (~1,500, ~0.5/s); over ``outage`` the partner's registrations
    all fail and its registered roamers decay. No ``nf`` label, no inventory; the partner's
    PLMN id written with a dash, the home one without."""
    rng = random.Random(7)
    req = {"99970": 0.0, "262-01": 0.0}
    succ = dict(req)
    out: list[Point] = []
    for i in range(int(HOURS * 3600 / STEP)):
        t = i * STEP
        down = outage[0] <= t < outage[1]
        for plmn, rate, registered in (("99970", 50.0, 100_000), ("262-01", 0.5, 1_500)):
            n = rng.randint(int(rate * STEP * 0.9), int(rate * STEP * 1.1))
            ok = 0 if down and plmn == "262-01" else n - sum(rng.random() < 0.002 for _ in range(n))
            req[plmn] += n
            succ[plmn] += ok
            decay = 0.5 ** ((t - outage[0]) / 600) if down and plmn == "262-01" else 1.0
            labels = (("instance", "amf-1"), ("plmnid", plmn))
            out += [
                Point(
                    ts := T0 + t, "fivegs_amffunction_rm_reginitreq", labels, req[plmn], "counter"
                ),
                Point(ts, "fivegs_amffunction_rm_reginitsucc", labels, succ[plmn], "counter"),
                Point(
                    ts,
                    "fivegs_amffunction_rm_registeredsubnbr",
                    labels,
                    float(round(registered * decay * (1 + 0.002 * rng.gauss(0, 1)))),
                    "gauge",
                ),
            ]
    return out


def test_without_inventory_the_largest_plmn_is_home_and_the_others_are_partners() -> None:
    start, end = 5 * 3600.0, 5 * 3600.0 + 1800.0
    pipe = Pipeline().replay(plmn_points((start, end)))
    topo = pipe.current_topology()
    assert topo.home_plmns == ("99970",)
    assert [p.plmn for p in topo.partners] == ["262-01"]
    # (the partner's 1 % of all registrations later dents the AMF-wide ratio too: no fault)
    incident = next(
        i
        for i in pipe.correlator.incidents.values()
        if "amf-registration-success-by-plmn" in i.kpis
    )
    top = pipe.diagnoses[incident.id].top
    assert (top.fault, top.partner, top.entity) == ("roaming_partner_outage", "262-01", "sepp")


def test_histogram_parts_sent_without_a_type_are_read() -> None:
    """FORMATS §1's `type` is optional (default gauge): a histogram's `_sum` and `_count`
    then arrive as plain series under their own names, and the mean is still computed."""
    rng = random.Random(9)
    total = count = 0.0
    points: list[Point] = []
    for i in range(60):
        n = rng.randint(90, 110)
        total, count = total + n * rng.uniform(0.18, 0.22), count + n
        labels = (("instance", "gpu-srv-1"), ("model_name", "m"))
        points += [
            Point(T0 + i * STEP, "vllm:num_requests_running", labels, 12.0, "gauge"),
            Point(T0 + i * STEP, "vllm:time_to_first_token_seconds_sum", labels, total),
            Point(T0 + i * STEP, "vllm:time_to_first_token_seconds_count", labels, count),
        ]
    pipe = Pipeline().replay(points)
    history = pipe.kpi_history[("gpu-ttft-mean", "gpu-srv-1")]
    assert 0.15 < history[-1][1] < 0.25


def test_a_job_label_or_a_daemon_name_tells_the_type() -> None:
    pipe = Pipeline().replay(
        [
            Point(T0, "pfcp_peers_active", (("instance", "ne01"), ("job", "open5gs-smfd")), 1.0),
            Point(T0, "pfcp_peers_active", (("instance", "ne02"), ("nf", "open5gs-upfd")), 1.0),
            Point(T0, "pfcp_peers_active", (("instance", "open5gs-upfd-7"),), 1.0),
        ]
    )
    types = [pipe.entity_type(e) for e in ("ne01", "ne02", "open5gs-upfd-7")]
    assert types == ["smf", "upf", "upf"]
