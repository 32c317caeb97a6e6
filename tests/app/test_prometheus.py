"""A real Prometheus server (installed by scripts/system-deps.sh, one started per test on a
free loopback port) scrapes a real HTTP exporter; ``noc prom export`` reads back the raw
samples with their types, and the replay parser takes the file as any FORMATS §1 replay."""

from __future__ import annotations

import itertools
import re
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from noc_assistant.cli import run
from noc_assistant.ingest import Quarantine
from noc_assistant.ingest.replay import read_replay
from noc_assistant.prometheus import PrometheusError, PrometheusSource


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture()
def prometheus(tmp_path: Path, make_exporter: Callable[..., Any]) -> Iterator[str]:
    """Prometheus scraping one AMF exporter every second, its instance relabelled amf-1."""
    binary = shutil.which("prometheus")
    assert binary, "Prometheus is not installed (scripts/system-deps.sh installs it)"
    exporter = make_exporter()
    target = exporter.url.removeprefix("http://").removesuffix("/metrics")
    config = {
        "global": {"scrape_interval": "1s"},
        "scrape_configs": [
            {
                "job_name": "open5gs",
                "static_configs": [{"targets": [target]}],
                "relabel_configs": [{"target_label": "instance", "replacement": "amf-1"}],
            }
        ],
    }
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = _free_port()
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:  # ready, and five scrapes of the exporter stored
        assert proc.poll() is None and time.monotonic() < deadline
        try:
            got = httpx.get(f"{url}/api/v1/query", params={"query": "count_over_time(gnb[1m])"})
            result = got.json()["data"]["result"] if got.status_code == 200 else []
            if result and float(result[0]["value"][1]) >= 5:
                break
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    yield url
    proc.terminate()
    proc.wait(timeout=20)


def test_export_reads_raw_samples_with_their_types(prometheus: str, tmp_path: Path) -> None:
    out = tmp_path / "telemetry.jsonl"
    now = time.time()
    args = ["prom", "export", "--url", prometheus, "--out", str(out)]
    assert run([*args, "--start", str(now - 120), "--end", str(now)]) == 0
    q = Quarantine()
    points = list(read_replay(out, q))
    assert q.count == 0 and len(points) >= 5 * 7
    req = [p for p in points if p.metric == "fivegs_amffunction_rm_reginitreq"]
    assert {p.type for p in req} == {"counter"}
    assert dict(req[0].labels) == {"instance": "amf-1", "job": "open5gs", "nf": "amf"}
    values = [p.value for p in req]
    assert values == sorted(values) and len(set(values)) == len(values)  # raw, not resampled
    steps = {round(b.ts - a.ts) for a, b in itertools.pairwise(req)}
    assert steps == {1}  # the scrape interval, as stored
    kinds = {p.metric: p.type for p in points}
    assert kinds["amf_sbi_seconds_bucket"] == "histogram_bucket"
    assert kinds["amf_sbi_seconds_sum"] == "histogram_sum" and kinds["gnb"] == "gauge"
    assert kinds["up"] == "gauge"  # Prometheus' own series come too

    # a selector narrows it; a bad one is a clear error
    only = list(PrometheusSource(prometheus, match=["gnb"]).fetch(now - 120, now))
    assert {p.metric for p in only} == {"gnb"}
    with pytest.raises(PrometheusError, match="bad_data"):
        list(PrometheusSource(prometheus, match=["gnb{"]).fetch(now - 120, now))


def test_unreachable_prometheus_is_a_usage_error(tmp_path: Path) -> None:
    args = ["prom", "export", "--url", f"http://127.0.0.1:{_free_port()}"]
    assert run([*args, "--out", str(tmp_path / "t.jsonl"), "--start", "0", "--end", "60"]) == 2
    assert not (tmp_path / "t.jsonl").exists()


def test_watch_polls_prometheus_after_a_backfill(
    prometheus: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``noc watch --prometheus`` first replays the stored history, then reads each new
    stretch once: no sample reaches the pipeline twice."""
    monkeypatch.setenv("NOC_DB_URL", f"sqlite:///{tmp_path / 'noc.db'}")
    monkeypatch.setenv("NOC_DATA_DIR", str(tmp_path))
    from noc_assistant.settings import get_settings

    get_settings.cache_clear()
    args = ["watch", "--prometheus", prometheus, "--match", "gnb", "--interval", "1"]
    try:
        assert run([*args, "--backfill", "300", "--lag", "2", "--for", "4", "--no-serve"]) == 0
    finally:
        get_settings.cache_clear()
    out = capsys.readouterr().out
    m = re.search(r"(\d+) rounds, ([\d,]+) samples \((\d+) repeated\)", out)
    assert m is not None, out
    rounds, fed, repeated = int(m.group(1)), int(m.group(2).replace(",", "")), int(m.group(3))
    assert rounds >= 3 and repeated == 0  # each stretch read once
    assert "0 lines quarantined" in out  # nor read again after its time had passed
    assert fed >= 5 + rounds - 2  # the history before the start, then about one per round
