"""Domain objects the tests build by hand, written once: a test names what it is about and the
rest takes a default (``from tests.builders import make_finding``)."""

from __future__ import annotations

from typing import Any

from noc_assistant.models import Finding


def make_finding(
    kpi: str, entity: str, observed: float, expected: tuple[float, float], **fields: Any
) -> Finding:
    """A :class:`Finding` of ``kpi`` on ``entity``: ``observed`` against the ``expected``
    (low, high) range, its direction the way the value left that range (``up`` unless it is
    below); ``fields`` set the rest (defaults: id ``f-1``, detector ``t``, ts 0, score 1)."""
    low, high = expected
    return Finding(
        **{
            "id": "f-1",
            "detector": "t",
            "ts": 0.0,
            "score": 1.0,
            "direction": "down" if observed < low else "up",
            **fields,
            "kpi": kpi,
            "entity": entity,
            "observed": observed,
            "expected_low": low,
            "expected_high": high,
        }
    )
