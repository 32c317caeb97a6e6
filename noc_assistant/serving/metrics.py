"""Prometheus metrics of the built-in server (vLLM-compatible names plus ours).

vLLM names: ``vllm:num_requests_running``, ``vllm:num_requests_waiting``,
``vllm:prompt_tokens_total``, ``vllm:generation_tokens_total``,
``vllm:time_to_first_token_seconds``, ``vllm:e2e_request_latency_seconds``,
``vllm:request_success_total``, ``vllm:spec_decode_num_drafts_total``,
``vllm:spec_decode_num_draft_tokens_total``, ``vllm:spec_decode_num_accepted_tokens_total``,
``vllm:spec_decode_num_accepted_tokens_per_pos_total{position}``.

Ours: ``noc_spec_verify_rounds_total``, ``noc_round_stage_seconds_total{stage}``
(prefill / draft / verify), ``noc_energy_joules_total{part}`` (SIMPLE estimate: prefill /
kv_read / per_token), ``noc_energy_calibrated`` (1 when θ are fitted on this machine's
measured energy, 0 when the estimate is uncalibrated; label ``theta_source`` says which),
``noc_energy_measured_joules_total`` (what the energy meter counted, where one is readable) and
``noc_spec_mean_accept_length`` (τ of the last request).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from noc_assistant.serving.power import Calibration
from noc_assistant.serving.simple import EnergyBreakdown
from noc_assistant.serving.speculative import GenerationStats

__all__ = ["ServingMetrics"]


class ServingMetrics:
    """One registry per server; ``model`` is the ``model_name`` label."""

    def __init__(self, model: str) -> None:
        self.model = model
        self.registry = CollectorRegistry()
        r, lab = self.registry, ["model_name"]
        self.running = Gauge("vllm:num_requests_running", "Requests running", lab, registry=r)
        self.waiting = Gauge("vllm:num_requests_waiting", "Requests waiting", lab, registry=r)
        self.prompt_tokens = Counter("vllm:prompt_tokens", "Prompt tokens", lab, registry=r)
        self.generation_tokens = Counter(
            "vllm:generation_tokens", "Generated tokens", lab, registry=r
        )
        self.ttft = Histogram(
            "vllm:time_to_first_token_seconds",
            "Time to first token",
            lab,
            registry=r,
            buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
        )
        self.e2e = Histogram(
            "vllm:e2e_request_latency_seconds",
            "End-to-end request latency",
            lab,
            registry=r,
            buckets=(0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0),
        )
        self.success = Counter(
            "vllm:request_success", "Finished requests", [*lab, "finished_reason"], registry=r
        )
        self.drafts = Counter("vllm:spec_decode_num_drafts", "Draft rounds", lab, registry=r)
        self.draft_tokens = Counter(
            "vllm:spec_decode_num_draft_tokens", "Draft tokens", lab, registry=r
        )
        self.accepted = Counter(
            "vllm:spec_decode_num_accepted_tokens", "Accepted draft tokens", lab, registry=r
        )
        self.accepted_pos = Counter(
            "vllm:spec_decode_num_accepted_tokens_per_pos",
            "Accepted draft tokens per position",
            [*lab, "position"],
            registry=r,
        )
        self.rounds = Counter("noc_spec_verify_rounds", "Verify rounds", lab, registry=r)
        self.stage = Counter(
            "noc_round_stage_seconds", "Seconds spent per stage", [*lab, "stage"], registry=r
        )
        self.energy = Counter(
            "noc_energy_joules", "SIMPLE energy estimate", [*lab, "part"], registry=r
        )
        self.calibrated = Gauge(
            "noc_energy_calibrated",
            "1: the SIMPLE θ are fitted on energy measured here; 0: uncalibrated estimate",
            [*lab, "theta_source"],
            registry=r,
        )
        self.measured = Counter(
            "noc_energy_measured_joules", "Energy the machine's meter counted", lab, registry=r
        )
        self.tau = Gauge(
            "noc_spec_mean_accept_length",
            "Mean accepted length of the last request",
            lab,
            registry=r,
        )

    def record(
        self,
        st: GenerationStats,
        energy: EnergyBreakdown | None,
        calibration: Calibration | None = None,
    ) -> None:
        """Add one finished request (``calibration``: where its energy estimate's θ come
        from)."""
        m = self.model
        self.prompt_tokens.labels(m).inc(st.prompt_tokens)
        self.generation_tokens.labels(m).inc(st.output_tokens)
        self.ttft.labels(m).observe(st.ttft)
        self.e2e.labels(m).observe(st.time_total)
        self.success.labels(m, st.finish_reason).inc()
        self.drafts.labels(m).inc(st.rounds)
        self.rounds.labels(m).inc(st.rounds)
        self.draft_tokens.labels(m).inc(st.draft_tokens)
        self.accepted.labels(m).inc(st.accepted_tokens)
        for pos, n in enumerate(st.accepted_per_pos):
            self.accepted_pos.labels(m, str(pos)).inc(n)
        self.stage.labels(m, "prefill").inc(st.time_prefill)
        self.stage.labels(m, "draft").inc(st.time_draft)
        self.stage.labels(m, "verify").inc(st.time_verify)
        if st.rounds:
            self.tau.labels(m).set(st.mean_accept_length)
        if energy is not None:
            self.energy.labels(m, "prefill").inc(energy.prefill)
            self.energy.labels(m, "kv_read").inc(energy.kv_read)
            self.energy.labels(m, "per_token").inc(energy.per_token)
        if st.measured_j is not None:
            self.measured.labels(m).inc(st.measured_j)
        if calibration is not None:
            self.calibrated.clear()  # one series: the θ in force now
            self.calibrated.labels(m, calibration.source).set(float(calibration.calibrated))
