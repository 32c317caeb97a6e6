"""Subscriber-identifier masking: the pack's own examples, realistic NOC text, Luhn, payloads,
idempotence, broken policies, and a property test over random text."""

from __future__ import annotations

import re
import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from guardrails import GuardrailPolicyError, Masker, MaskingError, check_examples, luhn_valid
from knowledge.pack import Pack, load_pack
from knowledge.schema import MaskingPattern

PACK = load_pack()
KEPT = {"none": 0, "plmn": 6, "tac": 8}


@pytest.fixture(scope="module")
def pack() -> Pack:
    return PACK


@pytest.fixture(scope="module")
def masker() -> Masker:
    return Masker.from_pack(PACK)


def _identifier(text: str) -> str:
    return max(re.findall(r"\d+", re.sub(r"(?<=\d)-(?=\d)", "", text)), key=len)


HOLD = r"\g<0>"
"""The replacement of a hold: text known not to be an identifier, kept as it is."""
EXAMPLES = [(p, ex) for p in PACK.masking for ex in p.examples if p.replacement != HOLD]
HELD = [(p, ex) for p in PACK.masking for ex in p.examples if p.replacement == HOLD]
NON_EXAMPLES = [(p, ex) for p in PACK.masking for ex in p.non_examples]


@pytest.mark.parametrize(("pattern", "example"), EXAMPLES, ids=lambda v: getattr(v, "id", v))
def test_every_pack_example_is_masked(
    masker: Masker, pattern: MaskingPattern, example: str
) -> None:
    result = masker.mask(example)
    assert result.counts.get(pattern.id, 0) >= 1, result
    ident = _identifier(example)
    secret = ident[KEPT[pattern.keep] :]
    assert secret not in result.text
    assert ident not in result.text
    assert masker.mask(result.text).text == result.text


@pytest.mark.parametrize(("pattern", "text"), HELD, ids=lambda v: getattr(v, "id", v))
def test_every_hold_example_is_kept(masker: Masker, pattern: MaskingPattern, text: str) -> None:
    """A hold (a counter's value) matches its examples and nothing masks them."""
    assert re.search(pattern.regex, text)
    result = masker.mask(text)
    assert result.text == text
    assert result.total == 0


@pytest.mark.parametrize(("pattern", "text"), NON_EXAMPLES, ids=lambda v: getattr(v, "id", v))
def test_every_pack_non_example_is_unchanged(
    masker: Masker, pattern: MaskingPattern, text: str
) -> None:
    result = masker.mask(text)
    assert result.text == text
    assert result.total == 0


def test_check_examples_passes_on_the_default_pack(masker: Masker) -> None:
    results = check_examples(masker)
    assert len(results) == len(EXAMPLES) + len(HELD) + len(NON_EXAMPLES)
    assert [r for r in results if not r.passed] == []


def test_check_examples_catches_a_leaky_pattern() -> None:
    leaky = MaskingPattern(
        id="cust",
        identifier="customer number",
        regex=r"\bcust-(\d{4})(\d{6})\b",
        replacement=r"cust-\2<masked>",
        examples=("cust-1234567890",),
        non_examples=("cust-12",),
    )
    (example, non_example) = check_examples(Masker([leaky]))
    assert not example.passed
    assert "567890" in example.detail
    assert non_example.passed


def test_check_examples_catches_a_masked_non_example() -> None:
    greedy = MaskingPattern(
        id="any-digits",
        identifier="anything",
        regex=r"\d{6,}",
        replacement="<masked>",
        examples=("123456",),
        non_examples=("counter 1234567",),
    )
    results = check_examples(Masker([greedy]))
    assert [r.passed for r in results] == [True, False]


def test_log_line(masker: Masker) -> None:
    result = masker.mask("UE imsi-262011234567890 failed registration cause 5GMM#7")
    assert result.text == "UE imsi-26201<masked> failed registration cause 5GMM#7"
    assert dict(result.counts) == {"supi-imsi": 1}


PARTNER_EMAIL = """\
Dear partner NOC,

since 10:32 UTC your subscribers fail to attach on our AMF amf-2. Examples:
  - suci-0-262-01-0000-0-0-0123456789 (registration reject, 5GMM cause #7)
  - IMSI 262011234567890, MSISDN +4915112345678, msisdn-4915187654321
  - device imei-490154203237518 / imeisv-3548210456789012, PEI: 353456789012348
Please check your SEPP towards PLMN 999-70 (ticket 4711).
"""


def test_partner_email(masker: Masker) -> None:
    result = masker.mask(PARTNER_EMAIL)
    assert result.text == (
        "Dear partner NOC,\n\n"
        "since 10:32 UTC your subscribers fail to attach on our AMF amf-2. Examples:\n"
        "  - suci-<masked> (registration reject, 5GMM cause #7)\n"
        "  - IMSI 26201<masked>, MSISDN <msisdn-masked>, <msisdn-masked>\n"
        "  - device imei-49015420<imei-masked> / imeisv-35482104<imei-masked>,"
        " PEI: 35345678<imei-masked>\n"
        "Please check your SEPP towards PLMN 999-70 (ticket 4711).\n"
    )
    assert dict(result.counts) == {
        "suci": 1,
        "bare-imsi": 1,
        "gpsi-msisdn": 2,
        "pei-imei": 2,
        "bare-imei": 1,
    }
    for secret in (
        "0123456789",
        "1234567890",
        "15112345678",
        "15187654321",
        "3237518",
        "56789012",
        "9012348",
    ):
        assert secret not in result.text
    assert masker.mask(result.text).text == result.text


def test_json_payload(masker: Masker) -> None:
    payload = {
        "incident": "inc-42",
        "ue": {
            "supi": "imsi-999700000000001",
            "gpsi": "msisdn-4915112345678",
            "pei": 490154203237518,
        },
        "imsi": 262011234567890,
        "subscriber_id": "262011234567891",
        "events": [
            ("registration reject", "suci-0-999-70-0000-0-0-0000000001"),
            {"imsi-262011234567892": {"imeisv": "imeisv-4901542032375181"}},
        ],
        "tags": {"IMEI 490154203237518"},
        "rate": 0.45,
        "count": 3,
        "ok": False,
        "note": None,
    }
    masked = masker.mask_mapping(payload)
    assert masked == {
        "incident": "inc-42",
        "ue": {
            "supi": "imsi-99970<masked>",
            "gpsi": "<msisdn-masked>",
            "pei": "49015420<imei-masked>",
        },
        "imsi": "26201<masked>",
        "subscriber_id": "26201<masked>",
        "events": [
            ("registration reject", "suci-<masked>"),
            {"imsi-26201<masked>": {"imeisv": "imeisv-49015420<imei-masked>"}},
        ],
        "tags": {"IMEI 49015420<imei-masked>"},
        "rate": 0.45,
        "count": 3,
        "ok": False,
        "note": None,
    }
    assert payload["imsi"] == 262011234567890  # the input is not modified
    assert masker.mask_mapping(masked) == masked


def test_payload_keys_that_collide_raise(masker: Masker) -> None:
    with pytest.raises(MaskingError, match="same key"):
        masker.mask_mapping({"imsi-262011111111111": 1, "imsi-262011222222222": 2})


def test_payload_of_unknown_types_raises(masker: Masker) -> None:
    with pytest.raises(MaskingError, match="bytes"):
        masker.mask_mapping({"raw": b"imsi-262011234567890"})


def test_luhn() -> None:
    assert luhn_valid("490154203237518")
    assert luhn_valid("353456789012348")
    assert not luhn_valid("490154203237519")
    assert not luhn_valid("353456789012345")


def test_only_luhn_valid_imeis_are_masked(masker: Masker) -> None:
    assert masker.mask("IMEI: 490154203237518").text == "IMEI: 49015420<imei-masked>"
    assert masker.mask("IMEI: 490154203237519").text == "IMEI: 490154203237519"
    # the imei- prefix says what it is: masked whatever its check digit
    assert masker.mask("imei-490154203237519").text == "imei-49015420<imei-masked>"
    assert masker.mask("imei-490154203237518").text == "imei-49015420<imei-masked>"


def test_imeisv_has_no_check_digit_and_is_always_masked(masker: Masker) -> None:
    for imeisv in ("imeisv-4901542032375181", "imeisv-4901542032375189"):
        result = masker.mask(imeisv)
        assert result.text == "imeisv-49015420<imei-masked>"
        assert result.counts == {"pei-imei": 1}


def test_masking_is_idempotent_on_mixed_text(masker: Masker) -> None:
    text = (
        "UE 262011234567890 imsi-262011234567890 subscriber:999700000000001 "
        "+4915112345678 IMEI 490154203237518 pei=353456789012348 suci-0-262-01-0-0-0-12ab"
    )
    once = masker.mask(text).text
    assert masker.mask(once).text == once
    assert masker.mask(once).total == 0
    assert not re.search(r"\d{9}", once)


def test_context_words_restrict_matches() -> None:
    pattern = MaskingPattern(
        id="loose",
        identifier="ten digits after a word",
        regex=r"(?i)\b([a-z]+) (\d{10})\b",
        replacement=r"\1 <masked>",
        context_words=("ue",),
    )
    masker = Masker([pattern])
    assert masker.mask("ue 1234567890").text == "ue <masked>"
    assert masker.mask("node 1234567890").text == "node 1234567890"
    assert masker.mask("UE 1234567890 node 1234567890").text == "UE <masked> node 1234567890"


def _pattern(**fields: object) -> MaskingPattern:
    base: dict[str, object] = {
        "id": "broken",
        "identifier": "x",
        "regex": r"\bid-(\d+)\b",
        "replacement": "id-<masked>",
    }
    return MaskingPattern.model_construct(**(base | fields))


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"regex": r"\bid-(\d+"}, "does not compile"),
        ({"replacement": r"id-\2<masked>"}, "invalid group reference"),
        ({"replacement": r"id-\g<name>"}, "replacement"),
        ({"keep": "tac", "replacement": "masked"}, "placeholder"),
    ],
)
def test_broken_policy_names_the_pattern(fields: dict[str, object], message: str) -> None:
    with pytest.raises(GuardrailPolicyError, match=message) as err:
        Masker([_pattern(**fields)])
    assert err.value.pattern_id == "broken"
    assert "broken" in str(err.value)


_SEPARATORS = st.sampled_from([" ", "\n", "\t", ", ", "; ", "(", ")", "[", "]", "=", "'", '"'])
_TEXT = st.text(st.characters(blacklist_characters=string.digits), max_size=40)


@settings(max_examples=200, deadline=None)
@given(
    imsi=st.text(string.digits, min_size=15, max_size=15),
    before=_TEXT,
    after=_TEXT,
    left=_SEPARATORS,
    right=_SEPARATORS,
)
def test_random_imsis_never_survive(
    imsi: str, before: str, after: str, left: str, right: str
) -> None:
    masker = Masker.from_pack(PACK)
    result = masker.mask(f"{before}{left}imsi-{imsi}{right}{after}")
    assert result.counts.get("supi-imsi", 0) >= 1
    assert imsi[KEPT["plmn"] :] not in result.text
    # the text around has no ASCII digits: whatever digits are left are the kept MCC+MNC
    runs = re.findall(r"[0-9]+", result.text)
    assert all(len(run) <= KEPT["plmn"] and imsi.startswith(run) for run in runs), runs
    assert masker.mask(result.text).text == result.text
