"""Triage-first incident lists: what an engineer looks at first, and how the list is narrowed.

>>> from noc_assistant.models import Incident
>>> a = Incident(id="inc-a", fingerprint="a", opened_at=10.0, updated_at=10.0,
...              entities=["upf-1"], state="resolved")
>>> b = Incident(id="inc-b", fingerprint="b", opened_at=5.0, updated_at=5.0, entities=["amf-2"])
>>> [i.id for i in Triage().order([a, b])]          # open first
['inc-b', 'inc-a']
>>> [i.id for i in [a, b] if Triage(entity="upf-*").keeps(i)]
['inc-a']
>>> [i.id for i in [a, b] if Triage(q="AMF").keeps(i)]
['inc-b']
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from dataclasses import dataclass

from noc_assistant.models import Incident

__all__ = ["Triage"]


@dataclass(frozen=True)
class Triage:
    """A filter of the incident list (every part optional) and its order."""

    state: str | None = None
    entity: str | None = None
    """An entity name or a shell pattern (``upf-*``)."""
    fault: str | None = None
    """The assistant's top-ranked fault class."""
    q: str | None = None
    """Free text, case-insensitive, in the id, title, entities and KPIs."""
    since: float | None = None
    """Incidents updated at or after this time (epoch seconds)."""

    def keeps(self, inc: Incident) -> bool:
        if self.state and inc.state != self.state:
            return False
        if self.entity and not fnmatch.filter(inc.entities, self.entity.strip()):
            return False
        top = inc.hypotheses[0].fault if inc.hypotheses else None
        if self.fault and top != self.fault:
            return False
        if self.since is not None and inc.updated_at < self.since:
            return False
        if self.q:
            text = " ".join([inc.id, inc.title, *inc.entities, *inc.kpis]).lower()
            return self.q.strip().lower() in text
        return True

    @staticmethod
    def order(incidents: Sequence[Incident]) -> list[Incident]:
        """Open incidents first, each group by opening, newest first."""
        return sorted(incidents, key=lambda i: (i.state != "open", -i.opened_at, i.id))

    @property
    def active(self) -> bool:
        """Whether any part of the filter is set."""
        parts = (self.state, self.entity, self.fault, self.q, self.since)
        return any(x is not None and x != "" for x in parts)
