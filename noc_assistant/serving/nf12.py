"""NF12: lossless 12-bit storage of BF16 weights (research/dspine.md §5.1).

A BF16 value is ``sign | exponent(8) | mantissa(7)``. In trained weights the upper exponent
nibble is almost always ``0111`` (magnitudes in [2⁻¹⁵, 2)), so NF12 keeps
``sign | low exponent nibble | mantissa`` = 12 bits, packs two values into three bytes, and
stores every other value (zeros, tiny or large magnitudes) as an *escape*: its index and its
original 16 bits. Decoding restores ``0111``, then overwrites the escapes: bit-exact BF16.

NF12 is a **storage** format here: :func:`load_nf12_model` decodes it on load, and the engine
runs the decoded weights at its own dtype (fp32 on a CPU, bf16 on a GPU), so the resident
weights take what a BF16 checkpoint loaded the same way takes. It saves a quarter of the disk
and download of BF16; keeping weights in NF12 in GPU memory would need a decoding matmul
kernel, which the engine does not have.

>>> import torch
>>> w = torch.tensor([0.5, -1.25, 0.0, 3.0, 1e-3], dtype=torch.bfloat16)
>>> enc = encode_tensor(w)
>>> enc.escape_count, torch.equal(decode_tensor(enc).view(torch.int16), w.view(torch.int16))
(2, True)
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from noc_assistant.serving.errors import Nf12Error

__all__ = [
    "NF12_FILE",
    "Nf12Report",
    "Nf12Tensor",
    "convert_model_dir",
    "decode_tensor",
    "encode_tensor",
    "load_nf12",
    "load_nf12_model",
    "save_nf12",
]

NF12_FILE = "model.nf12.safetensors"
_NIBBLE = 0x7  # upper exponent nibble kept implicit


@dataclass
class Nf12Tensor:
    """One encoded tensor: packed 12-bit codes and the escapes."""

    shape: tuple[int, ...]
    packed: np.ndarray  # uint8, 3 bytes per 2 values
    esc_idx: np.ndarray  # int32 (tensors below 2**31 values)
    esc_val: np.ndarray  # uint16

    @property
    def numel(self) -> int:
        return int(np.prod(self.shape)) if self.shape else 1

    @property
    def escape_count(self) -> int:
        return int(self.esc_idx.size)

    @property
    def nbytes(self) -> int:
        return int(self.packed.nbytes + self.esc_idx.size * 4 + self.esc_val.nbytes)


def encode_tensor(t: Tensor) -> Nf12Tensor:
    """Encode a BF16 tensor (raises :class:`Nf12Error` for any other dtype)."""
    if t.dtype != torch.bfloat16:
        raise Nf12Error(f"NF12 encodes bfloat16 tensors, got {t.dtype}")
    u = t.detach().contiguous().view(torch.int16).numpy().view(np.uint16).reshape(-1)
    esc = ((u >> 11) & 0xF) != _NIBBLE
    codes = ((u >> 4) & 0x800) | (u & 0x7FF)
    codes[esc] = 0
    if codes.size % 2:
        codes = np.concatenate([codes, np.zeros(1, dtype=np.uint16)])
    a, b = codes[0::2], codes[1::2]
    packed = np.empty((a.size, 3), dtype=np.uint8)
    packed[:, 0] = a & 0xFF
    packed[:, 1] = ((a >> 8) & 0xF) | ((b & 0xF) << 4)
    packed[:, 2] = (b >> 4) & 0xFF
    if u.size >= 2**31:
        raise Nf12Error("NF12 tensors must have fewer than 2**31 values")
    idx = np.nonzero(esc)[0].astype(np.int32)
    return Nf12Tensor(tuple(t.shape), packed.reshape(-1), idx, u[idx].copy())


def decode_tensor(enc: Nf12Tensor) -> Tensor:
    """Decode to a BF16 tensor, bit-exact."""
    n = enc.numel
    p = enc.packed.reshape(-1, 3).astype(np.uint16)
    a = p[:, 0] | ((p[:, 1] & 0xF) << 8)
    b = (p[:, 1] >> 4) | (p[:, 2] << 4)
    codes = np.empty(p.shape[0] * 2, dtype=np.uint16)
    codes[0::2], codes[1::2] = a, b
    codes = codes[:n]
    u = ((codes & 0x800) << 4) | (_NIBBLE << 11) | (codes & 0x7FF)
    u[enc.esc_idx] = enc.esc_val
    return (
        torch.from_numpy(u.astype(np.uint16).view(np.int16).copy())
        .view(torch.bfloat16)
        .reshape(enc.shape)
    )


@dataclass
class Nf12Report:
    """Sizes and escape rate of an encoded state dict."""

    tensors: int
    values: int
    escapes: int
    bf16_bytes: int
    nf12_bytes: int

    @property
    def escape_rate(self) -> float:
        return self.escapes / self.values if self.values else 0.0

    @property
    def ratio(self) -> float:
        return self.nf12_bytes / self.bf16_bytes if self.bf16_bytes else 0.0


def save_nf12(state: Mapping[str, Tensor], path: str | Path) -> Nf12Report:
    """Encode every tensor of ``state`` (all BF16) into one safetensors file."""
    from safetensors.numpy import save_file

    arrays: dict[str, np.ndarray] = {}
    shapes: dict[str, list[int]] = {}
    rep = Nf12Report(0, 0, 0, 0, 0)
    for name, t in state.items():
        enc = encode_tensor(t)
        arrays[f"{name}::packed"] = enc.packed
        arrays[f"{name}::esc_idx"] = enc.esc_idx
        arrays[f"{name}::esc_val"] = enc.esc_val
        shapes[name] = list(enc.shape)
        rep.tensors += 1
        rep.values += enc.numel
        rep.escapes += enc.escape_count
        rep.bf16_bytes += enc.numel * 2
        rep.nf12_bytes += enc.nbytes
    save_file(arrays, str(path), metadata={"format": "nf12", "shapes": json.dumps(shapes)})
    return rep


def load_nf12(path: str | Path) -> dict[str, Tensor]:
    """Decode an NF12 file written by :func:`save_nf12` to BF16 tensors."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="numpy") as f:
            meta = f.metadata() or {}
            if meta.get("format") != "nf12":
                raise Nf12Error(f"{path} is not an NF12 file")
            shapes = json.loads(meta["shapes"])
            out = {}
            for name, shape in shapes.items():
                enc = Nf12Tensor(
                    tuple(shape),
                    f.get_tensor(f"{name}::packed"),
                    f.get_tensor(f"{name}::esc_idx"),
                    f.get_tensor(f"{name}::esc_val"),
                )
                out[name] = decode_tensor(enc)
    except (OSError, KeyError, ValueError) as exc:
        raise Nf12Error(f"cannot read {path}: {exc}") from exc
    return out


def convert_model_dir(src: str | Path, dst: str | Path) -> Nf12Report:
    """Write an NF12 copy of a BF16 safetensors model folder (config and tokenizer copied)."""
    from safetensors.torch import load_file

    s, d = Path(src), Path(dst)
    d.mkdir(parents=True, exist_ok=True)
    state: dict[str, Tensor] = {}
    for f in sorted(s.glob("*.safetensors")):
        state.update(load_file(str(f)))
    if not state:
        raise Nf12Error(f"no safetensors weights in {s}")
    for f in s.iterdir():
        if (
            f.is_file()
            and not f.name.endswith(".safetensors")
            and f.name != "model.safetensors.index.json"
        ):
            shutil.copy2(f, d / f.name)
    return save_nf12(state, d / NF12_FILE)


def load_nf12_model(
    path: str | Path,
    *,
    name: str | None = None,
    n_taps: int = 3,
    device: str | torch.device = "cpu",
) -> object:
    """Load a model folder whose weights are NF12 (returns a ``TargetModel``)."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from noc_assistant.serving.loading import HFTokenizer, TargetModel

    p = Path(path)
    cfg = AutoConfig.from_pretrained(p)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)  # type: ignore[no-untyped-call]
    state = load_nf12(p / NF12_FILE)
    missing, unexpected = model.load_state_dict(state, strict=False)
    tied = {"lm_head.weight"} if getattr(cfg, "tie_word_embeddings", False) else set()
    if set(missing) - tied or unexpected:
        raise Nf12Error(f"NF12 weights do not match the config: {missing} {unexpected}")
    if tied:
        model.tie_weights()
    tok = AutoTokenizer.from_pretrained(p)
    return TargetModel(model, HFTokenizer(tok), name or p.name, n_taps=n_taps, device=device)
