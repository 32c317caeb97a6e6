"""Contract tests of the telemetry simulator (docs/FORMATS.md §1, §2, §4) and its faults."""

from __future__ import annotations

import itertools
import json
import math
import re
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import typer
from pydantic import ValidationError
from typer.testing import CliRunner

from noc_assistant.cli.simulate import register
from noc_assistant.simulate import (
    FAULT_IDS,
    Scenario,
    ScenarioConfig,
    SimSample,
    build_scenario,
    write_scenario,
)
from noc_assistant.simulate.faults import EPC_FAULTS
from noc_assistant.simulate.network import EXPORTING_TYPES

RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|\+00:00)$")
TYPES = {"counter", "gauge", "histogram_bucket", "histogram_sum", "histogram_count"}
ENTITY_TYPES = {
    *("amf", "smf", "upf", "pcf", "nrf", "udm", "ausf", "nssf", "sepp"),
    *("mme", "sgw", "pgw", "hss", "gnb", "gpu_server"),
}
CORE = {"amf", "smf", "upf", "pcf"}
FAST = {"interval_s": 60.0}


def epoch(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


class Frame:
    """All values of a scenario as a (series × tick) array, with lookup helpers."""

    def __init__(self, sc: Scenario) -> None:
        self.sc = sc
        times, values = [], []
        for t, v, _ in sc.iter_chunks():
            times.append(t)
            values.append(v)
        self.t = np.concatenate(times)
        self.v = np.concatenate(values, axis=1)

    def rows(self, entity: str, metric: str, **labels: str) -> list[int]:
        return [
            i
            for i, s in enumerate(self.sc.series)
            if s.entity == entity
            and s.metric == metric
            and all(s.labels.get(k) == v for k, v in labels.items())
        ]

    def window(self, start: float, end: float) -> np.ndarray[Any, Any]:
        return (self.t >= start) & (self.t < end)

    def rate(self, w: np.ndarray[Any, Any], entity: str, metric: str, **labels: str) -> float:
        """Mean increase per tick over the window, summed over matching series."""
        total = 0.0
        for i in self.rows(entity, metric, **labels):
            x = self.v[i][w]
            x = x[~np.isnan(x)]
            d = np.diff(x)
            total += float(d[d >= 0].mean()) if len(d) else 0.0
        return total

    def mean(self, w: np.ndarray[Any, Any], entity: str, metric: str, **labels: str) -> float:
        vals = [float(np.nanmean(self.v[i][w])) for i in self.rows(entity, metric, **labels)]
        return float(np.nansum(vals))

    def max(self, w: np.ndarray[Any, Any], entity: str, metric: str, **labels: str) -> float:
        return max(float(np.nanmax(self.v[i][w])) for i in self.rows(entity, metric, **labels))


@pytest.fixture(scope="module")
def day() -> Scenario:
    return build_scenario(ScenarioConfig(days=1, faults="all", seed=7, **FAST))


@pytest.fixture(scope="module")
def day_frame(day: Scenario) -> Frame:
    return Frame(day)


@pytest.fixture(scope="module")
def day_files(day: Scenario, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_scenario(day, tmp_path_factory.mktemp("day"))


def read_lines(path: Path) -> Iterator[dict[str, Any]]:
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            yield json.loads(line)


# -- docs/FORMATS.md contracts ---------------------------------------------------------------------


def test_telemetry_lines_follow_formats(day_files: dict[str, Path], day: Scenario) -> None:
    types = {e["id"]: e["type"] for e in day.inventory["entities"]}
    last = -1.0
    n = 0
    for rec in read_lines(day_files["telemetry"]):
        n += 1
        assert set(rec) == {"ts", "metric", "labels", "value", "type"}
        assert RFC3339.match(rec["ts"])
        ts = epoch(rec["ts"])
        assert ts >= last
        last = ts
        assert re.match(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$", rec["metric"])
        assert rec["type"] in TYPES
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in rec["labels"].items())
        inst = rec["labels"]["instance"]
        assert inst in types
        if types[inst] in CORE:
            assert rec["labels"]["nf"] == types[inst]
        assert rec["value"] is None or isinstance(rec["value"], float)
        if rec["type"].startswith("histogram_bucket"):
            assert "le" in rec["labels"]
    assert n == day.n_series * day.n_ticks
    assert 150 <= day.n_series <= 320


def test_inventory_follows_formats(day_files: dict[str, Path]) -> None:
    inv = json.loads(day_files["inventory"].read_text())
    ents = inv["entities"]
    ids = [e["id"] for e in ents]
    assert len(ids) == len(set(ids))
    assert all(e["type"] in ENTITY_TYPES for e in ents)
    count = {t: sum(e["type"] == t for e in ents) for t in ENTITY_TYPES}
    assert count["amf"] >= 2 and count["smf"] >= 2 and count["upf"] >= 3
    for t in ("pcf", "nrf", "udm", "ausf", "sepp"):
        assert count[t] >= 1
    assert count["gpu_server"] == 2
    for e in ents:
        if e["type"] == "smf":
            assert e["peers"] and all(p in ids for p in e["peers"])
        if e["type"] == "sepp":
            assert len(e["partners"]) == 2
            for p in e["partners"]:
                assert re.match(r"^\d{3}-\d{2,3}$", p["plmn"])
                assert p["noc_email"].endswith(".example")
                assert re.match(r"^\d+\.\d+\.\d+\.\d+$", p["s8_peer"])
        if e["type"] == "gpu_server":
            assert e["gpus"] == ["0", "1"]


def test_labels_follow_formats(day_files: dict[str, Path], day: Scenario) -> None:
    labels = json.loads(day_files["labels"].read_text())
    ents = {e["id"]: e for e in day.inventory["entities"]}
    partners = {p["plmn"] for e in ents.values() for p in e.get("partners", [])}
    for inc in labels["incidents"]:
        assert inc["root_cause"]["fault"] in FAULT_IDS
        assert inc["root_cause"]["entity"] in ents
        assert inc["root_cause"]["entity"] in inc["affected"]
        assert all(a in ents for a in inc["affected"])
        assert epoch(inc["start"]) < epoch(inc["end"])
        if inc["root_cause"]["fault"] == "roaming_partner_outage":
            assert inc["partner"] in partners
        else:
            assert inc["partner"] is None
    for w in labels["no_fault"]:
        assert epoch(w["start"]) < epoch(w["end"]) and w["note"]
    for m in labels["maintenance"]:
        assert m["entity"] in ents and epoch(m["start"]) < epoch(m["end"])
    n_nf, n_inc = len(labels["no_fault"]), len(labels["incidents"])
    assert n_nf / (n_nf + n_inc) >= 0.2
    ids = [x["id"] for x in labels["incidents"] + labels["no_fault"]]
    assert len(ids) == len(set(ids))


def test_all_faults_once_per_day_without_overlap(day: Scenario) -> None:
    incs = day.labels["incidents"]
    assert {i["root_cause"]["fault"] for i in incs} == set(FAULT_IDS)
    spans = sorted((epoch(i["start"]), epoch(i["end"])) for i in incs)
    for a, b in spans:
        assert 10 * 60 <= b - a <= 45 * 60
    for (_, end), (nxt, _) in itertools.pairwise(spans):
        assert nxt - end >= 30 * 60
    windows = [(epoch(w["start"]), epoch(w["end"])) for w in day.labels["no_fault"]]
    windows += [(epoch(m["start"]), epoch(m["end"])) for m in day.labels["maintenance"]]
    for a, b in spans:
        assert all(b <= c or d <= a for c, d in windows)


def test_multi_day_repeats_every_fault() -> None:
    sc = build_scenario(ScenarioConfig(days=3, faults="all", seed=11, interval_s=300))
    faults = [i["root_cause"]["fault"] for i in sc.labels["incidents"]]
    assert all(faults.count(f) >= 3 for f in FAULT_IDS)


def test_a_larger_network_spreads_faults_over_more_entities() -> None:
    """``scale`` builds a larger network (scale × 2 AMFs, SMFs and GPU servers, one UPF more
    than SMFs): every labelled root and affected entity is in the inventory, faults land on
    the new entities too, and each NF carries a typical NF's traffic."""
    sc = build_scenario(ScenarioConfig(days=3, faults="all", seed=11, interval_s=300, scale=2))
    ids = {e["id"] for e in sc.inventory["entities"]}
    counts = {t: sum(1 for e in sc.inventory["entities"] if e["type"] == t) for t in CORE}
    assert counts == {"amf": 4, "smf": 4, "upf": 5, "pcf": 1}
    incs = sc.labels["incidents"]
    roots = {i["root_cause"]["entity"] for i in incs}
    assert {i["root_cause"]["fault"] for i in incs} == set(FAULT_IDS)
    assert all(set(i["affected"]) <= ids for i in incs) and roots <= ids | {""}
    assert {"amf-3", "amf-4", "smf-3", "smf-4", "gpu-srv-3", "gpu-srv-4"} & roots
    small = build_scenario(ScenarioConfig(days=0.05, faults="none", seed=11, interval_s=300))
    big = build_scenario(ScenarioConfig(days=0.05, faults="none", seed=11, interval_s=300, scale=2))

    def gnb_ue(sc: Scenario) -> float:
        f = Frame(sc)
        rows = [i for i, s in enumerate(sc.series) if s.metric == "ran_ue"]
        return float(np.mean(f.v[rows]))

    assert 0.8 < gnb_ue(big) / gnb_ue(small) < 1.25
    with pytest.raises(ValidationError, match="scale"):
        ScenarioConfig(scale=9)


# -- determinism -------------------------------------------------------------------------------


def _files(tmp: Path, **kw: Any) -> dict[str, bytes]:
    cfg = ScenarioConfig(days=0.1, faults="udm_timeout,nccl_hang", defects=True, **FAST, **kw)
    paths = write_scenario(build_scenario(cfg), tmp)
    return {k: p.read_bytes() for k, p in paths.items()}


def test_same_seed_gives_identical_files(tmp_path: Path) -> None:
    a = _files(tmp_path / "a", seed=5)
    b = _files(tmp_path / "b", seed=5)
    c = _files(tmp_path / "c", seed=6)
    assert a == b
    assert a["telemetry"] != c["telemetry"]


def test_iter_samples_matches_file(tmp_path: Path) -> None:
    sc = build_scenario(ScenarioConfig(days=0.02, faults="none", seed=2, defects=True, **FAST))
    paths = write_scenario(sc, tmp_path)
    from_file = [
        (epoch(r["ts"]), r["metric"], r["labels"], r["value"], r["type"])
        for r in read_lines(paths["telemetry"])
    ]
    assert [tuple(s) for s in sc.iter_samples()] == from_file


def test_sglang_servers_export_sglang_names_and_the_core_is_unchanged() -> None:
    """``serving_engine`` changes what the GPU servers' engines export (SGLang's names and
    kinds, research/telemetry.md §2.2), nothing else: the packet core's values and the labels
    are the same as with vLLM, and ``mixed`` alternates the engines."""
    cfg = {"days": 0.05, "faults": "kv_cache_saturation", "seed": 4, **FAST}
    runs = {e: build_scenario(ScenarioConfig(serving_engine=e, **cfg)) for e in ("vllm", "sglang")}
    mixed = build_scenario(ScenarioConfig(serving_engine="mixed", **cfg))

    def engine_metrics(sc: Scenario, server: str) -> set[str]:
        return {s.metric.split(":")[0] for s in sc.series if s.entity == server and ":" in s.metric}

    assert engine_metrics(runs["vllm"], "gpu-srv-1") == {"vllm"}
    assert engine_metrics(runs["sglang"], "gpu-srv-1") == {"sglang"}
    assert engine_metrics(mixed, "gpu-srv-1") == {"vllm"}
    assert engine_metrics(mixed, "gpu-srv-2") == {"sglang"}
    sg = {s.metric for s in runs["sglang"].series}
    for name in ("sglang:token_usage", "sglang:num_retracted_requests_total"):
        assert name in sg
    assert runs["sglang"].labels == runs["vllm"].labels
    assert runs["sglang"].inventory == runs["vllm"].inventory
    frames = {e: Frame(sc) for e, sc in runs.items()}

    def core(e: str) -> dict[tuple[str, str], list[float]]:
        f = frames[e]
        return {
            (s.entity, s.key): f.v[i].tolist()
            for i, s in enumerate(f.sc.series)
            if not s.entity.startswith("gpu")
        }

    assert core("sglang") == core("vllm")
    with pytest.raises(ValidationError, match="serving_engine"):
        ScenarioConfig(serving_engine="tgi", **cfg)  # type: ignore[arg-type]


def test_scrape_phases_stamp_each_entity_late(tmp_path: Path) -> None:
    """Each entity is stamped a fixed whole number of seconds after the tick (as Prometheus
    spreads its targets) and reports the interval that ends at its stamp: before any fault or
    event the values are the tick's, around them they differ; the file is in time order and
    equals ``iter_samples``."""
    kw: dict[str, Any] = {"days": 0.05, "faults": "udm_timeout", "seed": 3, "defects": True}
    plain = build_scenario(ScenarioConfig(**kw, **FAST))
    phased = build_scenario(ScenarioConfig(**kw, scrape_phases=True, **FAST))
    first_effect = min(e.t0 for e in phased.schedule.effects)
    offsets: dict[str, set[float]] = {}
    moved, later = [], {}
    for s in phased.iter_samples():
        off = (s.ts - plain.start) % 60.0
        offsets.setdefault(s.labels["instance"], set()).add(off)
        key = (s.ts - off, s.metric, tuple(sorted(s.labels.items())))
        if s.ts < first_effect:
            moved.append((*key, s.value))
        else:
            later[key] = s.value
    assert all(len(o) == 1 and 0 <= min(o) < 60 for o in offsets.values())
    assert len({min(o) for o in offsets.values()}) > 5  # the entities are spread
    same, changed = [], 0
    for x in plain.iter_samples():
        key = (x.ts, x.metric, tuple(sorted(x.labels.items())))
        if key in later:
            changed += later[key] != x.value
        elif x.ts < first_effect - 60.0:
            same.append((*key, x.value))
    assert same and set(same) <= set(moved)
    assert changed > 0  # the fault is seen at each entity's own stamp
    stamps = [s.ts for s in phased.iter_samples()]
    assert stamps == sorted(stamps)
    paths = write_scenario(phased, tmp_path)
    from_file = [
        (epoch(r["ts"]), r["metric"], r["labels"], r["value"], r["type"])
        for r in read_lines(paths["telemetry"])
    ]
    assert [tuple(x) for x in phased.iter_samples()] == from_file


def test_defects_are_gaps_and_duplicates(tmp_path: Path) -> None:
    sc = build_scenario(ScenarioConfig(days=0.05, faults="none", seed=4, defects=True, **FAST))
    lines = write_scenario(sc, tmp_path)["telemetry"].read_text().splitlines()
    recs = [json.loads(x) for x in lines]
    assert any(r["value"] is None for r in recs)
    assert len(lines) > len(set(lines))
    assert len(lines) == sc.n_series * sc.n_ticks + 2


def test_unknown_fault_is_rejected() -> None:
    with pytest.raises(ValidationError):
        ScenarioConfig(faults="udm_timeout,disk_full")
    assert ScenarioConfig(faults="none").fault_ids == ()
    assert ScenarioConfig(faults=["nccl_hang"]).fault_ids == ("nccl_hang",)


# -- counters and restarts ---------------------------------------------------------------------


def _restart_ticks(sc: Scenario, t: np.ndarray[Any, Any]) -> dict[str, set[int]]:
    out: dict[str, set[int]] = {}
    for r in sc.labels["restarts"]:
        out.setdefault(r["entity"], set()).add(int(np.searchsorted(t, epoch(r["ts"]))))
    return out


def test_counters_monotone_except_at_labelled_restarts(day_frame: Frame) -> None:
    f = day_frame
    restarts = _restart_ticks(f.sc, f.t)
    assert restarts
    for i, s in enumerate(f.sc.series):
        if s.type == "gauge":
            continue
        x = f.v[i]
        ok = np.flatnonzero(~np.isnan(x))
        drops = ok[1:][np.diff(x[ok]) < 0]
        for k in drops:
            prev = ok[ok < k][-1]
            assert any(prev < r <= k for r in restarts.get(s.entity, ())), (s, k)


def test_benign_restart_resets_counters(day_frame: Frame) -> None:
    f = day_frame
    clean = [r for r in f.sc.labels["restarts"] if r["reason"] == "clean restart"]
    assert clean
    for r in clean:
        k = int(np.searchsorted(f.t, epoch(r["ts"])))
        counters = [
            i for i, s in enumerate(f.sc.series) if s.entity == r["entity"] and s.type == "counter"
        ]
        assert all(f.v[i][k] <= f.v[i][k - 1] for i in counters if f.v[i][k - 1] > 0)
        (ps,) = f.rows(r["entity"], "process_start_time_seconds")
        assert f.v[ps][k] == epoch(r["ts"]) > f.v[ps][k - 1]


# -- fault injection ---------------------------------------------------------------------------

Check = Callable[[Frame, Frame, np.ndarray[Any, Any], dict[str, Any]], bool]


def _root(inc: dict[str, Any]) -> str:
    return str(inc["root_cause"]["entity"])


def _sbi(status: str, svc: str | None = None) -> dict[str, str]:
    lab = {"status_code": status}
    if svc:
        lab["target_service_name"] = svc
    return lab


def _plmn(inc: dict[str, Any]) -> str:
    return str(inc["partner"]).replace("-", "")


OUT = "free5gc_sbi_outbound_request_total"
REJECT = "fivegs_amffunction_rm_reginitfail"
PDU_FAIL = "fivegs_smffunction_sm_pdusessioncreationfail"
CHECKS: dict[str, Check] = {
    "n2_sctp_loss": lambda a, b, w, i: (
        a.mean(w, _root(i), "gnb") < 0.8 * b.mean(w, _root(i), "gnb")
    ),
    "pfcp_association_loss": lambda a, b, w, i: (
        a.mean(w, _root(i), "pfcp_peers_active") < 0.5 * b.mean(w, _root(i), "pfcp_peers_active")
        and sum(
            a.rate(w, s, "fivegs_smffunction_sm_n4sessionestabfail", cause="72")
            for s in i["affected"]
            if s.startswith("smf")
        )
        > 1
    ),
    "registration_storm": lambda a, b, w, i: (
        a.rate(w, _root(i), "fivegs_amffunction_rm_reginitreq")
        > 3 * b.rate(w, _root(i), "fivegs_amffunction_rm_reginitreq")
    ),
    "nrf_discovery_failure": lambda a, b, w, i: (
        a.rate(w, "amf-1", OUT, **_sbi("503", "nnrf-disc")) > 1
        and a.rate(w, "smf-1", OUT, **_sbi("200", "nudm-sdm"))
        < 0.8 * b.rate(w, "smf-1", OUT, **_sbi("200", "nudm-sdm"))
    ),
    "upf_gtpu_drop": lambda a, b, w, i: (
        a.rate(w, _root(i), "node_network_receive_drop_total")
        > 100 * max(b.rate(w, _root(i), "node_network_receive_drop_total"), 1)
    ),
    "udm_timeout": lambda a, b, w, i: (
        a.rate(w, "amf-1", OUT, **_sbi("504", "nudm-sdm")) > 1
        and a.rate(w, "amf-1", OUT, **_sbi("0")) == 0
        # timed-out answers are rejected with 5GMM cause 90, failed sessions counted as 504
        and a.rate(w, "amf-1", REJECT, cause="90") > 1 + 10 * b.rate(w, "amf-1", REJECT, cause="90")
        and a.rate(w, "smf-1", PDU_FAIL, cause="504")
        > 1 + 10 * b.rate(w, "smf-1", PDU_FAIL, cause="504")
    ),
    "sbi_cert_expiry": lambda a, b, w, i: (
        sum(a.rate(w, e, OUT, **_sbi("0")) for e in i["affected"] if e[:3] in ("amf", "smf")) > 10
    ),
    "roaming_partner_outage": lambda a, b, w, i: (
        a.rate(w, "amf-1", "fivegs_amffunction_rm_reginitsucc", plmnid=_plmn(i))
        < 0.5 * b.rate(w, "amf-1", "fivegs_amffunction_rm_reginitsucc", plmnid=_plmn(i))
        and a.rate(w, "amf-1", "fivegs_amffunction_rm_reginitsucc", plmnid="99970")
        == b.rate(w, "amf-1", "fivegs_amffunction_rm_reginitsucc", plmnid="99970")
    ),
    "kv_cache_saturation": lambda a, b, w, i: (
        a.max(w, _root(i), "vllm:kv_cache_usage_perc") >= 0.95
        and a.rate(w, _root(i), "vllm:num_preemptions_total") > 0
    ),
    "gpu_thermal_throttle": lambda a, b, w, i: (
        a.mean(w, _root(i), "DCGM_FI_DEV_SM_CLOCK")
        < 0.9 * b.mean(w, _root(i), "DCGM_FI_DEV_SM_CLOCK")
    ),
    "gpu_xid_error": lambda a, b, w, i: a.max(w, _root(i), "DCGM_FI_DEV_XID_ERRORS") == 79,
    "spec_accept_collapse": lambda a, b, w, i: (
        a.rate(w, _root(i), "vllm:spec_decode_num_accepted_tokens_total")
        / a.rate(w, _root(i), "vllm:spec_decode_num_draft_tokens_total")
        < 0.5
        * b.rate(w, _root(i), "vllm:spec_decode_num_accepted_tokens_total")
        / b.rate(w, _root(i), "vllm:spec_decode_num_draft_tokens_total")
    ),
    "long_context_kv_cost": lambda a, b, w, i: (
        a.rate(w, _root(i), "vllm:request_prompt_tokens_sum")
        / a.rate(w, _root(i), "vllm:request_prompt_tokens_count")
        > 5
        * b.rate(w, _root(i), "vllm:request_prompt_tokens_sum")
        / b.rate(w, _root(i), "vllm:request_prompt_tokens_count")
    ),
    "compressed_weights_high_concurrency": lambda a, b, w, i: (
        a.mean(w, _root(i), "vllm:num_requests_running")
        > 2 * b.mean(w, _root(i), "vllm:num_requests_running")
        and a.max(w, _root(i), "vllm:kv_cache_usage_perc") < 0.95
    ),
    "nccl_hang": lambda a, b, w, i: (
        a.rate(w & (a.t < epoch(i["start"]) + 300), _root(i), "vllm:generation_tokens_total") == 0
        and a.mean(w & (a.t < epoch(i["start"]) + 300), _root(i), "vllm:num_requests_running") > 0
    ),
}


@pytest.fixture(scope="module")
def baseline() -> Frame:
    return Frame(build_scenario(ScenarioConfig(days=0.3, faults="none", seed=21, **FAST)))


def test_checks_cover_every_fault() -> None:
    assert set(CHECKS) == set(FAULT_IDS)


@pytest.mark.parametrize("fault", FAULT_IDS)
def test_fault_changes_affected_telemetry(fault: str, baseline: Frame) -> None:
    sc = build_scenario(ScenarioConfig(days=0.3, faults=[fault], seed=21, **FAST))
    (inc,) = sc.labels["incidents"]
    assert inc["root_cause"]["fault"] == fault
    a = Frame(sc)
    start, end = epoch(inc["start"]), epoch(inc["end"])
    before = a.t < start
    # common random numbers: nothing differs before the fault starts
    assert np.array_equal(a.v[:, before], baseline.v[:, before], equal_nan=True)
    w = a.window(start, end)
    types = {e["id"]: e["type"] for e in sc.inventory["entities"]}
    for ent in inc["affected"]:
        if types[ent] not in EXPORTING_TYPES:
            continue
        rows = [i for i, s in enumerate(sc.series) if s.entity == ent]
        diff = ~np.isclose(a.v[rows][:, w], baseline.v[rows][:, w], equal_nan=True)
        assert diff.any(), f"{fault}: no change on {ent}"
    assert CHECKS[fault](a, baseline, w, inc), fault


def test_without_sbi_metrics_only_the_sbi_series_are_gone() -> None:
    """``sbi_metrics=False`` is a plain Open5GS deployment: no ``free5gc_sbi_*`` series, every
    other series the same value for value."""
    cfg = {"days": 0.05, "faults": "udm_timeout", "seed": 4, **FAST}
    full, bare = (build_scenario(ScenarioConfig(sbi_metrics=m, **cfg)) for m in (True, False))
    assert any(s.metric.startswith("free5gc_sbi_") for s in full.series)
    assert not any(s.metric.startswith("free5gc_sbi_") for s in bare.series)
    ff, fb = Frame(full), Frame(bare)
    index = {(s.entity, s.key): i for i, s in enumerate(full.series)}
    for i, s in enumerate(bare.series):
        assert np.array_equal(fb.v[i], ff.v[index[(s.entity, s.key)]], equal_nan=True), s.key
    assert bare.labels == full.labels


# -- a converged core (EPC beside the 5G core) --------------------------------------------------

EPC_CHECKS: dict[str, Check] = {
    "n2_sctp_loss": lambda a, b, w, i: (
        a.mean(w, _root(i), "enb") < 0.8 * b.mean(w, _root(i), "enb")
        and a.mean(w, _root(i), "mme_session") < 0.9 * b.mean(w, _root(i), "mme_session")
    ),
    "registration_storm": lambda a, b, w, i: (
        a.rate(w, _root(i), "dns_query_total") > 3 * b.rate(w, _root(i), "dns_query_total")
        and a.rate(w, "hss-1", "s6a_rx_air") > 1.5 * b.rate(w, "hss-1", "s6a_rx_air")
    ),
    "nrf_discovery_failure": lambda a, b, w, i: all(
        a.rate(w, m, "dns_query_failed") > 0.2 * a.rate(w, m, "dns_query_total")
        and b.rate(w, m, "dns_query_failed") < 0.01 * b.rate(w, m, "dns_query_total")
        for m in ("mme-1", "mme-2")
    ),
    "udm_timeout": lambda a, b, w, i: (
        a.rate(w, _root(i), "s6a_rx_air_error") > 0.1 * a.rate(w, _root(i), "s6a_rx_air")
        and b.rate(w, _root(i), "s6a_rx_air_error") < 0.01 * b.rate(w, _root(i), "s6a_rx_air")
        # the MMEs retry what failed
        and a.rate(w, _root(i), "s6a_rx_air") > b.rate(w, _root(i), "s6a_rx_air")
    ),
}
CONVERGED = {"seed": 21, "core": "converged", **FAST}


@pytest.fixture(scope="module")
def converged_baseline() -> Frame:
    return Frame(build_scenario(ScenarioConfig(days=0.3, faults="none", **CONVERGED)))


def test_converged_core_adds_an_epc_and_leaves_the_5g_core_alone() -> None:
    """``core="converged"`` adds an EPC control plane: MMEs and an HSS exporting what the
    Open5GS MME and HSS export (research/telemetry.md §1.2), an SGW and a DNS that export
    nothing; every 5G-core and GPU series is the same, value for value, as without it."""
    cfg = {"days": 0.05, "faults": "none", "seed": 4, **FAST}
    five, conv = (build_scenario(ScenarioConfig(core=c, **cfg)) for c in ("5gc", "converged"))
    types = {e["id"]: e["type"] for e in conv.inventory["entities"]}
    assert {k: v for k, v in types.items() if v in ("mme", "hss", "sgw", "dns")} == {
        "mme-1": "mme",
        "mme-2": "mme",
        "hss-1": "hss",
        "sgw-1": "sgw",
        "dns-1": "dns",
    }
    metrics = {(s.entity, s.metric) for s in conv.series if s.entity in ("mme-1", "hss-1")}
    for m in ("enb", "enb_ue", "mme_session", "dns_query_total", "dns_query_failed"):
        assert ("mme-1", m) in metrics
    for m in ("s6a_rx_air", "s6a_rx_air_error", "s6a_rx_ulr", "s6a_rx_ulr_error", "hss_imsi"):
        assert ("hss-1", m) in metrics
    assert not any(s.entity in ("sgw-1", "dns-1") for s in conv.series)
    fa, fc = Frame(five), Frame(conv)
    index = {(s.entity, s.key): i for i, s in enumerate(conv.series)}
    for i, s in enumerate(five.series):
        assert np.array_equal(fa.v[i], fc.v[index[(s.entity, s.key)]], equal_nan=True), s.key
    with pytest.raises(ValidationError, match="core"):
        ScenarioConfig(core="4g", **cfg)  # type: ignore[arg-type]


@pytest.mark.parametrize("fault", sorted(EPC_CHECKS))
def test_epc_form_of_a_fault_changes_the_epc_telemetry(
    fault: str, converged_baseline: Frame
) -> None:
    """In a converged core a fault class with an EPC form may happen there (seed 21 draws
    the EPC form of each): S1 associations lost on an MME, an attach storm, failing
    gateway-selection DNS, an HSS answering S6a with errors."""
    assert set(EPC_FAULTS) == set(EPC_CHECKS)
    sc = build_scenario(ScenarioConfig(days=0.3, faults=[fault], **CONVERGED))
    (inc,) = sc.labels["incidents"]
    types = {e["id"]: e["type"] for e in sc.inventory["entities"]}
    assert types[_root(inc)] == EPC_FAULTS[fault].root_types[0]
    a, b = Frame(sc), converged_baseline
    start, end = epoch(inc["start"]), epoch(inc["end"])
    assert np.array_equal(a.v[:, a.t < start], b.v[:, b.t < start], equal_nan=True)
    w = a.window(start, end)
    for ent in inc["affected"]:
        if types[ent] in EXPORTING_TYPES:
            rows = [i for i, s in enumerate(sc.series) if s.entity == ent]
            assert (~np.isclose(a.v[rows][:, w], b.v[rows][:, w], equal_nan=True)).any(), ent
    assert EPC_CHECKS[fault](a, b, w, inc), fault


@pytest.mark.parametrize("interval", [1800.0, 3600.0])
def test_at_long_pm_periods_every_labelled_fault_is_in_the_data(interval: float) -> None:
    """At 30- and 60-min granularity periods a 10-45 min fault snapped to the grid had no
    tick at all: labelled from start to start, and nowhere in the data (recall 0.37 at 60 min).
    Each fault now spans one period at least, and the period that holds it shows it."""
    faulty = build_scenario(ScenarioConfig(days=3, faults="all", seed=21, interval_s=interval))
    clean = build_scenario(ScenarioConfig(days=3, faults="none", seed=21, interval_s=interval))
    a, quiet = Frame(faulty), Frame(clean)
    types = {e["id"]: e["type"] for e in faulty.inventory["entities"]}
    incidents = faulty.labels["incidents"]
    assert len({i["root_cause"]["fault"] for i in incidents}) >= 10
    for inc in incidents:
        start, end = epoch(inc["start"]), epoch(inc["end"])
        assert end - start >= interval, inc["id"]
        w = a.window(start, end + 1.0)  # a sample reports the period that ends at its stamp
        shown = [
            ent
            for ent in inc["affected"]
            if types[ent] in EXPORTING_TYPES
            and not np.allclose(
                a.v[[i for i, s in enumerate(faulty.series) if s.entity == ent]][:, w],
                quiet.v[[i for i, s in enumerate(clean.series) if s.entity == ent]][:, w],
                equal_nan=True,
            )
        ]
        assert shown, f"{inc['id']} ({inc['root_cause']['fault']}): not in the data"


@pytest.mark.parametrize("interval", [1800.0, 3600.0])
def test_at_long_pm_periods_healthy_windows_keep_a_period_from_faults(interval: float) -> None:
    """A 15-min margin snapped to a 60-min grid was no margin: healthy windows began on a
    fault's last tick, its readings fell in them, and 57 % of them were scored as wrongly
    diagnosed. Every healthy window, and the first fault, keeps one period clear."""
    sc = build_scenario(ScenarioConfig(days=4, faults="all", seed=21, interval_s=interval))
    faults = [(epoch(i["start"]), epoch(i["end"])) for i in sc.labels["incidents"]]
    healthy = [(epoch(w["start"]), epoch(w["end"])) for w in sc.labels["no_fault"]]
    assert faults and healthy
    assert min(a for a, _ in faults) - sc.start >= 3 * interval
    for a, b in healthy:
        # no reading in the window reports a period of a fault (a reading at tick t reports
        # the period that ends at t)
        first = sc.start + math.ceil((a - sc.start) / interval) * interval
        last = sc.start + math.floor((b - sc.start) / interval) * interval
        assert all(last <= fa or first - interval >= fb for fa, fb in faults), (a, b)
    for (_, b), (a, _) in itertools.pairwise(sorted(faults)):
        assert a - b >= interval


# -- CLI -----------------------------------------------------------------------------------------


def test_cli_writes_files(tmp_path: Path) -> None:
    app = typer.Typer()
    register(app)

    @app.callback()
    def _root_cb() -> None:
        """Root."""

    out = tmp_path / "sim"
    res = CliRunner().invoke(
        app,
        [
            "simulate",
            "--days",
            "0.05",
            "--faults",
            "none",
            "--seed",
            "3",
            "--interval",
            "60",
            "--out",
            str(out),
        ],
    )
    assert res.exit_code == 0, res.output
    assert {p.name for p in out.iterdir()} == {"telemetry.jsonl", "labels.json", "inventory.json"}


@pytest.mark.parametrize("interval", [15.0, 900.0])
def test_a_maintenance_restart_stays_inside_its_window(interval: float) -> None:
    """The silence of a restart for maintenance lies inside the declared window: at 15-min
    periods it began two intervals before the window's middle, before a 45-min window opened,
    and the engine's silence paged as a false alert."""
    from noc_assistant.simulate.network import build_network
    from noc_assistant.simulate.schedule import make_schedule

    n_ticks = int(10 * 86400 / interval)
    sched = make_schedule(
        build_network(53), start=0.0, n_ticks=n_ticks, interval_s=interval, seed=53,
        fault_ids=FAULT_IDS,
    )  # fmt: skip
    assert sched.maintenance
    for m in sched.maintenance:
        gaps = [g for g in sched.gaps if g.entity == m.entity and m.start <= g.t1 <= m.end]
        assert gaps and all(m.start <= g.t0 < g.t1 <= m.end for g in gaps)


def test_traffic_follows_the_zones_wall_clock_through_a_change_of_clocks(tmp_path: Path) -> None:
    """With ``tz`` the subscribers' day is Berlin's: the busiest hour (19:00-20:00 local) is
    18:00 UTC on 28 March 2026 and, the clocks gone forward that night, 17:00 UTC on the 29th;
    without, 19:00 UTC both days. The inventory gives every entity the zone."""
    cfg = {"days": 2, "faults": "none", "seed": 4, "interval_s": 300.0, "start": "2026-03-28"}
    peaks = {}
    for tz in (None, "Europe/Berlin"):
        sc = build_scenario(ScenarioConfig(tz=tz, **cfg))  # type: ignore[arg-type]
        frame = Frame(sc)
        rows = frame.rows("amf-1", "fivegs_amffunction_rm_reginitreq")
        counts = sum(np.diff(frame.v[i]) for i in rows)  # over the PLMNs
        per_hour = counts[: 47 * 12].reshape(-1, 12).sum(axis=1)  # 47 whole hours
        peaks[tz] = [int(np.argmax(per_hour[:23])), int(np.argmax(per_hour[24:47])) + 24]
        zones = {e.get("tz") for e in sc.inventory["entities"]}
        assert zones == {tz}
    assert peaks == {None: [19, 43], "Europe/Berlin": [18, 41]}
    with pytest.raises(ValidationError, match="unknown time zone"):
        ScenarioConfig(tz="Europe/Berlyn")


def test_a_weekend_lowers_the_days_traffic_and_leaves_the_nights() -> None:
    """``weekend=0.7``: Saturday's registrations at noon are ~70 % of Friday's, its small hours
    as Friday's; without it the two days are alike."""
    cfg = {"days": 2, "faults": "none", "seed": 4, "interval_s": 300.0, "start": "2026-03-27"}
    ratios = {}
    for weekend in (1.0, 0.7):
        frame = Frame(build_scenario(ScenarioConfig(weekend=weekend, **cfg)))  # type: ignore[arg-type]
        rows = frame.rows("amf-1", "fivegs_amffunction_rm_reginitreq")
        per_hour = sum(np.diff(frame.v[i]) for i in rows)[: 47 * 12].reshape(-1, 12).sum(axis=1)
        ratios[weekend] = (per_hour[24 + 11 : 24 + 14].sum() / per_hour[11:14].sum(),
                           per_hour[24 + 2 : 24 + 4].sum() / per_hour[2:4].sum())  # fmt: skip
    assert all(0.93 < r < 1.07 for r in ratios[1.0]), ratios
    noon, night = ratios[0.7]
    assert 0.63 < noon < 0.77 and 0.9 < night < 1.1, ratios


@pytest.mark.parametrize(
    "config",
    [
        ScenarioConfig(days=0.05, seed=3, **FAST),
        ScenarioConfig(days=0.05, seed=5, defects=True, scrape_phases=True, **FAST),
        ScenarioConfig(days=0.05, seed=3, vary=11, defects=True),
    ],
    ids=["plain", "defects-phases", "vary"],
)
def test_columns_are_the_samples_in_their_order(config: ScenarioConfig) -> None:
    """``iter_columns`` (what ``noc demo`` feeds) gives every sample of ``iter_samples``, in
    its order, with its time to the bit, repeats and scrape jitter included."""
    sc = build_scenario(config)
    cols = list(sc.iter_columns())
    ts = np.concatenate([c.ts for c in cols]).tolist()
    series = np.concatenate([c.series for c in cols]).tolist()
    values = np.concatenate([c.value for c in cols]).tolist()
    meta = [(s.metric, dict(s.labels), s.type) for s in sc.series]
    got = [
        SimSample(t, *meta[i][:2], None if v != v else v, meta[i][2])
        for t, i, v in zip(ts, series, values, strict=True)
    ]
    samples = list(sc.iter_samples())
    assert got == samples
    assert not config.defects or (
        any(s.value is None for s in samples)
        and len({(s.ts, s.metric, *s.labels.items()) for s in samples}) < len(samples)
    )
