"""The operator's network inventory (FORMATS.md §4): entities, types and relations.

>>> inv = Inventory.from_dict({"entities": [{"id": "smf-1", "type": "smf", "peers": ["upf-1"]},
...                                          {"id": "upf-1", "type": "upf"}]})
>>> inv.type_of("smf-1"), inv.type_of("upf-9")
('smf', '')
>>> inv.neighbours("upf-1")
{'smf-1'}
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from noc_assistant.errors import InventoryError

__all__ = ["Entity", "Inventory", "load_inventory"]


class Partner(BaseModel):
    model_config = ConfigDict(extra="allow")

    plmn: str = Field(pattern=r"^\d{3}-\d{2,3}$")
    s8_peer: str | None = None
    noc_email: str | None = None


class Entity(BaseModel):
    """One inventory entity; unknown keys are kept (``extra="allow"``)."""

    model_config = ConfigDict(extra="allow")

    id: str = Field(min_length=1)
    type: str = Field(min_length=1)
    peers: list[str] = Field(default_factory=list)
    partners: list[Partner] = Field(default_factory=list)
    gpus: list[str] = Field(default_factory=list)


class Inventory(BaseModel):
    model_config = ConfigDict(extra="allow")

    entities: list[Entity]

    @classmethod
    def from_dict(cls, data: Any, source: str = "inventory") -> Inventory:
        try:
            inv = cls.model_validate(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            loc = ".".join(str(p) for p in first["loc"])
            raise InventoryError(f"field {loc}: {first['msg']}", source=source) from None
        seen: set[str] = set()
        for ent in inv.entities:
            if ent.id in seen:
                raise InventoryError(f"duplicate entity id {ent.id!r}", source=source)
            seen.add(ent.id)
        return inv

    def by_id(self) -> dict[str, Entity]:
        return {e.id: e for e in self.entities}

    def type_of(self, entity: str) -> str:
        for e in self.entities:
            if e.id == entity:
                return e.type
        return ""

    def neighbours(self, entity: str) -> set[str]:
        """Entities directly related to ``entity`` through ``peers`` (either direction)."""
        out: set[str] = set()
        for e in self.entities:
            if e.id == entity:
                out.update(e.peers)
            elif entity in e.peers:
                out.add(e.id)
        return out


def load_inventory(path: Path) -> Inventory:
    """Read and validate an inventory file; :class:`InventoryError` names file and field."""
    try:
        data = orjson.loads(path.read_bytes())
    except OSError as exc:
        raise InventoryError(f"cannot read: {exc.strerror}", source=str(path)) from None
    except orjson.JSONDecodeError as exc:
        raise InventoryError(f"not valid JSON: {exc}", source=str(path)) from None
    return Inventory.from_dict(data, source=str(path))
