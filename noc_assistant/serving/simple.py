"""SIMPLE energy law for LLM inference (research/dspine.md §4).

``E(I, O) = θ1·d²·L·I_new + θ2·d·L·R·(I·O + O²/2) + (θ0 + θ3·d·L)·O``  [J]

with d the hidden size, L the layers, R = n_kv_heads / n_q_heads, I the input tokens (I_new of
them not served from a prefix cache) and O the output tokens. The law is linear in θ, so θ is
fitted per GPU by non-negative least squares (:func:`fit`), reported with R² and MAPE.

The published θ are not available; :data:`LLAMA31_8B_IMPLIED` holds the values implied by the
worked example of the seed (Llama 3.1 8B, 68K input of which 63K cached, 247 output tokens:
≈1788 J uncached, ≈669 J cached), derived in :func:`implied_theta`. Use them as placeholders.

>>> shape = ModelShape(hidden_size=4096, num_layers=32, kv_ratio=8 / 32)
>>> e = predict(LLAMA31_8B_IMPLIED, shape, 68_000, 247, cached=63_000)
>>> round(e.total), round(predict(LLAMA31_8B_IMPLIED, shape, 68_000, 247).total)
(670, 1789)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "LLAMA31_8B_IMPLIED",
    "EnergyBreakdown",
    "FitResult",
    "ModelShape",
    "SimpleTheta",
    "design_row",
    "fit",
    "implied_theta",
    "predict",
]


@dataclass(frozen=True)
class ModelShape:
    """The model dimensions the law uses."""

    hidden_size: int
    num_layers: int
    kv_ratio: float


@dataclass(frozen=True)
class SimpleTheta:
    """θ0 (J/token), θ1 (prefill), θ2 (KV read), θ3 (per-token, per d·L)."""

    theta0: float
    theta1: float
    theta2: float
    theta3: float

    def as_array(self) -> np.ndarray:
        return np.array([self.theta0, self.theta1, self.theta2, self.theta3])


@dataclass(frozen=True)
class EnergyBreakdown:
    """Predicted energy of one request, split by term (J)."""

    prefill: float
    kv_read: float
    per_token: float

    @property
    def total(self) -> float:
        return self.prefill + self.kv_read + self.per_token


def design_row(shape: ModelShape, n_in: int, n_out: int, cached: int = 0) -> np.ndarray:
    """Coefficients of (θ0, θ1, θ2, θ3) for one request."""
    d, layers, r = shape.hidden_size, shape.num_layers, shape.kv_ratio
    new = max(0, n_in - cached)
    return np.array(
        [
            float(n_out),
            float(d) ** 2 * layers * new,
            float(d) * layers * r * (n_in * n_out + n_out**2 / 2.0),
            float(d) * layers * n_out,
        ]
    )


def predict(
    theta: SimpleTheta, shape: ModelShape, n_in: int, n_out: int, *, cached: int = 0
) -> EnergyBreakdown:
    """Energy of a request with ``n_in`` input (``cached`` of them cached) and ``n_out`` output."""
    row = design_row(shape, n_in, n_out, cached)
    t = theta.as_array()
    return EnergyBreakdown(
        prefill=float(row[1] * t[1]),
        kv_read=float(row[2] * t[2]),
        per_token=float(row[0] * t[0] + row[3] * t[3]),
    )


@dataclass(frozen=True)
class FitResult:
    theta: SimpleTheta
    r2: float
    mape: float


def fit(
    samples: Sequence[tuple[ModelShape, int, int, int, float]],
) -> FitResult:
    """NNLS fit of θ to measured ``(shape, n_in, n_out, cached, joules)`` samples.

    Columns are scaled to unit norm before the solve (they differ by ~10 orders of magnitude).
    """
    from scipy.optimize import nnls  # type: ignore[import-untyped]

    if len(samples) < 4:
        raise ValueError("need at least 4 samples to fit 4 coefficients")
    a = np.stack([design_row(s, i, o, c) for s, i, o, c, _ in samples])
    y = np.array([e for *_, e in samples], dtype=float)
    norms = np.linalg.norm(a, axis=0)
    norms[norms == 0] = 1.0
    coef, _ = nnls(a / norms, y)
    theta = coef / norms
    pred = a @ theta
    ss_res = float(((y - pred) ** 2).sum())
    ss_tot = float(((y - y.mean()) ** 2).sum())
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else 1.0
    mape = float(np.mean(np.abs((y - pred) / y))) * 100.0
    return FitResult(SimpleTheta(*(float(x) for x in theta)), r2, mape)


def implied_theta(
    shape: ModelShape,
    *,
    n_in: int = 68_000,
    cached: int = 63_000,
    n_out: int = 247,
    e_uncached: float = 1787.7,
    e_cached: float = 668.7,
    kv_share_cached: float = 0.86,
    small_in: int = 5_000,
    e_small: float = 138.1,
) -> SimpleTheta:
    """θ implied by a worked example (assumes caching removes prefill only; θ3 := 0)."""
    d, layers, r = shape.hidden_size, shape.num_layers, shape.kv_ratio
    theta1 = (e_uncached - e_cached) / cached / (d**2 * layers)
    kv_coef = d * layers * r * (n_in * n_out + n_out**2 / 2.0)
    theta2 = kv_share_cached * e_cached / kv_coef
    small_prefill = theta1 * d**2 * layers * small_in
    small_kv = theta2 * d * layers * r * (small_in * n_out + n_out**2 / 2.0)
    theta0 = (e_small - small_prefill - small_kv) / n_out
    return SimpleTheta(theta0=theta0, theta1=theta1, theta2=theta2, theta3=0.0)


LLAMA31_8B_IMPLIED = implied_theta(ModelShape(hidden_size=4096, num_layers=32, kv_ratio=0.25))
"""Placeholder θ implied by the Llama 3.1 8B worked example (not published values)."""
