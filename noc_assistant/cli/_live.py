"""What the live commands (``noc bus worker``, ``noc watch``, ``noc demo``) share: the pack and
topology from settings, the incident sink that stores, prints and forwards each event, and the
web console with drafting."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from noc_assistant.cli._console import console, err_console
from noc_assistant.settings import get_settings
from noc_assistant.store import open_store

if TYPE_CHECKING:
    from fastapi import FastAPI

    from knowledge.pack import Pack
    from knowledge.topology import Topology
    from noc_assistant.api.alert_intake import AlertSink
    from noc_assistant.api.events import Broadcaster
    from noc_assistant.integrations.alertmanager import AlertmanagerSink
    from noc_assistant.integrations.notify import Notifier
    from noc_assistant.models import Incident
    from noc_assistant.settings import Settings
    from noc_assistant.store import Store
    from noc_assistant.stream.correlate import IncidentEvent, MaintenanceWindow
    from noc_assistant.stream.pipeline import Pipeline
    from noc_assistant.triage.drafting import Drafter
    from noc_assistant.triage.logs import LogEvidence

__all__ = [
    "SYNC_EVERY_S",
    "IncidentOutput",
    "InventoryOpt",
    "console_app",
    "drafting_for_cli",
    "load_pack_and_topology",
    "network_entities",
]

SYNC_EVERY_S = 1.0
"""How often (wall clock) a live command re-reads the store's maintenance windows."""


def load_pack_and_topology(
    settings: Settings, inventory: Path | None
) -> tuple[Pack, Topology | None]:
    from knowledge.pack import load_pack
    from noc_assistant.inventory import load_topology

    pack = load_pack(settings.pack_dir)  # a PackError is a ConfigError: exit 2
    return pack, (load_topology(inventory, pack) if inventory is not None else None)


def network_entities(settings: Settings, inventory: Path | None) -> set[str] | None:
    """The entities of the network, from ``inventory`` or ``NOC_DATA_DIR/inventory.json``
    where it exists (None when neither says: then no entity can be checked)."""
    if inventory is None and (settings.data_dir / "inventory.json").is_file():
        inventory = settings.data_dir / "inventory.json"
    if inventory is None:
        return None
    _, topology = load_pack_and_topology(settings, inventory)
    return set(topology.types) if topology is not None and topology.types else None


class IncidentOutput:
    """The incident sink of a live command: the database (upserts by id, so an event seen
    twice after a restart is stored once), the console's live feed, Alertmanager when
    configured, and an ALERT / RESOLVED line on the terminal."""

    def __init__(
        self,
        settings: Settings,
        store: Store,
        pipeline: Callable[[], Pipeline | None],
        hub: Broadcaster | None = None,
    ) -> None:
        from noc_assistant.integrations.alertmanager import AlertmanagerSink

        self.store = store
        self.pipeline = pipeline
        """The running pipeline (its diagnoses; None before it exists)."""
        self.hub = hub
        self.alerts: AlertmanagerSink | None = (
            AlertmanagerSink(settings.alertmanager_url, console_url=settings.console_url)
            if settings.alertmanager_url
            else None
        )
        self._tracked = False
        self.ack_timeout_s = settings.ack_timeout_s
        self._first_open: dict[str, float] = {}
        self.unacknowledged: dict[str, Incident] = {}
        """The open incidents paged again because nobody took them (until someone does)."""
        self._synced: set[MaintenanceWindow] = set()
        self._sync_error: str | None = None
        self._first_sync = True
        self._synced_at = -math.inf
        self.logs: LogEvidence | None = None
        """NF log lines to cite as evidence (``noc watch --syslog``), when received."""
        self.notifier: Notifier | None = None
        """Webhook, Slack and PagerDuty routes of ``NOC_NOTIFY_ROUTES``, when set."""
        if settings.notify_routes is not None:
            from noc_assistant.integrations.notify import Notifier

            pack, _ = load_pack_and_topology(settings, None)
            self.notifier = Notifier.from_settings(settings, store, pack)
            if self.notifier is not None:
                self.notifier.start()
        from noc_assistant.integrations.tmf621 import Tickets

        self.tickets = Tickets.from_settings(settings, store)
        """Partner TMF621 tickets of approved e-mails: noted and resolved with the incident."""

    def __call__(self, event: IncidentEvent) -> None:
        inc = event.incident
        if self.alerts is not None:
            self.alerts.on_incident(event)
        self.store.save_incident(inc)
        if self.notifier is not None:
            self.notifier.on_incident(event)
        pipe = self.pipeline()
        diagnosis = pipe.diagnoses.get(inc.id) if pipe is not None else None
        if diagnosis is not None and self.logs is not None and pipe is not None:
            types = pipe.topology.types if pipe.topology is not None else {}
            diagnosis = self.logs.attach(inc, diagnosis, types.get)
        if diagnosis is not None:
            self.store.save_diagnosis(diagnosis)
        if event.finding is not None:
            self.store.save_findings([event.finding], incident_id=inc.id)
        if self.hub is not None:
            self.hub.publish({"kind": event.kind, "incident": inc.id, "state": inc.state})
        for warning in self.tickets.on_incident(event):
            err_console.print(f"warning: {warning}", markup=False, highlight=False)
        if event.kind in ("opened", "resolved", "reopened"):
            opened = "[blue]NOTICE[/]" if inc.severity == "info" else "[red]ALERT[/]"
            word = {"opened": opened, "resolved": "[green]RESOLVED[/]"}.get(
                event.kind, "[yellow]REOPENED[/]"
            )
            console.print(
                f"{word} {', '.join(inc.entities)}  {inc.title}  [dim]{inc.id}[/]", highlight=False
            )

    def tick(self) -> None:
        """Each round: the store's maintenance windows into the running correlator
        (:meth:`sync_maintenance`); renew Alertmanager's leases, and the first time send a
        restored pipeline's open incidents (Alertmanager may have let them lapse while the
        process was down)."""
        if self.refresh_maintenance():
            self.check_acknowledgements()
            pipe = self.pipeline()
            if self.notifier is not None and pipe is not None:
                self.notifier.check_acknowledgements(pipe.correlator.incidents.values())
        if self.alerts is None:
            return
        pipe = self.pipeline()
        if not self._tracked and pipe is not None:
            incidents = pipe.correlator.incidents.values()
            self.alerts.track([i for i in incidents if i.state == "open"])
            self._tracked = True
        self.alerts.refresh()

    def refresh_maintenance(self) -> bool:
        """:meth:`sync_maintenance` at most every :data:`SYNC_EVERY_S` (a bus worker ticks
        often; a worker of a slice calls only this: it stores nothing and pages nobody, but a
        silence inside a window is still no page). Whether it read the store now."""
        if time.monotonic() - self._synced_at < SYNC_EVERY_S:
            return False
        self._synced_at = time.monotonic()
        self.sync_maintenance()
        self.sync_tuning()
        return True

    def sync_tuning(self, now: float | None = None) -> None:
        """Give the correlator the raised bars on record (`noc tune add`, the API) that end
        after a day before ``now``, in place of those it held: one declared or ended early
        while the process runs takes effect at the next round. A store that cannot be read
        keeps the last ones (the maintenance sync has said so)."""
        from noc_assistant.errors import StorageError

        pipe = self.pipeline()
        if pipe is None:
            return
        at = time.time() if now is None else now
        try:
            rules = self.store.tuning_rules(ending_after=at - 86400.0)
        except StorageError:
            return
        pipe.correlator.tuning = tuple(rules)

    def check_acknowledgements(self, now: float | None = None) -> list[str]:
        """Page again for each open incident ranked a fault that nobody has acknowledged
        ``ack_timeout_s`` after a live command first saw it open (the wall clock, not the
        data's: a replayed feed's incidents are as new as their arrival; kept in the store,
        :meth:`Store.first_seen`, so a restart does not start the timer again); an
        ``UNACKNOWLEDGED`` line, the console's feed, and with Alertmanager a second alert
        until someone takes it or it resolves. Returns the incidents paged this time."""
        from noc_assistant.errors import StorageError

        pipe = self.pipeline()
        if pipe is None or self.ack_timeout_s <= 0:
            return []
        at = time.time() if now is None else now
        open_now = {
            i.id: i
            for i in pipe.correlator.incidents.values()
            if i.state == "open" and not (i.hypotheses and i.hypotheses[0].fault == "no_fault")
        }
        for inc_id in list(self._first_open):
            if inc_id not in open_now:
                del self._first_open[inc_id]
        new = [inc_id for inc_id in open_now if inc_id not in self._first_open]
        try:
            self._first_open.update(self.store.first_seen(new, at))
        except StorageError as exc:
            err_console.print(f"acknowledgements not checked: {exc}", highlight=False)
            return []
        due = [
            i
            for i in open_now.values()
            if at - self._first_open[i.id] >= self.ack_timeout_s or i.id in self.unacknowledged
        ]
        try:
            reviews = self.store.reviews_for([i.id for i in due])
        except StorageError as exc:
            err_console.print(f"acknowledgements not checked: {exc}", highlight=False)
            return []
        taken = {inc_id for inc_id, r in reviews.items() if r.acknowledged_by}
        for inc_id, inc in list(self.unacknowledged.items()):
            if inc_id not in open_now or inc_id in taken:
                del self.unacknowledged[inc_id]
                if self.alerts is not None:
                    self.alerts.taken(open_now.get(inc_id, inc))
        paged = []
        for inc in due:
            if inc.id in self.unacknowledged or inc.id in taken:
                continue
            self.unacknowledged[inc.id] = inc
            paged.append(inc.id)
            minutes = (at - self._first_open[inc.id]) / 60.0
            console.print(
                f"[magenta]UNACKNOWLEDGED[/] {', '.join(inc.entities)}  {inc.title}  "
                f"[dim]{inc.id}[/]  nobody has taken it in {minutes:.0f} min",
                highlight=False,
            )
            if self.hub is not None:
                self.hub.publish({"kind": "unacknowledged", "incident": inc.id, "state": "open"})
            if self.alerts is not None:
                self.alerts.unacknowledged(inc)
        return paged

    def sync_maintenance(self, now: float | None = None) -> None:
        """Give the correlator the maintenance windows declared in the store (the console's
        form, `noc maintenance add`) that end after a day before ``now`` (the first time: all
        of them), in place of those it was given before: one declared, moved or ended early
        while the process runs takes effect at the next round (:meth:`tick` reads at most
        every :data:`SYNC_EVERY_S`). Windows given otherwise (a replay's labels) stay. A store
        that cannot be read keeps the last windows, and says so once."""
        from noc_assistant.errors import StorageError
        from noc_assistant.stream.correlate import MaintenanceWindow

        pipe = self.pipeline()
        if pipe is None:
            return
        at = time.time() if now is None else now
        # the first time, every window on record: a snapshot may hold one ended long since
        since = -math.inf if self._first_sync else at - 86400.0
        try:
            declared = self.store.maintenance_windows(ending_after=since)
        except StorageError as exc:
            if str(exc) != self._sync_error:
                err_console.print(f"maintenance windows not refreshed: {exc}", highlight=False)
            self._sync_error = str(exc)
            return
        self._sync_error = None
        self._first_sync = False
        windows = {MaintenanceWindow(m.entity, m.start, m.end) for m in declared}
        # a window restored from a snapshot is the store's too: it is replaced by its current
        # form (ended early since, say), not kept beside it
        ours = {(w.entity, w.start) for w in windows}
        kept = [
            m
            for m in pipe.correlator.maintenance
            if m not in self._synced and (m.entity, m.start) not in ours
        ]
        pipe.correlator.maintenance = kept + sorted(windows, key=lambda w: (w.start, w.entity))
        self._synced = windows

    def summary(self) -> str | None:
        notified = self.notifier.summary() if self.notifier is not None else None
        if self.alerts is None:
            return notified
        a = self.alerts
        line = f"alertmanager {a.url}: {a.sent} alerts sent, {a.pending} waiting" + (
            f" ({a.last_error})" if a.last_error else ""
        )
        return f"{notified}\n{line}" if notified else line


def console_app(
    store: Store,
    hub: Broadcaster,
    settings: Settings,
    pack: Pack,
    topology: Topology | Callable[[], Topology],
    alert_sink: AlertSink | None = None,
) -> FastAPI:
    """The web console with drafting on: reports and chat through ``NOC_LLM_BASE_URL`` (the
    template answers when it is down), e-mails sent through ``NOC_SMTP_HOST``, writes guarded
    by ``NOC_API_TOKEN``, maintenance windows mirrored as silences in
    ``NOC_ALERTMANAGER_URL``, Alertmanager's webhook alerts into ``alert_sink`` (a running
    pipeline's :class:`~noc_assistant.api.alert_intake.QueuedAlerts`), else correlated by the
    console itself and stored."""
    from noc_assistant.api.alert_intake import AlertIntake
    from noc_assistant.api.app import create_app
    from noc_assistant.integrations.alertmanager import Silences
    from noc_assistant.integrations.mail import Mailer
    from noc_assistant.triage.drafting import Drafter

    drafter = Drafter.from_settings(pack, topology, settings)
    token = settings.api_token.get_secret_value() if settings.api_token else None
    return create_app(
        store,
        hub,
        settings.local_tz,
        drafter=drafter,
        mailer=Mailer.from_settings(settings),
        api_token=token,
        silences=Silences(settings.alertmanager_url) if settings.alertmanager_url else None,
        alerts=AlertIntake(alert_sink, pack, topology)
        if alert_sink is not None
        else AlertIntake.for_store(
            store,
            pack,
            topology,
            window_s=settings.correlation_window_s,
            resolve_after_s=settings.resolve_after_s,
        ),
    )


def drafting_for_cli(inventory: Path | None) -> tuple[Store, Drafter]:
    """The store and a drafter for the CLI: the pack of the settings, the inventory given
    (default: the demo's, when it exists), the LLM of ``NOC_LLM_BASE_URL``."""
    from knowledge.topology import Topology
    from noc_assistant.triage.drafting import Drafter

    settings = get_settings()
    if inventory is None and (settings.data_dir / "inventory.json").is_file():
        inventory = settings.data_dir / "inventory.json"
    pack, topology = load_pack_and_topology(settings, inventory)
    drafter = Drafter.from_settings(pack, topology or Topology.infer({}, pack), settings)
    return open_store(settings.db_url), drafter


InventoryOpt = Annotated[
    Path | None,
    typer.Option(help="Network inventory (FORMATS §4); default: NOC_DATA_DIR/inventory.json"),
]
