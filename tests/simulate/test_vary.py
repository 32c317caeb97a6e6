"""`noc simulate --vary`: seeded network draws, and the plain simulator left as it was."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from noc_assistant.simulate import (
    FAULT_IDS,
    Scenario,
    ScenarioConfig,
    build_scenario,
    write_scenario,
)
from noc_assistant.simulate.faults import EPC_FAULTS, FAULTS, KNOBS, load_catalogue
from noc_assistant.simulate.vary import draw_vary
from noc_assistant.timefmt import rfc3339

#: sha256 over telemetry, labels and inventory, computed before the catalogue moved to data
#: files and --vary existed: the plain simulator's output must not change
DEFAULT_HASHES: dict[str, tuple[dict[str, Any], str]] = {
    "1 d at 900 s, seed 23": (
        {"days": 1.0, "seed": 23, "interval_s": 900.0},
        "51234c22ee20428aa84285ab213494e4294a3fa9afcc66cb08c94db557a53d6c",
    ),
    "0.5 d at 300 s, seed 5, converged, mixed, phases, defects, Berlin, weekend": (
        {
            "days": 0.5,
            "seed": 5,
            "interval_s": 300.0,
            "core": "converged",
            "serving_engine": "mixed",
            "scrape_phases": True,
            "defects": True,
            "tz": "Europe/Berlin",
            "weekend": 0.7,
        },
        "bb3a40848c389e4b8f6dd62d38235f0033c0b79c086d28df9f97af0efcd7e23c",
    ),
}


def _digest(paths: dict[str, Path]) -> str:
    h = hashlib.sha256()
    for key in ("telemetry", "labels", "inventory"):
        h.update(paths[key].read_bytes())
    return h.hexdigest()


@pytest.mark.parametrize("name", sorted(DEFAULT_HASHES))
def test_simulate_default_output_unchanged(tmp_path: Path, name: str) -> None:
    kwargs, expected = DEFAULT_HASHES[name]
    paths = write_scenario(build_scenario(ScenarioConfig(**kwargs)), tmp_path)
    assert _digest(paths) == expected


def test_simulate_catalogue_is_data() -> None:
    doc = load_catalogue()
    assert tuple(doc["faults"]) == FAULT_IDS
    for spec in [*FAULTS.values(), *EPC_FAULTS.values()]:
        assert spec.domain in ("packet_core", "gpu_serving")
        assert spec.effects
        for eff in spec.effects:
            assert eff.knob in KNOBS
            assert eff.value[0] <= eff.value[1]
    assert {f for f, s in FAULTS.items() if s.domain == "gpu_serving"} == {
        f for f, s in FAULTS.items() if s.root_types == ("gpu_server",)
    }


def test_simulate_vary_same_seed_identical_other_seed_differs(tmp_path: Path) -> None:
    cfg = ScenarioConfig(days=0.25, seed=3, interval_s=300.0, vary=1000)
    a = write_scenario(build_scenario(cfg), tmp_path / "a")
    b = write_scenario(build_scenario(cfg), tmp_path / "b")
    assert _digest(a) == _digest(b)
    assert draw_vary(1000) == draw_vary(1000)
    draws = [draw_vary(s).summary() for s in range(2000, 2010)]
    for field in ("noise_family", "core", "serving_engine", "tz", "scale", "holiday_offsets"):
        assert len({json.dumps(d[field]) for d in draws}) > 1, field
    assert all(draws[0][k] != draws[1][k] for k in ("noise_scale", "core_floor", "weekend"))
    c = write_scenario(build_scenario(cfg.model_copy(update={"vary": 1001})), tmp_path / "c")
    assert _digest(c) != _digest(a)


def test_simulate_vary_replaces_network_options() -> None:
    draw = draw_vary(2002)
    sc = build_scenario(ScenarioConfig(days=0.1, interval_s=60.0, vary=2002, scale=3))
    assert sc.config.scale == draw.scale
    assert sc.config.core == draw.core and sc.config.tz == draw.tz
    assert {e["type"] for e in sc.inventory["entities"]} >= {"amf", "smf", "gpu_server"}


@pytest.mark.parametrize("vary", [1000, 1001, 1005, 1007])
def test_simulate_vary_every_fault_class_labelled(vary: int) -> None:
    sc = build_scenario(ScenarioConfig(days=2.0, seed=vary, interval_s=60.0, vary=vary))
    faults = {i["root_cause"]["fault"] for i in sc.labels["incidents"]}
    assert faults == set(FAULT_IDS)
    assert len(sc.labels["incidents"]) >= 2 * len(FAULT_IDS)


def _series_index(sc: Scenario, metric: str, entity: str, **labels: str) -> int:
    for i, s in enumerate(sc.series):
        if (
            s.metric == metric
            and s.entity == entity
            and all(s.labels.get(k) == v for k, v in labels.items())
        ):
            return i
    raise KeyError(metric)


def _values(sc: Scenario) -> np.ndarray:
    return np.concatenate([v for _, v, _ in sc.iter_chunks()], axis=1)


def test_simulate_vary_sparse_counters_and_benign_surge_unlabelled() -> None:
    sc = build_scenario(ScenarioConfig(days=1.0, seed=1003, interval_s=60.0, vary=1003))
    values = _values(sc)
    # sparse event counters: the preemption counter of a server stands still most intervals
    # and moves by one now and then
    srv = sc.network.gpu_servers[0]
    metric = (
        "sglang:num_retracted_requests_total"
        if srv.engine == "sglang"
        else "vllm:num_preemptions_total"
    )
    row = values[_series_index(sc, metric, srv.id)]
    inc = np.diff(row[~np.isnan(row)])
    inc = inc[inc >= 0]  # not across a reset
    assert np.mean(inc == 0) > 0.7
    assert np.any(inc == 1)
    # a flash crowd on every AMF at once: more attempts, healthy ratios, no incident label
    assert sc.schedule.benign_events
    a, b, note = sc.schedule.benign_events[0]
    assert "healthy" in note
    for inc_label in sc.labels["incidents"]:
        assert not (inc_label["start"] < rfc3339(b) and rfc3339(a) < inc_label["end"])
    times = sc.start + np.arange(sc.n_ticks) * sc.interval_s
    inside = (times > a + 300) & (times <= b)
    before = (times > a - 3600) & (times <= a - 1800)
    home = next(
        s.labels["plmnid"] for s in sc.series if s.metric == "fivegs_amffunction_rm_reginitreq"
    )
    for amf in [e.id for e in sc.network.by_type("amf")]:
        req = values[_series_index(sc, "fivegs_amffunction_rm_reginitreq", amf, plmnid=home)]
        ok = values[_series_index(sc, "fivegs_amffunction_rm_reginitsucc", amf, plmnid=home)]
        d_req, d_ok = np.diff(req, prepend=np.nan), np.diff(ok, prepend=np.nan)
        good = inside & ~np.isnan(d_req) & (d_req >= 0)
        assert np.nansum(d_ok[good]) / np.nansum(d_req[good]) > 0.95
        rate_in = np.nanmean(d_req[good])
        rate_before = np.nanmean(d_req[before & (d_req >= 0)])
        assert rate_in > 1.5 * rate_before


def test_simulate_vary_scrape_gaps_jitter_and_resets(tmp_path: Path) -> None:
    sc = build_scenario(ScenarioConfig(days=1.0, seed=1000, interval_s=60.0, vary=1000))
    assert any(r["reason"] == "counter reset" for r in sc.labels["restarts"])
    paths = write_scenario(sc, tmp_path)
    stamps = []
    nulls = 0
    with paths["telemetry"].open() as fh:
        for line in fh:
            doc = json.loads(line)
            stamps.append(datetime.fromisoformat(doc["ts"]).timestamp())
            nulls += doc["value"] is None
    assert nulls > 0
    assert any(s % 1 for s in stamps[:2000])  # jittered stamps
    assert stamps == sorted(stamps)  # still in time order
