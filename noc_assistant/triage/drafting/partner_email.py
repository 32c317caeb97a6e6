"""Partner-NOC e-mail drafts: for an incident whose diagnosis names a roaming partner with a
NOC contact (inventory ``partners[].noc_email`` or the operator overlay), a draft in status
``draft`` that a person approves before it is sent (:mod:`noc_assistant.integrations.mail`).
It is rendered from a template with evidence citations, checked, and the citations are then
removed: the partner reads numbers and times, not our ids."""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import Any

from knowledge.topology import PartnerLink, plmn_digits
from noc_assistant.errors import ConfigError
from noc_assistant.integrations.mail import masked
from noc_assistant.models import (
    EmailDraft,
    EmailEvent,
    Evidence,
    Finding,
    Hypothesis,
    Incident,
    Review,
)
from noc_assistant.triage import present
from noc_assistant.triage.drafting.checks import Checks, issues, strip_citations
from noc_assistant.triage.drafting.views import utc
from noc_assistant.triage.rca import Diagnosis

__all__ = ["DraftingError", "PartnerEmails", "review_refuses_partner"]


class DraftingError(ConfigError):
    """A draft that cannot be made from what is known and configured: no roaming partner
    implicated, no NOC contact for it, no evidence to write from (exit 2)."""


def review_refuses_partner(
    review: Review | None, hypothesis: Hypothesis, link: PartnerLink
) -> str | None:
    """Why the NOC's ``review`` rules out telling the partner of ``link`` (the hypothesis
    that names it) about the incident, or None: judged no fault or maintenance, or a
    confirmed root cause that is not that partner's."""
    if review is None or review.verdict is None:
        return None
    if review.verdict in ("no_fault", "maintenance"):
        return f"judged {review.verdict} by {review.verdict_by}"
    if review.root_cause is None:
        return None
    same_plmn = review.partner is None or plmn_digits(review.partner) == plmn_digits(link.plmn)
    if review.fault != hypothesis.fault or not same_plmn:
        return (
            f"{review.verdict_by} confirmed {review.fault} on {review.entity}, "
            f"not the roaming partner {link.plmn}"
        )
    return None


class PartnerEmails(Checks):
    """Drafts e-mails to the NOC of a roaming partner the diagnosis implicates."""

    def partner_hypothesis(self, diagnosis: Diagnosis) -> tuple[Hypothesis, PartnerLink]:
        """The top hypothesis when it names a roaming partner, and that partner's contact.

        Only the rules' first answer is written to a partner: an e-mail that tells another
        operator the fault is likely theirs while our own rules rank a cause of ours higher
        would mislead them.
        """
        h = diagnosis.top
        if h.partner is None or diagnosis.verdict != "fault":
            raise DraftingError(
                f"incident {diagnosis.incident_id}: no roaming partner is implicated "
                f"(the rules rank {h.fault} first)"
            )
        link = self.network_topology.partner_for_plmn(h.partner)
        if link is None or not link.noc_email:
            raise DraftingError(
                f"partner PLMN {h.partner} has no NOC contact: set partners[].noc_email "
                "in the inventory or the operator overlay"
            )
        return h, link

    def partner_email(
        self,
        incident: Incident,
        diagnosis: Diagnosis,
        findings: Sequence[Finding],
        now: float,
        email_id: str | None = None,
        review: Review | None = None,
        existing: Sequence[EmailDraft] = (),
    ) -> EmailDraft:
        """A draft e-mail to the implicated partner's NOC (status ``draft``: a person approves
        it before :class:`~noc_assistant.integrations.mail.Mailer` sends it). None when the NOC's
        ``review`` says otherwise: judged no fault or maintenance, or a confirmed root cause
        that is not the partner's (:class:`DraftingError`, with who said so).

        One open draft per incident and partner: where ``existing`` (the incident's drafts)
        holds one to the same partner still in draft or approved (a failed send stays
        approved), that one is returned unchanged instead of a second one; a rejected or sent
        e-mail does not count. The caller tells the two apart by its id.

        The e-mail states only what the evidence shows outside its normal band, and in the
        direction that is bad for its KPI (a success ratio under its band, a failure share
        over it): a value inside its band is no sign of a fault and is not written to the
        partner. The partner's signs are the findings labelled with its PLMN (``plmnid``:
        registration success, registered subscribers) or one of its S8 peers (``addr``),
        the strongest first (:func:`noc_assistant.triage.present.excess`), in the KPI's unit.
        """
        hypothesis, link = self.partner_hypothesis(diagnosis)
        refused = review_refuses_partner(review, hypothesis, link)
        if refused is not None:
            raise DraftingError(f"incident {incident.id}: {refused}: no partner e-mail")
        already = self._open_draft(existing, incident.id, link)
        if already is not None:
            return already
        signs = self._partner_signs(incident, diagnosis, findings, link)
        if not signs:
            raise DraftingError(
                f"incident {incident.id}: no evidence outside its normal band for PLMN "
                f"{link.plmn}: nothing to tell its NOC"
            )
        context = {
            "network": self.network,
            "plmn": link.plmn,
            "partner_name": link.name,
            "start": utc(min(s["ts"] for s in signs)),
            "resolved": utc(incident.resolved_at),
            "observations": self._strongest(signs, 6),
            "kpis": sorted({s["kpi"] for s in signs}),
            "reference": incident.id,
            "signature": self.signature,
            "contact": self.contact,
        }
        template = self._env.get_template("partner_email.txt.j2")
        # our name and contact are configured text, not claims (a phone number has digits):
        # the check reads the body without them
        unsigned = template.render(**context | {"signature": "", "network": "", "contact": ""})
        pool = self._grounding_pool(diagnosis) | {s["id"]: s["item"] for s in signs}
        report = self._check(unsigned, pool)
        if not report.ok:
            raise DraftingError(
                f"incident {incident.id}: the e-mail draft is not grounded: {issues(report)}"
            )
        body = template.render(**context)
        subject = self._env.get_template("partner_subject.txt.j2").render(**context).strip()
        keep = [self.contact]
        return EmailDraft(
            id=email_id or f"mail-{secrets.token_hex(5)}",
            incident_id=incident.id,
            to=[link.noc_email or ""],
            subject=masked(self.masker, subject, keep),
            body=masked(self.masker, strip_citations(body), keep).strip() + "\n",
            partner_plmn=link.plmn,
            created_at=now,
            history=[EmailEvent(at=now, action="drafted")],
        )

    @staticmethod
    def _open_draft(
        existing: Sequence[EmailDraft], incident_id: str, link: PartnerLink
    ) -> EmailDraft | None:
        """The newest draft of ``existing`` to ``link``'s NOC about the incident that is
        still open (draft or approved), if any."""
        digits = plmn_digits(link.plmn)
        drafts = [
            d
            for d in existing
            if d.incident_id == incident_id
            and d.status in ("draft", "approved")
            and plmn_digits(d.partner_plmn or "") == digits
        ]
        return max(drafts, key=lambda d: d.created_at, default=None)

    def _partner_signs(
        self,
        incident: Incident,
        diagnosis: Diagnosis,
        findings: Sequence[Finding],
        link: PartnerLink,
    ) -> list[dict[str, Any]]:
        """The incident's findings of ``link``'s PLMN (or S8 peers) that lie outside their
        band the bad way, as the e-mail's lines show them, strongest first; each with the
        evidence item it is checked against (``item``): the diagnosis's, or, for a finding
        the diagnosis did not cite (it cites the first three of a condition, and an outage
        deepens after its first minutes), one made alike."""
        digits = plmn_digits(link.plmn)
        wanted = set(incident.finding_ids)
        cited = {e.id: e for e in diagnosis.evidence}
        signs: list[dict[str, Any]] = []
        for f in findings:
            labels = dict(f.labels)
            if wanted and f.id not in wanted:
                continue
            if labels.get("plmnid") != digits and labels.get("addr") not in link.s8_peers:
                continue
            kpi = self.pack.kpis.get(f.kpi)
            low, high = f.expected_low, f.expected_high
            where = present.position(kpi or f.kpi, f.observed, low, high)
            bad = kpi.bad_direction if kpi is not None else "both"
            if where == "inside" or {"below": "up", "above": "down"}[where] == bad:
                continue  # normal, or better than normal: no sign of a fault
            observed = present.value(kpi or f.kpi, f.observed)
            expected = present.band(kpi or f.kpi, low, high)
            item = cited.get(f"ev-{f.id}") or Evidence(
                id=f"ev-{f.id}",
                finding_id=f.id,
                entity=f.entity,
                kpi=f.kpi,
                start=f.ts,
                end=f.ts,
                values=(f.observed, low, high),
                summary=f"{f.kpi} {f.direction} on {f.entity}: {observed} (expected {expected})",
            )
            signs.append(
                {
                    "id": item.id,
                    "item": item,
                    "kpi": f.kpi,
                    "title": kpi.title if kpi is not None else f.kpi,
                    "entity": f.entity,
                    "addr": labels.get("addr"),
                    "ts": f.ts,
                    "at": utc(f.ts),
                    "position": where,
                    "observed": observed,
                    "expected": expected,
                    "excess": present.excess(kpi or f.kpi, f.observed, low, high),
                }
            )
        signs.sort(key=lambda s: (-s["excess"], s["ts"], s["id"]))
        return signs

    @staticmethod
    def _strongest(signs: Sequence[dict[str, Any]], n: int) -> list[dict[str, Any]]:
        """The ``n`` strongest of ``signs`` (sorted strongest first), with the strongest of
        each KPI among them: the partner's registered-subscriber counts are read beside its
        success ratios even where the ratios moved more."""
        first = {s["kpi"]: s["id"] for s in reversed(signs)}
        chosen = [s for s in signs if first[s["kpi"]] == s["id"]][:n]
        chosen += [s for s in signs if s not in chosen][: n - len(chosen)]
        return sorted(chosen, key=signs.index)
