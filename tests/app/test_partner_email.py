"""Partner-NOC e-mails a NOC can send: every line agrees with its evidence (a value inside its
normal band is never written to a partner as a failure), the strongest evidence first, the
partner's registered-subscriber counts beside its success ratios, our name and contact under
the signature; one open draft per incident and partner (API and CLI), and the e-mail as a
``.eml`` message file, masked again."""

from __future__ import annotations

import email
import email.policy
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from test_drafting import IMSI, PACK, case

from knowledge.topology import Topology, load_inventory
from noc_assistant.api.app import create_app
from noc_assistant.cli import run
from noc_assistant.cli._console import console, err_console
from noc_assistant.models import (
    Diagnosis,
    Direction,
    EmailDraft,
    Evidence,
    Finding,
    Hypothesis,
    Incident,
)
from noc_assistant.settings import Settings, get_settings
from noc_assistant.store import SqliteStore, Store
from noc_assistant.triage import present
from noc_assistant.triage.drafting import Drafter, DraftingError
from noc_assistant.triage.rca import diagnose

TOKEN = "t0ken-for-partner-mail"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
ROAMING = "inc-roaming-partner-registration-0"
T0 = 1_767_615_000.0
CONTACT = "+49 30 1234567 (24/7 duty line), noc@example-mobile.test"
REGISTRATION = "amf-registration-success-by-plmn"
REGISTERED = "amf-registered-subscribers-by-plmn"


@pytest.fixture(scope="module")
def topo() -> Topology:
    return load_inventory(PACK.fixture_path("inventory.yaml"), PACK)


def _finding(
    n: int,
    kpi: str,
    entity: str,
    observed: float,
    low: float,
    high: float,
    t: float = 0.0,
    labels: tuple[tuple[str, str], ...] = (("plmnid", "20810"),),
    direction: Direction = "down",
) -> Finding:
    return Finding(
        id=f"f-{n}",
        detector="test",
        kpi=kpi,
        entity=entity,
        entity_type=entity.split("-")[0],
        ts=T0 + t,
        score=2.0,
        observed=observed,
        expected_low=low,
        expected_high=high,
        direction=direction,
        labels=labels,
    )


def _diagnosed(findings: list[Finding], topo: Topology) -> tuple[Incident, Diagnosis]:
    inc = Incident(
        id="inc-mail",
        fingerprint="fp",
        opened_at=min(f.ts for f in findings),
        updated_at=max(f.ts for f in findings),
        entities=sorted({f.entity for f in findings}),
        finding_ids=[f.id for f in findings],
        title="roaming",
    )
    return inc, diagnose(inc, findings, topo, PACK)


def _lines(body: str) -> list[str]:
    """The e-mail's measurement lines (``- <date> <time> UTC, <entity>: …``)."""
    return [line for line in body.splitlines() if line.startswith("- 20")]


def _partner_cases() -> list[tuple[str, int]]:
    """Every positive fixture of a rule that names a roaming partner to write to."""
    return [
        (rule.id, i)
        for rule in PACK.rules.values()
        if rule.partner_noc
        for i, t in enumerate(rule.tests)
        if t.expect is not None and t.expect.partner is not None and t.rank1
    ]


def test_every_partner_rule_is_covered() -> None:
    rules = {r for r, _ in _partner_cases()}
    assert {"roaming-partner-registration", "roaming-partner-registered-decay"} <= rules
    assert "roaming-partner-s8" in rules
    faults = {PACK.rules[r].fault for r in rules}
    assert faults == {"roaming_partner_outage"}


def _in_band_twin(f: Finding, n: int) -> Finding:
    """The same series at another time, inside its band: no sign of anything."""
    low, high = f.expected_low, f.expected_high
    unit = PACK.kpis[f.kpi].unit if f.kpi in PACK.kpis else ""
    top = min(high, 1.0) if unit == "ratio" else high
    inside = (max(low, 0.0) + top) / 2
    return f.model_copy(update={"id": f"{f.id}-twin-{n}", "observed": inside, "ts": f.ts + 7.0})


@pytest.mark.parametrize(("rule_id", "index"), _partner_cases())
def test_no_line_calls_a_value_inside_its_band_a_failure(
    rule_id: str, index: int, topo: Topology
) -> None:
    """Per fault class and rule that writes to a partner: with an in-band reading of every
    partner series added, the e-mail lists only the readings outside their band the bad way,
    strongest first, and says "fail" only when a success ratio fell."""
    _, _, findings = case(rule_id, index, topo)
    twins = [_in_band_twin(f, n) for n, f in enumerate(findings)]
    inc, diagnosis = _diagnosed([*findings, *twins], topo)
    d = Drafter(PACK, topo)
    _, link = d.partner_hypothesis(diagnosis)
    mail = d.partner_email(inc, diagnosis, [*findings, *twins], now=T0)
    signs = d._partner_signs(inc, diagnosis, [*findings, *twins], link)
    lines = _lines(mail.body)
    assert signs and len(lines) == min(6, len(signs))
    twin_ids = {f.id for f in twins}
    for s, line in zip(signs, lines, strict=False):
        assert s["id"] not in {f"ev-{t}" for t in twin_ids}
        f = next(f for f in findings if f"ev-{f.id}" == s["id"])
        where = present.position(f.kpi, f.observed, f.expected_low, f.expected_high)
        bad = PACK.kpis[f.kpi].bad_direction
        assert where != "inside" and (bad, where) not in (("up", "below"), ("down", "above"))
        assert f"{s['observed']} " in line and f"(expected {s['expected']})" in line
    assert [s["excess"] for s in signs] == sorted((s["excess"] for s in signs), reverse=True)
    for t in twins:  # an in-band value never reaches a line
        shown = present.value(t.kpi, t.observed)
        assert not any(f": {shown} " in line or f"to {shown} " in line for line in lines)
    says_fail = "fail" in mail.body.split("What we measured")[0] or "failing" in mail.subject
    assert says_fail == any(s["kpi"] == REGISTRATION for s in signs)


def test_the_seed_7_roaming_outage_reads_as_its_evidence(topo: Topology) -> None:
    """The user's case: the partner's success ratio stayed inside its band (75 % against
    61.3 % or more) while its registered roamers fell below theirs on both AMFs."""
    findings = [
        _finding(1, REGISTRATION, "amf-01", 0.75, 0.613, 1.325),
        _finding(2, REGISTERED, "amf-01", 2275.0, 2318.2, 2395.4, t=30.0),
        _finding(3, REGISTERED, "amf-02", 2298.0, 2332.0, 2570.0, t=45.0),
    ]
    inc, diagnosis = _diagnosed(findings, topo)
    assert (diagnosis.top.fault, diagnosis.top.partner) == ("roaming_partner_outage", "208-10")
    mail = Drafter(PACK, topo).partner_email(inc, diagnosis, findings, now=T0)
    lines = _lines(mail.body)
    assert lines == [
        "- 2026-01-05 12:10 UTC, amf-01: 2,275 of them were registered (expected 2,318–2,395).",
        "- 2026-01-05 12:10 UTC, amf-02: 2,298 of them were registered (expected 2,332–2,570).",
    ]
    assert "75 %" not in mail.body and "61.3" not in mail.body and "132" not in mail.body
    assert "fail" not in mail.body.split("What we measured")[0]
    assert "fewer of your subscribers (PLMN 208-10) than usual are registered" in mail.body
    assert mail.subject.startswith("[noc] Roamers from PLMN 208-10 dropping off our network")


def test_only_in_band_evidence_is_nothing_to_tell_a_partner(topo: Topology) -> None:
    findings = [
        _finding(1, REGISTERED, "amf-01", 2275.0, 2318.2, 2395.4),
        _finding(2, REGISTERED, "amf-02", 2298.0, 2332.0, 2570.0, t=15.0),
    ]
    inc, diagnosis = _diagnosed(findings, topo)
    inside = [f.model_copy(update={"observed": f.expected_low + 10}) for f in findings]
    with pytest.raises(DraftingError, match="no evidence outside its normal band for PLMN 208-10"):
        Drafter(PACK, topo).partner_email(inc, diagnosis, inside, now=T0)


def test_the_strongest_first_with_the_registered_counts_beside_the_ratios(
    topo: Topology,
) -> None:
    """Seven success ratios moved further than the one registered count: the count still
    gets a line, and the lines go from the largest departure (in band widths) down."""
    ratios = [
        _finding(n, REGISTRATION, "amf-01", 0.9 - 0.05 * n, 0.95, 1.05, t=10.0 * n)
        for n in range(1, 8)
    ]
    count = _finding(9, REGISTERED, "amf-01", 2310.0, 2318.2, 2395.4, t=5.0)
    findings = [*ratios, count]
    inc, diagnosis = _diagnosed(findings, topo)
    mail = Drafter(PACK, topo).partner_email(inc, diagnosis, findings, now=T0)
    lines = _lines(mail.body)
    assert len(lines) == 6
    assert sum("were registered" in line for line in lines) == 1
    assert lines[-1].endswith("2,310 of them were registered (expected 2,318–2,395).")
    shown = [float(line.split(": ")[1].split(" %")[0]) for line in lines[:-1]]
    assert shown == sorted(shown)  # the lowest success ratio, furthest below its band, first


def _hand_made(
    evidence: list[tuple[Finding, str]], partner: str = "208-10"
) -> tuple[Incident, Diagnosis, list[Finding]]:
    """A diagnosis naming ``partner``, resting on the given findings (kind finding)."""
    findings = [f for f, _ in evidence]
    items = [
        Evidence(
            id=f"ev-{f.id}",
            finding_id=f.id,
            entity=f.entity,
            kpi=f.kpi,
            start=f.ts,
            end=f.ts,
            values=(f.observed, f.expected_low, f.expected_high),
            summary=summary,
        )
        for f, summary in evidence
    ]
    top = Hypothesis(
        fault="roaming_partner_outage",
        entity="sepp-01",
        confidence=0.9,
        evidence_ids=tuple(e.id for e in items),
        partner=partner,
    )
    rest = Hypothesis(fault="no_fault", entity="", confidence=0.1)
    inc = Incident(
        id="inc-hand", fingerprint="fp", opened_at=T0, updated_at=T0 + 60, entities=["amf-01"]
    )
    return (
        inc,
        Diagnosis(incident_id=inc.id, verdict="fault", hypotheses=[top, rest], evidence=items),
        findings,
    )


def test_the_wording_follows_the_direction_of_each_kpi(topo: Topology) -> None:
    """A failure share over its band rose; a failure share under it (better than normal) and
    a success ratio over it are no signs; a success ratio under its band fell."""
    plmn = (("plmnid", "20810"),)
    worse_share = _finding(1, "amf-auth-failure", "amf-01", 0.3, 0.0, 0.02, direction="up")
    better_share = _finding(2, "amf-auth-failure", "amf-02", 0.001, 0.01, 0.05, t=5.0)
    better_ratio = _finding(3, REGISTRATION, "amf-02", 0.999, 0.9, 0.95, t=10.0, direction="up")
    worse_ratio = _finding(4, REGISTRATION, "amf-01", 0.6, 0.9, 1.0, t=20.0, labels=plmn)
    inc, diagnosis, findings = _hand_made(
        [
            (f, f"{f.kpi} on {f.entity}")
            for f in (worse_share, better_share, better_ratio, worse_ratio)
        ]
    )
    mail = Drafter(PACK, topo).partner_email(inc, diagnosis, findings, now=T0)
    lines = _lines(mail.body)
    assert len(lines) == 2
    assert any(
        "Authentication failure ratio rose to 30 % (expected at most 2 %)" in x for x in lines
    )
    assert any("60 % of their registrations succeeded (expected at least 90 %)" in x for x in lines)
    assert "99.9 %" not in mail.body and "0.1 %" not in mail.body


def test_the_signature_names_us_and_how_to_reach_us(topo: Topology) -> None:
    """Our name and contact close the e-mail, the contact's phone number as written (it is
    ours, not a subscriber's), while a subscriber's identifier is still masked."""
    settings = Settings(
        operator_name="Example Mobile", email_signature="NOC on-call", operator_contact=CONTACT
    )
    d = Drafter.from_settings(PACK, topo, settings)
    assert d.contact == CONTACT
    inc, diagnosis, findings = case(
        "roaming-partner-registration", 0, topo, extra_labels=(("imsi", IMSI),)
    )
    mail = d.partner_email(inc, diagnosis, findings, now=T0)
    assert mail.body.rstrip().endswith(f"Regards,\nNOC on-call, Example Mobile\n{CONTACT}")
    assert IMSI not in mail.body and "<msisdn-masked>" not in mail.body
    plain = Drafter(PACK, topo).partner_email(inc, diagnosis, findings, now=T0)
    assert plain.body.rstrip().endswith("Regards,\nNOC on-call")


def _draft(d: Drafter, topo: Topology, existing: list[EmailDraft]) -> EmailDraft:
    inc, diagnosis, findings = case("roaming-partner-registration", 0, topo)
    return d.partner_email(inc, diagnosis, findings, now=T0, existing=existing)


def test_one_open_draft_per_incident_and_partner(topo: Topology) -> None:
    d = Drafter(PACK, topo)
    first = _draft(d, topo, [])
    assert _draft(d, topo, [first]) is first
    approved = first.approved("ana", T0 + 1)
    failed = approved.send_failed("421 try later", T0 + 2)  # stays approved: still open
    assert _draft(d, topo, [failed]) is failed
    for closed in (first.rejected("bo", "wrong", at=T0 + 3), approved.sent("<m@op>", T0 + 4)):
        again = _draft(d, topo, [closed])
        assert again.id != closed.id and again.status == "draft"
    other_partner = first.model_copy(update={"partner_plmn": "208-10"})
    other_incident = first.model_copy(update={"incident_id": "inc-other"})
    assert _draft(d, topo, [other_partner, other_incident]).id not in {first.id}


# -- the API and the CLI ---------------------------------------------------------------------


@pytest.fixture()
def store(tmp_path: Path, topo: Topology) -> Iterator[Store]:
    s = SqliteStore(tmp_path / "noc.db")
    inc, diagnosis, findings = case("roaming-partner-registration", 0, topo)
    s.save_incident(inc)
    s.save_findings(findings, incident_id=inc.id)
    s.save_diagnosis(diagnosis)
    yield s
    s.close()


def _client(store: Store, topo: Topology) -> TestClient:
    d = Drafter(PACK, topo, contact=CONTACT)
    return TestClient(create_app(store, drafter=d, api_token=TOKEN))


def test_a_second_request_returns_the_open_draft(store: Store, topo: Topology) -> None:
    c = _client(store, topo)
    url = f"/api/incidents/{ROAMING}/emails"
    first = c.post(url, headers=AUTH)
    assert first.status_code == 201
    again = c.post(url, headers=AUTH)
    assert again.status_code == 200 and again.json()["id"] == first.json()["id"]
    assert len(store.list_emails(ROAMING)) == 1
    mid = first.json()["id"]
    reject = {"approver": "A. Engineer", "reason": "numbers checked by hand first"}
    assert c.post(f"/api/emails/{mid}/reject", headers=AUTH, json=reject).status_code == 200
    fresh = c.post(url, headers=AUTH)
    assert fresh.status_code == 201 and fresh.json()["id"] != mid
    assert len(store.list_emails(ROAMING)) == 2


def test_an_email_exports_as_a_masked_message_file(store: Store, topo: Topology) -> None:
    c = _client(store, topo)
    mid = c.post(f"/api/incidents/{ROAMING}/emails", headers=AUTH).json()["id"]
    draft = store.get_email(mid)
    assert draft is not None
    # a body that holds an identifier (written to the store behind the masker's back)
    leaky = f"{draft.body}\nUE imsi-{IMSI} again.\n{CONTACT}\n"
    store.save_email(draft.model_copy(update={"body": leaky}))
    r = c.get(f"/api/emails/{mid}.eml")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("message/rfc822")
    assert r.headers["content-disposition"] == f'attachment; filename="{mid}.eml"'
    msg = email.message_from_bytes(r.content, policy=email.policy.default)
    assert msg["To"] == "noc@partner-a.example" and msg["X-NOC-Draft"] == mid
    assert msg["From"] == get_settings().smtp_sender and msg["Subject"] == draft.subject
    text = msg.get_body().get_content()  # type: ignore[union-attr]
    assert IMSI not in text and "imsi-26201<masked>" in text and CONTACT in text
    # the route does not swallow, nor is swallowed by, the e-mail itself
    assert c.get(f"/api/emails/{mid}").json()["id"] == mid
    assert c.get("/api/emails/mail-nope.eml").status_code == 404


def test_the_cli_drafts_once_and_exports(
    store: Store,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("NOC_DB_URL", f"sqlite:///{tmp_path / 'noc.db'}")
    monkeypatch.setenv("NOC_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("NOC_SMTP_SENDER", "noc@example-mobile.test")
    monkeypatch.setenv("NOC_OPERATOR_CONTACT", CONTACT)
    monkeypatch.setattr(console, "width", 240)
    monkeypatch.setattr(err_console, "width", 240)
    get_settings.cache_clear()
    inventory = str(PACK.fixture_path("inventory.yaml"))
    try:
        assert run(["email", "draft", ROAMING, "--inventory", inventory]) == 0
        out = capsys.readouterr().out
        (draft,) = store.list_emails(ROAMING)
        assert out.startswith(f"{draft.id} (draft) to noc@partner-a.example") and CONTACT in out
        assert run(["email", "draft", ROAMING, "--inventory", inventory]) == 0
        again = capsys.readouterr()
        assert f"{draft.id} to 262-01 already exists" in again.err
        assert again.out.startswith(f"{draft.id} (draft, already exists)")
        assert len(store.list_emails(ROAMING)) == 1
        assert run(["email", "draft", "inc-nope", "--inventory", inventory]) == 2
        assert "inc-nope" in capsys.readouterr().err
        eml = tmp_path / "out.eml"
        assert run(["email", "export", draft.id, "--out", str(eml)]) == 0
        msg = email.message_from_bytes(eml.read_bytes(), policy=email.policy.default)
        assert msg["From"] == "noc@example-mobile.test" and msg["X-NOC-Incident"] == ROAMING
        assert CONTACT in msg.get_body().get_content()  # type: ignore[union-attr]
        assert run(["email", "export", "mail-nope", "--out", str(eml)]) == 2
        assert "mail-nope" in capsys.readouterr().err
        assert run(["email", "export", draft.id, "--out", str(tmp_path)]) == 2  # a directory
        assert "cannot write the message" in capsys.readouterr().err
    finally:
        get_settings.cache_clear()
