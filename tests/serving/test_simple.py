"""SIMPLE energy law: worked example, NNLS fit, energy split."""

from __future__ import annotations

import numpy as np
import pytest

from noc_assistant.serving.simple import (
    LLAMA31_8B_IMPLIED,
    ModelShape,
    SimpleTheta,
    fit,
    predict,
)

LLAMA8B = ModelShape(hidden_size=4096, num_layers=32, kv_ratio=8 / 32)


def test_worked_example_llama31_8b() -> None:
    uncached = predict(LLAMA31_8B_IMPLIED, LLAMA8B, 68_000, 247)
    cached = predict(LLAMA31_8B_IMPLIED, LLAMA8B, 68_000, 247, cached=63_000)
    assert uncached.total == pytest.approx(1787.7, rel=0.005)
    assert cached.total == pytest.approx(668.7, rel=0.005)
    # a cache hit but still expensive: the KV-read term uses the full context
    assert cached.kv_read == pytest.approx(uncached.kv_read)
    assert cached.kv_read / cached.total == pytest.approx(0.86, abs=0.01)
    assert predict(LLAMA31_8B_IMPLIED, LLAMA8B, 5_000, 247).total == pytest.approx(138.1, rel=0.005)


def test_nnls_fit_recovers_theta() -> None:
    true = SimpleTheta(theta0=0.02, theta1=3e-11, theta2=1e-9, theta3=2e-7)
    rng = np.random.default_rng(0)
    shapes = [ModelShape(2048, 24, 0.25), ModelShape(4096, 32, 0.25), ModelShape(3072, 28, 0.125)]
    samples = []
    for _ in range(60):
        s = shapes[int(rng.integers(3))]
        i, o = int(rng.integers(64, 4096)), int(rng.integers(16, 1024))
        e = predict(true, s, i, o).total * float(rng.normal(1.0, 0.01))
        samples.append((s, i, o, 0, e))
    res = fit(samples)
    assert res.r2 > 0.99
    assert res.mape < 2.0
    assert res.theta.theta1 == pytest.approx(true.theta1, rel=0.1)
    assert res.theta.theta2 == pytest.approx(true.theta2, rel=0.1)
    assert min(res.theta.as_array()) >= 0.0


def test_fit_needs_samples() -> None:
    with pytest.raises(ValueError):
        fit([(LLAMA8B, 10, 10, 0, 1.0)])


def test_breakdown_parts_sum() -> None:
    e = predict(LLAMA31_8B_IMPLIED, LLAMA8B, 1000, 100, cached=200)
    assert e.total == pytest.approx(e.prefill + e.kv_read + e.per_token)
    assert e.prefill == pytest.approx(LLAMA31_8B_IMPLIED.theta1 * 4096**2 * 32 * 800)


@pytest.mark.gpu
def test_nvml_energy_counter() -> None:
    pynvml = pytest.importorskip("pynvml")
    try:
        pynvml.nvmlInit()
    except Exception:  # no driver / no GPU
        pytest.skip("no NVIDIA GPU")
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert pynvml.nvmlDeviceGetTotalEnergyConsumption(h) > 0
