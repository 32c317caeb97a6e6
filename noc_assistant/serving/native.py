"""Native CPU forward for Llama-family GGUF models: packaged quantised weights, numba kernels.

The transformers path dequantises the packaged Q4_1 model to fp32 (~540 MB streamed per token)
and runs ~20 small torch ops per layer plus a ``DynamicCache`` concatenation per token. Here
the GGUF tensors stay in the precision the file ships (Q4_1 blocks: 4-bit codes with an fp16
scale ``d`` and minimum ``m`` per 32 weights; Q8_0: 8-bit codes with an fp16 scale; F32 norms;
any other type is dequantised to fp32 at load) and a decoding step or verify round (every
layer, the final norm and the LM head) is one call of one compiled numba function over a
preallocated KV cache. Prompts of ``PREFILL_MIN_TOKENS`` tokens or more go through BLAS on
weights dequantised one layer at a time instead (many rows: a GEMM is several times faster).

Numerics. Activations stay fp32 and every product is accumulated in fp32, so the forward
approximates the fp32 dequantisation of the same file (``models.load_gguf``, the reference) as
closely as an fp32 BLAS does; only the order of the additions differs. The kernels never
reassociate (no ``fastmath``): LLVM vectorises across output rows, never inside a sum, so each
output is the same fixed sequence of fp32 operations whatever the vector width or thread count,
and a row of a multi-token forward is bit-identical to the same token forwarded alone. That
batch invariance makes speculative verification exact: a verify round of B tokens returns, row
for row, the logits plain decoding would have produced (for B < ``PREFILL_MIN_TOKENS``).

Weight layout. A matrix ``[N, K]`` (output rows, inputs) is cut into tiles of ``TILE`` output
rows; inside a tile the codes of one quant block are stored code-major (``[code j][row]``), so
the innermost loop runs over ``TILE`` consecutive rows with unit stride. For Q4_1, byte ``j``
of a block holds code ``j`` (low nibble) and code ``j + 16`` (high nibble), as in ggml::

    w[k] = d * q[k] + m       (k = 32 b + j)
    y    = sum_b ( d_b * sum_j x[32b+j] q[j]  +  m_b * sum_j x[32b+j] )

so ``m`` costs one product per block, shared by all rows through the block sums of ``x``.
Rows of the query and key projections are reordered once at load from GGUF's interleaved rotary
layout back to the half-split layout of Hugging Face models (a permutation of whole rows: exact).

Threads: the kernels use ``torch.get_num_threads()`` numba threads (at most
``NUMBA_NUM_THREADS``), parallel over row tiles (matrices) and over heads (attention). The
first use on a machine compiles the kernels (about a minute on two cores); numba caches them
on disk.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import math
import mmap
import os
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, NamedTuple, TypeVar, cast

import numba
import numpy as np
import numpy.typing as npt
import torch
from numba import prange
from torch import Tensor

from noc_assistant.serving.cache import KVCache
from noc_assistant.serving.errors import ModelLoadError, RequestError
from noc_assistant.serving.loading import (
    HFTokenizer,
    TargetModel,
    TargetOutput,
    TextTokenizer,
    build_target_layer_ids,
    use_grouped_attention,
    use_row_major_linears,
)

__all__ = [
    "PREFILL_MIN_TOKENS",
    "TILE",
    "WIDE_VECTORS",
    "FastTokenizer",
    "LlamaSpec",
    "NativeLlama",
    "NativeTargetModel",
    "StaticKVCache",
    "load_native_gguf",
]

F32 = npt.NDArray[np.float32]

#: Output rows per weight tile: the unit of the vectorised inner loop and of the thread split.
TILE = 64

KIND_Q4_1 = 0
KIND_Q8_0 = 1
KIND_F32 = 2

#: Rows of x per register group in the multi-row kernels.
_GROUP = 4

#: Forwards of at least this many tokens (prompts) multiply through BLAS on weights dequantised
#: layer by layer; shorter ones (decoding, verify rounds) run the quantised kernels.
PREFILL_MIN_TOKENS = 64

#: Weight rows dequantised per BLAS call in a prefill (a slice that stays in L2).
_BLAS_ROWS = 512

_F = TypeVar("_F", bound=Callable[..., Any])


def _prefer_wide_vectors() -> bool:
    """Let LLVM use 512-bit vectors on AVX-512 CPUs (numba's code is 256-bit by default).

    LLVM's x86 tuning prefers 256-bit vectors even where AVX-512 is available (old Xeons lost
    clock speed on 512-bit code); for these kernels 512-bit halves the instruction count of
    the unpacking and the products and makes decoding ~25 % faster on a Sapphire Rapids core.
    numba has one code generator per process, configured when its first jitted function is
    created, so this can only be set before that and applies to every numba function the
    process compiles afterwards. That changes speed only: no numba code here reassociates
    floating-point arithmetic (no ``fastmath``), and then the vector width cannot change a
    result. Not done when numba was set up already, when ``NUMBA_CPU_NAME`` or
    ``NUMBA_CPU_FEATURES`` is set, or with ``NOC_LLM_WIDE_VECTORS=0``.
    """
    import llvmlite.binding as ll  # type: ignore[import-untyped]
    from numba.core import codegen, registry

    cfg = numba.config
    if os.environ.get("NOC_LLM_WIDE_VECTORS", "1").strip() in ("0", "false", "no"):
        return False
    if cfg.CPU_NAME is not None or cfg.CPU_FEATURES is not None:
        return False
    if "_toplevel_target_context" in vars(registry.cpu_target):  # numba already set up
        return False
    try:
        host = ll.get_host_cpu_features()
    except RuntimeError:
        return False
    if not (cfg.ENABLE_AVX and host.get("avx512f") and host.get("evex512", True)):
        return False
    cfg.CPU_FEATURES = codegen.get_host_cpu_features() + ",-prefer-256-bit"
    return True


#: Whether this process compiles numba code with 512-bit vectors (see _prefer_wide_vectors).
WIDE_VECTORS = _prefer_wide_vectors()


def _kernel(*, parallel: bool = False) -> Callable[[_F], _F]:
    """``numba.njit`` with the on-disk cache, strict IEEE arithmetic (no ``fastmath``: the
    summation order is part of the numerics), typed for mypy."""

    def wrap(f: _F) -> _F:
        return cast(_F, numba.njit(parallel=parallel, cache=True)(f))

    return wrap


# --------------------------------------------------------------------------------------------
# kernels
# --------------------------------------------------------------------------------------------
# Every kernel computes each output as the same expression whatever the number of rows of x:
# the 1-row and 4-row variants differ in loop order only, never in the order of the additions.


@_kernel()
def _block_sums(x: F32, nb: int) -> F32:  # pragma: no cover - compiled
    """Sum of each 32-value block of each row of x (the Q4_1 minimum's factor)."""
    m = x.shape[0]
    xs = np.empty((m, nb), np.float32)
    for r in range(m):
        for b in range(nb):
            s = np.float32(0.0)
            for j in range(32):
                s += x[r, b * 32 + j]
            xs[r, b] = s
    return xs


@_kernel(parallel=True)
def _mm_q4_1(x: F32, qt: Any, sc: F32, out: F32) -> None:  # pragma: no cover - compiled
    """out[M, N] = x[M, K] @ Wᵀ for a Q4_1 tiled W: codes qt [T, nb, 16·TILE] u8,
    scales sc [T, nb, 2·TILE] (d then m)."""
    nrows = x.shape[0]
    ntiles, nb = qt.shape[0], qt.shape[1]
    n_out = out.shape[1]
    xs = _block_sums(x, nb)
    groups = nrows // _GROUP
    for t in prange(ntiles):
        acc = np.empty(_GROUP * TILE, np.float32)
        part = np.empty(_GROUP * TILE, np.float32)
        for g in range(groups):
            r0 = g * _GROUP
            acc[:] = 0.0
            for b in range(nb):
                q = qt[t, b]
                o = b * 32
                part[:] = 0.0
                for j in range(16):
                    x0l = x[r0, o + j]
                    x0h = x[r0, o + j + 16]
                    x1l = x[r0 + 1, o + j]
                    x1h = x[r0 + 1, o + j + 16]
                    x2l = x[r0 + 2, o + j]
                    x2h = x[r0 + 2, o + j + 16]
                    x3l = x[r0 + 3, o + j]
                    x3h = x[r0 + 3, o + j + 16]
                    for n in range(TILE):
                        v = q[j * TILE + n]
                        lo = np.float32(np.uint8(v & 15))
                        hi = np.float32(np.uint8(v >> 4))
                        part[n] += x0l * lo
                        part[n] += x0h * hi
                        part[TILE + n] += x1l * lo
                        part[TILE + n] += x1h * hi
                        part[2 * TILE + n] += x2l * lo
                        part[2 * TILE + n] += x2h * hi
                        part[3 * TILE + n] += x3l * lo
                        part[3 * TILE + n] += x3h * hi
                s = sc[t, b]
                for i in range(_GROUP):
                    c = xs[r0 + i, b]
                    for n in range(TILE):
                        acc[i * TILE + n] += s[n] * part[i * TILE + n] + s[TILE + n] * c
            for i in range(_GROUP):
                for n in range(min(TILE, n_out - t * TILE)):
                    out[r0 + i, t * TILE + n] = acc[i * TILE + n]
        for r in range(groups * _GROUP, nrows):
            acc[:TILE] = 0.0
            for b in range(nb):
                q = qt[t, b]
                s = sc[t, b]
                o = b * 32
                c = xs[r, b]
                for n in range(TILE):
                    p = np.float32(0.0)
                    for j in range(16):
                        v = q[j * TILE + n]
                        p += x[r, o + j] * np.float32(np.uint8(v & 15))
                        p += x[r, o + j + 16] * np.float32(np.uint8(v >> 4))
                    acc[n] += s[n] * p + s[TILE + n] * c
            for n in range(min(TILE, n_out - t * TILE)):
                out[r, t * TILE + n] = acc[n]


@_kernel(parallel=True)
def _mm_q8_0(x: F32, qt: Any, sc: F32, out: F32) -> None:  # pragma: no cover - compiled
    """out = x @ Wᵀ for a Q8_0 tiled W: codes qt [T, nb, 32·TILE] i8, scales sc [T, nb, TILE]."""
    nrows = x.shape[0]
    ntiles, nb = qt.shape[0], qt.shape[1]
    n_out = out.shape[1]
    groups = nrows // _GROUP
    for t in prange(ntiles):
        acc = np.empty(_GROUP * TILE, np.float32)
        part = np.empty(_GROUP * TILE, np.float32)
        for g in range(groups):
            r0 = g * _GROUP
            acc[:] = 0.0
            for b in range(nb):
                q = qt[t, b]
                o = b * 32
                part[:] = 0.0
                for j in range(32):
                    x0 = x[r0, o + j]
                    x1 = x[r0 + 1, o + j]
                    x2 = x[r0 + 2, o + j]
                    x3 = x[r0 + 3, o + j]
                    for n in range(TILE):
                        w = np.float32(q[j * TILE + n])
                        part[n] += x0 * w
                        part[TILE + n] += x1 * w
                        part[2 * TILE + n] += x2 * w
                        part[3 * TILE + n] += x3 * w
                s = sc[t, b]
                for i in range(_GROUP):
                    for n in range(TILE):
                        acc[i * TILE + n] += s[n] * part[i * TILE + n]
            for i in range(_GROUP):
                for n in range(min(TILE, n_out - t * TILE)):
                    out[r0 + i, t * TILE + n] = acc[i * TILE + n]
        for r in range(groups * _GROUP, nrows):
            acc[:TILE] = 0.0
            for b in range(nb):
                q = qt[t, b]
                s = sc[t, b]
                o = b * 32
                for n in range(TILE):
                    p = np.float32(0.0)
                    for j in range(32):
                        p += x[r, o + j] * np.float32(q[j * TILE + n])
                    acc[n] += s[n] * p
            for n in range(min(TILE, n_out - t * TILE)):
                out[r, t * TILE + n] = acc[n]


@_kernel(parallel=True)
def _mm_f32(x: F32, wt: F32, out: F32) -> None:  # pragma: no cover - compiled
    """out = x @ Wᵀ for a dense tiled W: wt [T, K, TILE] (fp32 fallback for other types)."""
    nrows = x.shape[0]
    ntiles, k_in = wt.shape[0], wt.shape[1]
    n_out = out.shape[1]
    for t in prange(ntiles):
        w = wt[t]
        acc = np.empty(TILE, np.float32)
        for r in range(nrows):
            acc[:] = 0.0
            for k in range(k_in):
                xv = x[r, k]
                for n in range(TILE):
                    acc[n] += xv * w[k, n]
            for n in range(min(TILE, n_out - t * TILE)):
                out[r, t * TILE + n] = acc[n]


@_kernel()
def _matmul(
    x: F32, kind: int, q4: Any, q8: Any, f: F32, sc: F32, out: F32
) -> None:  # pragma: no cover - compiled
    if kind == KIND_Q4_1:
        _mm_q4_1(x, q4, sc, out)
    elif kind == KIND_Q8_0:
        _mm_q8_0(x, q8, sc, out)
    else:
        _mm_f32(x, f, out)


@_kernel()
def _exp(x: F32, out: F32, bits: Any) -> None:  # pragma: no cover - compiled
    """``out = exp(x)`` elementwise (fp32, within 1 ulp; ``bits`` is int32 scratch).

    A Cody-Waite reduction by ln 2 and Cephes' degree-7 polynomial in loops LLVM vectorises;
    the libm call numba makes per element was half of the attention's time. Arguments are
    clamped to [-87, 88] (exp(-87) ~ 1.6e-38: softmax weights that small are zero anyway).
    """
    n = x.shape[0]
    for i in range(n):
        v = min(max(x[i], np.float32(-87.0)), np.float32(88.0))
        k = np.floor(v * np.float32(1.44269504088896341) + np.float32(0.5))
        r = v - k * np.float32(0.693359375)
        r = r - k * np.float32(-2.12194440e-4)
        z = r * r
        y = np.float32(1.9875691500e-4)
        y = y * r + np.float32(1.3981999507e-3)
        y = y * r + np.float32(8.3334519073e-3)
        y = y * r + np.float32(4.1665795894e-2)
        y = y * r + np.float32(1.6666665459e-1)
        y = y * r + np.float32(5.0000001201e-1)
        out[i] = y * z + r + np.float32(1.0)
        bits[i] = (np.int32(k) + np.int32(127)) << np.int32(23)
    scale = bits[:n].view(np.float32)
    for i in range(n):
        out[i] = out[i] * scale[i]


@_kernel()
def _rmsnorm(x: F32, w: F32, eps: float, out: F32) -> None:  # pragma: no cover - compiled
    """``w * (x * rsqrt(mean(x²) + eps))`` per row, as Hugging Face's ``LlamaRMSNorm``."""
    d = x.shape[1]
    for r in range(x.shape[0]):
        ss = np.float32(0.0)
        for i in range(d):
            ss += x[r, i] * x[r, i]
        inv = np.float32(1.0) / np.sqrt(ss / np.float32(d) + np.float32(eps))
        for i in range(d):
            out[r, i] = w[i] * (x[r, i] * inv)


@_kernel(parallel=True)
def _attention(
    qkv: F32,
    kc: F32,
    vc: F32,
    pos0: int,
    cos: F32,
    sin: F32,
    n_heads: int,
    n_kv: int,
    out: F32,
) -> None:  # pragma: no cover - compiled
    """RoPE on the new rows' q and k, append k and v to the cache, causal GQA attention.

    ``qkv`` [T, (H + 2·Hkv)·D] holds q, k, v of T new tokens at positions ``pos0..pos0+T-1``;
    ``kc`` [Hkv, D, C] is the key cache transposed (so that the scores of all positions for one
    head dimension are a unit-stride vector), ``vc`` [Hkv, C, D] the value cache.
    """
    t_new = qkv.shape[0]
    hd = kc.shape[1]
    half = hd // 2
    kv0 = n_heads * hd
    v0 = kv0 + n_kv * hd
    scale = np.float32(1.0 / math.sqrt(hd))
    # rotary embedding (rotate-half form), keys and values into the cache
    for t in range(t_new):
        p = pos0 + t
        for h in range(n_heads + n_kv):
            o = h * hd
            for i in range(half):
                a = qkv[t, o + i]
                b = qkv[t, o + i + half]
                c = cos[p, i]
                s = sin[p, i]
                qkv[t, o + i] = a * c - b * s
                qkv[t, o + i + half] = b * c + a * s
        for g in range(n_kv):
            for i in range(hd):
                kc[g, i, p] = qkv[t, kv0 + g * hd + i]
                vc[g, p, i] = qkv[t, v0 + g * hd + i]
    group = n_heads // n_kv
    for h in prange(n_heads):
        g = h // group
        kg = kc[g]
        vg = vc[g]
        scores = np.empty(pos0 + t_new, np.float32)
        bits = np.empty(pos0 + t_new, np.int32)
        acc = np.empty(hd, np.float32)
        for t in range(t_new):
            length = pos0 + t + 1
            sc = scores[:length]
            sc[:] = 0.0
            # q·k for all positions, 4 head dimensions per pass over the scores
            i = 0
            while i + 4 <= hd:
                q0 = qkv[t, h * hd + i] * scale
                q1 = qkv[t, h * hd + i + 1] * scale
                q2 = qkv[t, h * hd + i + 2] * scale
                q3 = qkv[t, h * hd + i + 3] * scale
                for s in range(length):
                    sc[s] += ((q0 * kg[i, s] + q1 * kg[i + 1, s]) + q2 * kg[i + 2, s]) + q3 * kg[
                        i + 3, s
                    ]
                i += 4
            while i < hd:
                qi = qkv[t, h * hd + i] * scale
                for s in range(length):
                    sc[s] += qi * kg[i, s]
                i += 1
            mx = sc[0]
            for s in range(1, length):
                mx = max(mx, sc[s])
            for s in range(length):
                sc[s] = sc[s] - mx
            _exp(sc, sc, bits)
            t0 = t1 = t2 = t3 = np.float32(0.0)  # four chains: the sum is latency-bound
            s = 0
            while s + 4 <= length:
                t0 += sc[s]
                t1 += sc[s + 1]
                t2 += sc[s + 2]
                t3 += sc[s + 3]
                s += 4
            while s < length:
                t0 += sc[s]
                s += 1
            tot = (t0 + t1) + (t2 + t3)
            # p·V, 4 positions per pass over the accumulator
            acc[:] = 0.0
            s = 0
            while s + 4 <= length:
                p0 = sc[s]
                p1 = sc[s + 1]
                p2 = sc[s + 2]
                p3 = sc[s + 3]
                for i in range(hd):
                    acc[i] += ((p0 * vg[s, i] + p1 * vg[s + 1, i]) + p2 * vg[s + 2, i]) + p3 * vg[
                        s + 3, i
                    ]
                s += 4
            while s < length:
                ps = sc[s]
                for i in range(hd):
                    acc[i] += ps * vg[s, i]
                s += 1
            for i in range(hd):
                out[t, h * hd + i] = acc[i] / tot


@_kernel()
def _swiglu(gu: F32, ffn: int, out: F32) -> None:  # pragma: no cover - compiled
    """``silu(gate) * up`` with gate = gu[:, :ffn], up = gu[:, ffn:]; silu(g) = g/(1+e^-g)."""
    neg = np.empty(ffn, np.float32)
    e = np.empty(ffn, np.float32)
    bits = np.empty(ffn, np.int32)
    for r in range(gu.shape[0]):
        for i in range(ffn):
            neg[i] = -gu[r, i]
        _exp(neg, e, bits)
        for i in range(ffn):
            out[r, i] = (gu[r, i] / (np.float32(1.0) + e[i])) * gu[r, ffn + i]


@_kernel()
def _forward(
    h: F32,
    pos0: int,
    kc: F32,
    vc: F32,
    cos: F32,
    sin: F32,
    eps: float,
    n_heads: int,
    n_kv: int,
    ffn: int,
    attn_norm: F32,
    ffn_norm: F32,
    out_norm: F32,
    kinds: Any,
    qkv_w: tuple[Any, Any, F32, F32],
    o_w: tuple[Any, Any, F32, F32],
    gu_w: tuple[Any, Any, F32, F32],
    down_w: tuple[Any, Any, F32, F32],
    head_w: tuple[Any, Any, F32, F32],
    taps: Any,
    feats: F32,
    logits: F32,
) -> None:  # pragma: no cover - compiled
    """All layers, the final norm and the LM head for the T rows of ``h`` (updated in place);
    ``logits`` has T rows, or 1 for the last row only."""
    t_new, d = h.shape
    hd = kc.shape[2]
    xn = np.empty((t_new, d), np.float32)
    qkv = np.empty((t_new, (n_heads + 2 * n_kv) * hd), np.float32)
    att = np.empty((t_new, n_heads * hd), np.float32)
    tmp = np.empty((t_new, d), np.float32)
    gu = np.empty((t_new, 2 * ffn), np.float32)
    act = np.empty((t_new, ffn), np.float32)
    for layer in range(attn_norm.shape[0]):
        _rmsnorm(h, attn_norm[layer], eps, xn)
        _matmul(
            xn, kinds[0], qkv_w[0][layer], qkv_w[1][layer], qkv_w[2][layer], qkv_w[3][layer], qkv
        )
        _attention(qkv, kc[layer], vc[layer], pos0, cos, sin, n_heads, n_kv, att)
        _matmul(att, kinds[1], o_w[0][layer], o_w[1][layer], o_w[2][layer], o_w[3][layer], tmp)
        h += tmp
        _rmsnorm(h, ffn_norm[layer], eps, xn)
        _matmul(xn, kinds[2], gu_w[0][layer], gu_w[1][layer], gu_w[2][layer], gu_w[3][layer], gu)
        _swiglu(gu, ffn, act)
        _matmul(
            act,
            kinds[3],
            down_w[0][layer],
            down_w[1][layer],
            down_w[2][layer],
            down_w[3][layer],
            tmp,
        )
        h += tmp
        for k in range(taps.shape[0]):
            if taps[k] == layer:
                feats[:, k * d : (k + 1) * d] = h
    _rmsnorm(h, out_norm, eps, xn)
    if logits.shape[0] != t_new:
        xn = np.ascontiguousarray(xn[t_new - logits.shape[0] :])
    _matmul(xn, kinds[4], head_w[0], head_w[1], head_w[2], head_w[3], logits)


@_kernel()
def _embed_rows(
    ids: Any, kind: int, q4: Any, q8: Any, f: F32, sc: F32, out: F32
) -> None:  # pragma: no cover - compiled
    """Rows ``ids`` of a tiled matrix, dequantised exactly as gguf does (``d*q + m``)."""
    k_in = out.shape[1]
    for r in range(ids.shape[0]):
        t = ids[r] // TILE
        n = ids[r] % TILE
        if kind == KIND_F32:
            for k in range(k_in):
                out[r, k] = f[t, k, n]
            continue
        for b in range(k_in // 32):
            if kind == KIND_Q8_0:
                d = sc[t, b, n]
                for j in range(32):
                    out[r, b * 32 + j] = d * np.float32(q8[t, b, j * TILE + n])
            else:
                d = sc[t, b, n]
                m = sc[t, b, TILE + n]
                for j in range(16):
                    v = q4[t, b, j * TILE + n]
                    out[r, b * 32 + j] = d * np.float32(np.uint8(v & 15)) + m
                    out[r, b * 32 + 16 + j] = d * np.float32(np.uint8(v >> 4)) + m


@_kernel(parallel=True)
def _dequantize_into(
    kind: int, q4: Any, q8: Any, f: F32, sc: F32, out: F32
) -> None:  # pragma: no cover - compiled
    """out [N, K] = the fp32 values of a tiled matrix (``d*q + m`` as gguf computes them)."""
    n_out, k_in = out.shape
    for t in prange((n_out + TILE - 1) // TILE):
        for n in range(min(TILE, n_out - t * TILE)):
            row = out[t * TILE + n]
            if kind == KIND_F32:
                for k in range(k_in):
                    row[k] = f[t, k, n]
                continue
            for b in range(k_in // 32):
                d = sc[t, b, n]
                if kind == KIND_Q8_0:
                    for j in range(32):
                        row[b * 32 + j] = d * np.float32(q8[t, b, j * TILE + n])
                else:
                    m = sc[t, b, TILE + n]
                    for j in range(16):
                        v = q4[t, b, j * TILE + n]
                        row[b * 32 + j] = d * np.float32(np.uint8(v & 15)) + m
                        row[b * 32 + 16 + j] = d * np.float32(np.uint8(v >> 4)) + m


# --------------------------------------------------------------------------------------------
# weights
# --------------------------------------------------------------------------------------------


class Matrix(NamedTuple):
    """A weight matrix [n_out, n_in] in the kernels' tiled layout (unused arrays are empty)."""

    kind: int
    n_out: int
    n_in: int
    q4: npt.NDArray[np.uint8]
    q8: npt.NDArray[np.int8]
    f: F32
    sc: F32

    @property
    def nbytes(self) -> int:
        return int(self.q4.nbytes + self.q8.nbytes + self.f.nbytes + self.sc.nbytes)


def _tiles(a: npt.NDArray[Any], n: int) -> npt.NDArray[Any]:
    """Pad the leading (row) axis of ``a`` to a multiple of TILE and split it: [T, TILE, ...]."""
    pad = (-n) % TILE
    if pad:
        a = np.concatenate([a, np.zeros((pad, *a.shape[1:]), a.dtype)])
    return a.reshape(-1, TILE, *a.shape[1:])


def _empty(ndim: int, dtype: Any) -> npt.NDArray[Any]:
    return np.zeros((0,) * ndim, dtype)


def pack_q4_1(blocks: npt.NDArray[np.uint8], n: int, k: int) -> Matrix:
    """Q4_1 blocks [n, k/32 · 20 bytes] (fp16 d, fp16 m, 16 code bytes) -> tiled Matrix."""
    nb = k // 32
    b = blocks.reshape(n, nb, 20)
    d = b[..., 0:2].copy().view(np.float16)[..., 0].astype(np.float32)
    m = b[..., 2:4].copy().view(np.float16)[..., 0].astype(np.float32)
    qs = _tiles(b[..., 4:20], n)  # [T, TILE, nb, 16]
    q4 = np.ascontiguousarray(qs.transpose(0, 2, 3, 1)).reshape(qs.shape[0], nb, 16 * TILE)
    dm = _tiles(np.stack([d, m], axis=-1), n)  # [T, TILE, nb, 2]
    sc = np.ascontiguousarray(dm.transpose(0, 2, 3, 1)).reshape(dm.shape[0], nb, 2 * TILE)
    return Matrix(KIND_Q4_1, n, k, q4, _empty(3, np.int8), _empty(3, np.float32), sc)


def pack_q8_0(blocks: npt.NDArray[np.uint8], n: int, k: int) -> Matrix:
    """Q8_0 blocks [n, k/32 · 34 bytes] (fp16 d, 32 int8 codes) -> tiled Matrix."""
    nb = k // 32
    b = blocks.reshape(n, nb, 34)
    d = b[..., 0:2].copy().view(np.float16)[..., 0].astype(np.float32)
    qs = _tiles(b[..., 2:34].view(np.int8), n)  # [T, TILE, nb, 32]
    q8 = np.ascontiguousarray(qs.transpose(0, 2, 3, 1)).reshape(qs.shape[0], nb, 32 * TILE)
    sc = np.ascontiguousarray(_tiles(d, n).transpose(0, 2, 1))  # [T, nb, TILE]
    return Matrix(KIND_Q8_0, n, k, _empty(3, np.uint8), q8, _empty(3, np.float32), sc)


def pack_f32(w: npt.NDArray[np.float32], n: int, k: int) -> Matrix:
    """A dense fp32 [n, k] -> tiled Matrix (the fallback for every other tensor type)."""
    wt = _tiles(np.asarray(w, np.float32).reshape(n, k), n)  # [T, TILE, K]
    f = np.ascontiguousarray(wt.transpose(0, 2, 1))
    return Matrix(KIND_F32, n, k, _empty(3, np.uint8), _empty(3, np.int8), f, _empty(3, np.float32))


def dequantize_matrix(m: Matrix) -> F32:
    """The fp32 [n_out, n_in] values of a packed matrix (``d*q + m`` as gguf computes them).

    >>> w = np.arange(64 * 32, dtype=np.float32).reshape(64, 32) / 7
    >>> bool(np.array_equal(dequantize_matrix(pack_f32(w, 64, 32)), w))
    True
    """
    out = np.empty((m.n_out, m.n_in), np.float32)
    ids = np.arange(m.n_out, dtype=np.int64)
    _embed_rows(ids, m.kind, m.q4, m.q8, m.f, m.sc, out)
    return out


@dataclass(frozen=True)
class LlamaSpec:
    """Shape and hyper-parameters of a Llama-family model, read from GGUF metadata."""

    n_layers: int
    hidden: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    ffn: int
    vocab: int
    eps: float
    rope_base: float
    max_positions: int
    name: str = "llama"


def _field(meta: dict[str, Any], key: str, path: Path, default: Any = None) -> Any:
    v = meta.get(key)
    if v is None:
        if default is None:
            raise ModelLoadError(f"{path}: GGUF metadata {key!r} is missing")
        return default
    return v


def _unpermute_rows(a: npt.NDArray[Any], n_head: int) -> npt.NDArray[Any]:
    """GGUF's interleaved rotary row order -> Hugging Face's half-split order (whole rows)."""
    n = a.shape[0]
    dim = n // n_head // 2
    return a.reshape(n_head, dim, 2, *a.shape[1:]).swapaxes(1, 2).reshape(a.shape)


def _dequantize(raw: npt.NDArray[np.uint8], ttype: Any) -> F32:
    """fp32 values of raw tensor bytes of any ggml type (gguf's own dequantisation)."""
    import gguf

    qt = gguf.GGMLQuantizationType
    if ttype == qt.F32:
        return raw.view(np.float32).copy()
    if ttype == qt.F16:
        return raw.view(np.float16).astype(np.float32)
    if ttype == qt.BF16:
        return (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
    size = gguf.GGML_QUANT_SIZES[ttype][1]
    out = gguf.quants.dequantize(raw.reshape(-1, size), ttype)
    return np.asarray(out, np.float32).reshape(-1)


@dataclass(frozen=True)
class GGUFTensorInfo:
    """Where one tensor lies in a GGUF file: ggml shape (innermost first), type, byte range."""

    name: str
    shape: tuple[int, ...]
    ggml_type: int
    offset: int
    n_bytes: int


#: GGUF metadata value types -> struct format of a scalar (8 = string, 9 = array).
_GGUF_SCALARS = {
    0: "B",
    1: "b",
    2: "H",
    3: "h",
    4: "I",
    5: "i",
    6: "f",
    7: "?",
    10: "Q",
    11: "q",
    12: "d",
}


def read_gguf_header(path: Path) -> tuple[dict[str, Any], dict[str, GGUFTensorInfo]]:
    """Metadata (scalars and strings; arrays are skipped and read as ``None``) and tensor
    locations of a little-endian GGUF v2/v3 file.

    ``gguf.GGUFReader`` materialises every metadata array as numpy objects (the default
    model's 49k-token vocabulary and 49k merges: ~160 MB and seconds); the forward needs none
    of them, so this walks past them.
    """
    import gguf

    try:
        with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            return _parse_gguf(mm, path, gguf)
    except (OSError, ValueError, struct.error) as exc:
        raise ModelLoadError(f"cannot read GGUF file {path}: {exc}") from exc


def _parse_gguf(mm: Any, path: Path, gguf: Any) -> tuple[dict[str, Any], dict[str, GGUFTensorInfo]]:
    pos = 0

    def take(fmt: str) -> Any:
        nonlocal pos
        v = struct.unpack_from("<" + fmt, mm, pos)
        pos += struct.calcsize("<" + fmt)
        return v[0]

    def string() -> str:
        nonlocal pos
        n = take("Q")
        s = bytes(mm[pos : pos + n]).decode("utf-8", errors="replace")
        pos += n
        return s

    def value(vtype: int) -> Any:
        nonlocal pos
        if vtype in _GGUF_SCALARS:
            return take(_GGUF_SCALARS[vtype])
        if vtype == 8:
            return string()
        if vtype == 9:
            etype, count = take("I"), take("Q")
            if etype in _GGUF_SCALARS:
                pos += count * struct.calcsize("<" + _GGUF_SCALARS[etype])
            else:
                for _ in range(count):
                    value(etype)
            return None
        raise ValueError(f"unknown metadata value type {vtype}")

    if bytes(mm[:4]) != b"GGUF":
        raise ValueError("not a GGUF file (bad magic)")
    pos = 4
    version = take("I")
    if version not in (2, 3):
        raise ValueError(f"GGUF version {version} is not supported (2 and 3 are)")
    n_tensors, n_kv = take("Q"), take("Q")
    meta: dict[str, Any] = {}
    for _ in range(n_kv):
        key = string()
        meta[key] = value(take("I"))
    raw: list[tuple[str, tuple[int, ...], int, int]] = []
    for _ in range(n_tensors):
        name = string()
        ndim = take("I")
        shape = tuple(int(take("Q")) for _ in range(ndim))
        ggml_type, offset = take("I"), take("Q")
        raw.append((name, shape, ggml_type, offset))
    align = int(meta.get("general.alignment") or 32)
    start = pos + (-pos) % align
    tensors: dict[str, GGUFTensorInfo] = {}
    for name, shape, ggml_type, offset in raw:
        try:
            block, size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(ggml_type)]
        except (KeyError, ValueError) as exc:
            raise ValueError(f"tensor {name!r} has unknown ggml type {ggml_type}") from exc
        n = math.prod(shape)
        tensors[name] = GGUFTensorInfo(name, shape, ggml_type, start + offset, n // block * size)
    return meta, tensors


class _GGUF:
    """Tensors of one GGUF file, each read with a plain file read when asked for (mapping the
    file would keep its pages in this process's resident set next to the packed copies)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.meta, self.tensors = read_gguf_header(path)

    def has(self, name: str) -> bool:
        return name in self.tensors

    def _raw(self, name: str) -> tuple[GGUFTensorInfo, npt.NDArray[np.uint8]]:
        t = self.tensors.get(name)
        if t is None:
            raise ModelLoadError(f"{self.path}: tensor {name!r} is missing")
        try:
            with open(self.path, "rb") as fh:
                fh.seek(t.offset)
                raw = np.fromfile(fh, np.uint8, t.n_bytes)
        except OSError as exc:
            raise ModelLoadError(f"{self.path}: tensor {name!r} cannot be read: {exc}") from exc
        if raw.size != t.n_bytes:
            raise ModelLoadError(f"{self.path}: tensor {name!r} is truncated")
        return t, raw

    def _rows(self, name: str, rows: int, cols: int, unpermute: int) -> tuple[int, Any]:
        """Tensor ``name``: (ggml type, rows of raw blocks) for Q4_1/Q8_0, else (F32, values)."""
        import gguf

        t, raw = self._raw(name)
        if t.shape != (cols, rows):  # ggml order: innermost first
            raise ModelLoadError(
                f"{self.path}: tensor {name!r} has shape {t.shape[::-1]}, expected {(rows, cols)}"
            )
        qt = gguf.GGMLQuantizationType
        try:
            if t.ggml_type in (qt.Q4_1, qt.Q8_0):
                a: Any = raw.reshape(rows, -1)
                kind = int(t.ggml_type)
            else:
                a = _dequantize(raw, t.ggml_type).reshape(rows, cols)
                kind = int(qt.F32)
        except (ValueError, NotImplementedError, TypeError) as exc:
            raise ModelLoadError(
                f"{self.path}: tensor {name!r} ({qt(t.ggml_type).name}) cannot be read: {exc}"
            ) from exc
        return kind, _unpermute_rows(a, unpermute) if unpermute else a

    def matrix(self, *parts: tuple[str, int, int], cols: int) -> Matrix:
        """Tensors ``(name, rows, unpermute)`` stacked along the rows as one [Σ rows, cols]
        Matrix (one kernel call for q, k and v): Q4_1 and Q8_0 kept as they are when all parts
        share the type, anything else dequantised to fp32."""
        import gguf

        qt = gguf.GGMLQuantizationType
        got = [self._rows(name, rows, cols, unpermute) for name, rows, unpermute in parts]
        n = sum(rows for _, rows, _ in parts)
        kinds = {kind for kind, _ in got}
        if len(kinds) == 1 and kinds <= {int(qt.Q4_1), int(qt.Q8_0)}:
            blocks = np.concatenate([a for _, a in got]) if len(got) > 1 else got[0][1]
            if kinds == {int(qt.Q4_1)}:
                return pack_q4_1(blocks, n, cols)
            return pack_q8_0(blocks, n, cols)
        dense = [
            a if kind == int(qt.F32) else _dequantize(a.reshape(-1), qt(kind)).reshape(-1, cols)
            for kind, a in got
        ]
        return pack_f32(np.concatenate(dense) if len(dense) > 1 else dense[0], n, cols)

    def vector(self, name: str, n: int) -> F32:
        t, raw = self._raw(name)
        try:
            v = _dequantize(raw, t.ggml_type)
        except (ValueError, NotImplementedError, TypeError) as exc:
            raise ModelLoadError(f"{self.path}: tensor {name!r} cannot be read: {exc}") from exc
        if v.size != n:
            raise ModelLoadError(f"{self.path}: tensor {name!r} has {v.size} values, expected {n}")
        return np.ascontiguousarray(v.reshape(n))

    def spec(self) -> LlamaSpec:
        p, r = self.path, self.meta
        arch = str(_field(r, "general.architecture", p))
        if arch != "llama":
            raise ModelLoadError(f"{p}: architecture {arch!r} is not supported (llama only)")
        scaling = r.get("llama.rope.scaling.type")
        if scaling not in (None, "none", ""):
            raise ModelLoadError(f"{p}: rope scaling {scaling!r} is not supported")
        hidden = int(_field(r, "llama.embedding_length", p))
        n_heads = int(_field(r, "llama.attention.head_count", p))
        n_kv = int(_field(r, "llama.attention.head_count_kv", p, n_heads))
        head_dim = hidden // n_heads
        rope_dim = int(_field(r, "llama.rope.dimension_count", p, head_dim))
        if rope_dim != head_dim or head_dim % 2 or n_heads % n_kv:
            raise ModelLoadError(f"{p}: partial rotary or uneven head groups are not supported")
        emb = self.tensors.get("token_embd.weight")
        if emb is None:
            raise ModelLoadError(f"{p}: tensor 'token_embd.weight' is missing")
        vocab = int(emb.shape[1])
        return LlamaSpec(
            n_layers=int(_field(r, "llama.block_count", p)),
            hidden=hidden,
            n_heads=n_heads,
            n_kv_heads=n_kv,
            head_dim=head_dim,
            ffn=int(_field(r, "llama.feed_forward_length", p)),
            vocab=vocab,
            eps=float(_field(r, "llama.attention.layer_norm_rms_epsilon", p, 1e-5)),
            rope_base=float(_field(r, "llama.rope.freq_base", p, 10000.0)),
            max_positions=int(_field(r, "llama.context_length", p, 2048)),
            name=str(_field(r, "general.name", p, p.stem)),
        )


class _Stack:
    """One role's matrices of every layer, stacked on a leading layer axis (filled in place,
    so loading never holds the per-layer copies and the stack at once)."""

    def __init__(self, n_layers: int) -> None:
        self.n_layers = n_layers
        self.kind = -1
        self.n_out = self.n_in = 0
        self.arrays: tuple[Any, Any, F32, F32] = (
            _empty(4, np.uint8),
            _empty(4, np.int8),
            _empty(4, np.float32),
            _empty(4, np.float32),
        )

    def layer(self, i: int) -> Matrix:
        q4, q8, f, sc = self.arrays
        return Matrix(self.kind, self.n_out, self.n_in, q4[i], q8[i], f[i], sc[i])

    def _alloc(self, m: Matrix) -> None:
        self.kind, self.n_out, self.n_in = m.kind, m.n_out, m.n_in
        self.arrays = (
            np.empty((self.n_layers, *m.q4.shape), np.uint8),
            np.empty((self.n_layers, *m.q8.shape), np.int8),
            np.empty((self.n_layers, *m.f.shape), np.float32),
            np.empty((self.n_layers, *m.sc.shape), np.float32),
        )

    def put(self, i: int, m: Matrix) -> None:
        if self.kind < 0:
            self._alloc(m)
        elif (m.kind, m.n_out, m.n_in) != (self.kind, self.n_out, self.n_in):
            if (m.n_out, m.n_in) != (self.n_out, self.n_in):
                raise ModelLoadError(f"layer {i} has a {m.n_out}x{m.n_in} matrix, layer 0 not")
            if self.kind != KIND_F32:  # mixed types across layers: one dense format for all
                done = [
                    pack_f32(dequantize_matrix(self.layer(j)), self.n_out, self.n_in)
                    for j in range(i)
                ]
                self._alloc(pack_f32(np.zeros((m.n_out, m.n_in), np.float32), m.n_out, m.n_in))
                for j, d in enumerate(done):
                    self.arrays[2][j] = d.f
            m = pack_f32(dequantize_matrix(m), m.n_out, m.n_in)
        for dst, src in zip(self.arrays, (m.q4, m.q8, m.f, m.sc), strict=True):
            dst[i] = src

    @property
    def nbytes(self) -> int:
        return sum(int(a.nbytes) for a in self.arrays)


def rope_tables(spec: LlamaSpec, n: int) -> tuple[F32, F32]:
    """cos/sin [n, head_dim/2] computed as transformers' default rotary embedding does
    (fp32 ``inv_freq · position``, then ``cos``/``sin``), so that positions match bit for bit."""
    dim = spec.head_dim
    inv = 1.0 / (spec.rope_base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    pos = torch.arange(n, dtype=torch.int64).float()
    freqs = pos[:, None] * inv[None, :].float()
    return (
        np.ascontiguousarray(freqs.cos().numpy(), np.float32),
        np.ascontiguousarray(freqs.sin().numpy(), np.float32),
    )


# --------------------------------------------------------------------------------------------
# model, cache
# --------------------------------------------------------------------------------------------


def _sync_threads() -> int:
    """Give the kernels ``torch.get_num_threads()`` numba threads; returns that count.

    numba's OpenMP layer and torch share the OpenMP runtime here, and the layer's start-up
    (on the first ``set_num_threads``) resets the runtime's default team size to all cores,
    which torch then reports as its own thread count: the caller's setting is restored.
    """
    n = torch.get_num_threads()
    numba.set_num_threads(max(1, min(n, numba.config.NUMBA_NUM_THREADS)))
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)
    return n


def _find_malloc_trim() -> Callable[[int], int] | None:
    try:
        fn = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None
    fn.argtypes = [ctypes.c_size_t]
    fn.restype = ctypes.c_int
    return cast(Callable[[int], int], fn)


_MALLOC_TRIM = _find_malloc_trim()


def _trim_heap() -> None:
    """Give the heap's free pages back to the OS (glibc only).

    Loading (packing copies) and a BLAS prefill (dequantised weights, activations of every
    prompt row) free tens of MB that glibc keeps in the heap for reuse; decoding never needs
    them again, so without a trim they would stay resident (~25 MB for the default model).
    """
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)


def _fresh_zeros(shape: tuple[int, ...]) -> F32:
    """A zero fp32 array in its own anonymous memory map.

    Pages are zero-filled by the kernel when first written, so a cache's resident size follows
    the positions actually used, and the map is returned to the OS when the array is dropped
    (from the malloc heap, freed caches would stay resident and grow with every request).
    """
    n = max(1, math.prod(shape)) * 4
    return np.frombuffer(mmap.mmap(-1, n), np.float32, math.prod(shape)).reshape(shape)


class StaticKVCache(KVCache):
    """Preallocated fp32 keys and values of every layer; ``crop`` only moves the length.

    Keys are stored transposed ([layers, kv_heads, head_dim, capacity]) for the attention
    kernel. The capacity doubles (a copy) when a forward needs more, up to ``max_positions``,
    so memory follows the context actually used rather than the model's maximum.

    >>> c = StaticKVCache(n_layers=2, n_kv_heads=1, head_dim=4, max_positions=100)
    >>> c.reserve(10); c.length = 10; c.crop(4); c.length
    4
    >>> c.crop(8); c.length  # never grows
    4
    """

    def __init__(
        self,
        *,
        n_layers: int,
        n_kv_heads: int,
        head_dim: int,
        max_positions: int,
        capacity: int = 256,
    ) -> None:
        self.max_positions = max_positions
        self.length = 0
        cap = max(1, min(capacity, max_positions))
        self.k = _fresh_zeros((n_layers, n_kv_heads, head_dim, cap))
        self.v = _fresh_zeros((n_layers, n_kv_heads, cap, head_dim))

    @property
    def length(self) -> int:
        return self._length

    @length.setter
    def length(self, n: int) -> None:
        self._length = int(n)

    @property
    def capacity(self) -> int:
        return int(self.v.shape[2])

    def reserve(self, n: int) -> None:
        """Make room for ``n`` positions (copying the cached ones)."""
        if n <= self.capacity:
            return
        if n > self.max_positions:
            raise RequestError(
                f"{n} positions asked for; the context is {self.max_positions}",
                code="context_length_exceeded",
            )
        cap = min(self.max_positions, max(n, 2 * self.capacity))
        n_layers, n_kv, hd, _ = self.k.shape
        k = _fresh_zeros((n_layers, n_kv, hd, cap))
        v = _fresh_zeros((n_layers, n_kv, cap, hd))
        k[..., : self.length] = self.k[..., : self.length]
        v[:, :, : self.length] = self.v[:, :, : self.length]
        self.k, self.v = k, v

    def crop(self, length: int) -> None:
        """Keep the first ``length`` positions (no-op when already shorter)."""
        self._length = min(self._length, max(0, int(length)))


class NativeLlama:
    """The packed weights of a Llama GGUF and the compiled forward over them."""

    def __init__(self, path: str | Path) -> None:
        p = Path(path)
        if not p.is_file():
            raise ModelLoadError(f"{p} not found")
        self.path = p
        g = _GGUF(p)
        s = self.spec = g.spec()
        hd = s.head_dim
        n = s.n_layers
        self.qkv, self.o, self.gu, self.down = _Stack(n), _Stack(n), _Stack(n), _Stack(n)
        self.attn_norm = np.empty((n, s.hidden), np.float32)
        self.ffn_norm = np.empty((n, s.hidden), np.float32)
        for i in range(n):
            b = f"blk.{i}."
            qkv = g.matrix(
                (b + "attn_q.weight", s.n_heads * hd, s.n_heads),
                (b + "attn_k.weight", s.n_kv_heads * hd, s.n_kv_heads),
                (b + "attn_v.weight", s.n_kv_heads * hd, 0),
                cols=s.hidden,
            )
            self.qkv.put(i, qkv)
            self.o.put(i, g.matrix((b + "attn_output.weight", s.hidden, 0), cols=s.n_heads * hd))
            gate_up = g.matrix(
                (b + "ffn_gate.weight", s.ffn, 0), (b + "ffn_up.weight", s.ffn, 0), cols=s.hidden
            )
            self.gu.put(i, gate_up)
            self.down.put(i, g.matrix((b + "ffn_down.weight", s.hidden, 0), cols=s.ffn))
            self.attn_norm[i] = g.vector(b + "attn_norm.weight", s.hidden)
            self.ffn_norm[i] = g.vector(b + "ffn_norm.weight", s.hidden)
        self.out_norm = g.vector("output_norm.weight", s.hidden)
        self.embedding = g.matrix(("token_embd.weight", s.vocab, 0), cols=s.hidden)
        self.tied = not g.has("output.weight")
        self.head = (
            self.embedding if self.tied else g.matrix(("output.weight", s.vocab, 0), cols=s.hidden)
        )
        self.cos, self.sin = rope_tables(s, s.max_positions)
        self._kinds = np.array(
            [self.qkv.kind, self.o.kind, self.gu.kind, self.down.kind, self.head.kind], np.int64
        )
        _trim_heap()

    @property
    def nbytes(self) -> int:
        """Bytes of the packed weights (the head counted once when tied)."""
        n = self.qkv.nbytes + self.o.nbytes + self.gu.nbytes + self.down.nbytes
        n += self.embedding.nbytes + (0 if self.tied else self.head.nbytes)
        return n + self.attn_norm.nbytes + self.ffn_norm.nbytes + self.out_norm.nbytes

    def new_cache(self, capacity: int = 256) -> StaticKVCache:
        s = self.spec
        return StaticKVCache(
            n_layers=s.n_layers,
            n_kv_heads=s.n_kv_heads,
            head_dim=s.head_dim,
            max_positions=s.max_positions,
            capacity=capacity,
        )

    def embed(self, ids: npt.NDArray[np.int64]) -> F32:
        """fp32 embedding rows of ``ids`` (1-D)."""
        e = self.embedding
        out = np.empty((ids.shape[0], self.spec.hidden), np.float32)
        _embed_rows(ids, e.kind, e.q4, e.q8, e.f, e.sc, out)
        return out

    def forward(
        self,
        ids: npt.NDArray[np.int64],
        cache: StaticKVCache,
        taps: npt.NDArray[np.int64],
        *,
        all_logits: bool = True,
    ) -> tuple[F32, F32]:
        """Logits [T, V] (``all_logits``, else [1, V] of the last token) and tap features
        [T, len(taps)·hidden] of T new tokens; the cache grows."""
        s = self.spec
        t_new = int(ids.shape[0])
        if t_new and (int(ids.min()) < 0 or int(ids.max()) >= s.vocab):
            raise ValueError(f"token id out of range 0..{s.vocab - 1}")
        pos0 = cache.length
        cache.reserve(pos0 + t_new)
        logits = np.empty((t_new if all_logits else min(t_new, 1), s.vocab), np.float32)
        feats = np.zeros((t_new, taps.shape[0] * s.hidden), np.float32)
        if t_new == 0:
            return logits, feats
        h = self.embed(ids)
        _sync_threads()
        if t_new >= PREFILL_MIN_TOKENS:
            self._prefill(h, pos0, cache, taps, feats, logits)
            cache.length = pos0 + t_new
            _trim_heap()
            return logits, feats
        hw = self.head
        _forward(
            h,
            pos0,
            cache.k,
            cache.v,
            self.cos,
            self.sin,
            s.eps,
            s.n_heads,
            s.n_kv_heads,
            s.ffn,
            self.attn_norm,
            self.ffn_norm,
            self.out_norm,
            self._kinds,
            self.qkv.arrays,
            self.o.arrays,
            self.gu.arrays,
            self.down.arrays,
            (hw.q4, hw.q8, hw.f, hw.sc),
            taps,
            feats,
            logits,
        )
        cache.length = pos0 + t_new
        return logits, feats

    def _prefill(
        self,
        h: F32,
        pos0: int,
        cache: StaticKVCache,
        taps: npt.NDArray[np.int64],
        feats: F32,
        logits: F32,
    ) -> None:
        """The forward of a long run of tokens with BLAS matrix products.

        The quantised kernels compute every product in scalar-vector form; for many rows a
        BLAS GEMM over the dequantised weights (exactly the reference's fp32 values, a slice of
        rows at a time in a reused buffer) is several times faster. Rows differ from the
        kernels' only by summation order.
        """
        s = self.spec
        t_new, d = h.shape
        hd, ffn = s.head_dim, s.ffn
        buf = np.empty(_BLAS_ROWS * max(d, ffn, s.n_heads * hd), np.float32)
        xn = np.empty((t_new, d), np.float32)
        att = np.empty((t_new, s.n_heads * hd), np.float32)
        act = np.empty((t_new, ffn), np.float32)
        qkv = np.empty((t_new, self.qkv.n_out), np.float32)
        gu = np.empty((t_new, self.gu.n_out), np.float32)
        tmp = np.empty((t_new, d), np.float32)
        th = torch.from_numpy

        def matmul(x: F32, m: Matrix, out: F32) -> F32:
            """out = x @ Wᵀ, W dequantised ``_BLAS_ROWS`` rows at a time (an L2-sized slice)."""
            for r0 in range(0, m.n_out, _BLAS_ROWS):
                r1 = min(m.n_out, r0 + _BLAS_ROWS)
                t0, t1 = r0 // TILE, (r1 + TILE - 1) // TILE
                w = buf[: (r1 - r0) * m.n_in].reshape(r1 - r0, m.n_in)
                _dequantize_into(m.kind, m.q4[t0:t1], m.q8[t0:t1], m.f[t0:t1], m.sc[t0:t1], w)
                torch.mm(th(x), th(w).t(), out=th(out)[:, r0:r1])
            return out

        tap_list = [int(t) for t in taps]
        for layer in range(s.n_layers):
            _rmsnorm(h, self.attn_norm[layer], s.eps, xn)
            matmul(xn, self.qkv.layer(layer), qkv)
            _attention(
                qkv,
                cache.k[layer],
                cache.v[layer],
                pos0,
                self.cos,
                self.sin,
                s.n_heads,
                s.n_kv_heads,
                att,
            )
            h += matmul(att, self.o.layer(layer), tmp)
            _rmsnorm(h, self.ffn_norm[layer], s.eps, xn)
            _swiglu(matmul(xn, self.gu.layer(layer), gu), ffn, act)
            h += matmul(act, self.down.layer(layer), tmp)
            for k, tap in enumerate(tap_list):
                if tap == layer:
                    feats[:, k * d : (k + 1) * d] = h
        _rmsnorm(h, self.out_norm, s.eps, xn)
        hw = self.head
        if logits.shape[0] < 16:  # the last token only: the kernel, no dequantised head
            x_last = np.ascontiguousarray(xn[t_new - logits.shape[0] :])
            _matmul(x_last, hw.kind, hw.q4, hw.q8, hw.f, hw.sc, logits)
        else:
            matmul(xn, hw, logits)

    def hf_config(self) -> Any:
        """A transformers ``LlamaConfig`` with this model's shape (for drafters and tools)."""
        from transformers import LlamaConfig

        s = self.spec
        return LlamaConfig(
            vocab_size=s.vocab,
            hidden_size=s.hidden,
            intermediate_size=s.ffn,
            num_hidden_layers=s.n_layers,
            num_attention_heads=s.n_heads,
            num_key_value_heads=s.n_kv_heads,
            head_dim=s.head_dim,
            max_position_embeddings=s.max_positions,
            rms_norm_eps=s.eps,
            rope_parameters={"rope_type": "default", "rope_theta": s.rope_base},
            tie_word_embeddings=self.tied,
        )


class _LazyHFModel:
    """What ``TargetModel.model`` offers, without holding a transformers model in memory.

    Drafters read the embedding through ``get_input_embeddings()``; the fp32 embedding is
    dequantised on first use (and is the LM head too when tied). Everything else (``generate``,
    ``__call__`` for ``features_batch``, ``state_dict``...) goes to the fp32 transformers model
    of the same GGUF, loaded on first use: the reference the native forward is tested against.
    """

    def __init__(self, native: NativeLlama) -> None:
        self._native = native
        self._config: Any = None
        self._hf: Any = None
        self._emb: Any = None
        self._head: Any = None

    @property
    def config(self) -> Any:
        if self._config is None:
            self._config = self._native.hf_config()
        return self._config

    def get_input_embeddings(self) -> torch.nn.Embedding:
        if self._emb is None:
            w = torch.from_numpy(dequantize_matrix(self._native.embedding))
            self._emb = torch.nn.Embedding.from_pretrained(w, freeze=True)  # type: ignore[no-untyped-call]
        emb: torch.nn.Embedding = self._emb
        return emb

    def get_output_embeddings(self) -> torch.nn.Module:
        if self._head is None:
            if self._native.tied:
                w = self.get_input_embeddings().weight
            else:
                w = torch.from_numpy(dequantize_matrix(self._native.head))
            lin = torch.nn.Linear(w.shape[1], w.shape[0], bias=False)
            lin.weight = torch.nn.Parameter(w, requires_grad=False)
            self._head = lin
        head: torch.nn.Module = self._head
        return head

    @property
    def hf(self) -> Any:
        """The transformers model of the same file (fp32, loaded on first use)."""
        if self._hf is None:
            from noc_assistant.serving.loading import _offline

            _offline()
            from transformers import AutoModelForCausalLM

            p = self._native.path
            try:
                m = AutoModelForCausalLM.from_pretrained(
                    p.parent, gguf_file=p.name, dtype=torch.float32
                )
            except (OSError, ValueError) as exc:
                raise ModelLoadError(f"cannot load {p} through transformers: {exc}") from exc
            m.eval()  # type: ignore[no-untyped-call]
            use_row_major_linears(m)  # as TargetModel does on the CPU
            use_grouped_attention(m)
            self._hf = m
        return self._hf

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.hf(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.hf, name)


class NativeTargetModel(TargetModel):
    """A :class:`TargetModel` whose ``forward`` is the native kernels' (CPU, fp32 activations).

    ``model`` is a stand-in (:class:`_LazyHFModel`): its embeddings come from the packed
    weights; training helpers that need a real transformers model get one on first use.
    """

    def __init__(
        self,
        native: NativeLlama,
        tokenizer: TextTokenizer,
        name: str,
        n_taps: int = 3,
    ) -> None:
        s = native.spec
        self.native = native
        self.device = torch.device("cpu")
        self.dtype = torch.float32
        self.model = _LazyHFModel(native)
        self.tokenizer = tokenizer
        self.name = name
        self.hidden_size = s.hidden
        self.num_layers = s.n_layers
        self.num_heads = s.n_heads
        self.num_kv_heads = s.n_kv_heads
        self.vocab_size = s.vocab
        self.max_positions = s.max_positions
        self.tap_layers = build_target_layer_ids(s.n_layers, n_taps)
        self._taps = np.array(self.tap_layers, np.int64)

    def embed(self, ids: Tensor) -> Tensor:
        flat = ids.reshape(-1).to(torch.int64).numpy()
        out = torch.from_numpy(self.native.embed(np.ascontiguousarray(flat)))
        return out.reshape(*ids.shape, self.hidden_size)

    @property
    def lm_head_weight(self) -> Tensor:
        w: Tensor = self.model.get_output_embeddings().weight
        return w

    def new_cache(self) -> StaticKVCache:
        return self.native.new_cache()

    @torch.inference_mode()
    def forward(
        self, ids: Sequence[int] | Tensor, cache: KVCache, *, all_logits: bool = True
    ) -> TargetOutput:
        """Run ``ids`` after the ``cache.length`` tokens already cached; the cache grows.

        ``all_logits=False`` returns the last token's logits only ([1, V]): a prompt's prefill
        needs no more, and the LM head is then computed for one row instead of T.
        """
        if not isinstance(cache, StaticKVCache):
            raise TypeError("a native target needs the cache of its own new_cache()")
        arr = np.ascontiguousarray(
            torch.as_tensor(ids, dtype=torch.long).reshape(-1).numpy(), dtype=np.int64
        )
        logits, feats = self.native.forward(arr, cache, self._taps, all_logits=all_logits)
        return TargetOutput(logits=torch.from_numpy(logits), features=torch.from_numpy(feats))


def load_native_gguf(
    path: str | Path,
    *,
    name: str | None = None,
    n_taps: int = 3,
    tokenizer: TextTokenizer | None = None,
) -> NativeTargetModel:
    """Load a Llama GGUF for the native forward; the tokeniser is read from the file unless
    one is given (tokenisers are slow to build from GGUF metadata: callers may cache one)."""
    p = Path(path)
    native = NativeLlama(p)
    if tokenizer is None:
        tokenizer = gguf_tokenizer(p)
    return NativeTargetModel(native, tokenizer, name or p.stem, n_taps=n_taps)


class FastTokenizer:
    """A saved Hugging Face fast tokeniser driven without transformers.

    Loading transformers for its tokeniser costs ~85 MB of resident memory and over a second
    of start-up, as much as the model's packed weights; the ids come from the Rust
    ``tokenizers`` library either way. The chat template is rendered as transformers renders it
    (sandboxed jinja2, ``trim_blocks``, ``lstrip_blocks``, ``loopcontrols``, its ``tojson``) and
    the result encoded without added special tokens, so ``chat_prompt``, ``encode``, ``decode``
    and ``eos_token_ids`` equal :class:`HFTokenizer`'s on the same folder.
    """

    def __init__(self, folder: Path) -> None:
        import jinja2
        import tokenizers
        from jinja2.ext import loopcontrols
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        try:
            cfg = json.loads((folder / "tokenizer_config.json").read_text())
            self._tok = tokenizers.Tokenizer.from_file(str(folder / "tokenizer.json"))
            tpl = folder / "chat_template.jinja"
            template = tpl.read_text() if tpl.is_file() else cfg.get("chat_template")
        except Exception as exc:  # tokenizers raises plain Exception on a bad file
            raise ModelLoadError(f"cannot load the tokeniser in {folder}: {exc}") from exc
        if not isinstance(template, str) or not template:
            raise ModelLoadError(f"the tokeniser in {folder} has no chat template")
        self._specials: dict[str, str] = {}
        for key in ("bos_token", "eos_token", "unk_token", "pad_token"):
            v = cfg.get(key)
            v = v.get("content") if isinstance(v, dict) else v
            if isinstance(v, str):
                self._specials[key] = v

        def raise_exception(message: str) -> None:
            raise jinja2.exceptions.TemplateError(message)

        def tojson(
            x: Any,
            ensure_ascii: bool = False,
            indent: int | None = None,
            separators: Any = None,
            sort_keys: bool = False,
        ) -> str:
            return json.dumps(
                x,
                ensure_ascii=ensure_ascii,
                indent=indent,
                separators=separators,
                sort_keys=sort_keys,
            )

        def strftime_now(fmt: str) -> str:
            return datetime.now().strftime(fmt)

        env = ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols]
        )
        env.filters["tojson"] = tojson
        env.globals["raise_exception"] = raise_exception
        env.globals["strftime_now"] = strftime_now
        self._template = env.from_string(template)

    def _id(self, token: str | None) -> int | None:
        if token is None:
            return None
        tid = self._tok.token_to_id(token)
        return None if tid is None else int(tid)

    @property
    def eos_token_ids(self) -> frozenset[int]:
        ids: set[int] = set()
        eos = self._id(self._specials.get("eos_token"))
        if eos is not None:
            ids.add(eos)
        unk = self._id(self._specials.get("unk_token"))
        for name in ("<|im_end|>", "<|endoftext|>"):
            tid = self._id(name)
            if tid is not None and tid != unk:
                ids.add(tid)
        return frozenset(ids)

    @property
    def backend(self) -> Any:
        """The ``tokenizers.Tokenizer`` itself (structured decoding builds its vocabulary
        from it: :func:`noc_assistant.serving.grammar.ll_tokenizer`)."""
        return self._tok

    def encode(self, text: str) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: Sequence[int]) -> str:
        return str(self._tok.decode(list(ids), skip_special_tokens=True))

    def chat_prompt(self, messages: Sequence[dict[str, str]]) -> list[int]:
        text = self._template.render(
            messages=[dict(m) for m in messages],
            tools=None,
            documents=None,
            add_generation_prompt=True,
            **self._specials,
        )
        return self.encode(text)


def gguf_tokenizer(path: Path, cache_dir: Path | None = None) -> TextTokenizer:
    """The tokeniser stored in a GGUF file.

    Building it from GGUF metadata goes through transformers (seconds, and ~150 MB for the
    metadata arrays); with ``cache_dir`` that happens once, the result is saved there and later
    loads are a :class:`FastTokenizer` over the saved files. Without ``cache_dir`` the
    transformers tokeniser is returned.
    """
    from noc_assistant.serving.loading import _offline

    if cache_dir is not None and (cache_dir / "tokenizer.json").is_file():
        return FastTokenizer(cache_dir)
    _offline()
    from transformers import AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"cannot load the tokeniser of {path}: {exc}") from exc
    if cache_dir is None:
        return HFTokenizer(tok)
    cache_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = cache_dir.with_name(cache_dir.name + f".tmp{os.getpid()}")
    tok.save_pretrained(tmp)
    with contextlib.suppress(OSError):  # another process got there first
        tmp.rename(cache_dir)
    return FastTokenizer(cache_dir)
