"""Network topology: the operator inventory (docs/FORMATS.md §4) read against the pack's NF types.

An entity of type A depends on entity B when the pack says type A depends on B's type; inventory
``peers`` narrow that to the listed entities (an SMF depends only on its own UPFs). Entities that
export no metrics (NRF, UDM, SEPP) are still nodes, so the RCA can blame them.

>>> topo = Topology.from_inventory({"entities": [
...     {"id": "smf-1", "type": "smf", "peers": ["upf-1"]},
...     {"id": "upf-1", "type": "upf"}, {"id": "upf-2", "type": "upf"},
...     {"id": "nrf-1", "type": "nrf"},
...     {"id": "sepp-1", "type": "sepp", "partners": [{"plmn": "262-01", "s8_peer": "10.0.0.1"}]}]})
>>> topo.depends_on("smf-1")
('nrf-1', 'sepp-1', 'upf-1')
>>> topo.related("upf-1", "smf-1"), topo.related("upf-2", "smf-1")
(True, False)
>>> topo.upstream_candidates("smf-1", "upf")
['upf-1']
>>> topo.partner_for_plmn("26201").sepp
'sepp-1'
"""

from __future__ import annotations

import json
import re
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from knowledge.pack import Pack, load_pack
from knowledge.schema import http_url
from noc_assistant.errors import InventoryError

__all__ = [
    "InventoryEntity",
    "PartnerLink",
    "Topology",
    "TopologyError",
    "load_inventory",
    "plmn_digits",
]


class TopologyError(InventoryError, ValueError):
    """An inventory that does not follow docs/FORMATS.md §4; names file and field (exit 2)."""

    def __init__(self, message: str, *, file: str | None = None, field: str | None = None):
        self.file = file
        self.field = field
        where = file or ""
        if field:
            where = f"{where}: field {field}" if where else f"field {field}"
        super().__init__(f"{where}: {message}" if where else message)


class _InventoryPartner(BaseModel):
    model_config = ConfigDict(extra="allow")

    plmn: str = Field(pattern=r"^\d{3}-\d{2,3}$")
    s8_peer: str | None = None
    noc_email: str | None = None


class InventoryEntity(BaseModel):
    """One inventory entity; unknown keys are kept (docs/FORMATS.md §4)."""

    model_config = ConfigDict(extra="allow")

    id: str = Field(min_length=1)
    type: str = Field(min_length=1)
    peers: list[str] = Field(default_factory=list)
    partners: list[_InventoryPartner] = Field(default_factory=list)
    gpus: list[str] = Field(default_factory=list)
    tz: str | None = None
    """IANA time zone of the entity's site where it is not the network's (its traffic follows
    that wall clock): an extension of docs/FORMATS.md §4, whose unknown keys are kept."""
    site: str | None = Field(default=None, min_length=1)
    """The site (region, data centre) the entity runs in: an extension of docs/FORMATS.md §4.
    Where two entities both name one and they differ, the same symptom on both at once is
    two sites' business, not one cause (:class:`noc_assistant.stream.correlate.Correlator`)."""

    @field_validator("tz")
    @classmethod
    def _known_zone(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                ZoneInfo(value)
            except (ZoneInfoNotFoundError, ValueError) as exc:
                raise ValueError(f"unknown time zone {value!r} (an IANA name)") from exc
        return value

    @field_validator("type")
    @classmethod
    def _lower(cls, value: str) -> str:
        """FORMATS §4 types are lower case; a CMDB's ``"AMF"`` means the pack's ``amf``."""
        return value.lower()


class _Inventory(BaseModel):
    model_config = ConfigDict(extra="allow")

    entities: list[InventoryEntity]


@dataclass(frozen=True)
class PartnerLink:
    """A roaming partner as our network sees it: PLMN, our SEPP, S8 peers, NOC contact."""

    plmn: str
    sepp: str | None = None
    s8_peers: tuple[str, ...] = ()
    noc_email: str | None = None
    name: str = ""
    tmf621_url: str | None = None
    """The base of the partner NOC's TMF621 Trouble Ticket API (``…/tmf-api/troubleTicket/v5``)
    where it takes tickets from us (:mod:`noc_assistant.integrations.tmf621`); inventory
    ``partners[].tmf621_url``. Its token is in the environment, never here."""


def _tmf621_url(value: object, source: str | None, where: str) -> str | None:
    """An inventory partner's ``tmf621_url``: an http(s) URL with a host, or None."""
    if value is None:
        return None
    try:
        if not isinstance(value, str):
            raise ValueError("an http:// or https:// URL with a host")
        return http_url(value)
    except ValueError as exc:
        raise TopologyError(str(exc), file=source, field=where) from None


def plmn_digits(plmn: str) -> str:
    """``"262-01"`` and ``"26201"`` both give ``"26201"``.

    >>> plmn_digits("262-01"), plmn_digits("26201")
    ('26201', '26201')
    """
    return re.sub(r"\D", "", plmn)


@dataclass
class Topology:
    """Entities, their types, direct dependencies and roaming partners."""

    types: dict[str, str]
    edges: dict[str, set[str]]
    partners: tuple[PartnerLink, ...] = ()
    home_plmns: tuple[str, ...] = ()
    attributes: dict[str, dict[str, Any]] = field(default_factory=dict, repr=False)
    roles: dict[str, frozenset[str]] = field(default_factory=dict, repr=False)
    """Per entity, its type and the types it acts as (the pack's ``acts_as``); an entity not
    listed plays its own type only."""
    _reverse: dict[str, set[str]] = field(default_factory=dict, repr=False)
    #: :meth:`upstream_candidates` already walked (a topology does not change once built; the
    #: RCA asks the same of every finding of an incident, each time the incident grows)
    _upstream: dict[tuple[str, str | None, int], tuple[str, ...]] = field(
        default_factory=dict, repr=False, compare=False
    )
    #: :meth:`related` and :meth:`entities_of_type` already answered, the same way
    _near: dict[tuple[str, str, int], bool] = field(default_factory=dict, repr=False, compare=False)
    _of_type: dict[str, tuple[str, ...]] = field(default_factory=dict, repr=False, compare=False)
    _around: dict[str, frozenset[str]] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._reverse = {}
        for source, targets in self.edges.items():
            for target in targets:
                self._reverse.setdefault(target, set()).add(source)

    def __getstate__(self) -> dict[str, Any]:
        """A snapshot leaves the walks out (they are redone on demand)."""
        return {**self.__dict__, "_upstream": {}, "_near": {}, "_of_type": {}, "_around": {}}

    def __setstate__(self, state: dict[str, Any]) -> None:
        """A snapshot from before the walks were kept restores with none."""
        self.__dict__.update({"_upstream": {}, **state, "_near": {}, "_of_type": {}, "_around": {}})

    # ------------------------------------------------------------ building

    @classmethod
    def from_inventory(
        cls, data: Mapping[str, Any], pack: Pack | None = None, *, source: str | None = None
    ) -> Topology:
        """Build from an inventory mapping (``{"entities": [...]}``)."""
        try:
            inventory = _Inventory.model_validate(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            loc = ".".join(str(p) for p in first["loc"])
            raise TopologyError(first["msg"], file=source, field=loc) from None
        pack = pack if pack is not None else load_pack()
        types: dict[str, str] = {}
        attributes: dict[str, dict[str, Any]] = {}
        for i, entity in enumerate(inventory.entities):
            if entity.id in types:
                raise TopologyError(
                    f"duplicate entity id {entity.id!r}", file=source, field=f"entities.{i}.id"
                )
            types[entity.id] = entity.type
            attributes[entity.id] = entity.model_dump()
        for entity in inventory.entities:
            for gpu in entity.gpus:
                types.setdefault(f"{entity.id}/gpu{gpu}", "gpu")
        explicit = {e.id: list(e.peers) for e in inventory.entities}
        for e in inventory.entities:
            explicit[e.id] += [f"{e.id}/gpu{g}" for g in e.gpus]
        partners: list[PartnerLink] = []
        for i, entity in enumerate(inventory.entities):
            for j, p in enumerate(entity.partners):
                url = (p.model_extra or {}).get("tmf621_url")
                partners.append(
                    PartnerLink(
                        plmn=p.plmn,
                        sepp=entity.id,
                        s8_peers=(p.s8_peer,) if p.s8_peer else (),
                        noc_email=p.noc_email,
                        tmf621_url=_tmf621_url(
                            url, source, f"entities.{i}.partners.{j}.tmf621_url"
                        ),
                    )
                )
        return cls._build(types, explicit, partners, pack, attributes)

    @classmethod
    def infer(cls, entity_types: Mapping[str, str], pack: Pack | None = None) -> Topology:
        """Build without an inventory, from entity → type pairs seen in telemetry labels.

        An empty type is filled in from the operator overlay's naming rules or the id's prefix.
        """
        pack = pack if pack is not None else load_pack()
        types = {e: t or guess_type(e, pack) for e, t in entity_types.items()}
        return cls._build(types, {}, [], pack, {})

    @classmethod
    def _build(
        cls,
        types: dict[str, str],
        explicit: Mapping[str, Sequence[str]],
        partners: list[PartnerLink],
        pack: Pack,
        attributes: dict[str, dict[str, Any]],
    ) -> Topology:
        roles = {e: pack.roles(t) for e, t in types.items()}
        by_type: dict[str, list[str]] = {}
        for entity, played in roles.items():
            for t in played:
                by_type.setdefault(t, []).append(entity)
        edges: dict[str, set[str]] = {e: set() for e in types}
        for entity, played in roles.items():
            peers = [p for p in explicit.get(entity, ()) if p]
            peer_types = {r for p in peers for r in roles.get(p, ("",))}
            for p in peers:
                edges[entity].add(p)
            for t in sorted(played):
                nf = pack.nf_types.get(t)
                if nf is None:
                    continue
                for dep_type in nf.depends_on:
                    if dep_type in peer_types:
                        continue
                    edges[entity].update(x for x in by_type.get(dep_type, ()) if x != entity)
        # overlay partners add contacts and S8 peers to what the inventory says
        merged: dict[str, PartnerLink] = {plmn_digits(p.plmn): p for p in partners}
        for op in pack.partners:
            key = plmn_digits(op.plmn)
            base = merged.get(key)
            merged[key] = PartnerLink(
                plmn=op.plmn,
                sepp=op.sepp or (base.sepp if base else None),
                s8_peers=tuple(dict.fromkeys((*(base.s8_peers if base else ()), *op.s8_peers))),
                noc_email=op.noc_email or (base.noc_email if base else None),
                name=op.name,
                # the overlay's own where its schema has one, else the inventory's
                tmf621_url=getattr(op, "tmf621_url", None) or (base.tmf621_url if base else None),
            )
        home = pack.operator.home_plmns if pack.operator else ()
        return cls(types, edges, tuple(merged.values()), tuple(home), attributes, roles)

    def with_entities(self, entity_types: Mapping[str, str], pack: Pack | None = None) -> Topology:
        """A copy that also knows entities seen only in telemetry (type-level edges)."""
        new = {e: t for e, t in entity_types.items() if e not in self.types and t}
        if not new:
            return self
        pack = pack if pack is not None else load_pack()
        types = {**self.types, **new}
        explicit = {e: sorted(d) for e, d in self.edges.items()}
        topo = Topology._build(types, explicit, list(self.partners), pack, dict(self.attributes))
        topo.home_plmns = self.home_plmns
        return topo

    # ------------------------------------------------------------ queries

    def type_of(self, entity: str) -> str:
        """The entity's type, ``""`` if the topology does not know it."""
        return self.types.get(entity, "")

    def _placed(self, entity: str, key: str) -> str | None:
        """The inventory's text ``key`` of the entity, or of its server for a GPU (which is
        where its server is), None where it gives none."""
        value = self.attributes.get(entity, {}).get(key)
        if value is None and "/gpu" in entity:
            value = self.attributes.get(entity.split("/gpu", 1)[0], {}).get(key)
        return value if isinstance(value, str) else None

    def zone_of(self, entity: str) -> str | None:
        """The IANA time zone the inventory gives the entity's site (a GPU its server's),
        None where it gives none (the network's own)."""
        return self._placed(entity, "tz")

    def site_of(self, entity: str) -> str | None:
        """The site the inventory gives the entity (a GPU its server's), None where it gives
        none."""
        return self._placed(entity, "site")

    def same_site(self, a: str, b: str) -> bool:
        """Whether ``a`` and ``b`` may be one site: not both placed, at different sites."""
        sa, sb = self.site_of(a), self.site_of(b)
        return sa is None or sb is None or sa == sb

    def plays(self, entity: str, nf_type: str) -> bool:
        """Whether ``entity`` is of ``nf_type`` or acts as one (an EPC PGW acts as an SMF)."""
        played = self.roles.get(entity)
        return nf_type in played if played is not None else self.types.get(entity) == nf_type

    def entities_of_type(self, nf_type: str) -> list[str]:
        """Entities of ``nf_type``, or acting as one (a new list)."""
        found = self._of_type.get(nf_type)
        if found is None:
            found = self._of_type[nf_type] = tuple(
                sorted(e for e in self.types if self.plays(e, nf_type))
            )
        return list(found)

    def depends_on(self, entity: str) -> tuple[str, ...]:
        """Entities ``entity`` directly depends on (sorted)."""
        return tuple(sorted(self.edges.get(entity, ())))

    def dependents(self, entity: str) -> tuple[str, ...]:
        """Entities that directly depend on ``entity`` (sorted)."""
        return tuple(sorted(self._reverse.get(entity, ())))

    def neighbours(self, entity: str) -> set[str]:
        return set(self.edges.get(entity, ())) | set(self._reverse.get(entity, ()))

    def related(self, a: str, b: str, hops: int = 1) -> bool:
        """Whether ``a`` and ``b`` are the same or within ``hops`` dependency links."""
        if a == b:
            return True
        key = (a, b, hops)
        found = self._near.get(key)
        if found is None:
            found = self._near[key] = self._within(a, b, hops)
        return found

    def around(self, entity: str) -> frozenset[str]:
        """``entity`` and its neighbours: every entity :meth:`related` to it at one link
        (neighbours are symmetric: ``related(e, entity)`` is ``e in around(entity)``)."""
        found = self._around.get(entity)
        if found is None:
            found = self._around[entity] = frozenset({entity, *self.neighbours(entity)})
        return found

    def _within(self, a: str, b: str, hops: int) -> bool:
        frontier, seen = {a}, {a}
        for _ in range(hops):
            frontier = {n for x in frontier for n in self.neighbours(x)} - seen
            if b in frontier:
                return True
            seen |= frontier
        return False

    def upstream_candidates(
        self, entity: str, nf_type: str | None = None, max_depth: int = 3
    ) -> list[str]:
        """Entities ``entity`` depends on, nearest first, optionally of one type only (a new
        list; the walk itself is done once per question)."""
        key = (entity, nf_type, max_depth)
        found = self._upstream.get(key)
        if found is None:
            found = self._upstream[key] = tuple(self._walk_up(entity, nf_type, max_depth))
        return list(found)

    def _walk_up(self, entity: str, nf_type: str | None, max_depth: int) -> list[str]:
        """Breadth-first over the dependencies, ``max_depth`` links at most."""
        out: list[str] = []
        seen = {entity}
        queue: deque[tuple[str, int]] = deque([(entity, 0)])
        while queue:
            node, depth = queue.popleft()
            if depth >= max_depth:
                continue
            for dep in self.depends_on(node):
                if dep in seen:
                    continue
                seen.add(dep)
                if nf_type is None or self.plays(dep, nf_type):
                    out.append(dep)
                queue.append((dep, depth + 1))
        return out

    def common_upstream(self, entities: Iterable[str], nf_type: str | None = None) -> list[str]:
        """Entities every one of ``entities`` depends on (directly or not): shared suspects."""
        sets = [set(self.upstream_candidates(e, nf_type)) for e in entities]
        if not sets:
            return []
        return sorted(set.intersection(*sets))

    def partner_for_plmn(self, plmnid: str) -> PartnerLink | None:
        digits = plmn_digits(plmnid)
        for p in self.partners:
            if plmn_digits(p.plmn) == digits:
                return p
        return None

    def partner_for_addr(self, addr: str) -> PartnerLink | None:
        for p in self.partners:
            if addr in p.s8_peers:
                return p
        return None


def guess_type(entity: str, pack: Pack) -> str:
    """Type of an entity id (or of an ``nf``/``job`` label) from the overlay's naming rules,
    else its alphabetic prefix, else the first of its words that names a type (a daemon's
    trailing ``d`` dropped: Open5GS runs ``open5gs-amfd``).

    >>> pack = load_pack()
    >>> [guess_type(e, pack) for e in ("amf-1", "open5gs-smfd-0", "core-upf-edge-3", "ne07")]
    ['amf', 'smf', 'upf', '']
    """
    if pack.operator is not None:
        for rule in pack.operator.naming:
            if re.search(rule.pattern, entity):
                return rule.type
    text = entity.lower()
    match = re.match(r"[a-z_]+", text)
    prefix = match.group(0).rstrip("_") if match else ""
    if prefix in pack.nf_types:
        return prefix
    for word in re.split(r"[^a-z0-9_]+", text):
        for name in (word, word[:-1] if word.endswith("d") else ""):
            if name and name in pack.nf_types:
                return name
    return ""


def load_inventory(path: Path | str, pack: Pack | None = None) -> Topology:
    """Read an inventory JSON (or YAML) file into a :class:`Topology`."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise TopologyError(f"cannot read: {exc.strerror}", file=str(path)) from None
    try:
        data = yaml.safe_load(text) if path.suffix in {".yaml", ".yml"} else json.loads(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise TopologyError(f"not valid JSON/YAML: {exc}", file=str(path)) from None
    if not isinstance(data, Mapping):
        raise TopologyError("top level must be an object with 'entities'", file=str(path))
    return Topology.from_inventory(data, pack, source=str(path))
