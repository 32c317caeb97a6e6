"""The compiled kernels of the native engine: quantised matrix products, attention, the forward.

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

Threads: the kernels use ``torch.get_num_threads()`` numba threads (at most
``NUMBA_NUM_THREADS``), parallel over row tiles (matrices) and over heads (attention). The
first use on a machine compiles the kernels (about a minute on two cores); numba caches them
on disk. That cache is keyed on the file of each compiled function alone, and the kernels call
one another and read this module's constants: they all stay in this one file, so that any
change to one of them recompiles every kernel that could have compiled it in.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numba import prange

from noc_assistant.serving.native.jit import F32, _kernel

__all__ = ["KIND_F32", "KIND_Q4_1", "KIND_Q8_0", "TILE"]

#: Output rows per weight tile: the unit of the vectorised inner loop and of the thread split.
TILE = 64

KIND_Q4_1 = 0
KIND_Q8_0 = 1
KIND_F32 = 2

#: Rows of x per register group in the multi-row kernels.
_GROUP = 4


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
    _mm_blocks(x, qt, sc, out, True)


@_kernel(parallel=True)
def _mm_q8_0(x: F32, qt: Any, sc: F32, out: F32) -> None:  # pragma: no cover - compiled
    """out = x @ Wᵀ for a Q8_0 tiled W: codes qt [T, nb, 32·TILE] i8, scales sc [T, nb, TILE]."""
    _mm_blocks(x, qt, sc, out, False)


@_kernel(inline=True)
def _mm_blocks(
    x: F32, qt: Any, sc: F32, out: F32, q4_1: bool
) -> None:  # pragma: no cover - compiled
    """out = x @ Wᵀ for a block-quantised tiled W (Q4_1 when ``q4_1``, else Q8_0): in each
    row tile, ``_GROUP`` rows of x at a time, then the rows left one at a time. Inlined into
    :func:`_mm_q4_1` and :func:`_mm_q8_0`, where ``q4_1`` is a constant: each compiles to the
    code it had when it spelled the loops out itself (the same results, bit for bit, and the
    same vector arithmetic in the assembly)."""
    nrows = x.shape[0]
    ntiles, nb = qt.shape[0], qt.shape[1]
    xs = _block_sums(x, nb if q4_1 else 0)
    groups = nrows // _GROUP
    for t in prange(ntiles):
        acc = np.empty(_GROUP * TILE, np.float32)
        part = np.empty(_GROUP * TILE, np.float32)
        for g in range(groups):
            r0 = g * _GROUP
            acc[:] = 0.0
            for b in range(nb):
                part[:] = 0.0
                if q4_1:
                    _q4_1_group(x, qt[t, b], sc[t, b], xs, r0, b, part, acc)
                else:
                    _q8_0_group(x, qt[t, b], sc[t, b], r0, b, part, acc)
            _store(acc, out, t, r0, _GROUP)
        for r in range(groups * _GROUP, nrows):
            acc[:TILE] = 0.0
            for b in range(nb):
                if q4_1:
                    _q4_1_row(x, qt[t, b], sc[t, b], xs[r, b], r, b, acc)
                else:
                    _q8_0_row(x, qt[t, b], sc[t, b], r, b, acc)
            _store(acc, out, t, r, 1)


@_kernel(inline=True)
def _q4_1_group(
    x: F32, q: Any, s: F32, xs: F32, r0: int, b: int, part: F32, acc: F32
) -> None:  # pragma: no cover - compiled
    """Add Q4_1 block ``b`` (codes q, scales s) of a tile to ``acc`` for rows r0..r0+3 of x
    (``part``: zeroed scratch)."""
    o = b * 32
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
    for i in range(_GROUP):
        c = xs[r0 + i, b]
        for n in range(TILE):
            acc[i * TILE + n] += s[n] * part[i * TILE + n] + s[TILE + n] * c


@_kernel(inline=True)
def _q8_0_group(
    x: F32, q: Any, s: F32, r0: int, b: int, part: F32, acc: F32
) -> None:  # pragma: no cover - compiled
    """Add Q8_0 block ``b`` (codes q, scales s) of a tile to ``acc`` for rows r0..r0+3 of x
    (``part``: zeroed scratch)."""
    o = b * 32
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
    for i in range(_GROUP):
        for n in range(TILE):
            acc[i * TILE + n] += s[n] * part[i * TILE + n]


@_kernel(inline=True)
def _q4_1_row(
    x: F32, q: Any, s: F32, c: np.float32, r: int, b: int, acc: F32
) -> None:  # pragma: no cover - compiled
    """Add Q4_1 block ``b`` of a tile to ``acc`` for row r of x (``c``: its block sum)."""
    o = b * 32
    for n in range(TILE):
        p = np.float32(0.0)
        for j in range(16):
            v = q[j * TILE + n]
            p += x[r, o + j] * np.float32(np.uint8(v & 15))
            p += x[r, o + j + 16] * np.float32(np.uint8(v >> 4))
        acc[n] += s[n] * p + s[TILE + n] * c


@_kernel(inline=True)
def _q8_0_row(
    x: F32, q: Any, s: F32, r: int, b: int, acc: F32
) -> None:  # pragma: no cover - compiled
    """Add Q8_0 block ``b`` of a tile to ``acc`` for row r of x."""
    o = b * 32
    for n in range(TILE):
        p = np.float32(0.0)
        for j in range(32):
            p += x[r, o + j] * np.float32(q[j * TILE + n])
        acc[n] += s[n] * p


@_kernel(inline=True)
def _store(acc: F32, out: F32, t: int, r0: int, rows: int) -> None:  # pragma: no cover - compiled
    """Write ``rows`` rows of a tile's sums to out from row r0 (the tile's valid columns)."""
    n_out = out.shape[1]
    for i in range(rows):
        for n in range(min(TILE, n_out - t * TILE)):
            out[r0 + i, t * TILE + n] = acc[i * TILE + n]


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


@_kernel()
def _rope_append(
    qkv: F32,
    kcs: Any,
    vcs: Any,
    layer: int,
    seqs: Any,
    pos: Any,
    cos: F32,
    sin: F32,
    n_heads: int,
    n_kv: int,
) -> None:  # pragma: no cover - compiled
    """Rotary embedding (rotate-half form) of the new rows' q and k, in place, then their keys
    and values into the caches: row t to layer ``layer`` of cache ``seqs[t]`` (``kcs``/``vcs``:
    typed lists) at position ``pos[t]``."""
    hd = kcs[0].shape[2]
    half = hd // 2
    kv0 = n_heads * hd
    v0 = kv0 + n_kv * hd
    for t in range(qkv.shape[0]):
        p = pos[t]
        kc = kcs[seqs[t]][layer]
        vc = vcs[seqs[t]][layer]
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


@_kernel()
def _scores(q: F32, kg: F32, sc: F32) -> None:  # pragma: no cover - compiled
    """``sc[s] = (q / sqrt(D)) · k_s`` for the first ``len(sc)`` cached positions of one key
    head ``kg`` [D, C], 4 head dimensions per pass over the scores."""
    hd = q.shape[0]
    length = sc.shape[0]
    scale = np.float32(1.0 / math.sqrt(hd))
    sc[:] = 0.0
    i = 0
    while i + 4 <= hd:
        q0 = q[i] * scale
        q1 = q[i + 1] * scale
        q2 = q[i + 2] * scale
        q3 = q[i + 3] * scale
        for s in range(length):
            sc[s] += ((q0 * kg[i, s] + q1 * kg[i + 1, s]) + q2 * kg[i + 2, s]) + q3 * kg[i + 3, s]
        i += 4
    while i < hd:
        qi = q[i] * scale
        for s in range(length):
            sc[s] += qi * kg[i, s]
        i += 1


@_kernel()
def _softmax_weights(sc: F32, bits: Any) -> np.float32:  # pragma: no cover - compiled
    """Turn scores into unnormalised softmax weights in place (``exp(s - max)``); returns
    their sum, the softmax's denominator (``bits`` is int32 scratch for :func:`_exp`)."""
    length = sc.shape[0]
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
    return (t0 + t1) + (t2 + t3)


@_kernel()
def _weighted_values(
    w: F32, vg: F32, tot: np.float32, acc: F32, out: F32
) -> None:  # pragma: no cover - compiled
    """``out = Σ_s w[s] · v_s / tot`` over the first ``len(w)`` positions of one value head
    ``vg`` [C, D], 4 positions per pass over the accumulator ``acc`` [D]."""
    hd = acc.shape[0]
    length = w.shape[0]
    acc[:] = 0.0
    s = 0
    while s + 4 <= length:
        p0 = w[s]
        p1 = w[s + 1]
        p2 = w[s + 2]
        p3 = w[s + 3]
        for i in range(hd):
            acc[i] += ((p0 * vg[s, i] + p1 * vg[s + 1, i]) + p2 * vg[s + 2, i]) + p3 * vg[s + 3, i]
        s += 4
    while s < length:
        ps = w[s]
        for i in range(hd):
            acc[i] += ps * vg[s, i]
        s += 1
    for i in range(hd):
        out[i] = acc[i] / tot


@_kernel(parallel=True)
def _attention(
    qkv: F32,
    kcs: Any,
    vcs: Any,
    layer: int,
    seqs: Any,
    pos: Any,
    cos: F32,
    sin: F32,
    n_heads: int,
    n_kv: int,
    out: F32,
) -> None:  # pragma: no cover - compiled
    """RoPE on the new rows' q and k, append k and v to the caches, causal GQA attention.

    ``qkv`` [T, (H + 2·Hkv)·D] holds q, k, v of T new tokens; row t belongs to sequence
    ``seqs[t]`` at position ``pos[t]`` and attends to positions 0..pos[t] of that sequence's
    cache (rows of several sequences share one call: batched decoding). ``kcs``/``vcs`` are
    typed lists of every sequence's caches, ``kcs[s]`` [layers, Hkv, D, C] the keys transposed
    (so that the scores of all positions for one head dimension are a unit-stride vector),
    ``vcs[s]`` [layers, Hkv, C, D] the values. A row's result depends only on its own sequence
    and position, whatever the other rows.
    """
    _rope_append(qkv, kcs, vcs, layer, seqs, pos, cos, sin, n_heads, n_kv)
    t_new = qkv.shape[0]
    hd = kcs[0].shape[2]
    group = n_heads // n_kv
    longest = 0
    for t in range(t_new):
        longest = max(longest, pos[t] + 1)
    for h in prange(n_heads):
        scores = np.empty(longest, np.float32)
        bits = np.empty(longest, np.int32)
        acc = np.empty(hd, np.float32)
        for t in range(t_new):
            kg = kcs[seqs[t]][layer, h // group]
            vg = vcs[seqs[t]][layer, h // group]
            sc = scores[: pos[t] + 1]
            _scores(qkv[t, h * hd : (h + 1) * hd], kg, sc)
            tot = _softmax_weights(sc, bits)
            _weighted_values(sc, vg, tot, acc, out[t, h * hd : (h + 1) * hd])


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
    seqs: Any,
    pos: Any,
    kcs: Any,
    vcs: Any,
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
    """All layers, the final norm and the LM head for the T rows of ``h`` (updated in place):
    row t of sequence ``seqs[t]`` (an index into the cache lists ``kcs``/``vcs``) at position
    ``pos[t]``; ``logits`` has T rows, or fewer for the last rows only."""
    t_new, d = h.shape
    hd = kcs[0].shape[2]
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
        _attention(qkv, kcs, vcs, layer, seqs, pos, cos, sin, n_heads, n_kv, att)
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
