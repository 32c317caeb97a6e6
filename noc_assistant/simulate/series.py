"""The series the simulator exports, per entity type, with their exporter names and labels."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from noc_assistant.models import MetricType
from noc_assistant.simulate.faults import AMF_SERVICES, SMF_SERVICES
from noc_assistant.simulate.network import Network, plmn_digits

__all__ = [
    "AMF_REG_CAUSES",
    "SBI_OK",
    "SGLANG_ITL_LE",
    "SGLANG_TTFT_LE",
    "SMF_N4_CAUSES",
    "SMF_PDU_CAUSES",
    "SeriesDef",
    "build_series",
    "skey",
]

SNSSAI = "1-000001"
#: 5GMM causes of Registration Reject: 22 congestion, 90 payload not forwarded (an AUSF/UDM
#: answer timed out), 111 protocol error (the rest)
AMF_REG_CAUSES: tuple[str, ...] = ("22", "90", "111")
AMF_AUTH_CAUSES: tuple[str, ...] = ("20", "21")
SMF_PDU_CAUSES: tuple[str, ...] = ("403", "500", "504")
SMF_N4_CAUSES: tuple[str, ...] = ("72", "74", "77")
#: method and success status of each SBI service call (free5GC outbound labels)
SBI_OK: Mapping[str, tuple[str, str]] = {
    "nausf-auth": ("POST", "201"),
    "nudm-uecm": ("PUT", "204"),
    "nudm-sdm": ("GET", "200"),
    "nnrf-disc": ("GET", "200"),
    "npcf-smpolicycontrol": ("POST", "201"),
}
SBI_LATENCY_LE = "0.025"
TTFT_LE: tuple[str, ...] = ("0.5", "2.5", "+Inf")
ITL_LE: tuple[str, ...] = ("0.05", "0.1", "+Inf")
PROMPT_LE: tuple[str, ...] = ("1000", "10000", "50000", "+Inf")
#: SGLang's own bucket bounds (``python/sglang/srt/metrics/collector.py``, research/telemetry.md
#: §2.2), shortened to the ones a healthy or a faulty server reaches here
SGLANG_TTFT_LE: tuple[str, ...] = ("0.1", "0.2", "0.4", "0.6", "0.8", "1", "2", "4", "+Inf")
SGLANG_ITL_LE: tuple[str, ...] = ("0.01", "0.02", "0.04", "0.06", "0.08", "0.1", "0.25", "+Inf")
#: Open5GS MME gauges (``src/mme/metrics.c``): eNBs on S1, UE contexts on S1, PDN sessions
MME_GAUGES: tuple[str, ...] = ("enb", "enb_ue", "mme_session")
#: Open5GS HSS S6a receive counters rendered (``s6a_rx_<x>``)
HSS_S6A: tuple[str, ...] = ("air", "air_error", "ulr", "ulr_error", "pur")
DCGM_FIELDS: tuple[str, ...] = (
    "DCGM_FI_DEV_SM_CLOCK",
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_MEMORY_TEMP",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_XID_ERRORS",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
    "DCGM_FI_DEV_FB_USED",
)


def skey(metric: str, **labels: str) -> str:
    """Local key of a series within its entity (metric plus its non-identity labels).

    >>> skey("fivegs_amffunction_rm_reginitfail", cause="22")
    'fivegs_amffunction_rm_reginitfail{cause=22}'
    """
    if not labels:
        return metric
    inner = ",".join(f"{k}={v}" for k, v in labels.items())
    return f"{metric}{{{inner}}}"


@dataclass(frozen=True)
class SeriesDef:
    """One exported series: full labels for the file, ``entity``/``key`` for the model."""

    metric: str
    labels: dict[str, str]
    type: MetricType
    entity: str
    key: str
    scope: str
    """What a restart or a gap of the entity touches: ``process``, ``engine`` or ``gpu:<n>``."""
    decimals: int = 0
    """Rounding of the written value (gauges and histogram sums)."""

    @property
    def point_labels(self) -> tuple[tuple[str, str], ...]:
        """The labels as a :class:`~noc_assistant.ingest.point.Point` carries them (sorted
        pairs): what a pipeline numbers the series by at its door."""
        return tuple(sorted(self.labels.items()))


class _Builder:
    def __init__(self) -> None:
        self.out: list[SeriesDef] = []

    def add(
        self,
        entity: str,
        base: dict[str, str],
        metric: str,
        type_: MetricType,
        *,
        scope: str = "process",
        decimals: int = 0,
        key: str | None = None,
        extra: dict[str, str] | None = None,
        **more: str,
    ) -> None:
        extra = {**(extra or {}), **more}
        labels = {**base, **extra}
        key = key if key is not None else skey(metric, **extra)
        self.out.append(SeriesDef(metric, labels, type_, entity, key, scope, decimals))

    def hist(
        self,
        entity: str,
        base: dict[str, str],
        metric: str,
        les: tuple[str, ...],
        *,
        scope: str,
        decimals: int,
        **extra: str,
    ) -> None:
        for le in les:
            self.add(
                entity,
                base,
                f"{metric}_bucket",
                "histogram_bucket",
                scope=scope,
                extra={"le": le, **extra},
            )
        self.add(
            entity,
            base,
            f"{metric}_sum",
            "histogram_sum",
            scope=scope,
            decimals=decimals,
            extra=extra,
        )
        self.add(entity, base, f"{metric}_count", "histogram_count", scope=scope, extra=extra)


def _vllm_series(b: _Builder, ent: str, model_name: str) -> None:
    base = {"instance": ent, "model_name": model_name, "engine": "0"}
    sc = "engine"
    b.add(ent, base, "vllm:num_requests_running", "gauge", scope=sc)
    b.add(ent, base, "vllm:num_requests_waiting", "gauge", scope=sc)
    b.add(ent, base, "vllm:kv_cache_usage_perc", "gauge", scope=sc, decimals=4)
    for m in (
        "num_preemptions",
        "prompt_tokens",
        "generation_tokens",
        "prefix_cache_queries",
        "prefix_cache_hits",
    ):
        b.add(ent, base, f"vllm:{m}_total", "counter", scope=sc)
    for reason in ("stop", "length", "abort"):
        b.add(
            ent,
            base,
            "vllm:request_success_total",
            "counter",
            scope=sc,
            finished_reason=reason,
        )
    for m in ("num_drafts", "num_draft_tokens", "num_accepted_tokens"):
        b.add(ent, base, f"vllm:spec_decode_{m}_total", "counter", scope=sc)
    b.hist(ent, base, "vllm:time_to_first_token_seconds", TTFT_LE, scope=sc, decimals=3)
    b.hist(ent, base, "vllm:inter_token_latency_seconds", ITL_LE, scope=sc, decimals=3)
    b.hist(ent, base, "vllm:request_prompt_tokens", PROMPT_LE, scope=sc, decimals=0)


def _sglang_series(b: _Builder, ent: str, model_name: str) -> None:
    # scheduler and tokenizer metrics of one engine (TP rank 0 exports)
    base = {"instance": ent, "model_name": model_name, "engine_type": "unified", "tp_rank": "0"}
    sc = "engine"
    for m in ("num_running_reqs", "num_queue_reqs", "num_used_tokens", "max_total_num_tokens"):
        b.add(ent, base, f"sglang:{m}", "gauge", scope=sc)
    for m in ("token_usage", "cache_hit_rate", "spec_accept_rate"):
        b.add(ent, base, f"sglang:{m}", "gauge", scope=sc, decimals=4)
    for m in ("gen_throughput", "spec_accept_length"):
        b.add(ent, base, f"sglang:{m}", "gauge", scope=sc, decimals=3)
    for m in (
        "num_retracted_requests",
        "num_requests",
        "num_aborted_requests",
        "prompt_tokens",
        "generation_tokens",
        "cached_tokens",
    ):
        b.add(ent, base, f"sglang:{m}_total", "counter", scope=sc)
    b.hist(ent, base, "sglang:time_to_first_token_seconds", SGLANG_TTFT_LE, scope=sc, decimals=3)
    b.hist(ent, base, "sglang:inter_token_latency_seconds", SGLANG_ITL_LE, scope=sc, decimals=3)


def _sbi(b: _Builder, ent: str, base: dict[str, str], services: tuple[str, ...]) -> None:
    for svc in services:
        method, ok = SBI_OK[svc]
        codes = [ok, "504", "0"] + (["503"] if svc == "nnrf-disc" else [])
        for code in codes:
            b.add(
                ent,
                base,
                "free5gc_sbi_outbound_request_total",
                "counter",
                target_service_name=svc,
                status_code=code,
                method=method,
            )
        b.hist(
            ent,
            base,
            "free5gc_sbi_outbound_request_duration_seconds",
            (SBI_LATENCY_LE, "+Inf"),
            scope="process",
            decimals=6,
            method=method,
            target_service_name=svc,
            status_code=ok,
        )


def _amf_series(b: _Builder, net: Network, ent: str, plmns: list[str], sbi_metrics: bool) -> None:
    base = {"instance": ent, "nf": "amf"}
    for m in ("gnb", "ran_ue", "amf_session"):
        b.add(ent, base, m, "gauge")
    for p in plmns:
        b.add(ent, base, "fivegs_amffunction_rm_reginitreq", "counter", plmnid=p)
        b.add(ent, base, "fivegs_amffunction_rm_reginitsucc", "counter", plmnid=p)
    for c in AMF_REG_CAUSES:
        b.add(ent, base, "fivegs_amffunction_rm_reginitfail", "counter", cause=c)
    for m in (
        "rm_regmobreq",
        "rm_regmobsucc",
        "mm_paging5greq",
        "mm_paging5gsucc",
        "amf_authreq",
    ):
        b.add(ent, base, f"fivegs_amffunction_{m}", "counter")
    for c in AMF_AUTH_CAUSES:
        b.add(ent, base, "fivegs_amffunction_amf_authfail", "counter", cause=c)
    for p in plmns:
        b.add(
            ent,
            base,
            "fivegs_amffunction_rm_registeredsubnbr",
            "gauge",
            plmnid=p,
            snssai=SNSSAI,
        )
    if sbi_metrics:
        _sbi(b, ent, base, AMF_SERVICES)


def _smf_series(b: _Builder, net: Network, ent: str, plmns: list[str], sbi_metrics: bool) -> None:
    home = plmns[0]
    base = {"instance": ent, "nf": "smf"}
    b.add(
        ent,
        base,
        "fivegs_smffunction_sm_pdusessioncreationreq",
        "counter",
        plmnid=home,
        snssai=SNSSAI,
    )
    b.add(
        ent,
        base,
        "fivegs_smffunction_sm_pdusessioncreationsucc",
        "counter",
        plmnid=home,
        snssai=SNSSAI,
    )
    for c in SMF_PDU_CAUSES:
        b.add(ent, base, "fivegs_smffunction_sm_pdusessioncreationfail", "counter", cause=c)
    b.add(ent, base, "fivegs_smffunction_sm_n4sessionestabreq", "counter")
    for c in SMF_N4_CAUSES:
        b.add(ent, base, "fivegs_smffunction_sm_n4sessionestabfail", "counter", cause=c)
    b.add(ent, base, "pfcp_peers_active", "gauge")
    b.add(ent, base, "pfcp_sessions_active", "gauge")
    b.add(ent, base, "fivegs_smffunction_sm_sessionnbr", "gauge", plmnid=home, snssai=SNSSAI)
    for partner in net.partners:
        b.add(ent, base, "gtp_node_s5c_rx_createsession", "counter", addr=partner.s8_peer)
    if sbi_metrics:
        _sbi(b, ent, base, SMF_SERVICES)


def _upf_series(b: _Builder, net: Network, ent: str, plmns: list[str], sbi_metrics: bool) -> None:
    base = {"instance": ent, "nf": "upf"}
    b.add(ent, base, "fivegs_upffunction_upf_sessionnbr", "gauge")
    b.add(ent, base, "pfcp_peers_active", "gauge")
    b.add(ent, base, "fivegs_upffunction_sm_n4sessionestabreq", "counter")
    for m in ("receive_bytes", "transmit_bytes", "receive_packets", "receive_drop"):
        b.add(ent, base, f"node_network_{m}_total", "counter", device="n3")


def _pcf_series(b: _Builder, net: Network, ent: str, plmns: list[str], sbi_metrics: bool) -> None:
    home = plmns[0]
    base = {"instance": ent, "nf": "pcf"}
    for m in ("policyamassoreq", "policyamassosucc", "policysmassoreq", "policysmassosucc"):
        b.add(ent, base, f"fivegs_pcffunction_pa_{m}", "counter", plmnid=home, snssai=SNSSAI)
    b.add(ent, base, "fivegs_pcffunction_pa_sessionnbr", "gauge", plmnid=home, snssai=SNSSAI)


def _mme_series(b: _Builder, net: Network, ent: str, plmns: list[str], sbi_metrics: bool) -> None:
    base = {"instance": ent, "nf": "mme"}
    for m in MME_GAUGES:
        b.add(ent, base, m, "gauge")
    for m in ("dns_query_total", "dns_query_failed"):
        b.add(ent, base, m, "counter")


def _hss_series(b: _Builder, net: Network, ent: str, plmns: list[str], sbi_metrics: bool) -> None:
    base = {"instance": ent, "nf": "hss"}
    for m in HSS_S6A:
        b.add(ent, base, f"s6a_rx_{m}", "counter")
    b.add(ent, base, "hss_imsi", "gauge")


def _gpu_server_series(
    b: _Builder, net: Network, ent: str, plmns: list[str], sbi_metrics: bool
) -> None:
    srv = net.server(ent)
    if srv.engine == "sglang":
        _sglang_series(b, ent, srv.model_name)
    else:
        _vllm_series(b, ent, srv.model_name)
    for gpu in srv.gpus:
        gbase = {"instance": ent, "gpu": gpu}
        for f in DCGM_FIELDS:
            type_: MetricType = (
                "counter" if f == "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION" else "gauge"
            )
            dec = 3 if f in ("DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE") else 0
            b.add(ent, gbase, f, type_, scope=f"gpu:{gpu}", decimals=dec, key=f"{f}@{gpu}")


_BY_TYPE: Mapping[str, Callable[[_Builder, Network, str, list[str], bool], None]] = {
    "amf": _amf_series,
    "smf": _smf_series,
    "upf": _upf_series,
    "pcf": _pcf_series,
    "mme": _mme_series,
    "hss": _hss_series,
    "gpu_server": _gpu_server_series,
}


def build_series(net: Network, sbi_metrics: bool = True) -> list[SeriesDef]:
    """Every series of the network, in file order (entity by entity); without
    ``sbi_metrics`` the AMFs and SMFs export no SBI client series (``free5gc_sbi_*``), as a
    plain Open5GS deployment does."""
    b = _Builder()
    home = plmn_digits(net.home_plmn)
    plmns = [home] + [plmn_digits(p.plmn) for p in net.partners]
    for e in net.entities:
        ent = e.id
        render = _BY_TYPE.get(e.type)
        if render is None:
            continue
        render(b, net, ent, plmns, sbi_metrics)
        scope = "engine" if e.type == "gpu_server" else "process"
        proc_base = {"instance": ent} if e.type == "gpu_server" else {"instance": ent, "nf": e.type}
        b.add(ent, proc_base, "process_start_time_seconds", "gauge", scope=scope)
    return b.out
