"""The masker against a generated hostile corpus (every identifier form a probe used, in log
lines, JSON, label values, URLs, e-mail text and entity names: none may survive) and a benign
corpus (timestamps, counters, PLMN ids, NF addresses, ids: at most 1 % may be touched).

The generators are seeded, so a failure names a case that fails again. ``corpus_figures``
is what BENCHMARKS.md "Masking corpus" reports.
"""

from __future__ import annotations

import random
import re
import string
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from guardrails import Masker, luhn_valid
from knowledge.pack import load_pack

SEED = 20260509
HOSTILE_CASES = 1200
BENIGN_CASES = 1200
MAX_FALSE_MASK_RATE = 0.01


@dataclass(frozen=True)
class Case:
    """One identifier written one way, in one context (``template`` holds ``{}``)."""

    kind: str
    form: str
    text: str
    ident: str
    """The identifier's characters, separators removed, lower case."""
    secret: str
    """The part of ``ident`` that must never survive (past a kept MCC-MNC or TAC)."""
    prefix: str
    suffix: str


_MCCS = ("001", "262", "310", "208", "234", "440", "460", "505", "724", "999", "214", "302")
_CCS = ("49", "1", "44", "33", "39", "34", "81", "86", "91", "61", "353")
_RBIS = ("35", "86", "01", "49", "99", "44")
_HEX = "0123456789abcdef"


def _digits(rng: random.Random, n: int) -> str:
    return "".join(rng.choice(string.digits) for _ in range(n))


def _hex(rng: random.Random, n: int) -> str:
    return "".join(rng.choice(_HEX) for _ in range(n))


def _pct(text: str) -> str:
    """Percent-encode every character that is not a letter or a digit."""
    return "".join(c if c.isalnum() else f"%{ord(c):02X}" for c in text)


Form = tuple[str, str, str, str]
"""(kind, form name, written form, identifier characters)."""


def _pick(
    rng: random.Random,
    kind: str,
    forms: dict[str, str],
    ident: str,
    other: dict[str, str] | None = None,
) -> Form:
    """One of the ``forms`` (name → written form), drawn; its identifier characters are
    ``ident``, or ``other[name]`` for a form that writes another identifier."""
    name = rng.choice(sorted(forms))
    return kind, name, forms[name], (other or {}).get(name, ident)


def _imsi(rng: random.Random) -> Form:
    mcc = rng.choice(_MCCS)
    mnc = _digits(rng, rng.choice((2, 3)))
    msin = _digits(rng, 15 - 3 - len(mnc))
    d = mcc + mnc + msin
    forms = {
        "prefix": f"imsi-{d}",
        "prefix-upper": f"IMSI-{d}",
        "supi-prefix": f"supi-{d}",
        "supi-label": f"SUPI: {d}",
        "supi-label-prefix": f"SUPI: imsi-{d}",
        "label-eq": f"imsi={d}",
        "label-spaces": f"IMSI {mcc} {mnc} {msin}",
        "label-dashes": f"imsi {mcc}-{mnc}-{msin}",
        "prefix-dashes": f"imsi-{mcc}-{mnc}-{msin}",
        "bare": d,
        "bare-spaces": f"{mcc} {mnc} {msin[:5]} {msin[5:]}",
        "bare-dashes": f"{mcc}-{mnc}-{msin}",
        "json": f'{{"imsi":"{d}"}}',
        "json-number": f'{{"imsi": {d}}}',
        "json-supi": f'{{"supi":"imsi-{d}"}}',
        "json-other-key": f'{{"ueId":"{d}"}}',
        "url-encoded-label": f"imsi%3D{d}",
        "url-encoded-json": _pct(f'"imsi":"{d}"'),
        "url-encoded-bare": _pct(f"{mcc} {mnc} {msin}"),
        "url-path": f"/nudm-sdm/v2/imsi-{d}/am-data",
        "url-path-bare": f"/subscribers/{d}/sessions",
        "url-query": f"?supi=imsi-{d}&plmn=26201",
        "subscriber": f"subscriber={d}",
        "ue-label": f"UE {d}",
        "underscore-label": f"ue_imsi={d}",
        "fourteen": f"IMSI {d[:14]}",
    }
    return _pick(rng, "imsi", forms, d, {"fourteen": d[:14]})


def _suci(rng: random.Random) -> Form:
    mcc = rng.choice(_MCCS)
    mnc = _digits(rng, 2)
    msin = _digits(rng, 10)
    concealed = _hex(rng, 40)
    forms = {
        "null-scheme": f"suci-0-{mcc}-{mnc}-0000-0-0-{msin}",
        "upper": f"SUCI-0-{mcc}-{mnc}-0000-0-0-{msin}",
        "profile-a": f"suci-0-{mcc}-{mnc}-00ff-1-3-{concealed}",
        "label": f"SUCI: 0-{mcc}-{mnc}-0000-0-0-{msin}",
        "json": f'{{"suci":"suci-0-{mcc}-{mnc}-0000-0-0-{msin}"}}',
    }
    return _pick(rng, "suci", forms, msin, {"profile-a": concealed})


def _msisdn(rng: random.Random) -> Form:
    cc = rng.choice(_CCS)
    area = _digits(rng, 3)
    local = _digits(rng, 7)
    intl = cc + area + local
    national = "0" + area + local
    forms = {
        "plus": f"+{intl}",
        "plus-spaces": f"+{cc} {area} {local}",
        "plus-parens": f"+{cc} ({area}) {local}",
        "plus-dots": f"+{cc}.{area}.{local}",
        "plus-dashes": f"+{cc}-{area}-{local[:3]}-{local[3:]}",
        "plus-trunk": f"+{cc} (0){area} {local}",
        "double-zero": f"00{intl}",
        "double-zero-spaces": f"00{cc} {area} {local}",
        "pct-plus": f"%2B{intl}",
        "pct-plus-spaces": f"%2B{cc}%20{area}%20{local}",
        "msisdn-prefix": f"msisdn-{intl}",
        "label": f"MSISDN: {intl}",
        "json": f'{{"msisdn":"{intl}"}}',
        "json-plus": f'{{"msisdn":"+{cc} {area} {local}"}}',
        "tel-uri": f"tel:+{intl}",
        "national-phone": f"phone: {national}",
        "national-parens": f"phone: ({national[:4]}) {local}",
        "national-slash": f"Tel. {national[:4]}/{local}",
        "caller": f"caller={intl}",
        "gpsi": f"gpsi=msisdn-{intl}",
    }
    nationals = dict.fromkeys(("national-phone", "national-parens", "national-slash"), national)
    return _pick(rng, "msisdn", forms, intl, nationals)


def _luhn_digit(body: str) -> str:
    return next(d for d in string.digits if luhn_valid(body + d))


def _imei(rng: random.Random) -> Form:
    body = rng.choice(_RBIS) + _digits(rng, 12)
    d = body + _luhn_digit(body)
    sv = body + _digits(rng, 2)
    forms = {
        "bare": d,
        "label": f"IMEI {d}",
        "label-colon": f"IMEI: {d}",
        "prefix": f"imei-{d}",
        "dashes": f"IMEI {d[:2]}-{d[2:8]}-{d[8:14]}-{d[14]}",
        "bare-dashes": f"{d[:2]}-{d[2:8]}-{d[8:14]}-{d[14]}",
        "spaces": f"IMEI {d[:2]} {d[2:8]} {d[8:14]} {d[14]}",
        "bare-spaces": f"{d[:2]} {d[2:8]} {d[8:14]} {d[14]}",
        "fourteen": f"IMEI {body}",
        "pei": f"pei={d}",
        "json": f'{{"pei":"imei-{d}"}}',
        "json-imei": f'"imei": "{d}"',
        "imeisv": f"IMEISV {sv}",
        "imeisv-prefix": f"imeisv-{sv}",
        "imeisv-dashes": f"IMEISV: {sv[:2]}-{sv[2:8]}-{sv[8:14]}-{sv[14:]}",
        "pct-label": f"imei%3D{d}",
    }
    svs = dict.fromkeys(("imeisv", "imeisv-prefix", "imeisv-dashes"), sv)
    return _pick(rng, "imei", forms, d, {"fourteen": body, **svs})


def _guti(rng: random.Random) -> Form:
    plmn = rng.choice(_MCCS) + _digits(rng, 2)
    tmsi = _hex(rng, 8)
    forms = {
        "5g-guti": f"5G-GUTI {plmn}-{_hex(rng, 4)}-{_hex(rng, 2)}-{tmsi}",
        "5g-guti-prefix": f"5g-guti-{plmn}{_hex(rng, 6)}{tmsi}",
        "guti-eq": f"guti={plmn}{_hex(rng, 6)}{tmsi}",
        "guti-4g": f"GUTI: {plmn[:3]}-{plmn[3:]}-{_hex(rng, 4)}-{_hex(rng, 2)}-0x{tmsi}",
        "json": f'{{"5gGuti":"5g-guti-{plmn}{_hex(rng, 6)}{tmsi}"}}',
    }
    return _pick(rng, "guti", forms, tmsi)


def _tmsi(rng: random.Random) -> Form:
    tmsi = _hex(rng, 7) + rng.choice(string.digits)  # a TMSI's hex with a digit in it
    s_tmsi = _hex(rng, 4) + tmsi
    forms = {
        "tmsi-0x": f"tmsi=0x{tmsi}",
        "m-tmsi": f"M-TMSI: {tmsi}",
        "p-tmsi": f"P-TMSI {tmsi}",
        "5g-tmsi": f"5G-TMSI 0x{tmsi}",
        "5g-s-tmsi": f"5G-S-TMSI: 0x{s_tmsi}",
        "5g-s-tmsi-plain": f"5g-s-tmsi={s_tmsi}",
        "decimal": f"tmsi {int(tmsi, 16)}",
    }
    other = {"5g-s-tmsi": s_tmsi, "5g-s-tmsi-plain": s_tmsi, "decimal": str(int(tmsi, 16))}
    return _pick(rng, "tmsi", forms, tmsi, other)


def _ue_ip(rng: random.Random) -> Form:
    v4 = f"10.{rng.randint(40, 99)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}"
    v6 = f"2001:db8:{_hex(rng, 4)}:{_hex(rng, 4)}::{_hex(rng, 3)}"
    forms = {
        "ue_ip": f"ue_ip={v4}",
        "ue-ip": f"UE-IP: {v4}",
        "pdu-address": f"PDU address {v4}",
        "pdu-address-ipv4": f"PDU Address: IPv4 {v4}",
        "json": f'"ueIpv4Address": "{v4}"',
        "ipv6": f"ue_ipv6={v6}",
        "framed": f"framed_ip={v4}",
    }
    return _pick(rng, "ue-ip", forms, v4, {"ipv6": v6})


_KEPT = {"imsi": 6, "imei": 8}
"""Identifier characters a mask may keep: MCC-MNC of an IMSI, the TAC of an IMEI."""

_HOSTILE_TEMPLATES = (
    "2026-05-09T10:32:11.123Z amf-1 [WARN] registration reject {} cause 5GMM#7",
    "May  9 10:32:11 smf-2 pfcp[812]: session of {} released (N4 cause 66)",
    'ts=1714559531 level=warn msg="auth failure" {} nf=ausf-1',
    '{"event":"reg_reject","ue":"{}","ts":1714559531}',
    '{"incident":"inc-3f2a9c1b","data":{}}',
    'amf_ue_context{id="{}",nf="amf-1"} 1',
    "GET https://udm.5gc.mnc001.mcc001.3gppnetwork.org/nudm-uecm/v1/{}/registrations HTTP/2",
    "https://console.example.net/search?q={}&since=2026-05-09",
    "Dear partner NOC,\n\nplease check {} roaming on your network since 10:32 UTC.\n"
    "Ticket INC-20260509-0042, PLMN 262-01.\n",
    "gpu-srv-1 {}",
    "entity={} kpi=amf-registration-success",
    "1714559531,amf_reg_fail,amf-1,{},3",
    "peer 10.0.0.3:8805 rejected {} (cause 66)",
    "[ev-link-amf-2-udm-1] {} failed on amf1.5gc.mnc001.mcc001.3gppnetwork.org",
    "{}",
    "  - {} (registration reject, 5GMM cause #7)",
)

_GENERATORS: tuple[Callable[[random.Random], Form], ...] = (
    _imsi,
    _imsi,
    _suci,
    _msisdn,
    _msisdn,
    _imei,
    _imei,
    _guti,
    _tmsi,
    _ue_ip,
)


def hostile_corpus(n: int = HOSTILE_CASES, seed: int = SEED) -> list[Case]:
    """``n`` identifiers, each written one of its ways inside one of the contexts."""
    rng = random.Random(seed)
    cases: list[Case] = []
    for _ in range(n):
        kind, name, form, ident = rng.choice(_GENERATORS)(rng)
        template = rng.choice(_HOSTILE_TEMPLATES)
        prefix, _, suffix = template.partition("{}")
        ident = _compact(ident)
        secret = ident[_KEPT.get(kind, 0) :]
        cases.append(Case(kind, name, prefix + form + suffix, ident, secret, prefix, suffix))
    return cases


def _benign(rng: random.Random) -> str:
    epoch = rng.randint(1_577_836_800, 1_798_761_600)  # 2020 .. 2026
    iso = f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T{rng.randint(0, 23):02d}:"
    iso += f"{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}"
    big = rng.randint(10**14, 10**15 - 1)
    plmn = rng.choice(_MCCS) + _digits(rng, 2)
    ip = f"10.{rng.randint(0, 9)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}"
    nf = rng.choice(("amf", "smf", "upf", "ausf", "udm", "nrf", "pcf", "sepp"))
    fqdn = f"{nf}{rng.randint(1, 9)}.5gc.mnc{plmn[3:]:0>3}.mcc{plmn[:3]}.3gppnetwork.org"
    choices = (
        f"{iso}.{rng.randint(0, 999):03d}Z {nf}-1 [INFO] registration accepted",
        f"{iso}+02:00 {nf}-2 heartbeat to {ip}:{rng.choice((7777, 8080, 8805, 38412))} ok",
        f"ts={epoch} level=info msg=scrape nf={nf}-1 duration_ms={rng.randint(1, 900)}",
        f'{{"ts": {epoch}{_digits(rng, 3)}, "metric": "up", "value": 1}}',
        f"{epoch}.{_digits(rng, 6)} {nf} tick",
        f"ran_ue={rng.randint(10**10, 10**11 - 1)}",
        f"bytes_total {big}",
        f'fivegs_ep_n3_gtp_indataoctn3upf{{instance="upf-{rng.randint(1, 9)}"}} {big} {epoch}000',
        f"fivegs_upffunction_upf_sessionnbr {big}",
        f'"rx_bytes": {big}',
        f"packets_dropped_total={big}",
        f'amf_registration_total{{plmn="{plmn}"}} {rng.randint(0, 10**6)} {epoch}000',
        f"PLMN {plmn[:3]}-{plmn[3:]} partner SEPP sepp-{rng.randint(1, 4)}",
        f"plmn={plmn} mcc={plmn[:3]} mnc={plmn[3:]}",
        f"RM.RegInitReq.PLMN{plmn} on ManagedElement=5gc-ams-01,AMFFunction=1",
        f"nf address {ip}:{rng.randint(1024, 65535)} ({fqdn})",
        f"peer {fqdn} resolved to {ip}",
        f"nf_ip={ip} nf_ipv6=2001:db8::{_hex(rng, 2)}",
        f"[ev-link-{nf}-{rng.randint(1, 9)}-udm-{rng.randint(1, 9)}] p99 {rng.randint(10, 900)} ms",
        f"incident inc-{_hex(rng, 8)} opened at {iso}Z",
        f"INC-{iso[:10].replace('-', '')}-{rng.randint(1, 9999):04d} escalated",
        f"trace_id={_hex(rng, 32)} span_id={_hex(rng, 16)}",
        f"request {_hex(rng, 8)}-{_hex(rng, 4)}-{_hex(rng, 4)}-{_hex(rng, 4)}-{_hex(rng, 12)} done",
        f"TS 29.571 §5.3.{rng.randint(1, 9)}, 5GMM cause #{rng.randint(1, 111)}",
        f"S-NSSAI 1-{_hex(rng, 6)} 5QI {rng.randint(1, 9)} gNB id {rng.randint(1, 10**6)}",
        f"latency_ms {rng.randint(1, 900)}.{rng.randint(0, 9)} p99 over {rng.randint(1, 60)} min",
        f"cpu_seconds_total {rng.randint(1, 10**7)}.{_digits(rng, 2)}",
        f"{epoch}{_digits(rng, 3)},amf_reg_req,{nf}-1,{rng.randint(0, 10**6)},counter",
        f"version 1.{rng.randint(0, 30)}.{rng.randint(0, 30)} build {_hex(rng, 7)}",
        f"GUTI reallocation complete for {rng.randint(1, 500)} UEs on {nf}-1",
        f"uptime {rng.randint(1, 10**8)} s, restarts {rng.randint(0, 9)}",
    )
    return rng.choice(choices)


def benign_corpus(n: int = BENIGN_CASES, seed: int = SEED) -> list[str]:
    """``n`` strings that hold no identifier (timestamps, counters, PLMN ids, NF addresses,
    evidence, incident and trace ids)."""
    rng = random.Random(seed + 1)
    return [_benign(rng) for _ in range(n)]


def _compact(text: str) -> str:
    """Letters and digits only, lower case: an identifier with its separators removed."""
    return re.sub(r"[^0-9a-z]", "", text.lower())


def leaks(masker: Masker, case: Case) -> list[str]:
    """What is wrong with the masking of one case (empty: nothing)."""
    out = masker.mask(case.text).text
    compact = _compact(out)
    problems = []
    if case.ident in compact or case.secret in compact:
        problems.append(f"identifier survives: {out!r}")
    if not (out.startswith(case.prefix) and out.endswith(case.suffix)):
        problems.append(f"text around the identifier changed: {out!r}")
    return problems


def corpus_figures(masker: Masker) -> dict[str, int]:
    """Hostile cases and leaks, benign cases and false masks (BENCHMARKS.md)."""
    hostile = hostile_corpus()
    benign = benign_corpus()
    return {
        "hostile_cases": len(hostile),
        "leaked": sum(1 for c in hostile if leaks(masker, c)),
        "benign_cases": len(benign),
        "false_masks": sum(1 for t in benign if masker.mask(t).text != t),
    }


@pytest.fixture(scope="module")
def masker() -> Masker:
    return Masker.from_pack(load_pack())


def test_the_hostile_corpus_covers_every_form() -> None:
    cases = hostile_corpus()
    assert len(cases) >= 1000
    kinds = {c.kind for c in cases}
    assert kinds == {"imsi", "suci", "msisdn", "imei", "guti", "tmsi", "ue-ip"}
    forms = {(c.kind, c.form) for c in cases}
    assert len(forms) == 86, len(forms)  # every way of writing each identifier, all drawn


def test_no_identifier_survives(masker: Masker) -> None:
    failed = {}
    for case in hostile_corpus():
        problems = leaks(masker, case)
        if problems:
            failed[f"{case.kind}/{case.form}: {case.text!r}"] = problems
    assert not failed, f"{len(failed)} cases: " + repr(list(failed.items())[:10])


def test_benign_text_is_almost_never_masked(masker: Masker) -> None:
    corpus = benign_corpus()
    assert len(corpus) >= 1000
    touched = [(t, masker.mask(t).text) for t in corpus if masker.mask(t).text != t]
    assert len(touched) / len(corpus) <= MAX_FALSE_MASK_RATE, touched[:10]


def test_masking_the_corpus_is_idempotent(masker: Masker) -> None:
    for case in hostile_corpus(200, SEED + 7):
        once = masker.mask(case.text).text
        assert masker.mask(once).text == once, case


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"imsi":"001010123456789"}', '{"imsi":"00101<masked>"}'),
        ("SUPI: 001010123456789", "SUPI: 00101<masked>"),
        ("imsi%3D001-01-0123456789&x=1", "imsi%3D00101<masked>&x=1"),
        ("call +49 (170) 1234567 now", "call <msisdn-masked> now"),
        ("from %2B49.170.1234567.", "from <msisdn-masked>."),
        ("5G-GUTI 00101-cafe-01-0123abcd failed", "5G-GUTI <guti-masked> failed"),
        ("tmsi=0x1234abcd", "tmsi=<tmsi-masked>"),
        ("5G-S-TMSI: 0x0123abcdef12", "5G-S-TMSI: <tmsi-masked>"),
        ("ue_ip=10.45.0.17 nf=10.0.0.3", "ue_ip=<ue-ip-masked> nf=10.0.0.3"),
        ("IMEI 35-345678-901234-8", "IMEI 35345678<imei-masked>"),
        ("ran_ue=12345678901", "ran_ue=12345678901"),
        ("bytes_total 123456789012345", "bytes_total 123456789012345"),
        ("PLMN 262-01 amf1.5gc.mnc001.mcc001.3gppnetwork.org", None),
    ],
)
def test_forms_the_probe_found(masker: Masker, text: str, expected: str | None) -> None:
    assert masker.mask(text).text == (text if expected is None else expected)
