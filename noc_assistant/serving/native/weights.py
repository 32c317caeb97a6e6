"""Packed weights of the native engine: GGUF quant blocks rearranged into the kernels' tiles.

See :mod:`noc_assistant.serving.native.kernels` for the tiled layout. Types other than Q4_1
and Q8_0 are kept as dense fp32 tiles.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from noc_assistant.serving.errors import ModelLoadError
from noc_assistant.serving.native.jit import F32
from noc_assistant.serving.native.kernels import KIND_F32, KIND_Q4_1, KIND_Q8_0, TILE, _embed_rows

__all__ = ["Matrix", "dequantize_matrix", "pack_f32", "pack_q4_1", "pack_q8_0"]


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
