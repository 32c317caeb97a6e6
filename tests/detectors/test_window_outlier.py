"""The IsolationForest adapter scores a stretch in bulk exactly as it does value by value."""

from __future__ import annotations

import numpy as np
import pytest

from detectors import WindowOutlier


@pytest.mark.parametrize("window", [4, 16])
def test_bulk_scoring_is_value_by_value_scoring(window: int) -> None:
    rng = np.random.default_rng(3)
    xs = 10 + np.sin(np.arange(1500) / 9) + rng.normal(0, 0.1, 1500)
    xs[[40, 700, 701, 1200]] = np.nan  # gaps: scored 0, not learnt
    xs[900] += 8  # a spike
    one = WindowOutlier(window=window, fit_size=200, refit_every=150)
    by_one = []
    for x in xs.tolist():
        by_one.append(one.score_one(x))
        one.learn_one(x)
    many = WindowOutlier(window=window, fit_size=200, refit_every=150)
    got = np.concatenate([many.score_learn_many(xs[:333]), many.score_learn_many(xs[333:])])
    np.testing.assert_allclose(got, by_one, rtol=1e-12, atol=1e-12)
    assert max(got[900 : 900 + window]) > np.quantile(got, 0.99)  # windows holding the spike
    assert got[[40, 700, 701, 1200]].tolist() == [0.0] * 4
