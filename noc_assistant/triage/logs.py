"""NF log lines as evidence for a diagnosis.

The detectors and rules rank the causes; a log line never changes the ranking. What it adds is
what an engineer would read next: around an incident, the lines of its entities (and of each
hypothesis's root-cause entity) that match the pack's log patterns for a ranked fault class
become evidence items of kind ``log``, cited by that hypothesis like any finding, so a report
shows "smf-1: PFCP association released by upf-3" beside the KPI that paged.

Lines arrive masked (:class:`~noc_assistant.ingest.syslog.LogWindow` masks before it keeps);
they are still untrusted text: a line carrying instructions (the pack's injection phrases) is
cited as withheld, never quoted to a model or a person.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass

from guardrails.injection import scan
from knowledge.logs import LogPatterns
from knowledge.schema import InjectionPolicy
from noc_assistant.ingest.syslog import LogLine, LogWindow
from noc_assistant.models import Diagnosis, Evidence, Incident

__all__ = ["MAX_LOG_EVIDENCE", "LogEvidence", "attach_log_evidence"]

#: log lines cited per hypothesis at most (the first matches of each pattern, by time)
MAX_LOG_EVIDENCE = 3
#: how long before the incident opened, and after it was last updated, lines count
BEFORE_S, AFTER_S = 900.0, 300.0
#: the longest line quoted in a summary
MAX_QUOTE = 300


def attach_log_evidence(
    incident: Incident,
    diagnosis: Diagnosis,
    window: LogWindow,
    patterns: LogPatterns,
    entity_type: Callable[[str], str | None],
    injection: InjectionPolicy | None = None,
) -> Diagnosis:
    """``diagnosis`` with the matching log lines cited by the hypotheses they support (the
    same diagnosis when none match)."""
    since, until = incident.opened_at - BEFORE_S, incident.updated_at + AFTER_S
    if incident.resolved_at is not None:
        until = incident.resolved_at + AFTER_S
    known = {e.id for e in diagnosis.evidence}
    added: list[Evidence] = []
    hypotheses = []
    for h in diagnosis.hypotheses:
        cited: list[str] = []
        for entity in dict.fromkeys([h.entity, *incident.entities]):
            for line in window.lines(entity, since, until):
                if len(cited) >= MAX_LOG_EVIDENCE:
                    break
                kind = entity_type(entity)
                if not any(p.fault == h.fault for p in patterns.matching(line.text, kind)):
                    continue
                ev = _evidence(line, injection)
                cited.append(ev.id)
                if ev.id not in known:
                    known.add(ev.id)
                    added.append(ev)
        new_ids = tuple(dict.fromkeys([*h.evidence_ids, *cited]))
        hypotheses.append(h.model_copy(update={"evidence_ids": new_ids}) if cited else h)
    if not added:
        return diagnosis
    return diagnosis.model_copy(
        update={"hypotheses": hypotheses, "evidence": [*diagnosis.evidence, *added]}
    )


def _evidence(line: LogLine, injection: InjectionPolicy | None) -> Evidence:
    digest = hashlib.sha256(f"{line.entity}|{line.ts}|{line.text}".encode()).hexdigest()[:12]
    text = line.text if len(line.text) <= MAX_QUOTE else line.text[: MAX_QUOTE - 1] + "…"
    if injection is not None and scan(text, injection):
        text = "[withheld: the line carries instructions]"
    return Evidence(
        id=f"ev-log-{digest}",
        kind="log",
        entity=line.entity,
        start=line.ts,
        end=line.ts,
        summary=f"{line.app} log: {text}",
    )


@dataclass(frozen=True)
class LogEvidence:
    """What a live command holds to cite logs: the received lines, the pack's patterns and
    its injection policy."""

    window: LogWindow
    patterns: LogPatterns
    injection: InjectionPolicy | None = None

    def attach(
        self, incident: Incident, diagnosis: Diagnosis, entity_type: Callable[[str], str | None]
    ) -> Diagnosis:
        return attach_log_evidence(
            incident, diagnosis, self.window, self.patterns, entity_type, self.injection
        )
