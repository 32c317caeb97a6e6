"""Fault catalogue of the simulator: what each fault class does to the telemetry, loaded from
``data/faults.yaml`` (the classes, their knobs, shapes and magnitudes are data, not code).

A fault is a set of :class:`Effect` s. Each effect turns one *knob* of the traffic model
(:data:`KNOBS`) on a set of entities, following a :class:`Shape` in time. The traffic model
(``model.py``) reads knobs and propagates them: an SBI error fraction on ``nudm-sdm`` becomes
registration rejects on the AMF and fewer policy associations on the PCF, for example. So a
fault names only its mechanism; the symptoms follow from the model.

Targets (who an effect applies to), resolved against the inventory for each incident:

``root``        the root-cause entity
``amf`` …       every entity of that type (``amf``, ``smf``, ``upf``, ``pcf``)
``peer_smf``    SMFs that list the root UPF in their N4 ``peers``
``consumers``   AMFs / SMFs that call a service of the root NF (every AMF and SMF for the NRF)

Scopes (``Effect.scope``) name the knob's sub-key, filled in per incident: ``{gpu}`` (one GPU of
the root server), ``{plmn}`` (one roaming partner), ``{root_services}`` (the SBI services the
root NF produces), ``{other_services}`` (every service but ``nnrf-disc``), ``{all_services}``.

>>> sorted(FAULTS) == sorted(FAULT_IDS)
True
>>> FAULTS["udm_timeout"].root_types
('udm',)

A converged core (``noc simulate --core converged``) also serves LTE through an EPC control
plane; there the fault classes of :data:`EPC_FAULTS` happen either in the 5G core or in their
EPC form (S1 instead of N2, the HSS's S6a instead of the UDM's SBI, the MME's DNS lookups
instead of NRF discovery), with the same durations.

>>> sorted(EPC_FAULTS)
['n2_sctp_loss', 'nrf_discovery_failure', 'registration_storm', 'udm_timeout']
>>> all(EPC_FAULTS[f].duration_min == FAULTS[f].duration_min for f in EPC_FAULTS)
True
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any, Literal

import yaml

__all__ = [
    "AMF_SERVICES",
    "EPC_FAULTS",
    "FAULTS",
    "FAULT_IDS",
    "KNOBS",
    "SERVICES_OF",
    "SMF_SERVICES",
    "Effect",
    "FaultSpec",
    "Gap",
    "Restart",
    "Shape",
    "load_catalogue",
]

Combine = Literal["mul", "add"]


@dataclass(frozen=True)
class Shape:
    """When an effect is on, relative to its incident.

    ``start``/``end`` are fractions of the incident duration; the effect ramps up linearly over
    ``ramp_in_s`` after ``start`` and down over ``ramp_out_s`` before ``end`` (0 = a step).
    ``wave_period_s``/``wave_depth`` modulate the plateau (back-off waves, flapping).
    """

    start: float = 0.0
    end: float = 1.0
    ramp_in_s: float = 60.0
    ramp_out_s: float = 60.0
    wave_period_s: float = 0.0
    wave_depth: float = 0.0


@dataclass(frozen=True)
class Effect:
    """Turn ``knob`` to ``value`` (drawn uniformly from the range per incident) on ``target``."""

    target: str
    knob: str
    value: tuple[float, float]
    shape: Shape = Shape()
    scope: str = ""


@dataclass(frozen=True)
class Gap:
    """Samples missing (``null``) for part of an incident: ``engine``, ``gpu`` (the chosen
    GPU), ``node`` (everything of the root entity) or ``process``."""

    scope: str
    start: float
    end: float


@dataclass(frozen=True)
class Restart:
    """A process restart of the root at a fraction of the incident: counters reset to 0 and
    ``process_start_time_seconds`` jumps. ``scope`` is ``engine``, ``node`` or ``process``."""

    scope: str
    at: float


@dataclass(frozen=True)
class FaultSpec:
    """One fault class: where it can start, how long it lasts, what it does."""

    id: str
    root_types: tuple[str, ...]
    duration_min: tuple[float, float]
    effects: tuple[Effect, ...]
    affected: tuple[str, ...] = ()
    """Targets whose telemetry shows symptoms (the root is always added)."""
    gaps: tuple[Gap, ...] = ()
    restarts: tuple[Restart, ...] = ()
    partner: bool = False
    """The incident concerns one roaming partner (its PLMN goes into the labels)."""
    per_gpu: bool = False
    """The incident concerns one GPU of the root server."""
    domain: str = "packet_core"
    """The renderer that shows its symptoms: ``packet_core`` or ``gpu_serving``."""


def _shape(raw: Any, named: Mapping[str, Shape]) -> Shape:
    if raw is None:
        return Shape()
    if isinstance(raw, str):
        return named[raw]
    return Shape(**{k: float(v) for k, v in raw.items()})


def _effects(raw: Any, doc: Mapping[str, Any], named: Mapping[str, Shape]) -> tuple[Effect, ...]:
    """A fault's effects: a list of effects and names of shared effect sets, or one name."""
    items = [raw] if isinstance(raw, str) else list(raw)
    out: list[Effect] = []
    for item in items:
        if isinstance(item, str):
            out.extend(_effects(doc["effect_sets"][item], doc, named))
            continue
        lo, hi = item["value"]
        out.append(
            Effect(
                target=str(item["target"]),
                knob=str(item["knob"]),
                value=(float(lo), float(hi)),
                shape=_shape(item.get("shape"), named),
                scope=str(item.get("scope", "")),
            )
        )
    return tuple(out)


def _spec(fid: str, raw: Mapping[str, Any], doc: Mapping[str, Any], duration: Any) -> FaultSpec:
    named = {k: _shape(v, {}) for k, v in doc["shapes"].items()}
    lo, hi = duration
    return FaultSpec(
        id=fid,
        root_types=tuple(raw["root_types"]),
        duration_min=(float(lo), float(hi)),
        effects=_effects(raw["effects"], doc, named),
        affected=tuple(raw.get("affected", ())),
        gaps=tuple(
            Gap(g["scope"], float(g["start"]), float(g["end"])) for g in raw.get("gaps", ())
        ),
        restarts=tuple(Restart(r["scope"], float(r["at"])) for r in raw.get("restarts", ())),
        partner=bool(raw.get("partner", False)),
        per_gpu=bool(raw.get("per_gpu", False)),
        domain=str(raw.get("domain", "packet_core")),
    )


def load_catalogue(text: str | None = None) -> dict[str, Any]:
    """The parsed catalogue document (``data/faults.yaml`` unless ``text`` is given)."""
    if text is None:
        text = resources.files(__package__).joinpath("data/faults.yaml").read_text("utf-8")
    doc = yaml.safe_load(text)
    if not isinstance(doc, dict):
        raise ValueError("fault catalogue: expected a mapping at the top level")
    return doc


_DOC = load_catalogue()

KNOBS: Mapping[str, Combine] = {str(k): v for k, v in _DOC["knobs"].items()}
AMF_SERVICES: tuple[str, ...] = tuple(_DOC["amf_services"])
SMF_SERVICES: tuple[str, ...] = tuple(_DOC["smf_services"])
#: SBI services each producer NF type offers (used for ``{root_services}``).
SERVICES_OF: Mapping[str, tuple[str, ...]] = {
    str(k): tuple(v) for k, v in _DOC["services_of"].items()
}
STEP = Shape(ramp_in_s=0.0, ramp_out_s=0.0)

FAULTS: Mapping[str, FaultSpec] = {
    fid: _spec(fid, raw, _DOC, raw["duration_min"]) for fid, raw in _DOC["faults"].items()
}

#: The EPC form of the fault classes that have one (a converged core draws either form).
EPC_FAULTS: Mapping[str, FaultSpec] = {
    fid: _spec(fid, raw, _DOC, FAULTS[fid].duration_min) for fid, raw in _DOC["epc_faults"].items()
}

#: The closed set of fault classes (docs/FORMATS.md §3), in catalogue order.
FAULT_IDS: tuple[str, ...] = tuple(FAULTS)
