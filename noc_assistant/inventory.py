"""The operator's network inventory (docs/FORMATS.md §4), read into the pack's topology.

The knowledge pack owns what an inventory means (``knowledge.topology``); this module reads one:
its errors are :class:`~noc_assistant.errors.InventoryError` (exit 2, naming file and field).

>>> topo = topology_from_dict({"entities": [{"id": "smf-1", "type": "smf", "peers": ["upf-1"]},
...                                         {"id": "upf-1", "type": "upf"}]})
>>> topo.type_of("smf-1"), topo.related("upf-1", "smf-1")
('smf', True)
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from knowledge.pack import Pack
from knowledge.topology import Topology
from knowledge.topology import load_inventory as _load_inventory

__all__ = ["load_topology", "topology_from_dict"]


def topology_from_dict(
    data: Mapping[str, Any], pack: Pack | None = None, source: str = "inventory"
) -> Topology:
    """Topology of an inventory mapping (``{"entities": [...]}``)."""
    return Topology.from_inventory(data, pack, source=source)


def load_topology(path: Path, pack: Pack | None = None) -> Topology:
    """Read an inventory file; :class:`InventoryError` names the file and field."""
    return _load_inventory(path, pack)
