"""The GPU-serving renderer: a serving engine's queue and batch (vLLM or SGLang exporter
names) and its GPUs' DCGM fields, from the knobs and the demand of one chunk."""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from noc_assistant.simulate.network import GpuServer, Network
from noc_assistant.simulate.series import (
    ITL_LE,
    PROMPT_LE,
    SGLANG_ITL_LE,
    SGLANG_TTFT_LE,
    TTFT_LE,
    skey,
)
from noc_assistant.simulate.traffic import (
    Arr,
    EngineState,
    RenderChunk,
    TrafficProfile,
    lognormal_cdf,
)

__all__ = ["GpuServing"]


class _EngineOut(NamedTuple):
    """What a serving engine did over each tick, before an exporter names it (``running``,
    ``waiting`` and ``kv`` as its gauges read them)."""

    running: Arr
    waiting: Arr
    kv: Arr
    pre: Arr
    """preemptions (SGLang: retractions) per second"""
    fin: Arr
    """finished requests per second"""
    abort: Arr
    gen: Arr
    """generated tokens per second"""
    prompt: Arr
    """mean prompt tokens"""
    hit: Arr
    """prefix-cache hit ratio"""
    acc: Arr
    """mean accepted length of speculative decoding"""
    ttft: Arr
    itl: Arr


class _Demand(NamedTuple):
    """What a GPU server is asked to do over each tick, and the state of its GPUs."""

    lam: Arr
    """arrivals per second"""
    prompt: Arr
    out_len: Arr
    hit: Arr
    acc: Arr
    comp: Arr
    cap: Arr
    """KV capacity in tokens"""
    hang: npt.NDArray[np.bool_]
    down: npt.NDArray[np.bool_]
    thermal: dict[str, Arr]
    clock: dict[str, Arr]
    cf: Arr
    """the slowest GPU's clock relative to boost"""


class GpuServing:
    """Renders the GPU servers' series into a :class:`RenderChunk`."""

    def __init__(self, net: Network, profile: TrafficProfile) -> None:
        self.net = net
        self.p = profile

    def render(self, c: RenderChunk, engines: dict[str, EngineState]) -> None:
        """Every GPU server; ``engines`` carries each engine's queue across chunks."""
        for srv in self.net.gpu_servers:
            self._gpu(c, srv, engines.setdefault(srv.id, EngineState()))

    def _gpu(self, c: RenderChunk, srv: GpuServer, st: EngineState) -> None:
        d = self._demand(c, srv)
        running, waiting, kv, ttft, itl, gen, fin, pre, abort = self._engine(c, d, st)
        nz, ent = c.noise, srv.id
        if c.sparse_preempt_per_s > 0:  # now and then one preemption even on a quiet server
            pre = pre + c.sparse_preempt_per_s
        # what the engine's gauges read (either exporter): the state with its jitter
        eng = _EngineOut(
            np.round(running * (1 + 0.03 * nz.normal(f"{ent}|run"))),
            np.round(waiting * (1 + 0.05 * np.abs(nz.normal(f"{ent}|wait")))),
            np.clip(kv * (1 + 0.01 * nz.normal(f"{ent}|kv")), 0.0, 1.0),
            *(pre, fin, abort, gen, d.prompt, d.hit, d.acc, ttft, itl),
        )
        if srv.engine == "sglang":
            self._sglang(c, ent, eng, d.cap)
        else:
            self._vllm(c, ent, eng)
        self._dcgm(c, srv, d, running, fin)

    def _demand(self, c: RenderChunk, srv: GpuServer) -> _Demand:
        p, k, nz, ent = self.p, c.knobs, c.noise, srv.id
        up = 1.0 - k.frac(ent, "drain")
        lam = (
            srv.peak_rps
            * (
                c.gpu * nz.wobble(f"{ent}|load", 0.06) * k.get(ent, "arrival_mult")
                + k.get(ent, "arrival_boost")
            )
            * up
            * np.maximum(1.0 + 0.05 * nz.normal(f"{ent}|arr"), 0.2)
        )
        prompt = p.prompt_tokens * k.get(ent, "prompt_len_mult") * nz.wobble(f"{ent}|P", 0.05)
        out_len = p.output_tokens * k.get(ent, "output_len_mult") * nz.wobble(f"{ent}|O", 0.05)
        hit = p.prefix_hit + (1.0 - p.prefix_hit) * k.frac(ent, "prefix_hit_gain")
        hit = np.clip(hit * nz.wobble(f"{ent}|hit", 0.04), 0.0, 0.98)
        acc = np.clip(
            p.accept_len * k.get(ent, "accept_len_mult") * nz.wobble(f"{ent}|acc", 0.03),
            1.0,
            p.spec_k + 1.0,
        )
        thermal = {g: k.frac(ent, f"thermal:{g}") for g in srv.gpus}
        clock = {
            g: p.boost_mhz * (1.0 - 0.38 * thermal[g]) * (1 + 0.002 * nz.normal(f"{ent}|clk|{g}"))
            for g in srv.gpus
        }
        return _Demand(
            lam=lam,
            prompt=prompt,
            out_len=out_len,
            hit=hit,
            acc=acc,
            comp=k.frac(ent, "compressed"),
            cap=srv.kv_tokens * k.get(ent, "kv_capacity_mult"),
            hang=k.frac(ent, "hang") > 0.5,
            down=k.frac(ent, "engine_down") > 0.5,
            thermal=thermal,
            clock=clock,
            cf=np.minimum.reduce([clock[g] / p.boost_mhz for g in srv.gpus]),
        )

    def _engine(self, c: RenderChunk, d: _Demand, st: EngineState) -> tuple[Arr, ...]:
        """The engine tick by tick: queue, batch, KV use, latencies, throughput."""
        p, n, dt = self.p, c.n, c.dt
        running, waiting, kv, ttft, itl, gen, fin, pre, abort = (np.zeros(n) for _ in range(9))
        q, r_prev = st.queue, st.running
        give_up = 1.0 - math.exp(-dt / 90.0)  # share of the queue abandoning per tick
        lam, prompt, out_len, hit, acc, cap, cf = (
            d.lam,
            d.prompt,
            d.out_len,
            d.hit,
            d.acc,
            d.cap,
            d.cf,
        )
        for i in range(n):
            if d.down[i]:
                q, r_prev = 0.0, 0.0
                continue
            per_seq = prompt[i] + out_len[i] / 2.0
            ctxf = 1.0 + per_seq / 32000.0
            spec = 1.25 / acc[i] / cf[i] * ctxf
            if d.comp[i] > 0.5:
                a, b = p.step_s * 0.8 * spec, p.step_s * 0.8 * spec / 40.0
            else:
                a, b = p.step_s * spec, p.step_s * spec / 96.0
            prefill = prompt[i] * (1.0 - hit[i]) / (p.prefill_tok_s * cf[i])
            if d.hang[i]:
                running[i] = r_prev
                q += lam[i] * dt
                ab = q * give_up / dt
                q -= ab * dt
                waiting[i], abort[i] = q, ab
                kv[i] = min(r_prev * per_seq / cap[i], 1.0)
                itl[i] = a + b * r_prev
                continue
            r_max = min(float(p.max_num_seqs), 0.985 * cap[i] / per_seq)
            served_q = q * (1.0 - math.exp(-dt / 30.0))
            lam_eff = lam[i] + served_q / dt
            base = 0.02 + prefill + out_len[i] * a
            denom = 1.0 - lam_eff * out_len[i] * b
            r_dem = lam_eff * base / denom if denom > 1e-6 else float("inf")
            if r_dem <= r_max:
                r = r_dem
                q -= served_q
                mu = lam_eff
                pre_rate = 0.0
            else:
                r = r_max
                e2e = base + out_len[i] * b * r
                mu = r / e2e
                q = max(q + (lam[i] - mu) * dt, 0.0)
                kv_bound = r_max < p.max_num_seqs
                over = min(r_dem / r_max - 1.0, 3.0) if math.isfinite(r_dem) else 3.0
                pre_rate = r * 0.02 * (0.5 + over) if kv_bound else 0.0
            ab = q * give_up / dt
            q = max(q - ab * dt, 0.0)
            step = a + b * r
            running[i], waiting[i] = r, q
            kv[i] = min(r * per_seq / cap[i], 1.0)
            itl[i] = step
            gen[i] = r / step
            fin[i] = mu
            pre[i] = pre_rate
            abort[i] = ab
            ttft[i] = (
                0.02 + prefill + (q / mu if mu > 0 else 0.0) + (0.3 * pre_rate / max(mu, 1e-6))
            )
            r_prev = r
        st.queue, st.running = q, r_prev
        return running, waiting, kv, ttft, itl, gen, fin, pre, abort

    def _dcgm(self, c: RenderChunk, srv: GpuServer, d: _Demand, running: Arr, fin: Arr) -> None:
        """Each GPU's DCGM fields."""
        p, k, nz, ent, dt = self.p, c.knobs, c.noise, srv.id, c.dt
        hang, down, thermal, comp = d.hang, d.down, d.thermal, d.comp
        util_eng = np.clip(
            running / 60.0 + 0.4 * np.minimum(fin * d.prompt / 40000.0, 1.0), 0.0, 1.0
        )
        for g in srv.gpus:
            gk = f"{ent}|{g}"
            u = np.where(down, 0.0, util_eng)
            util = np.where(hang, 100.0, np.clip(12.0 + 100.0 * u, 0.0, 100.0))
            util = np.where(down, 0.0, util)
            c.gauge(
                ent,
                f"DCGM_FI_DEV_GPU_UTIL@{g}",
                np.clip(util + 2.0 * nz.normal(gk + "util"), 0, 100),
            )
            ratio = d.clock[g] / p.boost_mhz
            power = (85.0 + 560.0 * u**0.9) * (0.55 + 0.45 * ratio)
            power = np.where(hang, 255.0, power)
            power = np.where(down, 72.0, power)
            power = np.minimum(power * (1 + 0.02 * nz.normal(gk + "pw")), 700.0)
            c.gauge(ent, f"DCGM_FI_DEV_POWER_USAGE@{g}", power)
            c.put(ent, f"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION@{g}", np.round(power * dt * 1000))
            temp = 30.0 + 0.06 * power + 45.0 * thermal[g] + 0.5 * nz.normal(gk + "t")
            c.gauge(ent, f"DCGM_FI_DEV_GPU_TEMP@{g}", temp)
            c.gauge(ent, f"DCGM_FI_DEV_MEMORY_TEMP@{g}", temp + 5.0 + 8.0 * thermal[g])
            c.gauge(ent, f"DCGM_FI_DEV_SM_CLOCK@{g}", np.where(down, 345.0, d.clock[g]))
            tensor = u * 0.55 * (1.0 - 0.4 * comp)
            tensor = np.where(hang, 0.01, tensor)
            c.gauge(
                ent,
                f"DCGM_FI_PROF_PIPE_TENSOR_ACTIVE@{g}",
                np.clip(tensor * (1 + 0.03 * nz.normal(gk + "ta")), 0, 1),
            )
            reasons = (
                np.where(thermal[g] > 0.25, 0x20, 0)
                | np.where(thermal[g] > 0.6, 0x40, 0)
                | np.where(power >= 695.0, 0x4, 0)
                | np.where(u < 0.02, 0x1, 0)
            )
            c.gauge(ent, f"DCGM_FI_DEV_CLOCKS_EVENT_REASONS@{g}", reasons.astype(np.float64))
            c.gauge(ent, f"DCGM_FI_DEV_XID_ERRORS@{g}", np.round(k.get(ent, f"xid:{g}")))
            fb = np.where(down, 420.0, p.fb_total_mib * 0.9)
            c.gauge(ent, f"DCGM_FI_DEV_FB_USED@{g}", fb + np.round(nz.normal(gk + "fb")))

    def _vllm(self, c: RenderChunk, ent: str, e: _EngineOut) -> None:
        """A vLLM engine's series (``vllm:*``, research/telemetry.md §2.1)."""
        p = self.p
        c.gauge(ent, "vllm:num_requests_running", e.running)
        c.gauge(ent, "vllm:num_requests_waiting", e.waiting)
        c.gauge(ent, "vllm:kv_cache_usage_perc", e.kv)
        c.count(ent, "vllm:num_preemptions_total", e.pre)
        stop = c.count(
            ent, skey("vllm:request_success_total", finished_reason="stop"), e.fin * 0.93
        )
        length = c.count(
            ent, skey("vllm:request_success_total", finished_reason="length"), e.fin * 0.07
        )
        c.count(
            ent,
            skey("vllm:request_success_total", finished_reason="abort"),
            e.abort + e.fin * 0.002,
        )
        fin_n = stop + length
        prompt_rate = e.fin * e.prompt + e.pre * e.prompt * 0.5
        ptok = c.count(ent, "vllm:prompt_tokens_total", prompt_rate)
        gtok = c.count(ent, "vllm:generation_tokens_total", e.gen)
        c.put(ent, "vllm:prefix_cache_queries_total", ptok)
        c.put(ent, "vllm:prefix_cache_hits_total", np.round(ptok * e.hit))
        drafts = c.count(ent, "vllm:spec_decode_num_drafts_total", e.gen / e.acc)
        c.put(ent, "vllm:spec_decode_num_draft_tokens_total", drafts * p.spec_k)
        c.put(
            ent,
            "vllm:spec_decode_num_accepted_tokens_total",
            np.minimum(np.round(drafts * (e.acc - 1.0)), drafts * p.spec_k),
        )
        self._hist(
            c,
            ent,
            "vllm:time_to_first_token_seconds",
            TTFT_LE,
            fin_n,
            np.maximum(e.ttft, 0.005),
            0.6,
        )
        self._hist(
            c, ent, "vllm:inter_token_latency_seconds", ITL_LE, gtok, np.maximum(e.itl, 1e-4), 0.3
        )
        self._hist(
            c, ent, "vllm:request_prompt_tokens", PROMPT_LE, fin_n, np.maximum(e.prompt, 1.0), 0.9
        )

    def _sglang(self, c: RenderChunk, ent: str, e: _EngineOut, cap: Arr) -> None:
        """An SGLang engine's series (``sglang:*``, research/telemetry.md §2.2): the same
        quantities under SGLang's names and kinds, e.g. KV pool usage is ``token_usage``,
        preemptions are retractions, and speculative decoding and the prefix cache report
        gauges (``spec_accept_length``, ``cache_hit_rate``) beside token counters."""
        p = self.p
        c.gauge(ent, "sglang:num_running_reqs", e.running)
        c.gauge(ent, "sglang:num_queue_reqs", e.waiting)
        c.gauge(ent, "sglang:token_usage", e.kv)
        c.gauge(ent, "sglang:num_used_tokens", np.round(e.kv * cap))
        c.gauge(ent, "sglang:max_total_num_tokens", np.round(cap))
        c.gauge(ent, "sglang:gen_throughput", e.gen, rel_noise=0.02)
        c.gauge(ent, "sglang:cache_hit_rate", e.hit)
        c.gauge(ent, "sglang:spec_accept_length", e.acc, rel_noise=0.01)
        c.gauge(ent, "sglang:spec_accept_rate", (e.acc - 1.0) / p.spec_k)
        c.count(ent, "sglang:num_retracted_requests_total", e.pre)
        fin_n = c.count(ent, "sglang:num_requests_total", e.fin)
        c.count(ent, "sglang:num_aborted_requests_total", e.abort + e.fin * 0.002)
        # the tokenizer counts a request's prompt once, when it finishes (vLLM counts the
        # prompt tokens each prefill computes, re-prefills after a preemption included)
        ptok = c.count(ent, "sglang:prompt_tokens_total", e.fin * e.prompt)
        gtok = c.count(ent, "sglang:generation_tokens_total", e.gen)
        c.put(ent, "sglang:cached_tokens_total", np.round(ptok * e.hit))
        self._hist(
            c,
            ent,
            "sglang:time_to_first_token_seconds",
            SGLANG_TTFT_LE,
            fin_n,
            np.maximum(e.ttft, 0.005),
            0.6,
        )
        self._hist(
            c,
            ent,
            "sglang:inter_token_latency_seconds",
            SGLANG_ITL_LE,
            gtok,
            np.maximum(e.itl, 1e-4),
            0.3,
        )

    def _hist(
        self,
        c: RenderChunk,
        ent: str,
        metric: str,
        les: tuple[str, ...],
        count: Arr,
        median: Arr,
        sigma: float,
    ) -> None:
        c.put(ent, f"{metric}_count", count)
        mean = median * math.exp(sigma * sigma / 2)
        c.put(ent, f"{metric}_sum", count * mean)
        for le in les:
            if le == "+Inf":
                c.put(ent, skey(f"{metric}_bucket", le=le), count)
            else:
                share = lognormal_cdf(float(le), median, sigma)
                c.put(
                    ent,
                    skey(f"{metric}_bucket", le=le),
                    np.minimum(c.noise.sround(f"{ent}|{metric}|{le}", count * share), count),
                )
