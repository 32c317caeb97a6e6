"""The console's own /metrics: read from the store at each scrape (open, unacknowledged,
verdicts, the week's false-alarm share, maintenance in force, e-mails), parsed as Prometheus
reads it, and scraped by the real Prometheus on loopback."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
from conftest import run_prometheus
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from noc_assistant.api.events import Broadcaster
from noc_assistant.api.metrics import registry
from noc_assistant.models import Incident, Review
from noc_assistant.ops.maintenance import new_window
from noc_assistant.ops.raised_bars import new_rule
from noc_assistant.store import SqliteStore, Store

NOW = 1_796_292_000.0


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _incident(i: str, opened: float, state: str = "open") -> Incident:
    return Incident(
        id=i,
        fingerprint=i,
        opened_at=opened,
        updated_at=opened + 60,
        state=state,  # type: ignore[arg-type]
        resolved_at=opened + 600 if state == "resolved" else None,
        entities=["upf-3"],
    )


def test_the_metrics_read_the_store(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "noc.db")
    got = _samples(generate_latest(registry(store, clock=lambda: NOW)).decode())
    assert got[("noc_store_up", ())] == 1.0
    assert ("noc_false_alarm_share", ()) not in got  # nothing judged: absent, not 0
    store.save_incident(_incident("inc-1", NOW - 3600))
    store.save_incident(_incident("inc-2", NOW - 7200))
    store.save_incident(_incident("inc-3", NOW - 9000, "resolved"))
    store.save_review(Review(incident_id="inc-2").acknowledged("ana", NOW - 7000))
    store.save_review(Review(incident_id="inc-3").judged("no_fault", "ana", NOW - 8000))
    store.save_maintenance(new_window("smf-1", "ana", NOW - 60, duration_s=3600))
    store.save_tuning(new_rule("gpu-kv-cache-usage", "ana", NOW - 60, min_score=2, reason="r"))
    got = _samples(generate_latest(registry(store, clock=lambda: NOW)).decode())
    assert got[("noc_incidents", (("state", "open"),))] == 2.0
    assert got[("noc_incidents", (("state", "resolved"),))] == 1.0
    assert got[("noc_incidents_open_unacknowledged", ())] == 1.0
    assert got[("noc_incident_verdicts", (("verdict", "no_fault"),))] == 1.0
    assert got[("noc_incident_verdicts", (("verdict", "none"),))] == 2.0
    assert got[("noc_false_alarm_share", ())] == 1.0
    assert got[("noc_maintenance_windows_active", ())] == 1.0
    assert got[("noc_raised_bars_active", ())] == 1.0
    assert got[("noc_emails", (("status", "draft"),))] == 0.0
    store.close()
    got = _samples(generate_latest(registry(store, clock=lambda: NOW)).decode())
    assert got == {("noc_store_up", ()): 0.0}  # a closed store: down, nothing read as zero


def test_prometheus_scrapes_the_console(
    served: tuple[str, Store, Broadcaster], tmp_path: Path
) -> None:
    base, store, _ = served
    now = time.time()
    store.save_incident(_incident("inc-1", now - 60))
    target = base.removeprefix("http://")
    config = {
        "global": {"scrape_interval": "1s"},
        "scrape_configs": [
            {"job_name": "noc-assistant", "static_configs": [{"targets": [target]}]}
        ],
    }

    def unacknowledged(url: str) -> list[str]:
        got = httpx.get(
            f"{url}/api/v1/query", params={"query": "noc_incidents_open_unacknowledged"}
        )
        result = got.json()["data"]["result"] if got.status_code == 200 else []
        return [r["value"][1] for r in result]

    with run_prometheus(tmp_path, config, lambda url: bool(unacknowledged(url))) as url:
        assert unacknowledged(url) == ["1"]
        store.save_review(Review(incident_id="inc-1").acknowledged("ana", now))
        deadline = time.monotonic() + 20
        while unacknowledged(url) != ["0"] and time.monotonic() < deadline:
            time.sleep(0.5)
        assert unacknowledged(url) == ["0"]  # taken: the next scrape says so
