"""The console's own ``/metrics`` (Prometheus text format): what a NOC dashboard and its
alert rules watch about the assistant, read from the store at each scrape.

- ``noc_incidents{state}``: incidents stored, open and resolved;
- ``noc_incidents_open_unacknowledged``: open incidents nobody has taken (alert on it);
- ``noc_incident_verdicts{verdict}``: incidents by verdict (``none``: not judged yet);
- ``noc_false_alarm_share``: the share of the judged incidents of the last week that were
  false (as :func:`evals.live.live_report` counts it; absent while none is judged);
- ``noc_maintenance_windows_active``: windows in force now;
- ``noc_raised_bars_active``: raised bars in force now (:mod:`noc_assistant.ops.raised_bars`: KPIs
  that page only from a higher score, an alert rule can flag one forgotten);
- ``noc_emails{status}``: partner e-mails by status;
- ``noc_store_up``: 1 when the store answered the scrape, 0 when it did not (the other
  families are then absent rather than read as zero).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from evals.live import WEEK_S
from noc_assistant.errors import StorageError
from noc_assistant.store import Store

__all__ = ["StoreCollector", "registry"]


class StoreCollector(Collector):
    """Reads the store at each scrape (no state of its own: every replica says the same)."""

    def __init__(self, store: Store, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.clock = clock

    def collect(self) -> Iterator[GaugeMetricFamily]:
        up = GaugeMetricFamily("noc_store_up", "1 if the store answered this scrape")
        try:
            families = list(self._families())
        except StorageError:
            up.add_metric([], 0.0)
            yield up
            return
        up.add_metric([], 1.0)
        yield up
        yield from families

    def _families(self) -> Iterator[GaugeMetricFamily]:
        # a scrape every few seconds: counts and the open incidents, never every body stored
        now = self.clock()
        counts = self.store.incident_counts()
        reviews = self.store.reviews()
        states = GaugeMetricFamily("noc_incidents", "Incidents stored, by state", labels=["state"])
        for state in ("open", "resolved"):
            states.add_metric([state], float(counts.get(state, 0)))
        yield states
        open_now = self.store.list_incidents(state="open", limit=1_000_000)
        untaken = sum(
            1 for i in open_now if i.id not in reviews or not reviews[i.id].acknowledged_by
        )
        yield GaugeMetricFamily(
            "noc_incidents_open_unacknowledged", "Open incidents nobody has taken", value=untaken
        )
        verdicts = GaugeMetricFamily(
            "noc_incident_verdicts", "Incidents by verdict (none: not judged)", labels=["verdict"]
        )
        by_verdict: Counter[str] = Counter(r.verdict for r in reviews.values() if r.verdict)
        judged = sum(by_verdict.values())
        by_verdict["none"] = max(sum(counts.values()) - judged, 0)
        for verdict in ("fault", "no_fault", "maintenance", "none"):
            verdicts.add_metric([verdict], float(by_verdict[verdict]))
        yield verdicts
        week = [reviews.get(i.id) for i in self.store.incidents_between(now - WEEK_S, now)]
        said = [r.verdict for r in week if r is not None and r.verdict in ("fault", "no_fault")]
        if said:
            yield GaugeMetricFamily(
                "noc_false_alarm_share",
                "Share of last week's judged incidents that were false",
                value=said.count("no_fault") / len(said),
            )
        active = sum(1 for w in self.store.maintenance_windows(ending_after=now) if w.active(now))
        yield GaugeMetricFamily(
            "noc_maintenance_windows_active", "Maintenance windows in force", value=active
        )
        bars = sum(1 for t in self.store.tuning_rules(ending_after=now) if t.active(now))
        yield GaugeMetricFamily("noc_raised_bars_active", "Raised bars in force", value=bars)
        emails = GaugeMetricFamily("noc_emails", "Partner e-mails by status", labels=["status"])
        by_status = Counter(m.status for m in self.store.list_emails())
        for status in ("draft", "approved", "sent", "rejected"):
            emails.add_metric([status], float(by_status[status]))
        yield emails


def registry(store: Store, clock: Callable[[], float] = time.time) -> CollectorRegistry:
    """A registry holding the store's collector only (not the process-wide default)."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(StoreCollector(store, clock))
    return reg
