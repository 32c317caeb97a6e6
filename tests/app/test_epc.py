"""An EPC core on hand-made telemetry (Open5GS MME and HSS exporters, research/telemetry.md
§1.2): the pack watches S1-MME associations and S6a answers, and names the fault classes of
their 5GC counterparts (N2 association loss, subscriber-data failures)."""

from __future__ import annotations

import random

from noc_assistant.ingest import Point
from noc_assistant.stream.pipeline import Pipeline

T0 = 1_795_910_400.0  # 2026-11-29T00:00:00Z
STEP = 60.0
HOURS = 8


Span = tuple[float, float] | None


def epc_points(
    *, s1_loss: Span = None, s6a_errors: Span = None, attach_wave: Span = None
) -> list[Point]:
    """An MME with 8 eNBs and ~1,000 UEs on S1 selecting gateways for ~5 attaches/s, an HSS
    answering ~30 S6a requests/s (0.2 % errors); ``s1_loss``: 5 eNBs drop their association
    (and their UEs) over that span; ``s6a_errors``: 35 % of S6a requests fail over that span;
    ``attach_wave``: four times the attaches (lookups and S6a requests). Seconds after
    ``T0``."""
    rng = random.Random(3)
    mme = (("instance", "mme-1"), ("nf", "mme"))
    hss = (("instance", "hss-1"), ("nf", "hss"))
    air = air_err = ulr = ulr_err = dns = 0.0
    out: list[Point] = []
    for i in range(int(HOURS * 3600 / STEP)):
        t = i * STEP
        ts = T0 + t
        lost = 5 if s1_loss and s1_loss[0] <= t < s1_loss[1] else 0
        enb = 8 - lost
        ue = round(enb * 125 * (1 + 0.02 * rng.gauss(0, 1)))
        err_share = 0.35 if s6a_errors and s6a_errors[0] <= t < s6a_errors[1] else 0.002
        wave = 4 if attach_wave and attach_wave[0] <= t < attach_wave[1] else 1
        dns += wave * rng.randint(270, 330)
        for kind in ("air", "ulr"):
            n = wave * rng.randint(800, 1000)
            bad = sum(1 for _ in range(n) if rng.random() < err_share)
            if kind == "air":
                air, air_err = air + n, air_err + bad
            else:
                ulr, ulr_err = ulr + n, ulr_err + bad
        out += [
            Point(ts, "enb", mme, float(enb), "gauge"),
            Point(ts, "enb_ue", mme, float(ue), "gauge"),
            Point(ts, "mme_session", mme, float(ue), "gauge"),
            Point(ts, "dns_query_total", mme, dns, "counter"),
            Point(ts, "dns_query_failed", mme, 0.0, "counter"),
            Point(ts, "s6a_rx_air", hss, air, "counter"),
            Point(ts, "s6a_rx_air_error", hss, air_err, "counter"),
            Point(ts, "s6a_rx_ulr", hss, ulr, "counter"),
            Point(ts, "s6a_rx_ulr_error", hss, ulr_err, "counter"),
        ]
    return out


def run(points: list[Point]) -> Pipeline:
    return Pipeline().replay(points)


def test_a_healthy_epc_core_is_quiet() -> None:
    pipe = run(epc_points())
    assert pipe.findings == []
    assert ("mme-enb-associations", "mme-1") in pipe.kpi_history
    assert ("hss-s6a-error-share", "hss-1") in pipe.kpi_history


def test_lost_s1_associations_are_an_association_loss_on_the_mme() -> None:
    start, end = 5 * 3600.0, 5 * 3600.0 + 1200.0
    pipe = run(epc_points(s1_loss=(start, end)))
    (incident,) = pipe.correlator.incidents.values()
    assert incident.entities == ["mme-1"]
    assert T0 + start <= incident.opened_at <= T0 + start + 2 * STEP
    diag = pipe.diagnoses[incident.id]
    assert (diag.top.fault, diag.top.entity) == ("n2_sctp_loss", "mme-1")


def test_failing_s6a_answers_are_a_subscriber_data_fault_at_the_hss() -> None:
    start, end = 5 * 3600.0, 5 * 3600.0 + 1200.0
    pipe = run(epc_points(s6a_errors=(start, end)))
    (incident,) = pipe.correlator.incidents.values()
    assert incident.entities == ["hss-1"]
    assert T0 + start <= incident.opened_at <= T0 + start + 2 * STEP
    diag = pipe.diagnoses[incident.id]
    assert (diag.top.fault, diag.top.entity) == ("udm_timeout", "hss-1")


def test_the_re_attach_wave_after_s1_comes_back_is_part_of_the_s1_incident() -> None:
    """The eNBs come back after 25 min and their UEs attach again at once: the wave of
    gateway lookups and S6a requests comes long after the loss's last new symptom (beyond the
    10-min grouping window), but the S1 diagnosis expects it (``order: after`` support), so it
    joins that incident instead of paging as an attach storm of its own."""
    start = 5 * 3600.0
    pipe = run(
        epc_points(s1_loss=(start, start + 1500.0), attach_wave=(start + 1500.0, start + 1800.0))
    )
    (incident,) = pipe.correlator.incidents.values()
    assert "mme-gateway-selections" in incident.kpis
    diag = pipe.diagnoses[incident.id]
    assert (diag.top.fault, diag.top.entity) == ("n2_sctp_loss", "mme-1")


def test_an_attach_wave_alone_is_an_attach_storm_on_the_mme() -> None:
    start = 5 * 3600.0
    pipe = run(epc_points(attach_wave=(start, start + 900.0)))
    (incident,) = pipe.correlator.incidents.values()
    assert set(incident.entities) == {"mme-1", "hss-1"}
    diag = pipe.diagnoses[incident.id]
    assert (diag.top.fault, diag.top.entity) == ("registration_storm", "mme-1")
