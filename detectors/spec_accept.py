"""GPU serving: speculative-decoding acceptance collapse."""

from __future__ import annotations

from collections.abc import Mapping

from detectors.ratio import BinomialRatio

__all__ = ["SpecAcceptCollapse"]


class SpecAcceptCollapse:
    """Score a drop of draft-token acceptance, from counts, overdispersion-aware.

    Feed per-interval counts ``{"accepted": accepted draft tokens, "drafted": drafted tokens,
    "rounds": verification steps}`` (vLLM ``spec_decode_num_accepted_tokens_total`` /
    ``num_draft_tokens_total`` / ``num_drafts_total`` increases). Acceptance is a ratio of
    counts, so a quiet interval with few drafts cannot page (:class:`BinomialRatio`, down).
    ``accepted_length_`` is the last mean accepted length per round (``1 + accepted/rounds``,
    the number DSpine and EAGLE report), kept for evidence.

    Examples
    --------
    >>> det = SpecAcceptCollapse()
    >>> for _ in range(100):
    ...     det.learn_one({"accepted": 3600, "drafted": 5000, "rounds": 1000})
    >>> det.score_one({"accepted": 3570, "drafted": 5000, "rounds": 1000}) < 3
    True
    >>> det.score_one({"accepted": 600, "drafted": 5000, "rounds": 1000}) > 20
    True
    >>> det.accepted_length_
    1.6
    """

    def __init__(self, alpha: float = 0.02, grace: int = 10) -> None:
        self.alpha = alpha
        self.grace = grace
        self.ratio_ = BinomialRatio(alpha=alpha, bad_direction="down", grace=grace)
        self.accepted_length_ = float("nan")

    @staticmethod
    def _counts(x: Mapping[str, float]) -> dict[str, float]:
        return {"num": float(x["accepted"]), "den": float(x["drafted"])}

    def learn_one(self, x: Mapping[str, float]) -> None:
        self.ratio_.learn_one(self._counts(x))

    def score_one(self, x: Mapping[str, float]) -> float:
        rounds = float(x.get("rounds", 0.0))
        if rounds > 0:
            self.accepted_length_ = 1.0 + float(x["accepted"]) / rounds
        return self.ratio_.score_one(self._counts(x))
