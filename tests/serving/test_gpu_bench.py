"""The prepared GPU benchmark (bench/gpu_dspine.py) runs end to end at toy sizes on the CPU, so
the script a lent GPU machine will run does not rot between the sessions that have one."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_gpu_bench_smoke_run(tmp_path: Path) -> None:
    script = str(ROOT / "bench" / "gpu_dspine.py")
    data = tmp_path / "corpus.json"
    subprocess.run(
        [sys.executable, script, "prepare", "--tiny", "--out", str(data)], check=True, cwd=ROOT
    )
    blob = json.loads(data.read_text())
    assert blob["train"] and blob["held_out"] and blob["eos"]
    out = tmp_path / "out"
    args = ["run", "--data", str(data), "--out", str(out), "--smoke", "--device", "cpu"]
    subprocess.run([sys.executable, script, *args], check=True, cwd=ROOT, timeout=600)
    res = json.loads((out / "gpu_dspine.json").read_text())
    rows = res["results"]
    assert set(rows) == {"target-only", "DSpine B=4", "DFlash-style B=4"}
    assert all(r["identical"] == "3/3" for r in rows.values())  # lossless on every prompt
    assert res["drafters"]["DSpine"]["steps_done"] == 5
    assert "| DSpine B=4 |" in (out / "gpu_dspine.md").read_text()
