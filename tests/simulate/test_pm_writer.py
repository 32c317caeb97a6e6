"""The simulator's PM files (``noc simulate --pm-out``): what they hold reads back through
``noc_assistant.ingest.pm`` as the simulator's own replay says, and a fault survives the path."""

from __future__ import annotations

import json
import math
import re
import xml.etree.ElementTree as ET
from collections import defaultdict
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from knowledge.pack import load_pack
from noc_assistant.cli import run as cli_run
from noc_assistant.errors import ConfigError
from noc_assistant.ingest import Quarantine
from noc_assistant.ingest.pm import metric_name, pm_points, read_pm_file
from noc_assistant.simulate import Scenario, ScenarioConfig, build_scenario, write_scenario
from noc_assistant.simulate.pm_writer import (
    FUNCTION_CLASSES,
    MEAS_TYPES,
    N3_MEAS_TYPES,
    check_pm_config,
    function_ldn,
    pm_plan,
    write_pm_files,
)

#: defects (missing samples), a maintenance silence of smf-1 and a clean restart of upf-3 (its
#: counters start again from 0, no sample lost) in one day of 5-min periods, EPC included
CONFIG = ScenarioConfig(
    days=1, faults="all", seed=3, interval_s=300, defects=True, core="converged"
)
#: the default pack's vendor-specific measurements: (NF type, measurement) → metric
VENDOR = load_pack().pm_names()
#: (NF type, metric) of the series written under a vendor-specific name
VENDOR_METRICS = {(nf, metric) for (nf, _), (metric, _) in VENDOR.items()}
FILE_NAME = re.compile(r"^A\d{8}\.\d{4}\+0000-\d{4}\+0000_(?P<ne>[a-z0-9-]+)\.xml$")
LDN = re.compile(r"^ManagedElement=(?P<ne>[^,]+),(?P<cls>[A-Z]+Function)=1$")

Key = tuple[str, str, tuple[tuple[str, str], ...]]
"""(entity, metric, labels other than ``instance``)"""


class Written(NamedTuple):
    sc: Scenario
    telemetry: Path
    pm_dir: Path
    paths: list[Path]


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Written:
    root = tmp_path_factory.mktemp("pm")
    sc = build_scenario(CONFIG)
    files = write_scenario(sc, root / "sim")
    paths = write_pm_files(sc, root / "pm")
    return Written(sc, files["telemetry"], root / "pm", paths)


def _replay(path: Path) -> Iterator[dict[str, Any]]:
    seen = set()
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            if line not in seen:  # the defects repeat a few lines
                seen.add(line)
                yield json.loads(line)


def _expected(written: Written) -> tuple[dict[Key, dict[float, float | None]], set[Key]]:
    """What the PM files should say, from the simulator's replay file: per NF series with a PM
    equivalent (a TS 28.552 one or the pack's vendor-specific one), the count of each period
    (increase from the sample before; the value itself after a fall, a restart) or the gauge's
    value; None where a sample is missing. Also the gauge keys."""
    types = {e["id"]: e["type"] for e in written.sc.inventory["entities"]}
    raw: dict[tuple[str, str, tuple[tuple[str, str], ...]], dict[float, float | None]] = {}
    kinds: dict[tuple[str, str, tuple[tuple[str, str], ...]], str] = {}
    for s in _replay(written.telemetry):
        ent = s["labels"]["instance"]
        metric, kept = s["metric"], {k: v for k, v in s["labels"].items() if k != "instance"}
        if kept.pop("device", None) == "n3" and metric in N3_MEAS_TYPES:
            # the N3 interface's counters: TS 28.552's measurements on the UPF's EP_N3
            metric = f"fivegs_ep_n3_{N3_MEAS_TYPES[metric].lower().replace('.', '_')}"
            kept["object"] = "EP_N3=1"
        elif "device" in s["labels"]:
            continue
        known = metric in MEAS_TYPES or (types[ent], metric) in VENDOR_METRICS
        known = known or metric.startswith("fivegs_ep_n3_")
        if not known or types[ent] not in FUNCTION_CLASSES or "addr" in kept:
            continue
        labels = tuple(sorted(kept.items()))
        key = (ent, metric, labels)
        ts = datetime_epoch(s["ts"])
        raw.setdefault(key, {})[ts] = s["value"]
        kinds[key] = s["type"]
    out: dict[Key, dict[float, float | None]] = defaultdict(dict)
    gauges: set[Key] = set()
    for (ent, metric, labels), series in raw.items():
        target = (ent, metric, labels)
        stamps = sorted(series)
        for i, ts in enumerate(stamps):
            cur = series[ts]
            if kinds[(ent, metric, labels)] == "gauge":
                gauges.add(target)
                value = cur
            else:
                value = _increase(series[stamps[i - 1]] if i else None, cur)
            out[target][ts] = value
    return dict(out), gauges


def _increase(prev: float | None, cur: float | None) -> float | None:
    """Prometheus' increase between two samples: the value itself after a fall (a reset)."""
    if cur is None or prev is None:
        return None
    return cur if cur < prev else cur - prev


def datetime_epoch(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _read_back(written: Written) -> tuple[dict[Key, dict[float, float | None]], Quarantine]:
    """The PM files through ``pm_points``: per series, the count of each period (from the
    cumulative counters: the increase, or the value where the sum starts again after a gap)
    or the gauge's value."""
    q = Quarantine()
    cumulative: dict[Key, dict[float, float | None]] = defaultdict(dict)
    kinds: dict[Key, str] = {}
    for p in pm_points(sorted(written.pm_dir.glob("*.xml")), q, vendor=VENDOR):
        labels = dict(p.labels)
        m = LDN.match(labels.pop("instance"))
        assert m is not None, p
        key = (m["ne"], p.metric, tuple(sorted(labels.items())))
        assert p.ts not in cumulative[key], key
        cumulative[key][p.ts] = p.value
        kinds[key] = p.type
    out: dict[Key, dict[float, float | None]] = {}
    for key, series in cumulative.items():
        stamps = sorted(series)
        if kinds[key] == "gauge":
            out[key] = dict(series)
            continue
        counts: dict[float, float | None] = {}
        for i, ts in enumerate(stamps):
            cur, prev = series[ts], series[stamps[i - 1]] if i else None
            counts[ts] = None if cur is None else (cur if prev is None else cur - prev)
        out[key] = counts
    return out, q


def test_round_trip_matches_the_replay(written: Written) -> None:
    expected, gauges = _expected(written)
    got, quarantine = _read_back(written)
    assert quarantine.count == 0
    assert set(got) == set(expected)
    n_values = n_gaps = 0
    for key, series in expected.items():
        assert set(got[key]) == set(series), key
        for ts, want in series.items():
            have = got[key][ts]
            if want is None:
                assert have is None, (key, ts)
                n_gaps += 1
            else:
                assert have is not None and math.isclose(have, want, rel_tol=1e-9), (key, ts)
                n_values += 1
    # every NF type and both kinds are there, the restart and the silences too
    assert {k[0].split("-")[0] for k in got} == {"amf", "smf", "upf", "pcf", "mme", "hss"}
    assert gauges and any(k not in gauges for k in expected)
    assert n_values > 10_000 and n_gaps > 0
    # labels: the sub-counters come back, the nf from the function class
    amf = {k[2] for k in got if k[0] == "amf-1" and k[1] == "fivegs_amffunction_rm_reginitfail"}
    assert amf == {(("cause", c), ("nf", "amf")) for c in ("111", "22", "90")}
    sessions = {k[2] for k in got if k[1] == "fivegs_smffunction_sm_sessionnbr"}
    assert sessions == {(("nf", "smf"), ("plmnid", "99970"), ("snssai", "1-000001"))}
    # the per-PLMN split, and the network functions' own gauges under the exporter's names
    plmns = {dict(k[2])["plmnid"] for k in got if k[1] == "fivegs_amffunction_rm_reginitreq"}
    assert len(plmns) == 1 + len(written.sc.network.partners) > 1
    own = {(k[0].split("-")[0], k[1]) for k in got if not k[1].startswith("fivegs_")}
    n3 = {k[1] for k in got if k[0] == "upf-1" and dict(k[2]).get("object") == "EP_N3=1"}
    assert n3 == {
        "fivegs_ep_n3_gtp_indatapktpacketlossn3upf",
        "fivegs_ep_n3_gtp_indatapktn3upf",
        "fivegs_ep_n3_gtp_indataoctn3upf",
        "fivegs_ep_n3_gtp_outdataoctn3upf",
    }
    assert own <= VENDOR_METRICS  # (the simulated UPF exports no pfcp_sessions_active)
    assert {("amf", "gnb"), ("smf", "pfcp_peers_active"), ("upf", "pfcp_peers_active")} <= own
    assert {("mme", "enb"), ("hss", "s6a_rx_air_error"), ("hss", "hss_imsi")} <= own


def test_counts_are_per_period_and_split_per_plmn(written: Written) -> None:
    """The raw file values: counts of one period, not running totals; the AMF's registrations
    split per PLMN (``.PLMN<mcc><mnc>``), the gNBs under their vendor-specific name."""
    sc = written.sc
    paths = [p for p in written.paths if p.name.endswith("_amf-2.xml")]
    assert len(paths) == sc.n_ticks
    values = {v.meas_type: v.value for v in read_pm_file(paths[100], Quarantine())}
    home = "RM.RegInitReq.PLMN99970"
    assert 0 < (values[home] or 0) < 300 * 100  # a 5-min count at < 100/s
    partners = [t for t in values if t.startswith("RM.RegInitReq.PLMN") and t != home]
    assert len(partners) == len(sc.network.partners)
    assert all(0 <= (values[t] or 0) < (values[home] or 0) for t in partners)
    assert "RM.RegInitReq" not in values  # no total beside the split: it would count twice
    assert (values["VS.GnbNbrMean"] or 0) > 0
    first = read_pm_file(paths[0], Quarantine())
    counters = [v for v in first if metric_name(v.ldn, v.meas_type)[2] != "gauge"]
    assert counters and all(v.value is None for v in counters)  # no sample before the first


def test_files_named_and_shaped_as_3gpp(written: Written) -> None:
    sc = written.sc
    types = {e["id"]: e["type"] for e in sc.inventory["entities"]}
    names = [p.name for p in written.paths]
    assert len(set(names)) == len(names) == len(list(written.pm_dir.iterdir()))
    ne = {m["ne"] for m in map(FILE_NAME.match, names) if m is not None}
    assert len(ne) > 0 and all(FILE_NAME.match(n) for n in names)
    assert {types[e] for e in ne} == {"amf", "smf", "upf", "pcf", "mme", "hss"}  # no GPU
    assert len(names) == len(ne) * sc.n_ticks
    assert names[0] == "A20261128.2355+0000-0000+0000_amf-1.xml"
    root = ET.parse(written.paths[0]).getroot()
    ns = "{http://www.3gpp.org/ftp/specs/archive/32_series/32.435#measCollec}"
    assert root.tag == f"{ns}measCollecFile"
    info = root.find(f"{ns}measData/{ns}measInfo")
    assert info is not None
    gran = info.find(f"{ns}granPeriod")
    assert gran is not None and gran.get("duration") == "PT300S"
    assert gran.get("endTime") == "2026-11-29T00:00:00+00:00"
    value = info.find(f"{ns}measValue")
    assert value is not None and value.get("measObjLdn") == "ManagedElement=amf-1,AMFFunction=1"


def test_only_network_functions_get_files() -> None:
    """GPU servers are not network functions; without the pack's vendor-specific names an MME
    and the HSS have nothing to write (their series have Open5GS' own names)."""
    sc = build_scenario(
        ScenarioConfig(days=0.01, faults="none", seed=3, interval_s=300, core="converged")
    )
    types = {e["id"]: e["type"] for e in sc.inventory["entities"]}
    assert {"mme", "hss", "gpu_server"} <= set(types.values())
    assert {types[m.entity] for m in pm_plan(sc)} == {"amf", "smf", "upf", "pcf", "mme", "hss"}
    assert {types[m.entity] for m in pm_plan(sc, vendor={})} == {"amf", "smf", "upf", "pcf"}
    sbi = [m.meas_type for m in pm_plan(sc) if m.entity == "amf-1" and "Sbi" in m.meas_type]
    assert (
        "VS.SbiClientReq.nausf-auth.POST.201" in sbi and "VS.SbiClientReq.nausf-auth.POST.0" in sbi
    )


def test_every_measurement_reads_back_under_the_simulators_name(written: Written) -> None:
    plan = pm_plan(written.sc)
    assert plan
    for m in plan:
        metric, labels, kind = metric_name(m.ldn, m.meas_type, VENDOR)
        (i,) = m.rows
        s = written.sc.series[i]
        if s.labels.get("device") == "n3":  # TS 28.552's N3 measurements, by their own names
            assert m.meas_type == N3_MEAS_TYPES[s.metric] and labels["object"] == "EP_N3=1"
            assert kind == "counter" and metric.startswith("fivegs_ep_n3_gtp_"), m
            continue
        assert metric == s.metric, m
        assert kind == ("gauge" if s.type == "gauge" else "counter"), m
        assert labels["instance"] == function_ldn(s.entity, s.labels["nf"])
        assert {k: v for k, v in s.labels.items() if k != "instance"} == {
            k: v for k, v in labels.items() if k != "instance"
        }


def test_a_missing_sample_is_nil_and_reads_back_as_a_gap(written: Written) -> None:
    """smf-1's maintenance silence: NIL in its files (never 0), gaps after ``pm_points``; the
    first period after it has its gauges again, and its counts stay NIL (no sample before)."""
    (window,) = written.sc.labels["maintenance"]
    assert window["entity"] == "smf-1"
    start, end = datetime_epoch(window["start"]), datetime_epoch(window["end"])
    files = sorted(p for p in written.paths if p.name.endswith("_smf-1.xml"))
    silent, after = [], None
    for p in files:
        values = read_pm_file(p, Quarantine())
        if start <= values[0].end <= end and all(v.value is None for v in values):
            silent.append(p)
        elif silent and after is None:
            after = values
    assert silent
    assert '<r p="1">NIL</r>' in silent[0].read_text(encoding="utf-8")
    assert after is not None
    kinds = {v.meas_type: metric_name(v.ldn, v.meas_type)[2] for v in after}
    assert all((v.value is None) == (kinds[v.meas_type] == "counter") for v in after)
    silent_ends = {read_pm_file(p, Quarantine())[0].end for p in silent}
    points = [
        p
        for p in pm_points(sorted(files), Quarantine())
        if p.ts in silent_ends and dict(p.labels)["instance"].startswith("ManagedElement=smf-1,")
    ]
    assert points and all(p.value is None for p in points)


def test_a_period_under_a_minute_is_refused(tmp_path: Path) -> None:
    short = ScenarioConfig(days=0.01, faults="none", seed=3, interval_s=15)
    with pytest.raises(ConfigError, match="at least 60 s"):
        check_pm_config(short)
    with pytest.raises(ConfigError, match="at least 60 s"):
        write_pm_files(build_scenario(short), tmp_path / "pm")
    with pytest.raises(ConfigError, match="whole seconds"):
        check_pm_config(ScenarioConfig(interval_s=90.5))
    with pytest.raises(ConfigError, match="scrape phases"):
        check_pm_config(ScenarioConfig(interval_s=300, scrape_phases=True))
    out = tmp_path / "sim"
    args = ["simulate", "--out", str(out), "--days", "0.01", "--interval", "15"]
    assert cli_run([*args, "--pm-out", str(tmp_path / "pm")]) == 2
    assert not (tmp_path / "pm").exists() and not out.exists()  # refused before simulating


def test_core_faults_are_diagnosed_from_the_pm_path(tmp_path: Path) -> None:
    """``noc simulate --pm-out`` → ``noc pm convert --inventory`` → ``noc eval run``: the
    packet-core faults are found and diagnosed from the PM files alone (seed 3, converged core:
    every class but the NRF's, 7 of 7, AC@1 1.0, one false alert). The PFCP association loss
    and the N2 SCTP loss need the pack's vendor-specific gauges (``VS.PfcpPeerNbrMean``,
    ``VS.GnbNbrMean``), the certificate expiry its SBI client counts with their sub-counter
    labels, the roaming partner's outage the per-PLMN sub-counters, the GTP-U drop the N3 loss
    measurement and its KPI, the HSS's timeouts the EPC's files. The inventory
    names each function (``ManagedElement=amf-1,AMFFunction=1``) by its id, as the labels do;
    without it the entities are LDNs no label names."""
    sim, pm_dir = tmp_path / "sim", tmp_path / "pm"
    faults = "registration_storm,udm_timeout,pfcp_association_loss,n2_sctp_loss"
    faults += ",roaming_partner_outage,upf_gtpu_drop,sbi_cert_expiry"
    args = ["simulate", "--out", str(sim), "--days", "1", "--interval", "300", "--seed", "3"]
    args += ["--core", "converged", "--faults", faults, "--pm-out", str(pm_dir)]
    assert cli_run(args) == 0
    replay = tmp_path / "pm.jsonl"
    convert = ["pm", "convert", str(pm_dir), "--out", str(replay)]
    assert cli_run([*convert, "--inventory", str(sim / "inventory.json")]) == 0
    assert not replay.with_name("pm.jsonl.quarantine.jsonl").exists()
    first = json.loads(replay.read_text().splitlines()[0])
    assert not first["labels"]["instance"].startswith("ManagedElement=")
    assert first["labels"]["ldn"].startswith(f"ManagedElement={first['labels']['instance']},")
    report = tmp_path / "report.json"
    args = ["eval", "run", "--telemetry", str(replay), "--labels", str(sim / "labels.json")]
    args += ["--inventory", str(sim / "inventory.json"), "--out", str(report)]
    assert cli_run(args) == 0
    rep = json.loads(report.read_text())
    labels = json.loads((sim / "labels.json").read_text())["incidents"]
    assert ("udm_timeout", "hss-1") in {
        (i["root_cause"]["fault"], i["root_cause"]["entity"]) for i in labels
    }
    assert rep["incidents_total"] == 7
    assert rep["incident_recall"] == 1.0, rep["missed_incidents"]
    assert rep["rca_ac1"] == 1.0, rep["rca_failures"]
    assert rep["false_positives"] <= 1, rep["false_alert_list"]


def test_vendor_measurements_come_from_the_pack(tmp_path: Path) -> None:
    """An operator's overlay renames a vendor-specific measurement (same id): the new name is
    read as the metric, and the default pack's name no longer maps."""
    overlay = tmp_path / "pack"
    (overlay / "measurements").mkdir(parents=True)
    (overlay / "pack.yaml").write_text(
        "name: acme\nversion: 0.1.0\nextends: default\n", encoding="utf-8"
    )
    (overlay / "measurements" / "acme.yaml").write_text(
        "measurements:\n  - id: vs-amf-gnb\n    nf_type: amf\n"
        "    measurement: VS.NgapGnbCount\n    metric: gnb\n    summary: gNBs on N2\n",
        encoding="utf-8",
    )
    pack = load_pack(overlay)
    assert pack.pm_names()[("amf", "VS.NgapGnbCount")] == ("gnb", ())
    assert ("amf", "VS.GnbNbr") not in pack.pm_names()
    ldn = "ManagedElement=amf-1,AMFFunction=1"
    assert metric_name(ldn, "VS.NgapGnbCountMean", pack.pm_names())[0] == "gnb"
    assert metric_name(ldn, "VS.GnbNbrMean", pack.pm_names())[0] == "fivegs_amffunction_vs_gnbnbr"
