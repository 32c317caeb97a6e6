"""Derived KPI definitions of the knowledge pack (``knowledge/kpis/*.yaml``).

>>> kpis = load_kpis()
>>> kpis["amf-registration-success"].bad_direction
'down'
>>> sorted(kpis["amf-registration-success"].parsed.metrics)
['fivegs_amffunction_rm_reginitreq', 'fivegs_amffunction_rm_reginitsucc']
"""

from __future__ import annotations

from functools import cached_property
from importlib import resources
from pathlib import Path
from typing import Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from knowledge.formula import Formula, FormulaError, parse_formula
from noc_assistant.errors import ConfigError

__all__ = ["KpiDef", "KpiFile", "KpiLoadError", "load_kpis"]


class KpiLoadError(ConfigError, ValueError):
    """A KPI file that cannot be used; the message names the file and field (exit 2)."""


class KpiDef(BaseModel):
    """One derived KPI: a formula over an entity's series, and which way is bad."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(pattern=r"^[a-z0-9]+(-[a-z0-9]+)*$")
    title: str
    entity_types: tuple[str, ...]
    """Entity types the KPI applies to; empty: every entity, whatever its type."""
    formula: str
    support: str | None = None
    min_support: float = 0.0
    unit: str = ""
    bad_direction: Literal["up", "down", "both"] = "both"
    window_s: float | None = None
    """Counter window; default: four scrape intervals of the data."""
    references: tuple[str, ...] = ()
    group_by: tuple[str, ...] = ()
    """Labels to compute the KPI per value of (``plmnid``, ``addr`` …); findings carry them."""
    target_nf: str | None = None
    """NF type the measured calls go to (SBI client KPIs): where a fault may really sit."""
    benign_direction: Literal["up", "down", "both"] | None = None
    """The direction in which a change of this KPI says nothing bad about the service by
    itself (more load offered, more resources used, a restart): an incident of such findings
    only, confidently diagnosed ``no_fault``, is a notice rather than a page
    (``Incident.severity``). Unset: every finding of the KPI is a service symptom."""

    @field_validator("formula", "support")
    @classmethod
    def _formula_parses(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                parse_formula(value)
            except FormulaError as exc:
                raise ValueError(str(exc)) from None
        return value

    @model_validator(mode="after")
    def _liveness_alone(self) -> KpiDef:
        if self.parsed.liveness and (
            self.support or self.group_by or self.window_s or self.target_nf
        ):
            raise ValueError("an up() KPI takes no support, group_by, window_s or target_nf")
        return self

    def applies_to(self, entity_type: str) -> bool:
        """Whether the KPI is computed for an entity of ``entity_type``."""
        return not self.entity_types or entity_type in self.entity_types

    @cached_property
    def parsed(self) -> Formula:
        return parse_formula(self.formula)

    @cached_property
    def parsed_support(self) -> Formula | None:
        return parse_formula(self.support) if self.support else None

    @cached_property
    def reads_presence(self) -> bool:
        """Whether the formula reads ``present()`` (which series answered lately)."""
        return any(s.fn == "present" for s in self.parsed.selectors)

    @cached_property
    def counts_events(self) -> bool:
        """Whether the value is built from counter increases and rates only (events: a
        preemption, a failed request), not from gauges (states, codes: peers up, an Xid).
        Events that tick now and then are routine once seen often enough; a state that keeps
        changing is news each time (see ``EnsembleParams.resolution_always``)."""
        return all(s.fn in ("increase", "rate") for s in self.parsed.selectors)

    @cached_property
    def proportion(self) -> bool:
        """Whether the value is a share of the ``support`` events (unit ``ratio`` with a
        support: a success or failure ratio of counters). Its noise is binomial: a ratio of
        a handful of events is noise, which the detectors must know even when a window cut a
        scrape interval and the support is not a whole number (scrapes of different targets
        at different phases, a window that is not a multiple of the interval)."""
        return self.unit == "ratio" and self.parsed_support is not None


class KpiFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kpis: list[KpiDef]


#: libyaml's safe loader where PyYAML was built with it (the pack's, :mod:`knowledge.pack`)
_SAFE_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_kpis(directory: Path | None = None) -> dict[str, KpiDef]:
    """Load every ``*.yaml`` under ``directory`` (default: the pack's own ``kpis/``)."""
    root = directory if directory is not None else Path(str(resources.files("knowledge") / "kpis"))
    out: dict[str, KpiDef] = {}
    for path in sorted(root.glob("*.yaml")):
        try:
            data = yaml.load(path.read_text(encoding="utf-8"), Loader=_SAFE_LOADER)
            parsed = KpiFile.model_validate(data)
        except yaml.YAMLError as exc:
            raise KpiLoadError(f"{path}: not valid YAML: {exc}") from None
        except ValidationError as exc:
            first = exc.errors()[0]
            loc = ".".join(str(p) for p in first["loc"])
            raise KpiLoadError(f"{path}: field {loc}: {first['msg']}") from None
        for kpi in parsed.kpis:
            if kpi.id in out:
                raise KpiLoadError(f"{path}: duplicate KPI id {kpi.id!r}")
            out[kpi.id] = kpi
    return out
