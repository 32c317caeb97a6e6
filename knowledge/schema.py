"""Pydantic schemas of the knowledge-pack files (every model forbids unknown fields).

One model per file kind: ``pack.yaml`` (:class:`PackMeta`), ``references/*.yaml``
(:class:`ReferenceFile`), ``faults.yaml`` (:class:`FaultFile`), ``topology.yaml``
(:class:`TopologyFile`), ``rules/*.yaml`` (:class:`RuleFile`), ``guardrails/*.yaml``
(:class:`GuardrailFile`), ``measurements/*.yaml`` (:class:`MeasurementFile`) and an overlay's
``operator.yaml`` (:class:`OperatorFile`).
KPI files keep their own schema in :mod:`knowledge.kpis`.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator

__all__ = [
    "Condition",
    "Fault",
    "FaultFile",
    "FixtureExpect",
    "FixtureFinding",
    "GroundingPolicy",
    "GuardrailFile",
    "InjectionPolicy",
    "MaskingPattern",
    "Measurement",
    "MeasurementFile",
    "NamingRule",
    "NfType",
    "OperatorFile",
    "PackMeta",
    "Partner",
    "Reference",
    "ReferenceFile",
    "RootSpec",
    "Rule",
    "RuleFile",
    "RuleFixture",
    "TopologyFile",
    "http_url",
]

_ID = r"^[a-z0-9]+(-[a-z0-9]+)*$"
_FAULT_ID = r"^[a-z0-9]+(_[a-z0-9]+)*$"
_SEMVER = r"^\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$"
_PLMN = r"^\d{3}-\d{2,3}$"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PackMeta(_Strict):
    """``pack.yaml``: identity of a pack, and for an overlay the pack it extends."""

    name: str = Field(pattern=_ID)
    version: str = Field(pattern=_SEMVER)
    scope: tuple[str, ...] = ()
    description: str = ""
    extends: str | None = None
    """``default`` (the built-in pack) or a path relative to this pack's directory."""
    params: dict[str, float] = Field(default_factory=dict)
    """Named numbers rules and the RCA read (thresholds, weights); overlays override them."""


class Reference(_Strict):
    """A standard or source a rule cites: spec number, optional clause, one-line summary."""

    id: str = Field(pattern=_ID)
    title: str
    spec: str
    clause: str | None = None
    summary: str
    url: str | None = None

    @property
    def citation(self) -> str:
        """``3GPP TS 29.244 §6.2.2`` style text."""
        return f"{self.spec} §{self.clause}" if self.clause else self.spec


class ReferenceFile(_Strict):
    references: tuple[Reference, ...]


class Fault(_Strict):
    """One fault class (docs/FORMATS.md §3) or ``no_fault``."""

    id: str = Field(pattern=_FAULT_ID)
    domain: Literal["packet_core", "gpu_serving", "any"]
    title: str
    description: str
    references: tuple[str, ...] = ()


class FaultFile(_Strict):
    faults: tuple[Fault, ...]


class NfType(_Strict):
    """An entity type and the types it depends on (a fault there shows up here)."""

    id: str = Field(pattern=r"^[a-z0-9_]+$")
    plane: Literal["ran", "control", "user", "serving", "other"] = "other"
    depends_on: tuple[str, ...] = ()
    interfaces: dict[str, str] = Field(default_factory=dict)
    exports_metrics: bool = True
    acts_as: tuple[str, ...] = ()
    """Types whose role this one also plays: their KPIs apply, their dependencies are its own,
    and a rule looking for them finds it (an EPC PGW is PGW-C and PGW-U, the SMF's and the
    UPF's roles; in Open5GS the SMF and UPF daemons are the PGW)."""
    description: str = ""


class TopologyFile(_Strict):
    nf_types: tuple[NfType, ...]


class Measurement(_Strict):
    """A PM measurement whose 3GPP-style name does not say the exporter metric it is read as: a
    vendor-specific one (``VS.…``, TS 32.404) for a network function's own status gauge or
    counter. ``noc pm convert`` reads ``measurement`` on a function of ``nf_type`` as ``metric``
    (a status measurement's ``Mean`` as the metric itself, ``Max``/``Min`` as ``metric_max`` /
    ``metric_min``; sub-counters as labels); the simulator writes it under that name."""

    id: str = Field(pattern=_ID)
    nf_type: str = Field(pattern=r"^[a-z0-9_]+$")
    measurement: str = Field(pattern=r"^[A-Za-z][A-Za-z0-9_]*\.[A-Za-z][A-Za-z0-9_]*$")
    """Family and name (``VS.GnbNbr``), without aggregation (``Mean``) or sub-counters."""
    metric: str = Field(pattern=r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
    sub_counters: tuple[str, ...] = ()
    """The labels its sub-counter suffixes carry, in order (``.nausf-auth.POST.201`` →
    ``target_service_name``, ``method``, ``status_code``); empty: the usual reading (S-NSSAI,
    PLMN, cause)."""
    summary: str
    references: tuple[str, ...] = ()

    @field_validator("sub_counters")
    @classmethod
    def _label_names(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        for name in v:
            if not re.fullmatch(r"[a-zA-Z_][a-zA-Z0-9_]*", name) or name in ("instance", "nf"):
                raise ValueError(f"{name!r} is not a label a sub-counter can carry")
        if len(set(v)) != len(v):
            raise ValueError("a label named twice")
        return v

    @field_validator("measurement")
    @classmethod
    def _no_aggregation(cls, v: str) -> str:
        if re.search(r"(Mean|Max|Min)$", v):
            raise ValueError("name the measurement without its Mean/Max/Min aggregation")
        return v


class MeasurementFile(_Strict):
    measurements: tuple[Measurement, ...]


class Condition(_Strict):
    """Findings a rule looks for: which KPIs, which way, where and when relative to the anchor.

    ``scope``: ``anchor`` (the anchor's entity), ``root`` (the root-cause entity), ``related``
    (anchor, root or a direct topology neighbour of either), ``any`` (anywhere in the incident),
    ``other`` (anywhere but the anchor's entity: a second witness, e.g. another consumer).
    ``order``: the finding must come ``before`` / ``after`` the anchor (or ``any``).
    ``same_target``: the KPI must measure calls to the same NF type as the anchor's KPI;
    ``differ_target``: to another NF type than the anchor's (one caller failing towards every
    producer it calls: the caller's side, e.g. its own client certificate).
    ``same_labels``: these labels must carry the anchor's values (``plmnid``, ``gpu`` …);
    ``differ_labels``: these labels must be present with another value than the anchor's.
    ``value_min`` / ``value_max``: bounds on the observed value, a number or a pack param name.
    """

    kpis: tuple[str, ...] = Field(min_length=1)
    direction: Literal["up", "down", "both"] = "both"
    scope: Literal["anchor", "root", "related", "any", "other"] = "related"
    order: Literal["any", "before", "after"] = "any"
    same_target: bool = False
    differ_target: bool = False
    same_labels: tuple[str, ...] = ()
    differ_labels: tuple[str, ...] = ()
    value_min: float | str | None = None
    value_max: float | str | None = None
    weight: float = Field(default=1.0, ge=0.0)
    note: str = ""
    """What the condition means for the diagnosis, shown as evidence text."""


class RootSpec(_Strict):
    """Where the root cause sits, starting from the anchor finding.

    ``anchor``: the anchor's entity. ``type``: the anchor's entity if it has type ``type``,
    else its upstream entities of that type (inventory). ``target``: upstream entities of the NF
    type the anchor KPI calls (``target_nf``), e.g. the UDM behind nudm timeouts. ``partner``:
    the SEPP holding the partner PLMN named by the anchor's ``plmnid`` or ``addr`` label.
    """

    kind: Literal["anchor", "type", "target", "partner"] = "anchor"
    type: str | None = None


class FixtureFinding(_Strict):
    """A finding in a rule fixture (shorthand of the application's ``Finding``)."""

    kpi: str
    entity: str
    direction: Literal["up", "down", "both"]
    t: float = 0.0
    """Seconds after the fixture's start."""
    observed: float = 1.0
    expected_low: float = 0.0
    expected_high: float = 0.0
    score: float = 1.0
    labels: dict[str, str] = Field(default_factory=dict)


class FixtureExpect(_Strict):
    fault: str
    entity: str
    partner: str | None = None


class RuleFixture(_Strict):
    """One example a rule must get right (``expect``) or must not claim (``expect`` absent)."""

    name: str
    inventory: str = "inventory.yaml"
    """File under the pack's ``fixtures/``."""
    findings: tuple[FixtureFinding, ...]
    expect: FixtureExpect | None = None
    rank1: bool = True
    """Positive fixtures: the expected hypothesis must also rank first over all rules."""


class Rule(_Strict):
    """A diagnostic rule: anchor + required/supporting/refuting findings → fault on a root."""

    id: str = Field(pattern=_ID)
    fault: str
    title: str
    description: str = ""
    prior: float = Field(default=1.0, ge=0.0)
    anchor: Condition
    root: RootSpec = RootSpec()
    partner_from: tuple[str, ...] = ()
    """Labels naming the partner (``plmnid``, ``addr``); a partner NOC is then involved."""
    require: tuple[Condition, ...] = ()
    support: tuple[Condition, ...] = ()
    refute: tuple[Condition, ...] = ()
    references: tuple[str, ...] = ()
    checks: tuple[str, ...] = ()
    partner_noc: bool = False
    candidate: bool = False
    """A weak sign: its score is kept under the pack's ``no_fault_score``, so it is listed as a
    candidate to check under a no-fault answer and never becomes the claim."""
    tests: tuple[RuleFixture, ...] = ()


class RuleFile(_Strict):
    rules: tuple[Rule, ...]


class MaskingPattern(_Strict):
    """A subscriber identifier to mask before text leaves for an LLM or an e-mail."""

    id: str = Field(pattern=_ID)
    identifier: str
    regex: str
    replacement: str
    keep: Literal["none", "plmn", "tac"] = "none"
    luhn: bool = False
    context_words: tuple[str, ...] = ()
    examples: tuple[str, ...] = ()
    non_examples: tuple[str, ...] = ()

    @field_validator("regex")
    @classmethod
    def _compiles(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"regex does not compile: {exc}") from None
        return value


class GroundingPolicy(_Strict):
    require_evidence_ids: bool = True
    require_number_match: bool = True
    number_tolerance: float = Field(default=0.01, ge=0.0)
    evidence_id_pattern: str = r"\[ev-[A-Za-z0-9_.:-]+\]"
    unsupported_claim: Literal["strip", "flag", "reject"] = "flag"
    require_reference_ids: bool = True


class InjectionPolicy(_Strict):
    untrusted_sources: tuple[str, ...]
    treat_as: Literal["data"] = "data"
    wrap_with: str
    suspicious_phrases: tuple[str, ...] = ()
    on_detect: Literal["flag", "drop", "reject"] = "flag"
    instruction: str


class GuardrailFile(_Strict):
    masking: tuple[MaskingPattern, ...] = ()
    grounding: GroundingPolicy | None = None
    injection: InjectionPolicy | None = None


def http_url(value: str) -> str:
    """``value`` when it is an ``http://`` or ``https://`` URL with a host (and a port, if
    any, in range); a :class:`ValueError` saying so otherwise.

    >>> http_url("https://tt.partner.example/tmf-api/troubleTicket/v5")
    'https://tt.partner.example/tmf-api/troubleTicket/v5'
    >>> http_url("tt.partner.example/v5")
    Traceback (most recent call last):
    ...
    ValueError: an http:// or https:// URL with a host
    """
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("an http:// or https:// URL with a host")
    parts.port  # noqa: B018 - a ValueError on a port out of range
    return value


class Partner(_Strict):
    """A roaming partner: PLMN id, our SEPP towards it, S8 peers, the partner NOC's contact,
    and where it takes trouble tickets from us (``tmf621_url``: the base of its TMF621 API,
    ``https://tt.partner.example/tmf-api/troubleTicket/v5``, as the inventory's
    ``partners[].tmf621_url``; over the inventory's where both name one). The token is in
    the environment (``NOC_TMF621_TOKEN_<MCCMNC>``), never here."""

    plmn: str = Field(pattern=_PLMN)
    name: str = ""
    sepp: str | None = None
    s8_peers: tuple[str, ...] = ()
    noc_email: str | None = None
    noc_phone: str | None = None
    tmf621_url: Annotated[str, AfterValidator(http_url)] | None = None


class NamingRule(_Strict):
    """Operator entity naming: ids matching ``pattern`` have type ``type``."""

    pattern: str
    type: str

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"pattern does not compile: {exc}") from None
        return value


class OperatorFile(_Strict):
    """``operator.yaml`` of an overlay: naming, partners, home PLMNs, rules switched off."""

    operator: str
    home_plmns: tuple[str, ...] = ()
    naming: tuple[NamingRule, ...] = ()
    partners: tuple[Partner, ...] = ()
    disable_rules: tuple[str, ...] = ()
