"""Broken packs fail with errors naming the file and the field; overlays extend the default."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from knowledge.pack import PackError, default_pack_dir, load_pack
from noc_assistant.cli import run

_DATA = [
    "pack.yaml",
    "faults.yaml",
    "topology.yaml",
    "references",
    "kpis",
    "rules",
    "guardrails",
    "fixtures",
    "measurements",
]


def _copy_pack(tmp_path: Path) -> Path:
    dest = tmp_path / "pack"
    dest.mkdir()
    src = default_pack_dir()
    for name in _DATA:
        if (src / name).is_dir():
            shutil.copytree(src / name, dest / name)
        else:
            shutil.copy(src / name, dest / name)
    return dest


def _edit(path: Path, change) -> None:  # type: ignore[no-untyped-def]
    data = yaml.safe_load(path.read_text())
    change(data)
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def test_copy_of_default_pack_loads(tmp_path: Path) -> None:
    assert load_pack(_copy_pack(tmp_path)).meta.name == "noc-default"


def test_unknown_reference_id(tmp_path: Path) -> None:
    root = _copy_pack(tmp_path)
    _edit(
        root / "rules" / "packet_core.yaml",
        lambda d: d["rules"][1]["references"].append("ts-99-999"),
    )
    with pytest.raises(PackError) as err:
        load_pack(root)
    assert err.value.file is not None and err.value.file.endswith("packet_core.yaml")
    assert err.value.field == "rules.1.references.2"
    assert "ts-99-999" in str(err.value)


def test_bad_kpi_formula(tmp_path: Path) -> None:
    root = _copy_pack(tmp_path)
    _edit(
        root / "kpis" / "gpu_serving.yaml",
        lambda d: d["kpis"][0].update(formula='open("/etc/passwd")'),
    )
    with pytest.raises(PackError) as err:
        load_pack(root)
    assert err.value.file is not None and err.value.file.endswith("gpu_serving.yaml")
    assert err.value.field == "kpis.0.formula"
    assert "unknown function 'open'" in str(err.value)


def test_duplicate_id(tmp_path: Path) -> None:
    root = _copy_pack(tmp_path)
    _edit(
        root / "references" / "other.yaml",
        lambda d: d["references"].append(dict(d["references"][0])),
    )
    with pytest.raises(PackError) as err:
        load_pack(root)
    assert "duplicate reference id 'gsma-ir-88'" in str(err.value)
    assert err.value.file is not None and err.value.file.endswith("other.yaml")


def test_unknown_field(tmp_path: Path) -> None:
    root = _copy_pack(tmp_path)
    _edit(root / "rules" / "gpu_serving.yaml", lambda d: d["rules"][2].update(severity="high"))
    with pytest.raises(PackError) as err:
        load_pack(root)
    assert err.value.field == "rules.2.severity"
    assert "unknown field" in str(err.value)


def test_acts_as_names_known_plain_types(tmp_path: Path) -> None:
    root = _copy_pack(tmp_path)

    def pgw(d: dict, roles: list[str]) -> None:  # type: ignore[type-arg]
        next(t for t in d["nf_types"] if t["id"] == "pgw")["acts_as"] = roles

    _edit(root / "topology.yaml", lambda d: pgw(d, ["smf", "ggsn"]))
    with pytest.raises(PackError) as err:
        load_pack(root)
    assert err.value.file is not None and err.value.file.endswith("topology.yaml")
    assert (err.value.field or "").endswith(".acts_as.1") and "unknown NF type 'ggsn'" in str(
        err.value
    )
    _edit(root / "topology.yaml", lambda d: pgw(d, ["pgw"]))
    with pytest.raises(PackError, match="'pgw' is not a plain role"):
        load_pack(root)


def test_unknown_kpi_in_rule(tmp_path: Path) -> None:
    root = _copy_pack(tmp_path)
    _edit(
        root / "rules" / "gpu_serving.yaml",
        lambda d: d["rules"][0]["anchor"].update(kpis=["gpu-nonexistent"]),
    )
    with pytest.raises(PackError) as err:
        load_pack(root)
    assert err.value.field == "rules.0.anchor.kpis.0"


def test_rule_without_negative_fixture(tmp_path: Path) -> None:
    root = _copy_pack(tmp_path)
    _edit(
        root / "rules" / "gpu_serving.yaml",
        lambda d: d["rules"][0].update(tests=[t for t in d["rules"][0]["tests"] if "expect" in t]),
    )
    with pytest.raises(PackError) as err:
        load_pack(root)
    assert err.value.field == "rules.0.tests"


def test_cli_validate_exit_codes(tmp_path: Path) -> None:
    assert run(["pack", "validate"]) == 0
    root = _copy_pack(tmp_path)
    _edit(root / "faults.yaml", lambda d: d["faults"][0]["references"].append("nope"))
    assert run(["pack", "validate", str(root)]) == 2


def test_cli_test_and_show() -> None:
    assert run(["pack", "test"]) == 0
    assert run(["pack", "show"]) == 0


def _overlay(tmp_path: Path) -> Path:
    root = tmp_path / "operator"
    (root / "kpis").mkdir(parents=True)
    (root / "pack.yaml").write_text(
        "name: acme-noc\nversion: 1.2.0\nextends: default\nscope: [acme]\n"
        "params: {spec_break_even_accept_length: 1.5}\n"
    )
    (root / "operator.yaml").write_text(
        "operator: acme\nhome_plmns: ['999-70']\n"
        "naming: [{pattern: '^core-amf', type: amf}]\n"
        "partners:\n"
        "  - {plmn: '262-01', name: Partner A, sepp: sepp-x, noc_email: noc@a.example}\n"
    )
    (root / "kpis" / "acme.yaml").write_text(
        "kpis:\n"
        "  - id: amf-registration-success\n"
        "    title: RSR with a larger support floor\n"
        "    entity_types: [amf]\n"
        '    formula: increase("fivegs_amffunction_rm_reginitsucc") / '
        'increase("fivegs_amffunction_rm_reginitreq")\n'
        '    support: increase("fivegs_amffunction_rm_reginitreq")\n'
        "    min_support: 200\n"
        "    bad_direction: down\n"
        "    references: [ts-28-554]\n"
    )
    return root


def test_overlay_extends_and_overrides(tmp_path: Path) -> None:
    pack = load_pack(_overlay(tmp_path))
    assert pack.meta.name == "acme-noc"
    assert pack.param("spec_break_even_accept_length") == 1.5
    assert pack.kpis["amf-registration-success"].min_support == 200
    assert pack.partners[0].noc_email == "noc@a.example"
    assert "n2-association-loss" in pack.rules
    assert run(["pack", "validate", str(tmp_path / "operator")]) == 0


def test_overlay_disabling_unknown_rule(tmp_path: Path) -> None:
    root = _overlay(tmp_path)
    with (root / "operator.yaml").open("a") as fh:
        fh.write("disable_rules: [no-such-rule]\n")
    with pytest.raises(PackError) as err:
        load_pack(root)
    assert err.value.field == "disable_rules.0"


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        (lambda d: d["measurements"][0].update(nf_type="enodeb"), "nf_type", "unknown NF type"),
        (
            lambda d: d["measurements"][1].update(measurement="VS.GnbNbr"),
            "measurement",
            "already measurement 'vs-amf-gnb'",
        ),
        (
            lambda d: d["measurements"][0].update(measurement="VS.GnbNbrMean"),
            "measurement",
            "without its Mean/Max/Min",
        ),
        (
            lambda d: d["measurements"][0]["references"].append("ts-99-999"),
            "references.3",
            "ts-99-999",
        ),
        (
            lambda d: d["measurements"][-1].update(sub_counters=["instance", "method"]),
            "sub_counters",
            "'instance' is not a label",
        ),
    ],
)
def test_broken_measurement(tmp_path: Path, change, field: str, words: str) -> None:  # type: ignore[no-untyped-def]
    """A vendor-specific PM measurement on an unknown NF type, named twice for one type, named
    with its aggregation, citing an unknown reference, or whose sub-counters would overwrite
    the entity's label: the file and the field are named."""
    root = _copy_pack(tmp_path)
    _edit(root / "measurements" / "open5gs.yaml", change)
    with pytest.raises(PackError) as err:
        load_pack(root)
    assert err.value.file is not None and err.value.file.endswith("open5gs.yaml")
    assert err.value.field is not None and err.value.field.endswith(field), err.value
    assert words in str(err.value)
