"""A real Prometheus server (installed by scripts/system-deps.sh, one started per test on a
free loopback port) scrapes a real HTTP exporter; ``noc prom export`` reads back the raw
samples with their types, and the replay parser takes the file as any FORMATS §1 replay."""

from __future__ import annotations

import itertools
import re
import time
from pathlib import Path

import pytest

from noc_assistant.cli import run
from noc_assistant.ingest import Quarantine
from noc_assistant.ingest.reader import read_replay
from noc_assistant.integrations.prometheus import PrometheusError, PrometheusSource


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


def test_unreachable_prometheus_is_a_usage_error(tmp_path: Path, free_port: int) -> None:
    args = ["prom", "export", "--url", f"http://127.0.0.1:{free_port}"]
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
    started = time.time()
    args = ["watch", "--prometheus", prometheus, "--match", "gnb", "--interval", "1"]
    try:
        assert run([*args, "--backfill", "300", "--lag", "2", "--for", "4", "--no-serve"]) == 0
    finally:
        get_settings.cache_clear()
    out = capsys.readouterr().out
    m = re.search(r"(\d+) rounds, ([\d,]+) samples \((\d+) repeated\)", out)
    assert m is not None, out
    rounds, fed, repeated = int(m.group(1)), int(m.group(2).replace(",", "")), int(m.group(3))
    assert rounds >= 2 and repeated == 0  # each stretch read once
    assert "0 lines quarantined" in out  # nor read again after its time had passed
    # at least the five stored before the start, at most what Prometheus holds for the span
    stored = list(PrometheusSource(prometheus, match=["gnb"]).fetch(started - 303, time.time()))
    assert 5 <= fed <= len(stored)
