"""Inventory → topology: dependencies, relatedness, upstream candidates, partners."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from knowledge.pack import load_pack
from knowledge.topology import Topology, TopologyError, load_inventory

INVENTORY = {
    "entities": [
        {"id": "amf-07", "type": "amf"},
        {"id": "smf-12", "type": "smf", "peers": ["upf-21", "upf-22"]},
        {"id": "upf-21", "type": "upf"},
        {"id": "upf-22", "type": "upf"},
        {"id": "upf-23", "type": "upf"},
        {"id": "nrf-01", "type": "nrf"},
        {"id": "udm-01", "type": "udm"},
        {
            "id": "sepp-02",
            "type": "sepp",
            "vendor": "x",
            "partners": [{"plmn": "262-01", "s8_peer": "10.250.1.1", "noc_email": "noc@a.example"}],
        },
        {"id": "gpu-srv-1", "type": "gpu_server", "gpus": ["0", "1"]},
    ]
}


@pytest.fixture(scope="module")
def topo() -> Topology:
    return Topology.from_inventory(INVENTORY, load_pack())


def test_peers_narrow_type_dependencies(topo: Topology) -> None:
    assert topo.upstream_candidates("smf-12", "upf") == ["upf-21", "upf-22"]
    assert "udm-01" in topo.depends_on("smf-12")
    assert topo.dependents("upf-21") == ("smf-12",)
    assert topo.dependents("upf-23") == ()


def test_related_groups_upf_with_its_smf(topo: Topology) -> None:
    assert topo.related("upf-21", "smf-12")
    assert not topo.related("upf-23", "smf-12")
    assert topo.related("amf-07", "udm-01")
    assert topo.related("amf-07", "upf-21", hops=2)


def test_entities_without_metrics_are_suspects(topo: Topology) -> None:
    assert topo.common_upstream(["amf-07", "smf-12"], "nrf") == ["nrf-01"]
    assert topo.upstream_candidates("amf-07", "udm") == ["udm-01"]


def test_partners_by_plmn_and_s8_peer(topo: Topology) -> None:
    link = topo.partner_for_plmn("26201")
    assert link is not None and link.sepp == "sepp-02" and link.noc_email == "noc@a.example"
    assert topo.partner_for_addr("10.250.1.1") == link
    assert topo.partner_for_plmn("99970") is None


def test_gpus_are_entities(topo: Topology) -> None:
    assert topo.type_of("gpu-srv-1/gpu0") == "gpu"
    assert "gpu-srv-1/gpu1" in topo.depends_on("gpu-srv-1")


def test_load_inventory_file_and_errors(tmp_path: Path) -> None:
    path = tmp_path / "inv.json"
    path.write_text(json.dumps(INVENTORY))
    assert load_inventory(path).type_of("upf-22") == "upf"
    path.write_text(json.dumps({"entities": [{"id": "x"}]}))
    with pytest.raises(TopologyError) as err:
        load_inventory(path)
    assert err.value.field == "entities.0.type"
    dup = {"entities": [{"id": "a", "type": "amf"}, {"id": "a", "type": "smf"}]}
    path.write_text(json.dumps(dup))
    with pytest.raises(TopologyError, match="duplicate entity id"):
        load_inventory(path)


def test_infer_without_inventory() -> None:
    topo = Topology.infer({"smf-1": "smf", "upf-1": "", "upf-2": "upf"})
    assert topo.type_of("upf-1") == "upf"
    assert topo.upstream_candidates("smf-1", "upf") == ["upf-1", "upf-2"]


def test_upstream_walks_are_kept_apart_from_callers_and_snapshots() -> None:
    """The walk is done once per question, but each caller gets its own list, and a snapshot
    (pickle) neither carries the walks nor misses them on restore, old snapshots included."""
    import pickle

    topo = Topology.from_inventory(INVENTORY, load_pack())
    first = topo.upstream_candidates("smf-12", "upf")
    first.append("upf-99")  # a caller that changes its list changes nothing kept
    assert topo.upstream_candidates("smf-12", "upf") == ["upf-21", "upf-22"]
    assert topo.upstream_candidates("smf-12", "upf", max_depth=1) == ["upf-21", "upf-22"]
    assert topo._upstream  # the walks are kept
    restored = pickle.loads(pickle.dumps(topo))
    assert restored._upstream == {}
    assert restored.upstream_candidates("smf-12") == topo.upstream_candidates("smf-12")
    old = dict(topo.__dict__)
    del old["_upstream"]  # a topology pickled before the walks were kept
    legacy = Topology.__new__(Topology)
    legacy.__setstate__(old)
    assert legacy.upstream_candidates("smf-12", "upf") == ["upf-21", "upf-22"]
    assert legacy == topo


def test_sites_come_from_the_inventory_and_gpus_take_their_servers() -> None:
    """``site`` (an extension of FORMATS.md §4): entities at two named sites are apart; an
    entity with no site may be anywhere; a GPU is at its server's site; an empty site is an
    error that names the field."""
    topo = Topology.from_inventory(
        {
            "entities": [
                {"id": "amf-1", "type": "amf", "site": "north"},
                {"id": "amf-2", "type": "amf", "site": "south"},
                {"id": "amf-3", "type": "amf"},
                {"id": "gpu-srv-1", "type": "gpu_server", "gpus": ["0"], "site": "south"},
            ]
        },
        load_pack(),
    )
    assert topo.site_of("amf-1") == "north" and topo.site_of("amf-3") is None
    assert topo.site_of("gpu-srv-1/gpu0") == "south"
    assert not topo.same_site("amf-1", "amf-2")
    assert topo.same_site("amf-2", "gpu-srv-1/gpu0") and topo.same_site("amf-1", "amf-3")
    with pytest.raises(TopologyError, match=r"entities\.0\.site"):
        Topology.from_inventory({"entities": [{"id": "a", "type": "amf", "site": ""}]})
