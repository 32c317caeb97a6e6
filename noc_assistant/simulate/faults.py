"""Fault catalogue of the simulator: what each fault class does to the telemetry, as data.

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
from typing import Literal

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
]

Combine = Literal["mul", "add"]

#: Knobs of the traffic model and how effects on the same knob combine.
#: ``mul``: factor ``1 + envelope * (value - 1)``, effects multiply (default 1).
#: ``add``: ``envelope * value``, effects add up (default 0).
KNOBS: Mapping[str, Combine] = {
    # AMF
    "reg_init_mult": "mul",  # initial-registration attempt rate
    "reg_mob_mult": "mul",  # mobility-registration attempt rate
    "congestion_reject": "add",  # share of initial registrations rejected, 5GMM cause 22
    "auth_synch_fail": "add",  # share of authentications failing, 5GMM cause 21
    "gnb_loss": "add",  # share of gNB (N2 SCTP) associations lost
    "sub_loss": "add",  # share of registered subscribers lost (implicit de-registration)
    "plmn_fail": "add",  # share of a partner PLMN's registrations failing (scope: plmn)
    "plmn_sub_loss": "add",  # share of a partner PLMN's registered roamers lost (scope: plmn)
    # SBI consumers (AMF, SMF); scope: target service name
    "sbi_latency_mult": "mul",
    "sbi_timeout": "add",  # share answered 504 (timeout)
    "sbi_connerr": "add",  # share failing before any HTTP status (TLS / connect), code "0"
    "sbi_unavail": "add",  # share answered 503
    "sbi_skip": "add",  # share never sent (producer could not be discovered)
    "disc_rate_mult": "mul",  # nnrf-disc request rate (cache misses, retries)
    # EPC: an MME's knobs above are its eNB (S1) associations, UE contexts and attach (and
    # tracking-area update) rates
    "dns_fail": "add",  # MME: share of DNS queries for gateway selection failing
    "s6a_error": "add",  # HSS: share of S6a AIR/ULR answered with an error
    # SMF
    "s8_fail": "add",  # share of S8 Create Session from a partner SGW lost (scope: plmn)
    # UPF
    "n4_lost": "add",  # PFCP association with the SMFs down (0/1)
    "session_decay": "add",  # share of PFCP sessions released and not replaced
    "gtpu_drop": "add",  # share of received N3 packets dropped
    # any exporting entity
    "drain": "add",  # traffic drained away (maintenance)
    # GPU server (vLLM engine + its GPUs)
    "arrival_mult": "mul",
    "arrival_boost": "add",  # extra arrivals, in units of the server's peak arrival rate
    "prompt_len_mult": "mul",
    "output_len_mult": "mul",
    "prefix_hit_gain": "add",  # moves the prefix-cache hit rate towards 1
    "accept_len_mult": "mul",  # speculative-decoding mean accepted length
    "kv_capacity_mult": "mul",
    "compressed": "add",  # compressed (dequantised) weights in use (0/1)
    "hang": "add",  # collective hang: no progress (0/1)
    "engine_down": "add",  # engine process dead (0/1)
    "thermal": "add",  # thermal throttling severity 0..1 (scope: gpu)
    "xid": "add",  # last Xid reported (scope: gpu)
}

AMF_SERVICES: tuple[str, ...] = ("nausf-auth", "nudm-uecm", "nudm-sdm", "nnrf-disc")
SMF_SERVICES: tuple[str, ...] = ("nudm-sdm", "npcf-smpolicycontrol", "nnrf-disc")

#: SBI services each producer NF type offers (used for ``{root_services}``).
SERVICES_OF: Mapping[str, tuple[str, ...]] = {
    "udm": ("nudm-sdm", "nudm-uecm"),
    "ausf": ("nausf-auth",),
    "pcf": ("npcf-smpolicycontrol",),
    "nrf": ("nnrf-disc",),
}


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


STEP = Shape(ramp_in_s=0.0, ramp_out_s=0.0)


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


def _fault(spec: FaultSpec) -> tuple[str, FaultSpec]:
    return spec.id, spec


_STORM = Shape(ramp_in_s=90, ramp_out_s=300, wave_period_s=240, wave_depth=0.5)
#: a registration (attach) storm's waves of initial and mobility registrations
_STORM_WAVE: tuple[Effect, ...] = (
    Effect("root", "reg_init_mult", (6.0, 15.0), _STORM),
    Effect("root", "reg_mob_mult", (2.0, 4.0), _STORM),
)


FAULTS: Mapping[str, FaultSpec] = dict(
    [
        _fault(
            FaultSpec(
                id="n2_sctp_loss",
                root_types=("amf",),
                duration_min=(12, 30),
                effects=(
                    # associations drop at once, flap, and come back near the end
                    Effect(
                        "root",
                        "gnb_loss",
                        (0.35, 0.7),
                        Shape(
                            end=0.85, ramp_in_s=0, ramp_out_s=120, wave_period_s=300, wave_depth=0.3
                        ),
                    ),
                    Effect("root", "sub_loss", (0.03, 0.08), Shape(ramp_in_s=900, ramp_out_s=300)),
                    # re-registration wave after recovery
                    Effect(
                        "root",
                        "reg_mob_mult",
                        (3.0, 6.0),
                        Shape(start=0.8, ramp_in_s=30, ramp_out_s=120),
                    ),
                    Effect(
                        "root",
                        "reg_init_mult",
                        (1.5, 2.5),
                        Shape(start=0.8, ramp_in_s=30, ramp_out_s=120),
                    ),
                ),
                affected=("pcf",),
            )
        ),
        _fault(
            FaultSpec(
                id="pfcp_association_loss",
                root_types=("upf",),
                duration_min=(10, 35),
                effects=(
                    Effect("root", "n4_lost", (1.0, 1.0), Shape(ramp_in_s=0, ramp_out_s=0)),
                    Effect(
                        "root", "session_decay", (0.15, 0.35), Shape(ramp_in_s=600, ramp_out_s=120)
                    ),
                ),
                affected=("peer_smf",),
            )
        ),
        _fault(
            FaultSpec(
                id="registration_storm",
                root_types=("amf",),
                duration_min=(15, 40),
                effects=(
                    *_STORM_WAVE,
                    Effect(
                        "root",
                        "congestion_reject",
                        (0.3, 0.6),
                        Shape(start=0.05, ramp_in_s=120, ramp_out_s=300),
                    ),
                    Effect(
                        "root",
                        "auth_synch_fail",
                        (0.01, 0.04),
                        Shape(ramp_in_s=120, ramp_out_s=300),
                    ),
                    Effect(
                        "root",
                        "sbi_latency_mult",
                        (1.4, 2.0),
                        Shape(ramp_in_s=120, ramp_out_s=300),
                        scope="{all_services}",
                    ),
                ),
                affected=("pcf",),
            )
        ),
        _fault(
            FaultSpec(
                id="nrf_discovery_failure",
                root_types=("nrf",),
                duration_min=(15, 40),
                effects=(
                    Effect(
                        "consumers",
                        "sbi_unavail",
                        (0.45, 0.65),
                        Shape(ramp_in_s=60, ramp_out_s=120),
                        scope="nnrf-disc",
                    ),
                    Effect(
                        "consumers",
                        "sbi_timeout",
                        (0.2, 0.3),
                        Shape(ramp_in_s=60, ramp_out_s=120),
                        scope="nnrf-disc",
                    ),
                    Effect(
                        "consumers",
                        "disc_rate_mult",
                        (3.0, 6.0),
                        Shape(ramp_in_s=60, ramp_out_s=120),
                    ),
                    # cached NF profiles expire: calls to every other producer stop
                    Effect(
                        "consumers",
                        "sbi_skip",
                        (0.4, 0.8),
                        Shape(start=0.12, ramp_in_s=180, ramp_out_s=120),
                        scope="{other_services}",
                    ),
                ),
                affected=("amf", "smf", "pcf"),
            )
        ),
        _fault(
            FaultSpec(
                id="upf_gtpu_drop",
                root_types=("upf",),
                duration_min=(10, 40),
                effects=(
                    Effect("root", "gtpu_drop", (0.04, 0.15), Shape(ramp_in_s=120, ramp_out_s=120)),
                ),
            )
        ),
        _fault(
            FaultSpec(
                id="udm_timeout",
                root_types=("udm",),
                duration_min=(15, 40),
                effects=(
                    # latency creeps up first …
                    Effect(
                        "consumers",
                        "sbi_latency_mult",
                        (25.0, 60.0),
                        Shape(ramp_in_s=600, ramp_out_s=120),
                        scope="{root_services}",
                    ),
                    # … then requests time out
                    Effect(
                        "consumers",
                        "sbi_timeout",
                        (0.3, 0.7),
                        Shape(start=0.3, ramp_in_s=300, ramp_out_s=120),
                        scope="{root_services}",
                    ),
                ),
                affected=("consumers", "pcf"),
            )
        ),
        _fault(
            FaultSpec(
                id="sbi_cert_expiry",
                root_types=("udm", "ausf", "pcf"),
                duration_min=(15, 45),
                effects=(
                    Effect("consumers", "sbi_connerr", (0.97, 1.0), STEP, scope="{root_services}"),
                ),
                affected=("consumers", "pcf"),
            )
        ),
        _fault(
            FaultSpec(
                id="roaming_partner_outage",
                root_types=("sepp",),
                duration_min=(15, 45),
                effects=(
                    Effect("amf", "plmn_fail", (0.9, 1.0), Shape(ramp_in_s=60), scope="{plmn}"),
                    Effect(
                        "amf",
                        "plmn_sub_loss",
                        (0.6, 0.9),
                        Shape(ramp_in_s=900, ramp_out_s=600),
                        scope="{plmn}",
                    ),
                    Effect("smf", "s8_fail", (0.9, 1.0), Shape(ramp_in_s=60), scope="{plmn}"),
                ),
                affected=("amf", "smf"),
                partner=True,
            )
        ),
        _fault(
            FaultSpec(
                id="kv_cache_saturation",
                root_types=("gpu_server",),
                duration_min=(15, 40),
                effects=(
                    Effect(
                        "root", "arrival_boost", (1.3, 1.8), Shape(ramp_in_s=300, ramp_out_s=240)
                    ),
                    Effect(
                        "root", "output_len_mult", (1.8, 2.4), Shape(ramp_in_s=300, ramp_out_s=240)
                    ),
                ),
            )
        ),
        _fault(
            FaultSpec(
                id="gpu_thermal_throttle",
                root_types=("gpu_server",),
                duration_min=(20, 45),
                effects=(
                    Effect(
                        "root",
                        "thermal",
                        (0.8, 1.0),
                        Shape(ramp_in_s=420, ramp_out_s=300),
                        scope="{gpu}",
                    ),
                ),
                per_gpu=True,
            )
        ),
        _fault(
            FaultSpec(
                id="gpu_xid_error",
                root_types=("gpu_server",),
                duration_min=(15, 30),
                effects=(
                    Effect(
                        "root",
                        "xid",
                        (79.0, 79.0),
                        Shape(end=0.8, ramp_in_s=0, ramp_out_s=0),
                        scope="{gpu}",
                    ),
                    Effect(
                        "root", "engine_down", (1.0, 1.0), Shape(end=0.8, ramp_in_s=0, ramp_out_s=0)
                    ),
                ),
                # the engine dies at once; the GPU falls off the bus a little later; the node
                # reboots, then the engine restarts
                gaps=(Gap("engine", 0.02, 0.8), Gap("gpu", 0.15, 0.8), Gap("node", 0.74, 0.8)),
                restarts=(Restart("node", 0.8),),
                per_gpu=True,
            )
        ),
        _fault(
            FaultSpec(
                id="spec_accept_collapse",
                root_types=("gpu_server",),
                duration_min=(15, 45),
                effects=(
                    Effect(
                        "root", "accept_len_mult", (0.38, 0.5), Shape(ramp_in_s=120, ramp_out_s=180)
                    ),
                ),
            )
        ),
        _fault(
            FaultSpec(
                id="long_context_kv_cost",
                root_types=("gpu_server",),
                duration_min=(15, 45),
                effects=(
                    Effect(
                        "root",
                        "prompt_len_mult",
                        (15.0, 30.0),
                        Shape(ramp_in_s=300, ramp_out_s=300),
                    ),
                    Effect(
                        "root", "prefix_hit_gain", (0.75, 0.9), Shape(ramp_in_s=300, ramp_out_s=300)
                    ),
                    Effect(
                        "root", "arrival_mult", (0.25, 0.4), Shape(ramp_in_s=300, ramp_out_s=300)
                    ),
                ),
            )
        ),
        _fault(
            FaultSpec(
                id="compressed_weights_high_concurrency",
                root_types=("gpu_server",),
                duration_min=(20, 45),
                effects=(
                    Effect("root", "compressed", (1.0, 1.0), STEP),
                    Effect("root", "kv_capacity_mult", (1.8, 2.2), STEP),
                    Effect(
                        "root", "arrival_boost", (1.2, 1.6), Shape(ramp_in_s=300, ramp_out_s=300)
                    ),
                ),
            )
        ),
        _fault(
            FaultSpec(
                id="nccl_hang",
                root_types=("gpu_server",),
                duration_min=(14, 17),
                effects=(
                    # about 600 s of hang until the NCCL watchdog aborts the process
                    Effect("root", "hang", (1.0, 1.0), Shape(end=0.68, ramp_in_s=0, ramp_out_s=0)),
                ),
                gaps=(Gap("engine", 0.68, 0.8),),
                restarts=(Restart("engine", 0.8),),
            )
        ),
    ]
)


def _epc(
    fault: str, root: str, effects: tuple[Effect, ...], affected: tuple[str, ...]
) -> tuple[str, FaultSpec]:
    """The EPC form of ``fault``: rooted at ``root``, as long as its 5G-core form."""
    return _fault(FaultSpec(fault, (root,), FAULTS[fault].duration_min, effects, affected))


#: The EPC form of the fault classes that have one (a converged core draws either form).
EPC_FAULTS: Mapping[str, FaultSpec] = dict(
    [
        # S1-MME: the same drop, flapping and re-attach wave as N2
        _epc("n2_sctp_loss", "mme", FAULTS["n2_sctp_loss"].effects, ("hss",)),
        _epc("registration_storm", "mme", _STORM_WAVE, ("hss",)),
        # S-NAPTR lookups for SGW/PGW selection fail; the MMEs fall back to their static
        # gateway lists, so attaches go on
        _epc(
            "nrf_discovery_failure",
            "dns",
            (Effect("mme", "dns_fail", (0.4, 0.8), Shape(ramp_in_s=60, ramp_out_s=120)),),
            ("mme",),
        ),
        # the HSS (or its back-end) answers S6a with errors: too busy, unable to deliver
        _epc(
            "udm_timeout",
            "hss",
            (Effect("root", "s6a_error", (0.15, 0.5), Shape(ramp_in_s=300, ramp_out_s=120)),),
            ("mme",),
        ),
    ]
)

#: The closed set of fault classes (FORMATS.md §3), in catalogue order.
FAULT_IDS: tuple[str, ...] = tuple(FAULTS)
