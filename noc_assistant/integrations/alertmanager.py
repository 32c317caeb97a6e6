"""Incidents as Prometheus Alertmanager alerts (the v2 API: ``POST /api/v2/alerts``).

Alertmanager routes, groups, silences and inhibits what it is sent; this module is the seam:
:class:`AlertmanagerSink` takes the pipeline's incident events and keeps Alertmanager's view
equal to ours.

- An alert's identity is its label set, so the labels are fixed when an incident first goes
  out: ``alertname="NocIncident"``, ``incident`` (our id), ``instance`` (the entity it opened
  on, as the exporters and :func:`noc_assistant.stream.correlate.inhibit_rules` name entities),
  ``severity`` (``critical``; ``warning`` when the first diagnosis was no fault; ``info`` for a
  notice, ``Incident.severity``: a notice that becomes a page ends its ``info`` alert and goes
  out again as a page, so that routes which drop ``info`` page then). What changes
  as the incident grows (the entities, KPIs, the ranked root causes) is in the annotations.
- A firing alert is sent with ``endsAt`` a lease ahead (Alertmanager would resolve a silent
  one by itself after its ``resolve_timeout``); :meth:`AlertmanagerSink.refresh` renews the
  leases of the open incidents. A resolved incident is sent with ``endsAt`` its resolution.
- Alertmanager down costs nothing: what could not be sent waits and goes with the next send,
  newest state per incident (alerts are idempotent by labels). :attr:`last_error` says why.
- An open incident nobody has acknowledged in time (:meth:`AlertmanagerSink.unacknowledged`,
  ``NOC_ACK_TIMEOUT_S``) gets a second alert, ``alertname="NocIncidentUnacknowledged"`` with
  ``escalation="unacknowledged"``, so that a route can send it to whoever is next in line; it
  resolves when someone takes the incident (:meth:`AlertmanagerSink.taken`) or the incident
  resolves.

A declared maintenance window is also an Alertmanager **silence** (:class:`Silences`,
``POST /api/v2/silences``) on ``instance="<entity>"``, so that one declaration mutes the
operator's own Prometheus alert rules on the entity too; ending the window early expires it.

Times: ``startsAt``/``endsAt`` are the data's times (a live feed's are the wall clock's); the
lease of a firing alert is counted from the wall clock, since Alertmanager judges it by that.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

import httpx

from noc_assistant.errors import NocError
from noc_assistant.models import Incident, Maintenance
from noc_assistant.stream.correlate import IncidentEvent
from noc_assistant.timefmt import rfc3339

__all__ = ["AlertmanagerError", "AlertmanagerSink", "Silences", "alert_body", "probe"]


class AlertmanagerError(NocError):
    """Alertmanager refused or could not be reached (names the URL, and its answer)."""


def probe(url: str, timeout_s: float = 5.0) -> str:
    """Whether the Alertmanager at ``url`` is ready (``/-/ready``) and its version (the v2
    status); :class:`AlertmanagerError` naming the URL otherwise."""
    base = url.rstrip("/")
    try:
        with httpx.Client(timeout=timeout_s) as client:
            client.get(f"{base}/-/ready").raise_for_status()
            status = client.get(f"{base}/api/v2/status").json()
    except (httpx.HTTPError, ValueError) as exc:
        raise AlertmanagerError(f"{base}: {exc}") from None
    version = status.get("versionInfo", {}).get("version", "?")
    return f"ready, version {version}, cluster {status.get('cluster', {}).get('status', '?')}"


def alert_body(
    incident: Incident, labels: dict[str, str], ends_at: float, console_url: str | None = None
) -> dict[str, Any]:
    """One Alertmanager v2 alert for ``incident`` (labels fixed by the caller).

    >>> inc = Incident(id="inc-1", fingerprint="f", opened_at=0.0, updated_at=60.0,
    ...                entities=["upf-2", "smf-1"], kpis=["upf-pfcp-peers"], title="t")
    >>> body = alert_body(inc, {"alertname": "NocIncident"}, 3600.0, "http://noc:8080")
    >>> body["startsAt"], body["endsAt"], body["generatorURL"]
    ('1970-01-01T00:00:00Z', '1970-01-01T01:00:00Z', 'http://noc:8080/incidents/inc-1')
    >>> body["annotations"]["entities"]
    'upf-2, smf-1'
    """
    annotations = {
        "summary": incident.title or f"incident {incident.id}",
        "entities": ", ".join(incident.entities),
        "kpis": ", ".join(incident.kpis),
    }
    if incident.hypotheses:
        annotations["root_cause"] = "; ".join(
            f"{h.fault} on {h.entity or '-'} ({h.confidence:.0%})" for h in incident.hypotheses[:3]
        )
    body: dict[str, Any] = {
        "labels": labels,
        "annotations": annotations,
        "startsAt": rfc3339(incident.opened_at),
        "endsAt": rfc3339(ends_at),
    }
    if console_url:
        body["generatorURL"] = f"{console_url.rstrip('/')}/incidents/{incident.id}"
    return body


class AlertmanagerSink:
    """Sends incident events to an Alertmanager (see the module docstring)."""

    def __init__(
        self,
        url: str,
        *,
        console_url: str | None = None,
        lease_s: float = 3600.0,
        timeout_s: float = 5.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.console_url = console_url
        self.lease_s = lease_s
        self._client = httpx.Client(timeout=timeout_s, transport=transport)
        self._labels: dict[str, dict[str, str]] = {}
        self._open: dict[str, Incident] = {}
        self._unacked: dict[str, Incident] = {}
        self._pending: dict[tuple[str, str], dict[str, Any]] = {}
        self._renewed = 0.0
        self.sent = 0
        self.last_error: str | None = None

    def labels(self, incident: Incident) -> dict[str, str]:
        """The incident's alert labels, fixed at its first send."""
        fixed = self._labels.get(incident.id)
        if fixed is not None and fixed["severity"] == "info" and incident.severity != "info":
            notice = alert_body(incident, fixed, time.time(), self.console_url)
            self._pending[("NocIncidentNotice", incident.id)] = notice  # ends the notice
            fixed = None
        if fixed is None:
            top = incident.hypotheses[0] if incident.hypotheses else None
            fixed = {
                "alertname": "NocIncident",
                "incident": incident.id,
                "instance": incident.entities[0] if incident.entities else "",
                "severity": "info"
                if incident.severity == "info"
                else "warning"
                if top is not None and top.fault == "no_fault"
                else "critical",
            }
            self._labels[incident.id] = fixed
        return fixed

    def _queue(self, incident: Incident) -> None:
        if incident.state == "resolved":
            ends = incident.resolved_at if incident.resolved_at is not None else time.time()
            self._open.pop(incident.id, None)
            if incident.id in self._unacked:
                self._queue_unacked(incident, ends)
        else:
            ends = max(time.time(), incident.updated_at) + self.lease_s
            self._open[incident.id] = incident
            if incident.id in self._unacked:
                self._queue_unacked(incident, None)
        self._pending[("NocIncident", incident.id)] = alert_body(
            incident, self.labels(incident), ends, self.console_url
        )

    def _queue_unacked(self, incident: Incident, ended: float | None) -> None:
        """The second alert of an incident nobody took: firing (a lease ahead) until
        ``ended``."""
        if ended is None:
            self._unacked[incident.id] = incident
            ends = time.time() + self.lease_s
        else:
            self._unacked.pop(incident.id, None)
            ends = ended
        labels = {
            **self.labels(incident),
            "alertname": "NocIncidentUnacknowledged",
            "severity": "critical",
            "escalation": "unacknowledged",
        }
        body = alert_body(incident, labels, ends, self.console_url)
        body["annotations"]["summary"] = f"nobody has acknowledged {incident.id}: " + (
            incident.title or ", ".join(incident.entities)
        )
        self._pending[("NocIncidentUnacknowledged", incident.id)] = body

    def unacknowledged(self, incident: Incident) -> None:
        """Page again: nobody has taken ``incident`` (see the module docstring)."""
        self._queue_unacked(incident, None)
        self.flush()

    def taken(self, incident: Incident) -> None:
        """Someone took ``incident``: its unacknowledged alert resolves."""
        if incident.id in self._unacked:
            self._queue_unacked(incident, time.time())
            self.flush()

    def on_incident(self, event: IncidentEvent) -> None:
        """An incident sink for :class:`noc_assistant.stream.pipeline.Pipeline`."""
        self._queue(event.incident)
        self.flush()

    def track(self, incidents: Iterable[Incident]) -> None:
        """Send these incidents' current state (a restarted worker's open incidents)."""
        for incident in incidents:
            self._queue(incident)
        self.flush()

    def refresh(self) -> None:
        """Renew the leases of the open incidents (at most every quarter lease)."""
        now = time.monotonic()
        if now - self._renewed < self.lease_s / 4:
            self.flush()
            return
        self._renewed = now
        for incident in list(self._unacked.values()):
            self._queue_unacked(incident, None)
        self.track(list(self._open.values()))

    def flush(self) -> int:
        """Send what waits; how many alerts went (0 when Alertmanager did not take them)."""
        if not self._pending:
            return 0
        batch = list(self._pending.values())
        try:
            resp = self._client.post(f"{self.url}/api/v2/alerts", json=batch)
            resp.raise_for_status()
        except httpx.HTTPError as exc:
            self.last_error = f"{self.url}: {exc}"
            return 0
        self._pending.clear()
        self.sent += len(batch)
        self.last_error = None
        return len(batch)

    @property
    def pending(self) -> int:
        return len(self._pending)

    def close(self) -> None:
        self._client.close()


class Silences:
    """Maintenance windows as Alertmanager silences (see the module docstring)."""

    def __init__(
        self, url: str, *, timeout_s: float = 5.0, transport: httpx.BaseTransport | None = None
    ) -> None:
        self.url = url.rstrip("/")
        self._client = httpx.Client(timeout=timeout_s, transport=transport)

    def silence(self, window: Maintenance) -> str:
        """Create the silence of ``window``; its id (:class:`AlertmanagerError` if refused).

        >>> import json
        >>> seen = []
        >>> def answer(request):
        ...     seen.append(json.loads(request.content))
        ...     return httpx.Response(200, json={"silenceID": "s-1"})
        >>> w = Maintenance(id="mw-1", entity="smf-1", start=0.0, end=60.0, by="ana",
        ...                 reason="CHG-7", created_at=0.0)
        >>> Silences("http://am:9093", transport=httpx.MockTransport(answer)).silence(w)
        's-1'
        >>> seen[0]["matchers"]
        [{'name': 'instance', 'value': 'smf-1', 'isRegex': False, 'isEqual': True}]
        >>> seen[0]["createdBy"], seen[0]["comment"], seen[0]["endsAt"]
        ('ana', 'maintenance mw-1: CHG-7', '1970-01-01T00:01:00Z')
        """
        body = {
            "matchers": [
                {"name": "instance", "value": window.entity, "isRegex": False, "isEqual": True}
            ],
            "startsAt": rfc3339(window.start),
            "endsAt": rfc3339(window.end),
            "createdBy": window.by,
            "comment": f"maintenance {window.id}" + (f": {window.reason}" if window.reason else ""),
        }
        try:
            resp = self._client.post(f"{self.url}/api/v2/silences", json=body)
            resp.raise_for_status()
            silence_id = resp.json()["silenceID"]
        except (httpx.HTTPError, ValueError, KeyError) as exc:
            raise AlertmanagerError(f"{self.url}: cannot create the silence: {exc}") from exc
        return str(silence_id)

    def expire(self, silence_id: str) -> None:
        """Expire a silence (a window ended early); one already gone is not an error."""
        try:
            resp = self._client.delete(f"{self.url}/api/v2/silence/{silence_id}")
            if resp.status_code != 404:
                resp.raise_for_status()
        except httpx.HTTPError as exc:
            raise AlertmanagerError(
                f"{self.url}: cannot expire silence {silence_id}: {exc}"
            ) from exc

    def close(self) -> None:
        self._client.close()
