"""What the telemetry says about the network when the inventory does not: each entity's type
and roles, and a topology inferred from them.

A :class:`~noc_assistant.stream.pipeline.Pipeline` owns one :class:`TopologyGuess`. With an
inventory its types and topology come first; without one, an entity's type comes from its
labels, its name and the metrics it exports, and the topology (home PLMN and roaming partners
included) from the entities seen so far.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import lru_cache

from knowledge.formula import LIVENESS, Formula
from knowledge.kpis import KpiDef
from knowledge.pack import Pack
from knowledge.topology import PartnerLink, Topology, guess_type, plmn_digits
from noc_assistant.ingest import SeriesStore
from noc_assistant.ingest.point import canonical_metric

__all__ = ["TopologyGuess", "own_metrics", "stored_names"]

_GPU_PREFIXES = ("vllm_", "sglang_", "DCGM_")


@lru_cache(maxsize=1024)
def stored_names(formula: Formula) -> frozenset[str]:
    """The names under which the series a formula reads are stored: each metric's canonical
    name and, for a histogram's mean, its ``_count`` series as sent without a ``type``
    (FORMATS' default is a gauge, so the parts keep their own names; ``hist_mean`` reads them
    so too).

    >>> from knowledge.formula import parse_formula
    >>> sorted(stored_names(parse_formula('hist_mean("vllm:e2e_request_latency_seconds")')))
    ['vllm_e2e_request_latency_seconds', 'vllm_e2e_request_latency_seconds_count']
    """
    names: set[str] = set()
    for sel in formula.selectors:
        if sel.fn == LIVENESS:
            continue
        names.add(canonical_metric(sel.metric, "counter"))
        if sel.fn == "hist_mean":
            names.add(canonical_metric(sel.metric + "_count"))
    return frozenset(names)


def own_metrics(kpis: Iterable[KpiDef], types: Iterable[str]) -> dict[str, frozenset[str]]:
    """Per type of ``types``, the metrics its KPIs read and no other type's of them does (an
    SMF's and a UPF's KPIs both read ``pfcp_peers_active``: it belongs to neither).

    >>> from knowledge.pack import load_pack
    >>> own = own_metrics(load_pack().kpis.values(), ["smf", "upf"])
    >>> "pfcp_peers_active" in own["smf"] | own["upf"]
    False
    >>> "fivegs_upffunction_upf_sessionnbr" in own["upf"]
    True
    """
    read: dict[str, set[str]] = {t: set() for t in types}
    for k in kpis:
        for t in read.keys() & set(k.entity_types):
            read[t].update(stored_names(k.parsed))
    return {
        t: frozenset(names - set().union(*(read[o] for o in read if o != t)))
        for t, names in read.items()
    }


class TopologyGuess:
    """Entity types, roles and the topology, from the inventory or else from ``store``."""

    def __init__(
        self,
        pack: Pack,
        topology: Topology | None,
        store: SeriesStore,
        kpis: Mapping[str, KpiDef] | None = None,
    ) -> None:
        self.pack = pack
        self.kpis = kpis if kpis is not None else pack.kpis
        """The KPIs watched (the pipeline's: a restored one keeps those of its snapshot)."""
        self.topology = topology
        """The inventory's topology (None: inferred from telemetry)."""
        self.store = store
        self._types = dict(topology.types) if topology is not None else {}
        self._inferred: Topology | None = None
        self._inferred_plmns: set[str] = set()
        self._plmn_counts: dict[tuple[str, str], float] = {}
        """Without an inventory: (PLMN id, entity) → its latest per-PLMN count (registered
        subscribers), which tells the home PLMN from the roaming partners"""
        self._role_metrics: dict[str, dict[str, frozenset[str]]] = {}
        self._own_by_type: dict[str, frozenset[str]] | None = None
        self._guessed: dict[str, tuple[int, str]] = {}

    def current(self) -> Topology:
        """The inventory's topology, or one inferred from telemetry labels without one."""
        if self.topology is not None:
            return self.topology
        entities = [e for e in self.store.entities if e]
        plmns = {p for p, _ in self._plmn_counts}
        known = self._inferred
        if known is None or set(known.types) != set(entities) or plmns != self._inferred_plmns:
            topo = Topology.infer({e: self.entity_type(e) for e in entities}, self.pack)
            self._inferred_plmns = plmns
            if len(plmns) > 1:
                # without an inventory, the PLMN with the most subscribers is home and the
                # others are roaming partners (inbound roamers are a small share anywhere)
                totals: dict[str, float] = {}
                for (plmn, _), count in self._plmn_counts.items():
                    totals[plmn] = totals.get(plmn, 0.0) + count
                home = max(sorted(totals), key=lambda p: totals[p])
                topo.home_plmns = (home,)
                topo.partners = tuple(
                    PartnerLink(plmn=f"{p[:3]}-{p[3:]}") for p in sorted(plmns - {home})
                )
            self._inferred = known = topo
        return known

    @property
    def counts_subscribers(self) -> bool:
        """Whether :meth:`count_subscribers` keeps counts (no inventory names home)."""
        return self.topology is None

    def count_subscribers(
        self, kpi: KpiDef, entity: str, group: tuple[tuple[str, str], ...], value: float
    ) -> None:
        """Without an inventory, keep a per-PLMN count (a ``count`` KPI grouped by
        ``plmnid``) evaluated on ``entity``: the PLMN with the most is home."""
        if self.counts_subscribers and kpi.unit == "count" and "plmnid" in kpi.group_by:
            plmn = plmn_digits(dict(group).get("plmnid", ""))  # 26201, 262-01
            if len(plmn) in (5, 6):
                self._plmn_counts[(plmn, entity)] = value

    def learn_type(self, entity: str, etype: str) -> None:
        """A type known elsewhere (a worker's finding names it); the inventory's is kept."""
        self._types.setdefault(entity, etype)

    def entity_type(self, entity: str) -> str:
        """The inventory's type, else the ``nf`` label's (or ``job``'s) when it names one, else
        what the entity exports says (GPU serving metrics, the label or the id by the
        operator's naming rules, a prefix or a word, or the type whose own metrics it exports:
        a CSV replay need not carry ``nf``)."""
        t = self._types.get(entity)
        if t:
            return t
        hint = self.store.entity_hint(entity)
        if hint in self.pack.nf_types:
            return hint
        metrics = self.store.metrics_of(entity)
        if any(m.startswith(_GPU_PREFIXES) for m in metrics):
            return "gpu_server"
        cached = self._guessed.get(entity)
        if cached is not None and cached[0] == len(metrics):
            return cached[1]
        guess = (
            (guess_type(hint, self.pack) if hint else "")
            or guess_type(entity, self.pack)
            or self._type_by_metrics(metrics)
        )
        self._guessed[entity] = (len(metrics), guess)
        return guess

    def _type_by_metrics(self, metrics: set[str]) -> str:
        """The one type whose own metrics (read by its KPIs only) ``metrics`` hold most of."""
        if self._own_by_type is None:
            self._own_by_type = own_metrics(self.kpis.values(), self.pack.nf_types)
        counts = {t: len(own & metrics) for t, own in self._own_by_type.items()}
        best = max(counts.values(), default=0)
        top = [t for t, c in counts.items() if c == best]
        return top[0] if best > 0 and len(top) == 1 else ""

    def roles(self, entity: str, metrics: Iterable[str]) -> frozenset[str]:
        """The roles ``entity`` plays: its type, and of the types it may act as (an EPC PGW:
        the SMF's, the UPF's) those whose own metrics it exports. A PGW-C and a PGW-U both
        export ``pfcp_peers_active``, read by the SMF's and the UPF's KPIs alike, so the shared
        names say nothing; if no role's own metric is there, every role is kept."""
        etype = self.entity_type(entity)
        roles = self.pack.roles(etype)
        if len(roles) == 1:
            return roles
        own = self._role_metrics.get(etype)
        if own is None:
            own = own_metrics(self.kpis.values(), roles - {etype})
            self._role_metrics[etype] = own
        names = set(metrics)
        shown = {r for r, excl in own.items() if excl & names}
        return frozenset({etype, *shown}) if shown else roles
