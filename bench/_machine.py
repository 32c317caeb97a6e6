"""What the benchmark scripts say about the machine they ran on."""

from __future__ import annotations

import platform
from pathlib import Path

__all__ = ["cpu_name"]


def cpu_name() -> str:
    """The CPU model from /proc/cpuinfo (Linux), else what platform knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"
