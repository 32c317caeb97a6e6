"""Reading Llama GGUF files for the native engine: header, metadata, tensors.

Rows of the query and key projections are reordered once at load from GGUF's interleaved
rotary layout back to the half-split layout of Hugging Face models (a permutation of whole
rows: exact). Q4_1 and Q8_0 tensors are packed as they are; any other type is dequantised to
fp32 by gguf's own code.
"""

from __future__ import annotations

import math
import mmap
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from noc_assistant.serving.errors import ModelLoadError
from noc_assistant.serving.native.jit import F32
from noc_assistant.serving.native.weights import Matrix, pack_f32, pack_q4_1, pack_q8_0

__all__ = ["GGUFTensorInfo", "LlamaSpec", "read_gguf_header"]


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
