"""The default knowledge pack loads, every id resolves, every rule's fixtures pass."""

from __future__ import annotations

import pytest

from knowledge.kpis import load_kpis
from knowledge.pack import REQUIRED_FAULTS, Pack, load_pack
from knowledge.rules import run_fixtures


@pytest.fixture(scope="module")
def pack() -> Pack:
    return load_pack()


def test_every_fault_class_has_a_rule(pack: Pack) -> None:
    assert set(pack.faults) >= REQUIRED_FAULTS
    covered = {r.fault for r in pack.rules.values()}
    assert REQUIRED_FAULTS - {"no_fault"} <= covered


def test_every_cross_reference_resolves(pack: Pack) -> None:
    refs = set(pack.references)
    for kpi in pack.kpis.values():
        assert set(kpi.references) <= refs, kpi.id
        assert set(kpi.entity_types) <= set(pack.nf_types), kpi.id
    for fault in pack.faults.values():
        assert set(fault.references) <= refs, fault.id
    for rule in pack.rules.values():
        assert rule.fault in pack.faults
        assert set(rule.references) <= refs, rule.id
        for cond in (rule.anchor, *rule.require, *rule.support, *rule.refute):
            assert set(cond.kpis) <= set(pack.kpis), rule.id
    for nf in pack.nf_types.values():
        assert set(nf.depends_on) <= set(pack.nf_types)


def test_kpi_files_cite_defined_references(pack: Pack) -> None:
    cited = {r for k in load_kpis().values() for r in k.references}
    assert cited <= set(pack.references)


def test_references_carry_spec_numbers(pack: Pack) -> None:
    assert pack.references["ts-29-244"].citation == "3GPP TS 29.244 §6.2.2"
    assert pack.references["rfc-9260"].spec == "IETF RFC 9260"
    assert pack.references["gsma-ir-88"].spec == "GSMA IR.88"


def test_every_rule_has_positive_and_negative_fixtures(pack: Pack) -> None:
    for rule in pack.rules.values():
        assert any(t.expect is not None for t in rule.tests), rule.id
        assert any(t.expect is None for t in rule.tests), rule.id


@pytest.mark.parametrize("rule_id", sorted(load_pack().rules))
def test_rule_fixtures_pass(pack: Pack, rule_id: str) -> None:
    results = run_fixtures(pack, [rule_id])
    assert results
    failed = [f"{r.name}: {r.detail}" for r in results if not r.passed]
    assert not failed, failed


def test_guardrail_policies_loaded(pack: Pack) -> None:
    ids = {m.id for m in pack.masking}
    assert {"supi-imsi", "gpsi-msisdn", "pei-imei"} <= ids
    assert pack.grounding.require_evidence_ids
    assert pack.injection is not None and "email" in pack.injection.untrusted_sources


def test_spec_break_even_follows_verify_share(pack: Pack) -> None:
    share = pack.param("spec_verify_share")
    assert pack.param("spec_break_even_accept_length") == pytest.approx(1 / share, abs=0.01)


def test_shares_of_events_are_declared_proportions(pack: Pack) -> None:
    """A ``ratio`` KPI with a support is a share of events (binomial noise); latencies and
    per-event means with a support are not."""
    k = pack.kpis
    assert k["amf-registration-success"].proportion
    assert k["sbi-udm-error-share"].proportion
    assert k["amf-registration-success-by-plmn"].proportion
    assert not k["sbi-udm-latency"].proportion  # seconds, backed by a count
    assert not k["gpu-spec-accept-length"].proportion  # tokens per draft
    assert not k["amf-registration-attempts"].proportion  # no support


class _Exporter:
    """A selector source holding a few series by name: gauges and counter increases
    (``increase`` over a 60 s window), histograms as ``<name>_sum``/``<name>_count``."""

    def __init__(self, values: dict[str, float]) -> None:
        self.values = values

    def select(self, fn: str, metric: str, matchers: object) -> float | None:
        if fn == "hist_mean":
            s, c = self.values.get(metric + "_sum"), self.values.get(metric + "_count")
            return None if s is None or not c else s / c
        v = self.values.get(metric)
        if v is None:
            return None
        return v / 60.0 if fn == "rate" else v


@pytest.mark.parametrize(
    ("kpi", "series", "expected"),
    [
        # vLLM (V1 names), its V0 names, SGLang: the same KPI from whichever is exported
        ("gpu-kv-cache-usage", {"vllm:kv_cache_usage_perc": 0.97}, 0.97),
        ("gpu-kv-cache-usage", {"vllm:gpu_cache_usage_perc": 0.96}, 0.96),
        ("gpu-kv-cache-usage", {"sglang:token_usage": 0.95}, 0.95),
        (
            "gpu-itl-mean",
            {"vllm:time_per_output_token_seconds_sum": 3.0,
             "vllm:time_per_output_token_seconds_count": 100.0},
            0.03,
        ),
        (
            "gpu-prefix-cache-hit",
            {"vllm:gpu_prefix_cache_hits_total": 30.0,
             "vllm:gpu_prefix_cache_queries_total": 120.0},
            0.25,
        ),
        (
            "gpu-prefix-cache-hit",
            {"sglang:cached_tokens_total": 60.0, "sglang:prompt_tokens_total": 120.0},
            0.5,
        ),
        ("gpu-preemption-rate", {"sglang:num_retracted_requests_total": 30.0}, 0.5),
        ("gpu-spec-accept-length", {"sglang:spec_accept_length": 2.4}, 2.4),
        (
            "gpu-spec-accept-length",
            {"vllm:spec_decode_num_accepted_tokens_total": 140.0,
             "vllm:spec_decode_num_drafts_total": 100.0},
            2.4,
        ),
        ("gpu-requests-waiting", {"sglang:num_queue_reqs": 7.0}, 7.0),
        # the current vLLM name wins where a version exports both
        (
            "gpu-kv-cache-usage",
            {"vllm:kv_cache_usage_perc": 0.5, "vllm:gpu_cache_usage_perc": 0.9},
            0.5,
        ),
    ],
)  # fmt: skip
def test_engine_kpis_read_whichever_exporter_runs(
    pack: Pack, kpi: str, series: dict[str, float], expected: float
) -> None:
    value = pack.kpis[kpi].parsed.evaluate(_Exporter(series))
    assert value is not None and abs(value - expected) < 1e-9
    assert pack.kpis[kpi].parsed.evaluate(_Exporter({"tgi:queue_size": 3.0})) is None
