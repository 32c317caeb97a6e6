"""The native model: packed weights of every layer and the forward over a static KV cache.

A decoding step or verify round (every layer, the final norm and the LM head) is one call of
one compiled numba function (:mod:`noc_assistant.serving.native.kernels`) over a preallocated
KV cache. Prompts of ``PREFILL_MIN_TOKENS`` tokens or more go through BLAS on weights
dequantised one layer at a time instead (many rows: a GEMM is several times faster).
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, cast

import numba
import numpy as np
import numpy.typing as npt
import torch

from noc_assistant.serving.errors import ModelLoadError
from noc_assistant.serving.native.gguf_file import _GGUF, LlamaSpec
from noc_assistant.serving.native.jit import F32, typed_list
from noc_assistant.serving.native.kernels import (
    TILE,
    _attention,
    _dequantize_into,
    _embed_rows,
    _forward,
    _matmul,
    _rmsnorm,
    _swiglu,
)
from noc_assistant.serving.native.kv_cache import StaticKVCache
from noc_assistant.serving.native.weights import Matrix, _Stack

__all__ = ["PREFILL_MIN_TOKENS", "NativeLlama", "rope_tables"]

#: Forwards of at least this many tokens (prompts) multiply through BLAS on weights dequantised
#: layer by layer; shorter ones (decoding, verify rounds) run the quantised kernels.
PREFILL_MIN_TOKENS = 64

#: Weight rows dequantised per BLAS call in a prefill (a slice that stays in L2).
_BLAS_ROWS = 512


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
        t_new = self._check_ids(ids)
        if t_new < PREFILL_MIN_TOKENS:
            n_logits = t_new if all_logits else min(t_new, 1)
            return self._kernel_forward([ids], [cache], taps, n_logits)
        pos0 = cache.length
        cache.reserve(pos0 + t_new)
        logits = np.empty((t_new if all_logits else 1, s.vocab), np.float32)
        feats = np.zeros((t_new, taps.shape[0] * s.hidden), np.float32)
        h = self.embed(ids)
        _sync_threads()
        self._prefill(h, pos0, cache, taps, feats, logits)
        cache.length = pos0 + t_new
        _trim_heap()
        return logits, feats

    def forward_many(
        self,
        calls: Sequence[tuple[npt.NDArray[np.int64], StaticKVCache]],
        taps: npt.NDArray[np.int64],
    ) -> list[tuple[F32, F32]]:
        """:meth:`forward` (all logits) of several sequences, each with its own cache.

        The short ones (decoding steps, verify rounds) share one kernel call: every matrix is
        read once for all their rows, which is what makes serving concurrent requests cheaper
        than serving them one after another. The kernels are batch invariant, so each
        sequence's logits and features are bit-identical to its own :meth:`forward`. Prompts
        of ``PREFILL_MIN_TOKENS`` tokens or more run on their own (BLAS).
        """
        if len({id(c) for _, c in calls}) != len(calls):
            raise ValueError("forward_many needs a distinct cache per sequence")
        out: list[tuple[F32, F32] | None] = [None] * len(calls)
        short = [i for i, (ids, _) in enumerate(calls) if self._check_ids(ids) < PREFILL_MIN_TOKENS]
        if short:
            logits, feats = self._kernel_forward(
                [calls[i][0] for i in short], [calls[i][1] for i in short], taps
            )
            r = 0
            for i in short:
                n = int(calls[i][0].shape[0])
                out[i] = (logits[r : r + n], feats[r : r + n])
                r += n
        for i, (ids, cache) in enumerate(calls):
            if out[i] is None:
                out[i] = self.forward(ids, cache, taps)
        return [o for o in out if o is not None]

    def _check_ids(self, ids: npt.NDArray[np.int64]) -> int:
        vocab = self.spec.vocab
        if ids.shape[0] and (int(ids.min()) < 0 or int(ids.max()) >= vocab):
            raise ValueError(f"token id out of range 0..{vocab - 1}")
        return int(ids.shape[0])

    def _kernel_forward(
        self,
        ids: Sequence[npt.NDArray[np.int64]],
        caches: Sequence[StaticKVCache],
        taps: npt.NDArray[np.int64],
        n_logits: int | None = None,
    ) -> tuple[F32, F32]:
        """One compiled call over the new tokens of every sequence (rows in order): the logits
        of the last ``n_logits`` rows (default: every row; the LM head runs for those only)
        and the features of every row; each cache grows by its sequence's tokens."""
        s = self.spec
        lengths = [int(a.shape[0]) for a in ids]
        rows = sum(lengths)
        logits = np.empty((rows if n_logits is None else n_logits, s.vocab), np.float32)
        feats = np.zeros((rows, taps.shape[0] * s.hidden), np.float32)
        if rows == 0:
            return logits, feats
        for a, c in zip(ids, caches, strict=True):
            c.reserve(c.length + int(a.shape[0]))
        seqs = np.repeat(np.arange(len(caches), dtype=np.int64), lengths)
        pos = np.concatenate(
            [
                np.arange(c.length, c.length + n, dtype=np.int64)
                for c, n in zip(caches, lengths, strict=True)
            ]
        )
        h = self.embed(np.ascontiguousarray(np.concatenate(ids), dtype=np.int64))
        _sync_threads()
        hw = self.head
        _forward(
            h,
            seqs,
            pos,
            typed_list([c.k for c in caches]),
            typed_list([c.v for c in caches]),
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
        for c, n in zip(caches, lengths, strict=True):
            c.length = c.length + n
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
        kcs, vcs = typed_list([cache.k]), typed_list([cache.v])
        seqs = np.zeros(t_new, np.int64)
        pos = np.arange(pos0, pos0 + t_new, dtype=np.int64)
        for layer in range(s.n_layers):
            _rmsnorm(h, self.attn_norm[layer], s.eps, xn)
            matmul(xn, self.qkv.layer(layer), qkv)
            _attention(
                qkv,
                kcs,
                vcs,
                layer,
                seqs,
                pos,
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
