"""The live feed of a console that does not run the pipeline itself (``noc serve``).

Workers, the bus correlator, ``noc replay`` or another console write incidents to the store;
every console replica looks at the store's incident versions (id → state and update time, no
bodies) every ``interval_s`` and publishes what changed to its own SSE hub. Replicas behind a
proxy therefore show the same feed, from the store alone, within one interval. Polling rather
than PostgreSQL ``LISTEN/NOTIFY`` keeps SQLite and PostgreSQL on one path; a look costs one
index-only query (10,000 incidents: a few milliseconds).
"""

from __future__ import annotations

import threading

from noc_assistant.api.events import Broadcaster
from noc_assistant.errors import StorageError
from noc_assistant.store import Store

__all__ = ["StoreFeed", "changes"]

Versions = dict[str, tuple[str, float]]


def changes(before: Versions, now: Versions) -> list[dict[str, str]]:
    """The feed events between two looks at the store, oldest update first.

    >>> for e in changes({"a": ("open", 1.0)}, {"a": ("open", 2.0), "b": ("open", 1.5)}):
    ...     print(e)
    {'kind': 'opened', 'incident': 'b', 'state': 'open'}
    {'kind': 'updated', 'incident': 'a', 'state': 'open'}
    >>> changes({"a": ("open", 1.0)}, {"a": ("resolved", 3.0)})
    [{'kind': 'resolved', 'incident': 'a', 'state': 'resolved'}]
    """
    events: list[tuple[float, str, dict[str, str]]] = []
    for incident_id, (state, updated) in now.items():
        old = before.get(incident_id)
        if old == (state, updated):
            continue
        if old is None:
            kind = "opened"
        elif state != old[0]:
            kind = "resolved" if state == "resolved" else "reopened"
        else:
            kind = "updated"
        events.append(
            (updated, incident_id, {"kind": kind, "incident": incident_id, "state": state})
        )
    return [e for _, _, e in sorted(events)]


class StoreFeed:
    """A daemon thread that publishes the store's incident changes to ``hub``."""

    def __init__(self, store: Store, hub: Broadcaster, interval_s: float = 0.5) -> None:
        self.store = store
        self.hub = hub
        self.interval_s = interval_s
        self.error: str | None = None
        """The last storage error (the feed carries on, the console shows the store's state)."""
        self._stop = threading.Event()
        self._seen: Versions = store.incident_versions()
        self._thread = threading.Thread(target=self._run, name="store-feed", daemon=True)

    def start(self) -> StoreFeed:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def look(self) -> int:
        """One look at the store: publish what changed since the last; how many events."""
        now = self.store.incident_versions()
        events = changes(self._seen, now)
        self._seen = now
        for event in events:
            self.hub.publish(event)
        return len(events)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.look()
                self.error = None
            except StorageError as exc:
                self.error = str(exc)
