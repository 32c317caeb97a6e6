"""NF12: bit-exact round trip, escapes, container, loading a model from NF12."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from noc_assistant.serving.errors import Nf12Error
from noc_assistant.serving.loading import TargetModel
from noc_assistant.serving.nf12 import (
    decode_tensor,
    encode_tensor,
    load_nf12,
    load_nf12_model,
    save_nf12,
)


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.int16)


def test_round_trip_every_tiny_tensor(tiny: TargetModel) -> None:
    state = {k: v.to(torch.bfloat16) for k, v in tiny.model.state_dict().items()}
    for name, t in state.items():
        enc = encode_tensor(t)
        assert torch.equal(_bits(decode_tensor(enc)), _bits(t)), name


def test_special_values_escape() -> None:
    vals = [0.0, -0.0, float("inf"), float("-inf"), float("nan"), 1e-30, 1e30, 2.0, 1.5, -0.75]
    t = torch.tensor(vals, dtype=torch.bfloat16)
    enc = encode_tensor(t)
    assert enc.escape_count == 8  # all but 1.5 and -0.75
    assert torch.equal(_bits(decode_tensor(enc)), _bits(t))


def test_random_bits_round_trip_odd_length() -> None:
    g = torch.Generator().manual_seed(0)
    raw = torch.randint(-(2**15), 2**15, (1001,), generator=g, dtype=torch.int32).to(torch.int16)
    t = raw.view(torch.bfloat16).reshape(7, 11, 13)
    assert torch.equal(_bits(decode_tensor(encode_tensor(t))), raw.reshape(7, 11, 13))


def test_weights_rarely_escape_and_shrink() -> None:
    g = torch.Generator().manual_seed(1)
    w = (torch.randn(256, 256, generator=g) * 0.02).to(torch.bfloat16)
    enc = encode_tensor(w)
    assert enc.escape_count / w.numel() < 0.01
    assert enc.nbytes < 0.78 * w.numel() * 2


def test_rejects_non_bf16() -> None:
    with pytest.raises(Nf12Error):
        encode_tensor(torch.zeros(3))


def test_container_and_model_load(tiny: TargetModel, tmp_path: Path) -> None:
    state = {k: v.to(torch.bfloat16) for k, v in tiny.model.state_dict().items()}
    rep = save_nf12(state, tmp_path / "w.safetensors")
    assert rep.tensors == len(state) and rep.ratio < 0.8
    back = load_nf12(tmp_path / "w.safetensors")
    assert set(back) == set(state)
    assert all(torch.equal(_bits(back[k]), _bits(state[k])) for k in state)
    with pytest.raises(Nf12Error):
        load_nf12(tmp_path / "missing.safetensors")
    assert callable(load_nf12_model)
