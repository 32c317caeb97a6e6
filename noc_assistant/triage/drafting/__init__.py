"""Drafting: root-cause reports, partner-NOC e-mails and triage-chat answers.

The detectors and the rules decide what is wrong (:mod:`noc_assistant.triage.rca`); this stage only
writes it down, and checks every text against the evidence before a person sees it:

* **Report** (:meth:`Drafter.report`): the body is rendered from the diagnosis alone
  (``prompts/templates/report.md.j2``), so a report exists without any model. With
  ``narrate=True`` the LLM writes the summary paragraph.
* **Partner-NOC e-mail** (:meth:`Drafter.partner_email`): for an incident whose diagnosis names
  a roaming partner with a NOC contact (inventory ``partners[].noc_email`` or the operator
  overlay), a draft in status ``draft`` that a person approves before it is sent
  (:mod:`noc_assistant.integrations.mail`). It is rendered from a template with evidence
  citations, checked, and the citations are then removed: the partner reads numbers and times,
  not our ids.
* **Triage chat** (:meth:`Drafter.answer`): the model answers from a system prompt holding the
  incident, its ranked causes and its evidence, after up to a few read-only look-ups of its
  choosing (:mod:`noc_assistant.triage.tools`). When no model answers, or nothing it said
  held, the answer comes from the diagnosis alone, shaped by what the question asks.

**The model can only write grounded text.** A narration or a chat answer is a JSON object of
claims decoded under a per-incident JSON Schema (:mod:`noc_assistant.triage.grounded`): each claim
names one evidence id of the incident, types no digit (numbers are placeholders filled from
the cited evidence, with units) and names no entity outside the incident. The rendered text
then passes the same checks as any draft — the pack's grounding check (every number cites
evidence it matches, every cited id exists) and :meth:`Drafter.vet` — as the last line of
defence; what fails is withheld and the reason recorded.

Everything that leaves for the model is masked first (IMSI/SUPI, MSISDN, IMEI …, the pack's
``masking`` patterns), evidence text and tool results are wrapped as data
(``<data source="telemetry">``) and the system prompt says that data is never an instruction.
What comes back is masked again. Confidences are cited as ``[ev-rca]``: a pseudo evidence item
holding the ranking's numbers.

The modules: :mod:`.views` (the drafter's configuration and what prompts and templates are
given), :mod:`.checks` (the grounding check and :meth:`Drafter.vet`), :mod:`.report`,
:mod:`.partner_email`, :mod:`.chat`, and :mod:`.drafter` (:class:`Drafter`, all of them in one).
"""

from __future__ import annotations

from noc_assistant.triage.drafting.chat import ChatAnswer, conversation
from noc_assistant.triage.drafting.drafter import Drafter
from noc_assistant.triage.drafting.partner_email import DraftingError, review_refuses_partner
from noc_assistant.triage.drafting.views import RANK_ID, SEEN_ID

__all__ = [
    "RANK_ID",
    "SEEN_ID",
    "ChatAnswer",
    "Drafter",
    "DraftingError",
    "conversation",
    "review_refuses_partner",
]
