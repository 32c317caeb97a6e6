"""``noc demo`` (what ``make run`` starts), without the console: a simulated quarter day
streams through detection into the store, incidents with their diagnoses, and the scenario's
planned work kept as declared maintenance windows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from noc_assistant.cli import run
from noc_assistant.ingest.replay import parse_ts
from noc_assistant.settings import get_settings
from noc_assistant.store import SqliteStore


def test_the_demo_streams_a_scenario_into_the_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "noc.db"
    monkeypatch.setenv("NOC_DB_URL", f"sqlite:///{db}")
    monkeypatch.setenv("NOC_DATA_DIR", str(tmp_path / "data"))
    get_settings.cache_clear()
    args = ["demo", "--days", "0.25", "--seed", "7", "--start", "2026-11-29T00:00:00Z"]
    try:
        assert run([*args, "--no-serve", "--no-hold"]) == 0
    finally:
        get_settings.cache_clear()
    out = capsys.readouterr().out
    assert "Demo summary" in out and "ALERT" in out
    labels = json.loads((tmp_path / "data" / "labels.json").read_text())
    store = SqliteStore(db)
    try:
        incidents = store.list_incidents()
        assert incidents and all(store.get_diagnosis(i.id) is not None for i in incidents)
        faults = {
            (i["root_cause"]["fault"], i["root_cause"]["entity"]) for i in labels["incidents"]
        }
        tops = {(h.fault, h.entity) for i in incidents for h in i.hypotheses[:1]}
        assert faults and faults <= tops, (faults, tops)
        planned = labels["maintenance"]
        assert planned  # the scenario holds planned work, and its findings paged nobody
        windows = store.maintenance_windows()
        assert [(w.entity, w.start, w.end) for w in windows] == [
            (m["entity"], parse_ts(m["start"]), parse_ts(m["end"])) for m in planned
        ]
        assert all(w.by == "noc demo" for w in windows)
        assert "suppressed (maintenance)" in out
    finally:
        store.close()
