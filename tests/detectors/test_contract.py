"""The one contract every detector passes (river style): learn_one / score_one, higher = worse."""

from __future__ import annotations

import copy
import math
import random
from collections.abc import Callable
from typing import Any

import pytest

import detectors as d

Item = tuple[Any, dict[str, Any]]


def _gauss(n: int = 400, mu: float = 100.0, sd: float = 2.0) -> list[Item]:
    rng = random.Random(11)
    return [(mu + rng.gauss(0, sd), {}) for _ in range(n)]


def _seasonal() -> list[Item]:
    rng = random.Random(12)
    return [
        (100 + 30 * math.sin(2 * math.pi * t / 86400) + rng.gauss(0, 1), {"t": float(t)})
        for t in range(0, 6 * 86400, 900)
    ]


def _ratio() -> list[Item]:
    rng = random.Random(13)
    out: list[Item] = []
    for _ in range(300):
        den = rng.randint(500, 1500)
        out.append(({"num": sum(rng.random() < 0.98 for _ in range(den)), "den": den}, {}))
    return out


def _kv() -> list[Item]:
    rng = random.Random(14)
    return [
        (
            {
                "kv_usage": 0.9 + 0.05 * rng.random(),
                "preemptions": rng.randint(0, 3),
                "waiting": rng.randint(0, 5),
            },
            {},
        )
        for _ in range(300)
    ]


def _latency() -> list[Item]:
    rng = random.Random(15)
    out: list[Item] = []
    for _ in range(400):
        load = rng.uniform(1, 64)
        out.append(
            (
                {"latency": 0.05 * math.exp(load / 40) * rng.lognormvariate(0, 0.05), "load": load},
                {},
            )
        )
    return out


def _spec() -> list[Item]:
    rng = random.Random(16)
    out: list[Item] = []
    for _ in range(200):
        drafted = rng.randint(3000, 6000)
        acc = sum(rng.random() < 0.7 for _ in range(drafted))
        out.append(({"accepted": acc, "drafted": drafted, "rounds": drafted // 5}, {}))
    return out


def _energy() -> list[Item]:
    rng = random.Random(17)
    return [
        ({"energy_j": 400 * rng.lognormvariate(0, 0.05), "requests": 8, "expected_j": 400}, {})
        for _ in range(300)
    ]


CASES: dict[str, tuple[Callable[[], Any], Callable[[], list[Item]], Item]] = {
    # cusum: the anomaly is a lasting 2σ shift, learnt for 15 samples before the scored one
    "robust_zscore": (d.RobustZScore, _gauss, (130.0, {})),
    "seasonal": (lambda: d.SeasonalProfile(n_bins=24), _seasonal, (160.0, {"t": 6 * 86400.0})),
    "cusum": (d.Cusum, lambda: [*_gauss(), *[(104.0, {})] * 15], (104.0, {})),
    "forecast_residual": (d.ForecastResidual, _gauss, (130.0, {})),
    "binomial_ratio": (d.BinomialRatio, _ratio, ({"num": 800, "den": 1000}, {})),
    "window_outlier": (
        lambda: d.WindowOutlier(window=8, fit_size=128, refit_every=128),
        _gauss,
        (160.0, {}),
    ),
    "kv_cache": (
        d.KvCacheSaturation,
        _kv,
        ({"kv_usage": 1.0, "preemptions": 60, "waiting": 80}, {}),
    ),
    "latency_load": (
        d.LatencyLoadRegression,
        _latency,
        ({"latency": 0.05 * math.exp(0.2) * 3, "load": 8}, {}),
    ),
    "spec_accept": (
        d.SpecAcceptCollapse,
        _spec,
        ({"accepted": 800, "drafted": 5000, "rounds": 1000}, {}),
    ),
    "energy": (
        d.EnergyPerRequest,
        _energy,
        ({"energy_j": 900, "requests": 8, "expected_j": 400}, {}),
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_detector_contract(name: str) -> None:
    factory, stream_fn, (bad_x, bad_kw) = CASES[name]
    stream = stream_fn()
    det, twin = factory(), factory()
    normal_scores = []
    for i, (x, kw) in enumerate(stream):
        assert det.learn_one(x, **kw) is None
        twin.learn_one(x, **kw)
        if len(stream) // 2 <= i < len(stream) - 15:
            s = det.score_one(x, **kw)
            assert isinstance(s, float) and math.isfinite(s) and s >= 0.0
            normal_scores.append(s)
    # scoring does not learn: a twin that never scored gives the same answer
    before = copy.deepcopy(det)
    s_bad = det.score_one(bad_x, **bad_kw)
    assert s_bad == det.score_one(bad_x, **bad_kw) == twin.score_one(bad_x, **bad_kw)
    assert s_bad == before.score_one(bad_x, **bad_kw)
    # higher = more anomalous: the injected anomaly beats every normal late score
    assert s_bad > max(normal_scores), (s_bad, max(normal_scores))
    # the constructor only stores its arguments (sklearn convention): no learned state set
    # from arguments is shared between instances
    assert factory().score_one(bad_x, **bad_kw) == 0.0
