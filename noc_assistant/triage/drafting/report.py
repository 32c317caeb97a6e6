"""The root-cause report of an incident: rendered from the diagnosis alone
(``prompts/templates/report.md.j2``), so a report exists without any model; with
``narrate=True`` the LLM writes the summary paragraph, as grounded claims that are checked
before they replace the template's summary."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from guardrails.injection import system_instruction
from noc_assistant.errors import LlmError
from noc_assistant.integrations.llm import Message
from noc_assistant.models import Incident, Report, Review
from noc_assistant.triage.drafting.checks import Checks, issues, shows_value
from noc_assistant.triage.drafting.views import RANK_ID, first_sign, sign_view, verdict_view
from noc_assistant.triage.grounded import (
    narration_schema,
    parse_claims,
    prune,
    render,
)
from noc_assistant.triage.rca import Diagnosis

if TYPE_CHECKING:
    from noc_assistant.triage.history import IncidentHistory, PastIncident

__all__ = ["ReportWriter"]


class ReportWriter(Checks):
    """Writes root-cause reports, narrated by the model where asked."""

    def report(
        self,
        incident: Incident,
        diagnosis: Diagnosis,
        narrate: bool = False,
        review: Review | None = None,
        seen: IncidentHistory | None = None,
        beside: Sequence[PastIncident] = (),
    ) -> Report:
        """The root-cause report of ``incident`` (see :mod:`noc_assistant.triage.drafting`);
        with the NOC's ``review``, its verdict heads the report; with ``seen``, the earlier
        incidents like it close it (cited ``[ev-seen]``), and ``beside``, those at the same
        time nearby (:func:`noc_assistant.triage.history.concurrent`)."""
        view = self._view(incident, diagnosis)
        view["noc_verdict"] = verdict_view(review, self._mask)
        view["seen"] = self._seen_view(seen)
        view["beside"] = [self._past_view(p) for p in beside]
        first = first_sign(diagnosis)
        summary = self._env.get_template("summary.txt.j2").render(
            **view, first=sign_view(view, first)
        )
        summary = summary.strip()
        generated_by = "template"
        withheld = None
        dropped: list[str] = []
        if narrate:
            narrated, withheld, dropped = self._narrate(incident, diagnosis, view)
            if narrated is not None:
                summary, generated_by = narrated, "llm"
        body = self._env.get_template("report.md.j2").render(**view, summary=summary)
        return Report(
            incident_id=incident.id,
            title=view["incident"]["title"],
            summary=summary,
            hypotheses=list(diagnosis.hypotheses),
            evidence=list(diagnosis.evidence),
            body=self._mask(body).strip() + "\n",
            generated_by=generated_by,
            narration_withheld=withheld,
            narration_dropped=dropped,
            untrusted_flags=view["flags"],
        )

    def _narration_prompt(
        self,
        diagnosis: Diagnosis,
        view: dict[str, Any],
        evidence: list[dict[str, Any]],
        names: list[str],
    ) -> list[Message]:
        """The system and user messages that ask the model for a narration."""
        top = view["top"]
        told = (
            f"{top['title']} on {top['entity_data']}, confidence {top['pct']}"
            if diagnosis.verdict == "fault"
            else "no fault class above the no-fault baseline"
        )
        return [
            {
                "role": "system",
                "content": self._env.get_template("narrate_system.txt.j2").render(
                    instruction=system_instruction(self._injection),
                ),
            },
            {
                "role": "user",
                "content": self._env.get_template("narrate_user.txt.j2").render(
                    incident=view["incident"],
                    diagnosis=told,
                    evidence=evidence,
                    example=self._example(diagnosis, evidence, names),
                ),
            },
        ]

    def _narrate(
        self, incident: Incident, diagnosis: Diagnosis, view: dict[str, Any]
    ) -> tuple[str | None, str | None, list[str]]:
        """The model's summary of the report, or None and why it was not used; and why each
        sentence it left out was dropped (:func:`~noc_assistant.triage.grounded.prune`)."""
        if self.llm is None:
            return None, "no language model is configured", []
        cited = set(diagnosis.top.evidence_ids)
        evidence = [e for e in view["evidence"] if e["id"] in cited][:8] or view["evidence"][:8]
        fill = self._filler(diagnosis)
        valued = {i.id for i in diagnosis.evidence if shows_value(fill, i.id)}
        # details cite items with values where there are any: a detail gives a value
        evidence = [e for e in evidence if e["id"] in valued] or evidence
        names = self._phrases(incident, diagnosis)
        root = self._mask(diagnosis.top.entity) if diagnosis.verdict == "fault" else None
        schema = narration_schema(
            [e["id"] for e in evidence] or [RANK_ID],
            names,
            root if root in names else None,
            sentences=max(1, self.narrate_sentences - 1),
            values=all(e["id"] in valued for e in evidence),
            headline_must=["{confidence}"],
        )
        messages = self._narration_prompt(diagnosis, view, evidence, names)
        try:
            answer = self.llm.complete(
                messages,
                schema=schema,
                schema_name="narration",
                max_tokens=self.narrate_tokens,
                frequency_penalty=self.frequency_penalty,
            )
            claims = parse_claims(answer.text, schema, cut=answer.finish_reason == "length")
        except LlmError as exc:
            return None, f"the language model failed: {exc}", []
        kept, dropped = prune(claims, fill)
        if not kept or kept[0] != claims[0]:
            why = dropped[0] if dropped else "it is empty"
            return None, f"the model's summary was not used: its headline {why}", dropped
        if len(kept) < 2:
            why = "; ".join(dict.fromkeys(dropped)) or "none written"
            return None, f"the model's summary was not used: no detail held ({why})", dropped
        text = self._mask(render(kept, fill))
        problem = self._narration_problem(text, messages[1]["content"], incident, diagnosis)
        if problem is not None:
            return None, problem, dropped
        return text, None, dropped

    def _narration_problem(
        self, text: str, prompt: str, incident: Incident, diagnosis: Diagnosis
    ) -> str | None:
        """Why a rendered narration cannot be shown (the whole reason), or None."""
        echoed = sum(
            len(line.strip())
            for line in prompt.splitlines()
            if len(line.strip()) >= 30 and not line.startswith("<data") and line.strip() in text
        )
        if echoed > 0.5 * len(text):
            return "the model's summary was not used: it repeats the prompt"
        report = self._check(text, self._grounding_pool(diagnosis))
        if not report.ok:
            return f"the model's summary was not supported by the evidence: {issues(report)}"
        problem = self.vet(text, incident, diagnosis)
        entity = diagnosis.top.entity
        if problem is None and diagnosis.verdict == "fault" and entity and entity not in text:
            problem = f"it does not name the diagnosed entity {diagnosis.top.entity}"
        if problem is not None:
            return f"the model's summary was not used: {problem}"
        return None
