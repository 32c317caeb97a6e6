"""Grounding of drafts: citations resolve, numbers match the cited evidence, and the
``unsupported_claim`` modes flag, strip or reject."""

from __future__ import annotations

from typing import Any, Literal

import pytest

from guardrails import GroundingReport, GuardrailPolicyError, UngroundedError, check_grounding
from knowledge.pack import load_pack
from knowledge.schema import GroundingPolicy
from noc_assistant.models import Evidence

PACK = load_pack()
REFS = PACK.references
EVIDENCE: dict[str, Any] = {
    "ev-f1": Evidence(
        id="ev-f1",
        entity="udm-1",
        kpi="udm_timeout_rate",
        start=1.79e9,
        end=1.79e9 + 300,
        values=(0.4523, 0.0, 0.05),
        summary="udm_timeout_rate up on udm-1: 0.4523 (expected 0..0.05)",
    ),
    "ev-f2": {"values": [850.0, 120.0], "summary": "p99 nudm latency 850 ms (baseline 120 ms)"},
    "ev-link-amf-2-udm-1": {"summary": "amf-2 depends on udm-1 (inventory)"},
    "ev-rate": {"values": [], "summary": "registration success 97.5 % over 3 AMFs"},
}


def _policy(mode: Literal["flag", "strip", "reject"] = "flag", **changes: Any) -> GroundingPolicy:
    return PACK.grounding.model_copy(update={"unsupported_claim": mode, **changes})


def _check(text: str, **policy: Any) -> GroundingReport:
    return check_grounding(text, EVIDENCE, REFS, _policy(**policy))


def _issues(report: GroundingReport) -> list[tuple[str, str]]:
    return [(i.kind, i.token) for i in report.issues]


GOOD = """\
## Diagnosis
UDM timeouts on udm-1 rose to 45 % [ev-f1], against at most 5 % normally [ev-f1].
- The p99 latency of nudm calls reached 850 ms, up from 120 ms [ev-f2].
- amf-2 depends on udm-1 [ev-link-amf-2-udm-1]; per 3GPP TS 29.503 [ref:ts-29-503] the AMF \
retries on another UDM.
Registration success held at 97.5 % on all 3 AMFs [ev-rate].
"""


def test_good_draft_is_ok() -> None:
    report = _check(GOOD)
    assert report.ok, report.issues
    assert report.issues == ()
    assert report.text == GOOD


def test_the_default_policy_is_the_one_tested() -> None:
    g = PACK.grounding
    assert (g.require_evidence_ids, g.require_number_match, g.require_reference_ids) == (
        True,
        True,
        True,
    )
    assert g.number_tolerance == pytest.approx(0.01)


def test_unknown_evidence_id() -> None:
    report = _check("UDM timeouts rose to 45 % [ev-f9].")
    assert not report.ok
    assert _issues(report) == [("unknown_evidence", "[ev-f9]")]
    assert report.issues[0].sentence == "UDM timeouts rose to 45 % [ev-f9]."


def test_unknown_evidence_id_without_numbers() -> None:
    assert _issues(_check("The UDM is overloaded [ev-udm]. The AMF is fine.")) == [
        ("unknown_evidence", "[ev-udm]")
    ]


def test_wrong_number() -> None:
    report = _check("UDM timeouts rose to 54 % [ev-f1]. p99 latency was 850 ms [ev-f2].")
    assert _issues(report) == [("number_mismatch", "54 %")]
    assert report.issues[0].sentence == "UDM timeouts rose to 54 % [ev-f1]."


def test_number_must_come_from_the_cited_evidence() -> None:
    # 850 is in ev-f2, not in ev-f1
    assert _issues(_check("Latency reached 850 ms [ev-f1].")) == [("number_mismatch", "850")]


@pytest.mark.parametrize(
    "sentence",
    [
        "Timeouts reached 45 % [ev-f1].",  # percentage for the ratio 0.4523
        "Timeouts reached 45.2 percent [ev-f1].",
        "The timeout ratio was 0.45 [ev-f1].",  # ratio for the ratio
        "The timeout ratio was 0.4523 [ev-f1].",
        "The success ratio was 0.975 [ev-rate].",  # ratio for the summary's 97.5 %
        "Success was 97.5% [ev-rate].",
    ],
)
def test_percentages_and_ratios_match(sentence: str) -> None:
    assert _check(sentence).ok, _check(sentence).issues


@pytest.mark.parametrize(
    ("sentence", "token"),
    [
        ("Timeouts reached 47 % [ev-f1].", "47 %"),
        ("The timeout ratio was 0.47 [ev-f1].", "0.47"),
        ("Success was 0.95 [ev-rate].", "0.95"),
        ("Timeouts reached 4.5 % [ev-f1].", "4.5 %"),
    ],
)
def test_near_numbers_do_not_match(sentence: str, token: str) -> None:
    assert _issues(_check(sentence)) == [("number_mismatch", token)]


def test_tolerance_is_relative_and_from_the_policy() -> None:
    text = "Latency reached 860 ms [ev-f2]."  # 1.2 % off 850
    assert _issues(_check(text)) == [("number_mismatch", "860")]
    assert _check(text, number_tolerance=0.02).ok


def test_uncited_number() -> None:
    report = _check("Three AMFs lost 12 % of registrations. The UPF is fine.")
    assert _issues(report) == [("uncited_number", "12 %")]
    assert _check("Three AMFs lost 12 % of registrations.", require_evidence_ids=False).ok


def test_citation_after_the_full_stop_counts() -> None:
    assert _check("Timeouts reached 45 %. [ev-f1]").ok


def test_ids_specs_and_times_are_not_claims() -> None:
    text = (
        "At 2026-05-09T10:32:05Z (10:32 UTC, epoch 1790000000) UE imsi-26201<masked> on amf-2 "
        "got 5GMM#7 via N4 from 10.0.0.1:8805 per TS 29.244 §6.2.2, RFC 9260 and Release 17; "
        "IMEI 49015420<imei-masked>, incident inc-42, partner 262-01, p99 [ev-link-amf-2-udm-1]."
    )
    assert _check(text).ok, _check(text).issues
    # the same without the citation: nothing there is a number to cite
    assert _check(text.replace(" [ev-link-amf-2-udm-1]", "")).ok


def test_require_number_match_off() -> None:
    assert _check("Timeouts reached 99 % [ev-f1].", require_number_match=False).ok


def test_unknown_reference_id() -> None:
    text = "The SEPP must reject it [ref:ts-99-999], see also [ref:ts-29-244]."
    assert _issues(_check(text)) == [("unknown_reference", "[ref:ts-99-999]")]
    assert _check(text, require_reference_ids=False).ok


def test_flag_keeps_the_text() -> None:
    text = "Timeouts reached 60 % [ev-f1]. The UDM is the root cause [ev-f1]."
    report = _check(text, mode="flag")
    assert not report.ok
    assert report.text == text
    assert report.removed == ()


def test_strip_removes_the_offending_sentences() -> None:
    text = (
        "# Report\n"
        "Timeouts reached 60 % [ev-f1]. The UDM is the root cause [ev-link-amf-2-udm-1].\n"
        "- 3 UPFs also failed.\n"
        "- p99 latency reached 850 ms [ev-f2].\n"
        "See [ref:ts-00-000].\n"
    )
    report = _check(text, mode="strip")
    assert not report.ok
    assert [i.kind for i in report.issues] == [
        "number_mismatch",
        "uncited_number",
        "unknown_reference",
    ]
    assert report.removed == (
        "Timeouts reached 60 % [ev-f1].",
        "3 UPFs also failed.",
        "See [ref:ts-00-000].",
    )
    assert report.text == (
        "# Report\n"
        "The UDM is the root cause [ev-link-amf-2-udm-1].\n"
        "- p99 latency reached 850 ms [ev-f2].\n"
    )
    assert check_grounding(report.text, EVIDENCE, REFS, _policy("strip")).ok


def test_strip_of_a_good_draft_changes_nothing() -> None:
    report = _check(GOOD, mode="strip")
    assert report.ok and report.text == GOOD


def test_reject_raises_with_the_report() -> None:
    with pytest.raises(UngroundedError) as err:
        _check("Timeouts reached 60 % [ev-f9] and 45 % [ev-f1].", mode="reject")
    assert _issues(err.value.report) == [
        ("unknown_evidence", "[ev-f9]"),
        ("number_mismatch", "60 %"),  # checked against ev-f1, the evidence that is known
    ]
    assert _check(GOOD, mode="reject").ok


def test_plain_dict_evidence_and_model_evidence_agree() -> None:
    model = EVIDENCE["ev-f1"]
    as_dict = {"ev-f1": model.model_dump()}
    text = "Timeouts reached 45 % [ev-f1], then 12 % [ev-f1]."
    for evidence in (EVIDENCE, as_dict):
        report = check_grounding(text, evidence, REFS, _policy())
        assert _issues(report) == [("number_mismatch", "12 %")]


def test_bad_citation_pattern_is_a_policy_error() -> None:
    with pytest.raises(GuardrailPolicyError, match="evidence_id_pattern"):
        _check("x", evidence_id_pattern=r"\[ev-(")
