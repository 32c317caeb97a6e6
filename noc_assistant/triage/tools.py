"""The triage chat's tools: read-only look-ups the model may call about one incident.

Each tool is an OpenAI function (:meth:`TriageTools.specs`) whose parameters are enums of this
incident's own entities, KPIs, evidence ids and fault classes, so that a model decoding under
the schema can only ask about what exists. A call (:meth:`TriageTools.call`) reads what the
caller gave — the incident, its diagnosis and findings, the network's topology, the pack, and
what the store remembers of earlier and concurrent incidents — and changes nothing.

A result is data, never instructions: its text is masked (subscriber identifiers) and wrapped
as ``<data source="telemetry">`` before the model sees it, and it becomes an evidence item of
its own (``ev-tool-N``) that the answer may cite, with the numbers it states as its values,
so the grounding check holds the answer to them like to any other evidence.

>>> from knowledge.pack import load_pack
>>> from knowledge.topology import Topology
>>> from noc_assistant.models import Evidence, Finding, Hypothesis, Incident
>>> from noc_assistant.triage.rca import Diagnosis
>>> f = Finding(id="f1", detector="d", kpi="amf-reg-success", entity="amf-1", ts=3600.0,
...             score=3.0, observed=0.42, expected_low=0.9, expected_high=1.0, direction="down")
>>> ev = Evidence(id="ev-f1", finding_id="f1", entity="amf-1", kpi="amf-reg-success",
...               start=3600.0, end=3600.0, values=(0.42, 0.9, 1.0), summary="reg down")
>>> h = Hypothesis(fault="amf_overload", entity="amf-1", confidence=0.8, evidence_ids=("ev-f1",))
>>> inc = Incident(id="i-1", fingerprint="x", opened_at=3600.0, updated_at=3600.0,
...                entities=["amf-1"], kpis=["amf-reg-success"], hypotheses=[h])
>>> d = Diagnosis(incident_id="i-1", verdict="fault", hypotheses=[h], evidence=[ev])
>>> tools = TriageTools(inc, d, pack=load_pack(), topology=Topology.infer({"amf-1": "amf"}),
...                     findings=[f])
>>> r = tools.call("kpi_series", '{"entity": "amf-1", "kpi": "amf-reg-success"}')
>>> r.id, r.error, r.values[:3]
('ev-tool-1', None, (0.42, 0.9, 1.0))
>>> tools.call("kpi_series", '{"entity": "smf-9", "kpi": "x"}').error
"entity: 'smf-9' is not one of this incident's"
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from guardrails.injection import injection_policy, screen
from guardrails.masking import Masker
from knowledge.pack import Pack
from knowledge.schema import InjectionPolicy
from knowledge.topology import Topology
from noc_assistant.models import Finding, Incident
from noc_assistant.triage.grounded import SAFE_NAME
from noc_assistant.triage.rca import Diagnosis
from prompts import tool_texts

if TYPE_CHECKING:
    from noc_assistant.triage.history import IncidentHistory, PastIncident

__all__ = ["TOOL_ID_PREFIX", "ToolResult", "TriageTools"]

TOOL_ID_PREFIX = "ev-tool-"
_MAX_POINTS = 12


@dataclass(frozen=True)
class ToolResult:
    """One call and what it returned (kept in the chat log as it was)."""

    id: str
    """The evidence id the answer cites for this result (``ev-tool-N``)."""
    name: str
    arguments: dict[str, Any]
    text: str
    """The result as the model read it: masked, not yet wrapped."""
    values: tuple[float, ...] = ()
    error: str | None = None
    elapsed_s: float = 0.0
    flagged: tuple[str, ...] = ()
    """Phrases of the result that read like instructions (kept as data, reported)."""

    def pool_item(self) -> dict[str, Any]:
        """The result as an evidence item for the grounding check."""
        return {"values": self.values, "summary": self.text}

    def log(self) -> dict[str, Any]:
        """The call as the chat log and the API keep it."""
        return {
            "id": self.id,
            "name": self.name,
            "arguments": self.arguments,
            "result": self.text,
            "error": self.error,
            "elapsed_s": round(self.elapsed_s, 4),
            "flagged": list(self.flagged),
        }


def _utc(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M")


class _BadCall(Exception):
    """A call the tool cannot answer: unknown tool, arguments outside the incident."""


@dataclass
class TriageTools:
    """The tools of one incident's chat (see the module docstring)."""

    incident: Incident
    diagnosis: Diagnosis
    pack: Pack
    topology: Topology
    findings: Sequence[Finding] = ()
    seen: IncidentHistory | None = None
    beside: Sequence[PastIncident] = ()
    masker: Masker | None = None
    calls: list[ToolResult] = field(default_factory=list)
    _policy: InjectionPolicy = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.masker is None:
            self.masker = Masker.from_pack(self.pack)
        self._policy = injection_policy(self.pack)
        self._run: dict[str, Callable[[dict[str, Any]], tuple[str, tuple[float, ...]]]] = {
            "kpi_series": self._kpi_series,
            "evidence_item": self._evidence_item,
            "neighbours": self._neighbours,
            "similar_incidents": self._similar,
            "fault_rule": self._fault_rule,
        }

    # -- what the model may ask about -------------------------------------------------------

    @property
    def entities(self) -> list[str]:
        """The incident's entities, those its hypotheses name and those its evidence is on."""
        names = [*self.incident.entities, *(h.entity for h in self.diagnosis.hypotheses)]
        names += [e.entity for e in self.diagnosis.evidence]
        return [n for n in dict.fromkeys(names) if n]

    @property
    def kpis(self) -> list[str]:
        names = [*self.incident.kpis, *(f.kpi for f in self.findings)]
        names += [e.kpi for e in self.diagnosis.evidence]
        return [n for n in dict.fromkeys(names) if n]

    @property
    def faults(self) -> list[str]:
        return list(dict.fromkeys(h.fault for h in self.diagnosis.hypotheses))

    def _enums(self) -> dict[str, list[str]]:
        """What each parameter may be: the incident's own values that read as names (an
        entity named like a sentence is telemetry text, never offered as a choice)."""
        enums = {
            "entity": self.entities,
            "kpi": self.kpis,
            "id": [e.id for e in self.diagnosis.evidence],
            "fault": self.faults,
        }
        return {k: [v for v in vs if SAFE_NAME.fullmatch(v)] for k, vs in enums.items()}

    def specs(self, names: Sequence[str] | None = None) -> list[dict[str, Any]]:
        """The tools as OpenAI function definitions (``names``: only those), each parameter
        an enum of this incident's values; a tool with a parameter that has none is left out."""
        enums = self._enums()
        out = []
        for name, text in tool_texts().items():
            if names is not None and name not in names:
                continue
            params: Mapping[str, str] = text.get("parameters") or {}  # type: ignore[assignment]
            if any(not enums.get(p) for p in params):
                continue
            props = {
                p: {"type": "string", "description": str(d), "enum": enums[p]}
                for p, d in params.items()
            }
            schema = {
                "type": "object",
                "properties": props,
                "required": list(props),
                "additionalProperties": False,
            }
            out.append(
                {
                    "type": "function",
                    "function": {
                        "name": name,
                        "description": str(text["description"]),
                        "parameters": schema,
                    },
                }
            )
        return out

    # -- calls ------------------------------------------------------------------------------

    def call(self, name: str, arguments: str | Mapping[str, Any]) -> ToolResult:
        """Run one tool; an unknown tool or an argument outside the incident is a result with
        an ``error`` the model reads (never an exception: the chat goes on)."""
        t0 = time.perf_counter()
        number = len(self.calls) + 1
        args: dict[str, Any] = {}
        try:
            args = dict(json.loads(arguments) if isinstance(arguments, str) else arguments)
            run = self._run.get(name)
            if run is None:
                raise _BadCall(f"no tool {name!r}")
            enums = self._enums()
            for key, value in args.items():
                allowed = enums.get(key)
                if allowed is not None and value not in allowed:
                    raise _BadCall(f"{key}: {value!r} is not one of this incident's")
            text, values = run(args)
            error = None
        except (_BadCall, json.JSONDecodeError, TypeError, ValueError, KeyError) as exc:
            text, values, error = "", (), str(exc) if isinstance(exc, _BadCall) else repr(exc)
        assert self.masker is not None
        masked = self.masker.mask(text).text
        screened = screen(masked, "telemetry", self._policy)
        result = ToolResult(
            id=f"{TOOL_ID_PREFIX}{number}",
            name=name,
            arguments=args,
            text=masked if error is None else f"error: {error}",
            values=values,
            error=error,
            elapsed_s=time.perf_counter() - t0,
            flagged=tuple(screened.findings),
        )
        self.calls.append(result)
        return result

    def wrapped(self, result: ToolResult) -> str:
        """A result as the model reads it: data, wrapped, with the id to cite."""
        body = screen(result.text, "telemetry", self._policy).text
        return f"[{result.id}] {body}"

    def _kpi_series(self, args: dict[str, Any]) -> tuple[str, tuple[float, ...]]:
        entity, kpi = str(args["entity"]), str(args["kpi"])
        points = sorted(
            (f for f in self.findings if f.entity == entity and f.kpi == kpi),
            key=lambda f: (f.ts, f.id),
        )
        if not points:
            return f"no anomalous readings of {kpi} on {entity} in this incident", ()
        shown = points[:_MAX_POINTS]
        lines = [
            f"{_utc(f.ts)} UTC: {f.observed:.4g} (expected {f.expected_low:.4g} to "
            f"{f.expected_high:.4g}, {f.direction})"
            for f in shown
        ]
        more = f"; {len(points) - len(shown)} more" if len(points) > len(shown) else ""
        values = tuple(v for f in shown for v in (f.observed, f.expected_low, f.expected_high))
        first, last = _utc(points[0].ts), _utc(points[-1].ts)
        head = f"{kpi} on {entity}, {len(points)} anomalous readings from {first} to {last} UTC"
        return f"{head}: " + "; ".join(lines) + more, (*values, float(len(points)))

    def _evidence_item(self, args: dict[str, Any]) -> tuple[str, tuple[float, ...]]:
        item = next(e for e in self.diagnosis.evidence if e.id == args["id"])
        backs = [h for h in self.diagnosis.hypotheses if item.id in h.evidence_ids]
        against = [h for h in self.diagnosis.hypotheses if item.id in h.refuted_by]
        parts = [f"{item.summary or item.kind} ({item.kind}, {_utc(item.start)} UTC)"]
        if backs:
            parts.append("supports " + ", ".join(f"{h.fault} on {h.entity}" for h in backs))
        if against:
            parts.append("refutes " + ", ".join(f"{h.fault} on {h.entity}" for h in against))
        return "; ".join(parts), tuple(item.values)

    def _neighbours(self, args: dict[str, Any]) -> tuple[str, tuple[float, ...]]:
        entity = str(args["entity"])
        involved = set(self.entities)
        up = list(self.topology.depends_on(entity))
        down = list(self.topology.dependents(entity))

        def names(xs: list[str]) -> str:
            return ", ".join(f"{x}{' (in this incident)' if x in involved else ''}" for x in xs)

        kind = self.topology.type_of(entity)
        return (
            f"{entity} is a {kind}; it depends on {names(up) or 'nothing known'}; "
            f"depending on it: {names(down) or 'nothing known'}",
            (),
        )

    def _similar(self, _: dict[str, Any]) -> tuple[str, tuple[float, ...]]:
        parts: list[str] = []
        values: list[float] = []
        if self.seen is not None:
            days = self.seen.lookback_s / 86_400.0
            parts.append(self.seen.hint or f"no earlier incident like this in {days:g} days")
            values += [self.seen.total, self.seen.judged, self.seen.false_alarms, days]
            for p in self.seen.similar[:3]:
                top = f"{p.top.fault} on {p.top.entity}" if p.top else "no hypothesis"
                parts.append(
                    f"{p.id} opened {_utc(p.opened_at)} UTC: {top}, {p.verdict or 'not judged'}"
                )
        else:
            parts.append("the NOC's records were not consulted")
        beside = [f"{p.id} on {', '.join(p.entities)} ({p.state})" for p in self.beside[:3]]
        parts.append("at the same time nearby: " + ("; ".join(beside) or "none"))
        values.append(float(len(self.beside)))
        return "; ".join(parts), tuple(values)

    def _fault_rule(self, args: dict[str, Any]) -> tuple[str, tuple[float, ...]]:
        fault = str(args["fault"])
        info = self.pack.faults.get(fault)
        hyp = next(h for h in self.diagnosis.hypotheses if h.fault == fault)
        rule = self.pack.rules.get(hyp.rule_id)
        parts = [f"{fault}: {info.title if info else fault}"]
        if info is not None:
            parts.append(" ".join(info.description.split()))
        parts.append(f"ranked with confidence {hyp.confidence:.4g} on {hyp.entity or 'no entity'}")
        if rule is not None and rule.checks:
            parts.append("checks: " + "; ".join(rule.checks))
        refs = [r for r in hyp.references if r in self.pack.references]
        if refs:
            parts.append("references: " + ", ".join(f"[ref:{r}]" for r in refs))
        return "; ".join(parts), (hyp.confidence,)
