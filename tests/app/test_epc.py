"""An EPC core on hand-made telemetry (Open5GS MME and HSS exporters, research/telemetry.md
§1.2): the pack watches S1-MME associations and S6a answers, and names the fault classes of
their 5GC counterparts (N2 association loss, subscriber-data failures)."""

from __future__ import annotations

import random

from noc_assistant.ingest import Point
from noc_assistant.pipeline import Pipeline

T0 = 1_795_910_400.0  # 2026-11-29T00:00:00Z
STEP = 60.0
HOURS = 8


def epc_points(
    *, s1_loss: tuple[float, float] | None = None, s6a_errors: tuple[float, float] | None = None
) -> list[Point]:
    """An MME with 8 eNBs and ~1,000 UEs on S1, an HSS answering ~30 S6a requests/s (0.2 %
    errors); ``s1_loss``: 5 eNBs drop their association (and their UEs) over that span;
    ``s6a_errors``: 35 % of S6a requests fail over that span. Seconds after ``T0``."""
    rng = random.Random(3)
    mme = (("instance", "mme-1"), ("nf", "mme"))
    hss = (("instance", "hss-1"), ("nf", "hss"))
    air = air_err = ulr = ulr_err = 0.0
    out: list[Point] = []
    for i in range(int(HOURS * 3600 / STEP)):
        t = i * STEP
        ts = T0 + t
        lost = 5 if s1_loss and s1_loss[0] <= t < s1_loss[1] else 0
        enb = 8 - lost
        ue = round(enb * 125 * (1 + 0.02 * rng.gauss(0, 1)))
        err_share = 0.35 if s6a_errors and s6a_errors[0] <= t < s6a_errors[1] else 0.002
        for kind in ("air", "ulr"):
            n = rng.randint(800, 1000)
            bad = sum(1 for _ in range(n) if rng.random() < err_share)
            if kind == "air":
                air, air_err = air + n, air_err + bad
            else:
                ulr, ulr_err = ulr + n, ulr_err + bad
        out += [
            Point(ts, "enb", mme, float(enb), "gauge"),
            Point(ts, "enb_ue", mme, float(ue), "gauge"),
            Point(ts, "mme_session", mme, float(ue), "gauge"),
            Point(ts, "s6a_rx_air", hss, air, "counter"),
            Point(ts, "s6a_rx_air_error", hss, air_err, "counter"),
            Point(ts, "s6a_rx_ulr", hss, ulr, "counter"),
            Point(ts, "s6a_rx_ulr_error", hss, ulr_err, "counter"),
        ]
    return out


def run(points: list[Point]) -> Pipeline:
    pipe = Pipeline()
    pipe.feed_all(points)
    pipe.finish()
    return pipe


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
