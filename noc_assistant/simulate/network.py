"""The simulated operator network: entities, their relations and their traffic shares.

>>> net = build_network(7)
>>> [e.id for e in net.entities if e.type == "upf"]
['upf-1', 'upf-2', 'upf-3']
>>> net.inventory()["entities"][0]
{'id': 'amf-1', 'type': 'amf'}
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, get_args

import numpy as np

__all__ = [
    "CORES",
    "EXPORTING_TYPES",
    "MAX_SCALE",
    "SERVING_ENGINES",
    "Core",
    "Entity",
    "GpuServer",
    "Network",
    "Partner",
    "ServingEngine",
    "build_network",
]

#: Entity types that expose metrics (Open5GS NRF, UDM, AUSF and SEPP have no metrics module).
#: The Open5GS MME and HSS export metrics; SGW-C/SGW-U and DNS do not.
EXPORTING_TYPES: frozenset[str] = frozenset(
    {"amf", "smf", "upf", "pcf", "mme", "hss", "gpu_server"}
)

HOME_PLMN = "999-70"
#: the largest ``build_network(scale=...)``: 16 AMFs, 16 SMFs, 17 UPFs, 16 GPU servers
MAX_SCALE = 8

ServingEngine = Literal["vllm", "sglang", "mixed"]
#: what ``build_network(engine=...)`` accepts: every server on vLLM, every one on SGLang, or
#: the two alternating (``gpu-srv-1`` vLLM, ``gpu-srv-2`` SGLang, …)
SERVING_ENGINES: tuple[str, ...] = get_args(ServingEngine)

Core = Literal["5gc", "converged"]
#: what ``build_network(core=...)`` accepts: a standalone 5G core, or a converged core that
#: also serves LTE through an EPC control plane (MMEs, an HSS, an SGW and the DNS used for
#: gateway selection) beside it, its SMFs acting as PGW-C and its UPFs as PGW-U, as Open5GS
#: runs them
CORES: tuple[str, ...] = get_args(Core)

_PARTNER_POOL: tuple[tuple[str, str], ...] = (
    ("262-01", "partner-a"),
    ("208-10", "partner-b"),
    ("234-15", "partner-c"),
    ("310-260", "partner-d"),
)
_MODELS: tuple[str, ...] = ("llama-3.1-70b-instruct", "qwen3-32b", "mistral-large-2411")


def plmn_digits(plmn: str) -> str:
    """``"262-01"`` → ``"26201"`` (the Open5GS ``plmnid`` label form).

    >>> plmn_digits("310-260")
    '310260'
    """
    return plmn.replace("-", "")


@dataclass(frozen=True)
class Partner:
    """A roaming partner reached through the SEPP (and over S8 from its SGW)."""

    plmn: str
    s8_peer: str
    noc_email: str
    share: float
    """Share of initial registrations that are inbound roamers of this partner."""


@dataclass(frozen=True)
class GpuServer:
    """An inference server: one serving engine (vLLM or SGLang) with tensor parallelism over
    its GPUs."""

    id: str
    gpus: tuple[str, ...]
    model_name: str
    peak_rps: float
    kv_tokens: float
    engine: Literal["vllm", "sglang"] = "vllm"
    """Which engine's exporter the server runs: the same quantities under other names."""


@dataclass(frozen=True)
class Entity:
    id: str
    type: str
    share: float = 0.0
    """Share of its type's traffic (AMF, SMF); 0 where it does not apply."""
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Network:
    """Everything the traffic model and the inventory need to know about the network."""

    entities: tuple[Entity, ...]
    home_plmn: str
    partners: tuple[Partner, ...]
    smf_peers: dict[str, tuple[str, ...]]
    gpu_servers: tuple[GpuServer, ...]
    uptime_s: dict[str, float]
    """Process uptime of each exporting entity when the scenario starts."""

    def by_type(self, type_: str) -> list[Entity]:
        return [e for e in self.entities if e.type == type_]

    def entity(self, entity_id: str) -> Entity:
        for e in self.entities:
            if e.id == entity_id:
                return e
        raise KeyError(entity_id)

    def server(self, entity_id: str) -> GpuServer:
        for s in self.gpu_servers:
            if s.id == entity_id:
                return s
        raise KeyError(entity_id)

    def smfs_of_upf(self, upf: str) -> list[str]:
        return [smf for smf, peers in self.smf_peers.items() if upf in peers]

    def inventory(self) -> dict[str, Any]:
        """The inventory document (docs/FORMATS.md §4)."""
        rows: list[dict[str, Any]] = []
        for e in self.entities:
            row: dict[str, Any] = {"id": e.id, "type": e.type}
            if e.type == "smf":
                row["peers"] = list(self.smf_peers[e.id])
            elif e.type == "sepp":
                row["partners"] = [
                    {"plmn": p.plmn, "s8_peer": p.s8_peer, "noc_email": p.noc_email}
                    for p in self.partners
                ]
            elif e.type == "gpu_server":
                srv = self.server(e.id)
                row["gpus"] = list(srv.gpus)
                row["model_name"] = srv.model_name
            rows.append(row)
        return {"entities": rows}


def _engine_of(engine: ServingEngine, index: int) -> Literal["vllm", "sglang"]:
    if engine == "mixed":
        return "vllm" if index % 2 else "sglang"
    if engine not in ("vllm", "sglang"):
        raise ValueError(f"unknown serving engine {engine!r} (known: {', '.join(SERVING_ENGINES)})")
    return engine


def _shares(rng: np.random.Generator, n: int) -> list[float]:
    raw = 1.0 + rng.uniform(-0.12, 0.12, n)
    return [float(x) for x in raw / raw.sum()]


def _partners(rng: np.random.Generator) -> tuple[Partner, ...]:
    picks = rng.choice(len(_PARTNER_POOL), size=2, replace=False)
    return tuple(
        Partner(
            plmn=_PARTNER_POOL[int(k)][0],
            s8_peer=f"10.250.{j + 1}.{int(rng.integers(1, 200))}",
            noc_email=f"noc@{_PARTNER_POOL[int(k)][1]}.example",
            share=(0.022, 0.013)[j],
        )
        for j, k in enumerate(picks)
    )


def _servers(rng: np.random.Generator, n: int, engine: ServingEngine) -> tuple[GpuServer, ...]:
    models = rng.permutation(len(_MODELS))
    return tuple(
        GpuServer(
            id=f"gpu-srv-{i}",
            gpus=("0", "1"),
            model_name=_MODELS[int(models[(i - 1) % len(_MODELS)])],
            peak_rps=float(rng.uniform(5.0, 7.0)),
            kv_tokens=float(rng.uniform(280_000, 320_000)),
            engine=_engine_of(engine, i),
        )
        for i in range(1, n + 1)
    )


def build_network(
    seed: int, engine: ServingEngine = "vllm", scale: int = 1, core: Core = "5gc"
) -> Network:
    """Build the operator network for ``seed`` (names never hint at faults); ``engine`` is the
    GPU servers' serving engine (:data:`SERVING_ENGINES`), drawn after everything else so that
    the rest of the network is the same whatever it is. ``scale`` multiplies the AMFs, SMFs and
    GPU servers (2 each at 1) and gives one UPF more than SMFs: each SMF has a UPF of its own
    and one UPF serves them all (N4), as at scale 1. ``core="converged"`` adds the EPC
    control plane (``scale`` × 2 MMEs, an HSS, an SGW, a DNS), drawn from a stream of its own so
    that the 5G core is the same entity for entity.

    >>> big = build_network(7, scale=3)
    >>> [len(big.by_type(t)) for t in ("amf", "smf", "upf", "gpu_server", "pcf")]
    [6, 6, 7, 6, 1]
    >>> sorted({len(p) for p in big.smf_peers.values()}), len(big.smfs_of_upf("upf-1")) in (1, 6)
    ([2], True)

    >>> [s.engine for s in build_network(7, "mixed").gpu_servers]
    ['vllm', 'sglang']
    >>> a, b = build_network(7, "sglang"), build_network(7)
    >>> a.gpu_servers[0].kv_tokens == b.gpu_servers[0].kv_tokens, a.entities == b.entities
    (True, True)

    >>> cv = build_network(7, core="converged")
    >>> [e.id for e in cv.entities if e.type in ("mme", "hss", "sgw", "dns")]
    ['mme-1', 'mme-2', 'hss-1', 'sgw-1', 'dns-1']
    >>> [e for e in cv.entities if e.type not in ("mme", "hss", "sgw", "dns")] == list(b.entities)
    True
    """
    if not 1 <= scale <= MAX_SCALE:
        raise ValueError(f"network scale {scale} out of range (1 to {MAX_SCALE})")
    if core not in CORES:
        raise ValueError(f"unknown core {core!r} (known: {', '.join(CORES)})")
    rng = np.random.default_rng([seed, 11])
    n = 2 * scale
    entities: list[Entity] = []
    for i, s in enumerate(_shares(rng, n), 1):
        entities.append(Entity(f"amf-{i}", "amf", s))
    for i, s in enumerate(_shares(rng, n), 1):
        entities.append(Entity(f"smf-{i}", "smf", s))
    for i in range(1, n + 2):
        entities.append(Entity(f"upf-{i}", "upf"))
    entities += [
        Entity("pcf-1", "pcf"),
        Entity("nrf-1", "nrf"),
        Entity("udm-1", "udm"),
        Entity("ausf-1", "ausf"),
        Entity("sepp-1", "sepp"),
    ]
    # N4: each SMF serves two UPFs, one UPF is shared
    shared = int(rng.integers(1, n + 2))
    others = [u for u in range(1, n + 2) if u != shared]
    smf_peers = {
        f"smf-{k}": tuple(sorted((f"upf-{others[k - 1]}", f"upf-{shared}")))
        for k in range(1, n + 1)
    }
    partners = _partners(rng)
    servers = _servers(rng, n, engine)
    entities += [Entity(s.id, "gpu_server") for s in servers]
    uptime = {
        e.id: float(rng.uniform(2, 40) * 86400) for e in entities if e.type in EXPORTING_TYPES
    }
    if core == "converged":
        epc = np.random.default_rng([seed, 13])
        lte = [Entity(f"mme-{i}", "mme", s) for i, s in enumerate(_shares(epc, n), 1)]
        lte += [Entity("hss-1", "hss"), Entity("sgw-1", "sgw"), Entity("dns-1", "dns")]
        uptime.update(
            {e.id: float(epc.uniform(2, 40) * 86400) for e in lte if e.type in EXPORTING_TYPES}
        )
        cut = next(i for i, e in enumerate(entities) if e.type == "gpu_server")
        entities[cut:cut] = lte
    return Network(
        entities=tuple(entities),
        home_plmn=HOME_PLMN,
        partners=partners,
        smf_peers=smf_peers,
        gpu_servers=servers,
        uptime_s=uptime,
    )
