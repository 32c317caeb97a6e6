"""``noc watch`` scrapes real HTTP exporters on loopback, as Prometheus would: samples typed from
``# TYPE``, bad lines quarantined with the target and line, and a target that stops answering
becomes an incident once the liveness grace has passed."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from noc_assistant.cli import run
from noc_assistant.ingest import Quarantine
from noc_assistant.ingest.scrape import Scraper, Target
from noc_assistant.settings import get_settings
from noc_assistant.storage import open_store


class _Exporter:
    """An Open5GS-like AMF exporter: counters that grow at every scrape, a gauge, a
    histogram, and optionally a line no parser can read."""

    def __init__(self, broken_line: bool = False) -> None:
        self.scrapes = 0
        self.broken_line = broken_line
        exporter = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                exporter.scrapes += 1
                body = exporter.text().encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.url = f"http://127.0.0.1:{port}/metrics"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def text(self) -> str:
        n = self.scrapes
        lines = [
            "# HELP fivegs_amffunction_rm_reginitreq Registration requests",
            "# TYPE fivegs_amffunction_rm_reginitreq counter",
            f'fivegs_amffunction_rm_reginitreq{{nf="amf"}} {300 * n}',
            "# TYPE fivegs_amffunction_rm_reginitsucc counter",
            f'fivegs_amffunction_rm_reginitsucc{{nf="amf"}} {298 * n}',
            "# TYPE gnb gauge",
            'gnb{nf="amf"} 12',
            "# TYPE amf_sbi_seconds histogram",
            f'amf_sbi_seconds_bucket{{le="0.1"}} {n}',
            f'amf_sbi_seconds_bucket{{le="+Inf"}} {n}',
            f"amf_sbi_seconds_sum {0.05 * n}",
            f"amf_sbi_seconds_count {n}",
        ]
        if self.broken_line:
            lines.append('gnb{nf="amf" 12')
        return "\n".join(lines) + "\n"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture()
def exporters() -> Iterator[tuple[_Exporter, _Exporter]]:
    a, b = _Exporter(broken_line=True), _Exporter()
    yield a, b
    for e in (a, b):
        e.stop()


def test_a_scrape_reads_types_and_quarantines_bad_lines(
    exporters: tuple[_Exporter, _Exporter],
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
    exporters: tuple[_Exporter, _Exporter],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    a, b = exporters
    db = f"sqlite:///{tmp_path / 'noc.db'}"
    monkeypatch.setenv("NOC_DB_URL", db)
    monkeypatch.setenv("NOC_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("NOC_STATE_KEY", "watch-test-key-0123456789")
    get_settings.cache_clear()
    stopper = threading.Timer(6.0, b.stop)
    stopper.start()
    ckpt = tmp_path / "watch.ckpt"
    try:
        args = ["watch", "--target", f"amf-1={a.url}", "--target", f"amf-2={b.url}"]
        args += ["--interval", "1", "--no-serve", "--checkpoint", str(ckpt)]
        started = time.monotonic()
        assert run([*args, "--for", "45"]) == 0
        assert time.monotonic() - started < 60
    finally:
        stopper.cancel()
        get_settings.cache_clear()
    out = capsys.readouterr()
    assert "scrape failed: " + b.url in out.err
    incidents = open_store(db).list_incidents()
    assert [i.entities for i in incidents] == [["amf-2"]]  # the silent one, and only it
    assert incidents[0].kpis == ["target-up"] and incidents[0].state == "open"
    assert a.scrapes >= 40

    # a restart resumes the detectors' state and the open incident from the snapshot
    get_settings.cache_clear()
    try:
        assert run([*args, "--for", "2"]) == 0
    finally:
        get_settings.cache_clear()
    assert f"resumed from {ckpt}" in capsys.readouterr().out
