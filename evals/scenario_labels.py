"""A scenario's ground-truth labels (FORMATS §2) as :mod:`evals.scenario` scores against them:
incidents and maintenance windows as spans of entities, and label times read strictly."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from noc_assistant.errors import BadInputError

__all__ = ["Interval", "labelled_incidents", "labelled_maintenance", "parse_time"]


@dataclass(frozen=True)
class Interval:
    """A labelled span: an incident (on its root-cause and affected entities) or a maintenance
    window (on its entity)."""

    entities: frozenset[str]
    start: float
    end: float
    id: str = ""
    fault: str = "unknown"
    """An incident's root-cause fault class (``unknown`` where its label names none)."""


_FIRST = 0.0
_LAST = 253_402_300_799.0
"""A label's time in epoch seconds: from 1970 to the end of year 9999 (what a date can be
written as); NaN, infinity and 1e20 are damage, not times."""


def parse_time(value: Any, *, source: str = "labels") -> float:
    """RFC 3339 text or epoch seconds → epoch seconds.

    >>> parse_time("2026-11-29T10:05:00Z")
    1795946700.0
    >>> parse_time(12.5)
    12.5
    """
    if isinstance(value, bool):
        raise BadInputError(f"bad time {value!r}", source=source)
    seconds: float | None = None
    if isinstance(value, int | float):
        try:
            seconds = float(value)
        except OverflowError:  # an integer past any float
            raise BadInputError(f"bad time {value:.6g}", source=source) from None
    elif isinstance(value, str):
        try:
            seconds = datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except (ValueError, OverflowError):
            seconds = None
    if seconds is None:
        raise BadInputError(f"bad time {str(value)[:100]!r}", source=source)
    if not math.isfinite(seconds) or not _FIRST <= seconds <= _LAST:
        raise BadInputError(f"bad time {value!r} (not a time a label can hold)", source=source)
    return seconds


def labelled_incidents(labels: Mapping[str, Any], source: str) -> list[Interval]:
    """The labels' incidents (FORMATS §2), each on its root-cause and affected entities."""
    out = []
    for i, inc in enumerate(labels.get("incidents", []) or []):
        try:
            ents = set(inc.get("affected") or [])
            root = inc.get("root_cause") or {}
            if root.get("entity"):
                ents.add(root["entity"])
            out.append(
                Interval(
                    frozenset(ents),
                    parse_time(inc["start"], source=source),
                    parse_time(inc["end"], source=source),
                    str(inc.get("id", f"incident-{i}")),
                    str(root.get("fault") or "unknown"),
                )
            )
        except (KeyError, AttributeError, TypeError):
            raise BadInputError(f"incident {i} lacks start/end", source=source) from None
    return out


def labelled_maintenance(labels: Mapping[str, Any], source: str) -> list[Interval]:
    """The labels' maintenance windows (FORMATS §2), each on its entity."""
    out = []
    for i, m in enumerate(labels.get("maintenance", []) or []):
        try:
            out.append(
                Interval(
                    frozenset([m["entity"]]),
                    parse_time(m["start"], source=source),
                    parse_time(m["end"], source=source),
                )
            )
        except (KeyError, TypeError):
            raise BadInputError(f"maintenance {i} lacks entity/start/end", source=source) from None
    return out
