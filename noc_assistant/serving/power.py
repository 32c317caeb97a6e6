"""Energy this machine reports (Linux powercap / RAPL), and SIMPLE's θ fitted on it.

The server's energy figures are SIMPLE estimates (:mod:`noc_assistant.serving.simple`); the θ
they use say where they come from. With no meter readable, θ are the values implied by the
SIMPLE paper's H100 example (:data:`~noc_assistant.serving.simple.LLAMA31_8B_IMPLIED`): the
joules are an **uncalibrated** estimate for this machine, and the API and ``/metrics`` say so.
Where Linux exposes RAPL energy counters (``/sys/class/powercap/intel-rapl:N/energy_uj``, also
on AMD Zen; reading them may need root), each request's energy is measured as the counters'
increase over its generation (the whole package: other work on the machine is counted too),
and once :data:`FIT_MIN_SAMPLES` requests are measured θ are fitted on them
(:func:`~noc_assistant.serving.simple.fit`): the estimate is then **calibrated** on this
machine. NVML (GPU energy) is not read yet: a GPU run keeps the implied θ and says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from noc_assistant.serving.simple import (
    LLAMA31_8B_IMPLIED,
    EnergyBreakdown,
    ModelShape,
    SimpleTheta,
    fit,
)

__all__ = ["FIT_MIN_SAMPLES", "IMPLIED_SOURCE", "Calibration", "RaplMeter"]

POWERCAP = Path("/sys/class/powercap")
#: measured requests before θ are fitted (four coefficients, with room for noise)
FIT_MIN_SAMPLES = 8
#: the most measured requests kept for the fit (the newest)
FIT_MAX_SAMPLES = 256
IMPLIED_SOURCE = (
    "implied by the SIMPLE paper's H100 example (Llama 3.1 8B); "
    "no energy meter readable here: uncalibrated"
)


@dataclass(frozen=True)
class _Zone:
    energy: Path
    wrap_uj: int


class RaplMeter:
    """The package zones of Linux powercap (``intel-rapl:N``, not their sub-zones): total
    joules, and the joules between two readings (a counter that wrapped is unwrapped).

    >>> import tempfile
    >>> root = Path(tempfile.mkdtemp())
    >>> for name, uj in (("intel-rapl:0", 5_000_000), ("intel-rapl:0:0", 1_000_000)):
    ...     (root / name).mkdir()
    ...     _ = (root / name / "energy_uj").write_text(str(uj))
    ...     _ = (root / name / "max_energy_range_uj").write_text("10000000")
    >>> meter = RaplMeter.open(root)
    >>> start = meter.read()
    >>> _ = (root / "intel-rapl:0" / "energy_uj").write_text("1000000")  # wrapped at 10 J
    >>> meter.joules_since(start)
    6.0
    >>> RaplMeter.open(root / "none") is None
    True
    """

    def __init__(self, zones: list[_Zone]) -> None:
        self._zones = zones

    @classmethod
    def open(cls, root: Path = POWERCAP) -> RaplMeter | None:
        """The meter of ``root``'s package zones, or None when none is readable."""
        zones: list[_Zone] = []
        try:
            candidates = sorted(root.glob("intel-rapl:*"))
        except OSError:
            return None
        for zone in candidates:
            if zone.name.count(":") != 1:  # a sub-zone (core, uncore, dram) of a package
                continue
            try:
                int((zone / "energy_uj").read_text())
                wrap = int((zone / "max_energy_range_uj").read_text())
            except (OSError, ValueError):  # absent, or root-only since CVE-2020-8694
                continue
            zones.append(_Zone(zone / "energy_uj", wrap))
        return cls(zones) if zones else None

    def read(self) -> list[int]:
        """Each zone's counter now (µJ)."""
        return [int(z.energy.read_text()) for z in self._zones]

    def joules_since(self, start: list[int]) -> float:
        """Joules used since ``start`` (:meth:`read`), over all package zones."""
        total = 0
        for zone, before, now in zip(self._zones, start, self.read(), strict=True):
            total += now - before if now >= before else now + zone.wrap_uj - before
        return total / 1e6


class Calibration:
    """θ for one model: the implied ones until :data:`FIT_MIN_SAMPLES` requests have been
    measured, then the fit on the measured ones (refitted as more come).

    >>> shape = ModelShape(hidden_size=576, num_layers=30, kv_ratio=3 / 9)
    >>> cal = Calibration(shape)
    >>> cal.calibrated, cal.source == IMPLIED_SOURCE
    (False, True)
    >>> true = SimpleTheta(0.5, 1e-8, 1e-9, 1e-6)
    >>> from noc_assistant.serving.simple import predict
    >>> for n_in, n_out in [(50 * k, 10 + 7 * k) for k in range(1, 9)]:
    ...     cal.add(n_in, n_out, predict(true, shape, n_in, n_out).total)
    >>> cal.calibrated, cal.source.startswith("fitted on 8 requests measured by RAPL")
    (True, True)
    >>> round(predict(cal.theta, shape, 300, 40).total / predict(true, shape, 300, 40).total, 3)
    1.0
    """

    def __init__(self, shape: ModelShape, theta: SimpleTheta = LLAMA31_8B_IMPLIED) -> None:
        self.shape = shape
        self.theta = theta
        self.source = IMPLIED_SOURCE
        self.calibrated = False
        self._samples: list[tuple[ModelShape, int, int, int, float]] = []

    def add(self, prompt_tokens: int, output_tokens: int, joules: float, cached: int = 0) -> None:
        """One measured request (``cached`` of its prompt tokens served from the prefix
        cache); θ are refitted once enough are measured."""
        if joules <= 0.0 or output_tokens <= 0:
            return
        self._samples.append((self.shape, prompt_tokens, output_tokens, cached, joules))
        del self._samples[:-FIT_MAX_SAMPLES]
        if len(self._samples) < FIT_MIN_SAMPLES:
            return
        result = fit(self._samples)
        self.theta = result.theta
        self.calibrated = True
        self.source = (
            f"fitted on {len(self._samples)} requests measured by RAPL on this machine "
            f"(R² {result.r2:.2f}, MAPE {result.mape:.0f} %)"
        )

    def fields(self, energy: EnergyBreakdown, measured_j: float | None) -> dict[str, Any]:
        """A request's ``energy_j`` in the API: the estimate's parts, whether its θ are
        calibrated and where they come from, and the joules measured (None: no meter)."""
        return {
            "prefill": energy.prefill,
            "kv_read": energy.kv_read,
            "per_token": energy.per_token,
            "calibrated": self.calibrated,
            "theta_source": self.source,
            "measured": measured_j,
        }
