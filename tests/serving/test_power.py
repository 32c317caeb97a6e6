"""Energy that is measured or says it is not (issue 35 item 5): RAPL counters read from a
powercap tree, θ fitted on measured requests, and the API and /metrics saying which."""

from __future__ import annotations

from pathlib import Path

import httpx
import openai

from noc_assistant.serving.engine import Engine, Request
from noc_assistant.serving.loading import TargetModel
from noc_assistant.serving.power import FIT_MIN_SAMPLES, IMPLIED_SOURCE, RaplMeter
from noc_assistant.serving.server import ServerThread, create_app


def _tree(root: Path, uj: int) -> None:
    for zone in ("intel-rapl:0", "intel-rapl:1"):
        (root / zone).mkdir(exist_ok=True)
        (root / zone / "energy_uj").write_text(str(uj))
        (root / zone / "max_energy_range_uj").write_text(str(262_143_328_850))
    (root / "intel-rapl:0:0").mkdir(exist_ok=True)  # a sub-zone: not counted again
    (root / "intel-rapl:0:0" / "energy_uj").write_text(str(uj))
    (root / "intel-rapl:0:0" / "max_energy_range_uj").write_text(str(262_143_328_850))


class _Ticking(RaplMeter):
    """A package that burns 1.5 J per reading (what a generation costs, about)."""

    def __init__(self, root: Path) -> None:
        opened = RaplMeter.open(root)
        assert opened is not None
        super().__init__(opened._zones)
        self.root = root
        self.uj = 1_000_000

    def read(self) -> list[int]:
        self.uj += 1_500_000
        _tree(self.root, self.uj)
        return super().read()


def test_package_zones_are_summed_and_unreadable_ones_skipped(tmp_path: Path) -> None:
    _tree(tmp_path, 2_000_000)
    meter = RaplMeter.open(tmp_path)
    assert meter is not None
    start = meter.read()
    assert start == [2_000_000, 2_000_000]
    _tree(tmp_path, 2_500_000)
    assert meter.joules_since(start) == 1.0  # two packages, 0.5 J each
    (tmp_path / "intel-rapl:1" / "energy_uj").write_text("not a number")
    only = RaplMeter.open(tmp_path)
    assert only is not None and only.read() == [2_500_000]
    assert RaplMeter.open(tmp_path / "missing") is None


def test_the_api_and_metrics_say_the_estimate_is_uncalibrated(tiny: TargetModel) -> None:
    engine = Engine(tiny, name="tiny", context=200)
    engine.meter = None  # whatever this machine has (meter=None opens its RAPL): no meter
    srv = ServerThread(create_app(engine, max_tokens_default=8)).start()
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{srv.port}/v1", api_key="local")
        r = client.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "upf-3?"}], max_tokens=4
        )
        energy = (r.model_extra or {})["noc"]["energy_j"]
        assert energy["calibrated"] is False and energy["theta_source"] == IMPLIED_SOURCE
        assert energy["measured"] is None and energy["prefill"] > 0
        text = httpx.get(f"http://127.0.0.1:{srv.port}/metrics").text
        assert 'noc_energy_calibrated{model_name="tiny",theta_source="implied by' in text
        assert 'uncalibrated"} 0.0' in text
    finally:
        srv.stop()


def test_theta_are_fitted_once_enough_requests_are_measured(
    tiny: TargetModel, tmp_path: Path
) -> None:
    _tree(tmp_path, 1_000_000)
    engine = Engine(tiny, name="tiny", context=200, meter=_Ticking(tmp_path))
    prompt = engine.encode_chat([{"role": "user", "content": "Summarize the alarm."}])
    for i in range(FIT_MIN_SAMPLES):
        _, st = engine.generate(Request(prompt=prompt[: 8 + 3 * i], max_tokens=4 + i))
        assert st.measured_j == 3.0  # two packages, 1.5 J each between the two readings
        assert engine.calibration.calibrated == (i + 1 >= FIT_MIN_SAMPLES)
    assert engine.calibration.source.startswith(f"fitted on {FIT_MIN_SAMPLES} requests")
    assert engine.energy(st).total > 0
