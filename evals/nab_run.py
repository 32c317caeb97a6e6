"""``noc eval nab``: load the NAB corpus, run the ensemble bank or one single detector, score.

The scorer and the bank live in :mod:`evals.nab`, the single detectors in :mod:`evals.single`
(which builds on the scorer); this module picks between them, so neither imports the other
both ways.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from evals.nab import NAB_TARGET_RATE, detect, load_corpus, report, write_scores
from evals.single import detect_single

__all__ = ["evaluate"]


def evaluate(
    root: Path, scores_out: Path | None = None, detector: str = "ensemble-bank", **params: Any
) -> dict[str, Any]:
    """Load the NAB corpus at ``root``, run the detectors, score; optionally write scores.

    ``detector`` is the ensemble bank (default) or one name of
    :data:`evals.single.DETECTORS`, scored alone under the same label-free rules (``params``
    then takes ``target_rate`` and ``tz`` only).
    """
    corpus = load_corpus(root)
    rate = float(params.get("target_rate", NAB_TARGET_RATE))
    start = time.perf_counter()
    if detector == "ensemble-bank":
        results = detect(corpus, **params)
    else:
        extra = sorted(set(params) - {"target_rate", "tz"})
        if extra:
            raise TypeError(f"a single detector takes no {', '.join(extra)}")
        results = detect_single(corpus, detector, rate, params.get("tz"))
    elapsed = time.perf_counter() - start
    out = report(corpus, results)
    samples = sum(len(s.values) for s in corpus)
    out["samples"] = samples
    out["samples_per_s"] = samples / elapsed if elapsed > 0 else 0.0
    out["detector"] = detector
    out["false_alarm_budget_per_series_day"] = rate
    if scores_out is not None:
        write_scores(scores_out, corpus, results)
    return out
