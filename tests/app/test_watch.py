"""``noc watch`` scrapes real HTTP exporters on loopback, as Prometheus would: samples typed from
``# TYPE``, bad lines quarantined with the target and line, and a target that stops answering
becomes an incident once the liveness grace has passed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from noc_assistant.cli import run
from noc_assistant.ingest import Quarantine
from noc_assistant.ingest.scrape import Scraper, Target
from noc_assistant.settings import get_settings
from noc_assistant.store import open_store


@pytest.fixture()
def exporters(make_exporter: Callable[..., Any]) -> tuple[Any, Any]:
    return make_exporter(broken_line=True), make_exporter()


def test_a_scrape_reads_types_and_quarantines_bad_lines(
    exporters: tuple[Any, Any],
) -> None:
    a, b = exporters
    q = Quarantine()
    scraper = Scraper(
        [Target("amf-1", a.url), Target("amf-2", b.url), Target("amf-3", "http://127.0.0.1:1/")],
        timeout_s=2,
        quarantine=q,
    )
    result = scraper.scrape(1000.0)
    scraper.close()
    by = {(p.labels, p.metric): p for p in result.points}
    req = by[((("instance", "amf-1"), ("nf", "amf")), "fivegs_amffunction_rm_reginitreq")]
    assert (req.ts, req.value, req.type) == (1000.0, 300.0, "counter")
    kinds = {p.metric: p.type for p in result.points}
    assert kinds["amf_sbi_seconds_bucket"] == "histogram_bucket"
    assert kinds["amf_sbi_seconds_count"] == "histogram_count" and kinds["gnb"] == "gauge"
    assert len(result.points) == 2 * 7
    assert list(result.failed) == ["amf-3"]  # no answer: no samples, not zeros
    assert [(r.source, r.line) for r in q.records] == [(a.url, 13)]


def test_watch_pages_for_a_target_that_stops_answering(
    exporters: tuple[Any, Any],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    a, b = exporters
    db = f"sqlite:///{tmp_path / 'noc.db'}"
    monkeypatch.setenv("NOC_DB_URL", db)
    monkeypatch.setenv("NOC_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("NOC_STATE_KEY", "watch-test-key-0123456789")
    monkeypatch.setenv("NOC_ACK_TIMEOUT_S", "2")
    get_settings.cache_clear()
    stopper = threading.Timer(6.0, b.stop)
    stopper.start()
    ckpt = tmp_path / "watch.ckpt"
    try:
        args = ["watch", "--target", f"amf-1={a.url}", "--target", f"amf-2={b.url}"]
        args += ["--interval", "1", "--no-serve", "--checkpoint", str(ckpt)]
        assert run([*args, "--for", "45"]) == 0
    finally:
        stopper.cancel()
        get_settings.cache_clear()
    out = capsys.readouterr()
    assert "scrape failed: " + b.url in out.err
    incidents = open_store(db).list_incidents()
    assert [i.entities for i in incidents] == [["amf-2"]]  # the silent one, and only it
    assert incidents[0].kpis == ["target-up"] and incidents[0].state == "open"
    # nobody took it within NOC_ACK_TIMEOUT_S: paged again, once
    unacked = [line for line in out.out.splitlines() if line.startswith("UNACKNOWLEDGED")]
    assert len(unacked) == 1 and "amf-2" in unacked[0] and incidents[0].id in unacked[0]
    assert a.scrapes >= 40

    # a restart resumes the detectors' state and the open incident from the snapshot
    get_settings.cache_clear()
    try:
        assert run([*args, "--for", "2"]) == 0
    finally:
        get_settings.cache_clear()
    assert f"resumed from {ckpt}" in capsys.readouterr().out


def test_sigterm_stops_watch_with_a_snapshot(exporters: tuple[Any, Any], tmp_path: Path) -> None:
    a, _ = exporters
    env = {
        **os.environ,
        "NOC_DB_URL": f"sqlite:///{tmp_path / 'noc.db'}",
        "NOC_DATA_DIR": str(tmp_path),
        "NOC_STATE_KEY": "watch-test-key-0123456789",
    }
    ckpt = tmp_path / "watch.ckpt"
    args = [sys.executable, "-m", "noc_assistant", "watch", "--target", f"amf-1={a.url}"]
    args += ["--interval", "0.2", "--no-serve", "--checkpoint", str(ckpt)]
    proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while a.scrapes < 5:
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    assert not ckpt.exists()  # no snapshot yet (every 240 rounds)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    assert ckpt.exists() and "rounds" in out


def test_maintenance_declared_while_watch_runs_holds_the_page_until_it_ends(
    exporters: tuple[Any, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same silent target, but an engineer declares maintenance on it (in the store, as
    the console and `noc maintenance add` do) while watch runs: nobody is paged while the
    window lasts, and the silence that outlasts it pages once it ends."""
    from detectors.params import liveness_grace_s
    from noc_assistant.ops.maintenance import new_window

    a, b = exporters
    db = f"sqlite:///{tmp_path / 'noc.db'}"
    monkeypatch.setenv("NOC_DB_URL", db)
    monkeypatch.setenv("NOC_DATA_DIR", str(tmp_path))
    get_settings.cache_clear()
    store = open_store(db)
    window: list[Any] = []

    def declare() -> None:  # two rounds in: the loop must pick it up while it runs
        window.append(new_window("amf-2", "ops", time.time(), duration_s=40, reason="reboot"))
        store.save_maintenance(window[0])

    stopped: list[float] = []
    timers = [
        threading.Timer(2.0, declare),
        threading.Timer(5.0, lambda: (b.stop(), stopped.append(time.time()))),
    ]
    for t in timers:
        t.start()
    try:
        args = ["watch", "--target", f"amf-1={a.url}", "--target", f"amf-2={b.url}"]
        assert run([*args, "--interval", "1", "--no-serve", "--for", "55"]) == 0
    finally:
        for t in timers:
            t.cancel()
        get_settings.cache_clear()
    [incident] = open_store(db).list_incidents()
    assert incident.entities == ["amf-2"] and incident.kpis == ["target-up"]
    # without the window the silence pages after its grace (30 s: the test above); the window
    # outlasts that, and the page comes when it ends
    assert window[0].end - stopped[0] > liveness_grace_s(1.0, on_clock=True) + 2
    assert window[0].end <= incident.opened_at <= window[0].end + 5
