"""How numbers are shown to a person (:mod:`noc_assistant.triage.present`): every unit the knowledge
pack uses is known, bands are clipped to what a quantity can be, severities are bounded and
monotone, and whatever is rendered still passes the grounding check against the evidence it
came from: the placeholders against the evidence item's values alone."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from guardrails.grounding import check_grounding
from knowledge.pack import load_pack
from noc_assistant.models import Diagnosis, Evidence, Finding, Incident
from noc_assistant.triage import present
from noc_assistant.triage.rca import _EvidenceBuilder

PACK = load_pack()
KPIS = sorted(PACK.kpis)
UNITS = sorted({k.unit for k in PACK.kpis.values()})
SCALED = ("s", "B/s")
"""Units shown scaled for reading (125 ms, 12.3 MB/s): grounded by the summary that writes them."""


def _grounded(text: str, item: Evidence | Mapping[str, Any]) -> bool:
    report = check_grounding(f"{text} [ev-x].", {"ev-x": item}, PACK.references, PACK.grounding)
    return report.ok


def _evidence(kpi: str, observed: float, low: float, high: float) -> Evidence:
    """The evidence item the RCA makes of a finding (its summary written by ``present``)."""
    inc = Incident(id="inc-1", fingerprint="f", opened_at=0.0, updated_at=0.0)
    builder = _EvidenceBuilder(inc)
    f = Finding(
        id="f-1",
        detector="t",
        kpi=kpi,
        entity="amf-1",
        ts=1_767_615_210.0,
        score=2.0,
        observed=observed,
        expected_low=low,
        expected_high=high,
        direction="down" if observed < low else "up",
    )
    return builder.items[builder.finding(f)]


def test_every_unit_of_the_pack_is_known() -> None:
    """A unit ``present`` does not know is shown as a bare number: a new one in a KPI file
    must be taught to it."""
    assert all(present.unit_of(u) == u for u in UNITS), UNITS
    assert {present.unit_of(k) for k in KPIS} == set(UNITS)


@pytest.mark.parametrize(
    ("kpi", "x", "shown"),
    [
        ("amf-registration-success-by-plmn", 0.902439, "90.2 %"),
        ("amf-registration-success-by-plmn", 0.99996, "99.996 %"),
        ("amf-registered-subscribers-by-plmn", 2275.0, "2,275"),
        ("amf-registered-subscribers-by-plmn", 157_400.4, "157,400"),
        ("sbi-udm-latency", 0.0421, "42.1 ms"),
        ("gpu-ttft-mean", 3.25, "3.25 s"),
        ("amf-registration-attempts", 15.33, "15.3/s"),
        ("upf-rx-throughput", 12_345_678.0, "12.3 MB/s"),
        ("gpu-temp-max", 71.42, "71.4 °C"),
        ("gpu-xid-last", 79.0, "79"),
        ("target-up", 0.0, "no"),
        ("gpu-generation-throughput", 1234.5, "1,234 tokens/s"),
        ("nf-process-start-time", 1_767_614_400.0, "2026-01-05 12:00:00 UTC"),
        ("some_raw_metric_total", 53868250532371.6, "53,868,250,532,372"),
    ],
)
def test_values_in_their_units(kpi: str, x: float, shown: str) -> None:
    assert present.value(kpi, x) == shown


@pytest.mark.parametrize(
    ("kpi", "low", "high", "shown"),
    [
        ("amf-registration-success-by-plmn", 0.613, 1.325, "at least 61.3 %"),
        ("amf-registration-success-by-plmn", 0.841421, 0.97, "84.1 % to 97 %"),
        ("sbi-udm-error-share", -0.09446, 0.1008, "at most 10.1 %"),
        ("sbi-udm-error-share", -4.859e-12, 4.979e-12, "0 %"),
        ("sbi-udm-error-share", -0.2, 1.2, "any value"),
        ("amf-registered-subscribers-by-plmn", 2318.2, 2395.4, "2,318–2,395"),
        ("amf-registered-subscribers-by-plmn", -12.0, 30.4, "at most 30"),
        ("smf-pfcp-peers", 1.0, 1.0, "1"),
        ("sbi-udm-latency", 0.012, 0.05, "12 ms to 50 ms"),
        ("amf-registration-attempts", 4.086, 8.027, "4.09/s to 8.03/s"),
        ("target-up", 1.0, 1.0, "yes"),
    ],
)
def test_bands_clipped_to_what_the_quantity_can_be(
    kpi: str, low: float, high: float, shown: str
) -> None:
    assert present.band(kpi, low, high) == shown


def test_severity_is_bounded_monotone_and_half_at_the_alarm_bar() -> None:
    scores = [0.0, 1e-6, 0.3, 1.0, 2.0, 9.5, 154.0, 1e6, 53868250532371.6, 1e300, math.inf]
    indices = [present.severity_index(s) for s in scores]
    assert indices == sorted(indices) and indices[0] == 0 and indices[-1] == 100
    assert all(0 <= i <= 99 for i in indices[:-1])
    assert present.severity_index(1.0) == 50 and present.severity(1.0) == "50/100"
    assert present.severity_index(math.nan) == 0 and present.severity_index(-3.0) == 0


@settings(max_examples=60, deadline=None)
@given(a=st.floats(-1e6, 1e6), b=st.floats(-1e6, 1e6))
def test_severity_never_decreases(a: float, b: float) -> None:
    lo, hi = sorted((a, b))
    assert present.severity_index(lo) <= present.severity_index(hi)


_VALUES = st.one_of(
    st.floats(-2.0, 2.0),
    st.floats(-1e7, 1e7),
    st.sampled_from([0.0, 1.0, -4.859e-12, 4.979e-12, 0.99996, 1e-5, 2275.0, 1_767_614_400.0]),
)


@settings(max_examples=300, deadline=None)
@given(kpi=st.sampled_from([*KPIS, "raw_metric"]), x=_VALUES, low=_VALUES, high=_VALUES)
def test_what_is_rendered_is_grounded_in_the_evidence_it_came_from(
    kpi: str, x: float, low: float, high: float
) -> None:
    """Whatever the values: a summary's numbers are grounded in its item (values and
    summary), and a placeholder's in the item's values alone."""
    ev = _evidence(kpi, x, low, high)
    assert _grounded(present.value(kpi, x), ev)
    assert _grounded(present.band(kpi, low, high), ev)
    values_only = {"values": ev.values}
    for field in present.FIELDS:
        text = present.placeholder(ev, field)
        assert _grounded(text, values_only), (field, text, ev.values)


@settings(max_examples=200, deadline=None)
@given(
    kpi=st.sampled_from([k for k in KPIS if PACK.kpis[k].unit not in SCALED]),
    x=_VALUES,
    low=st.floats(-1e6, 1e6),
    width=st.floats(0.0, 1e6),
)
def test_unscaled_numbers_match_the_values_alone(
    kpi: str, x: float, low: float, width: float
) -> None:
    """Where no unit is scaled (everything but ms and kB/s …), the person's text matches the
    raw values too (a band that overlaps what the quantity can be)."""
    high = low + width
    floor, ceiling = (0.0, 1.0) if PACK.kpis[kpi].unit == "ratio" else (0.0, math.inf)
    if high <= floor + 1e-3 or low >= ceiling - 1e-3:
        return  # a band wholly outside the physical range: shown clipped, not as its values
    values = {"values": (x, low, high)}
    assert _grounded(present.value(kpi, x), values)
    assert _grounded(present.band(kpi, low, high), values)


def test_a_placeholder_is_total() -> None:
    """Items without values (a link, an absence), a field it does not know, values that are
    not numbers: a clear placeholder, never an exception."""
    link = Evidence(id="ev-link", kind="inventory", entity="sepp-1", start=0.0, end=0.0)
    assert [present.placeholder(link, f) for f in ("observed", "band", "expected_high")] == [
        present.NO_VALUE
    ] * 3
    assert present.placeholder(link, "start") == "1970-01-01 00:00 UTC"
    ev = _evidence("amf-registration-success-by-plmn", 0.635, 0.841, 1.1)
    assert present.placeholder(ev, "colour") == present.NO_VALUE
    odd = ev.model_copy(update={"values": (math.nan, math.inf, -math.inf)})
    assert present.placeholder(odd, "observed") == present.NO_VALUE
    assert present.placeholder(odd, "band") == present.NO_VALUE
    one = ev.model_copy(update={"values": (0.42,)})
    assert present.placeholder(one, "observed") == "42 %"
    assert present.placeholder(one, "band") == present.NO_VALUE


def test_position_and_excess_tell_a_sign_from_a_normal_value() -> None:
    ratio = "amf-registration-success-by-plmn"
    assert present.position(ratio, 0.75, 0.613, 1.325) == "inside"
    assert present.position(ratio, 0.9208, 0.92061, 1.0) == "inside"  # 92.1 % both ways
    assert present.position(ratio, 0.635, 0.841, 1.1) == "below"
    assert present.position("sbi-udm-error-share", 0.3, -0.09, 0.1) == "above"
    assert present.excess(ratio, 0.75, 0.613, 1.325) == 0.0
    count = present.excess("amf-registered-subscribers-by-plmn", 2275, 2318, 2395)
    assert count == pytest.approx(43 / 77)
    # a ratio's band does not widen past 100 %: 0.635 against 0.841..1.1 is 1.3 widths out
    assert present.excess(ratio, 0.635, 0.841, 1.1) == pytest.approx(0.206 / 0.159)


def test_a_diagnosis_stored_before_units_reads_in_units() -> None:
    """A report of an incident diagnosed before summaries showed units shows its numbers in
    units all the same, from the item's values, and they still pass the grounding check."""
    from knowledge.topology import load_inventory
    from noc_assistant.models import Hypothesis
    from noc_assistant.triage.drafting import Drafter

    old = Evidence(
        id="ev-f-1",
        finding_id="f-1",
        entity="amf-1",
        kpi="sbi-udm-error-share",
        start=1_767_615_210.0,
        end=1_767_615_210.0,
        values=(0.3846, -4.859e-12, 4.979e-12),
        summary="sbi-udm-error-share up on amf-1: 0.3846 (expected -4.859e-12..4.979e-12) [x=1]",
    )
    diagnosis = Diagnosis(
        incident_id="inc-1",
        verdict="fault",
        hypotheses=[
            Hypothesis(
                fault="udm_timeout", entity="udm-01", confidence=0.9, evidence_ids=("ev-f-1",)
            )
        ],
        evidence=[old],
    )
    inc = Incident(id="inc-1", fingerprint="f", opened_at=0.0, updated_at=0.0, title="t")
    d = Drafter(PACK, load_inventory(PACK.fixture_path("inventory.yaml"), PACK))
    report = d.report(inc, diagnosis)
    line = "[ev-f-1] sbi-udm-error-share up on amf-1: 38.5 % (expected 0 %) [x=1]"
    assert f"- {line}" in report.body
    assert _grounded(line.removeprefix("[ev-f-1] "), old)
