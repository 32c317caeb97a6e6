"""What the benchmark scripts say about the machine they ran on."""

from __future__ import annotations

import os
import platform
import sys
from datetime import UTC, datetime
from pathlib import Path

__all__ = ["NAB_ROOT", "cpu_name", "preamble"]

#: where the shared NAB corpus lies beside a checkout (``../shared/datasets/nab``)
NAB_ROOT = Path(__file__).resolve().parents[2] / "shared" / "datasets" / "nab"


def cpu_name() -> str:
    """The CPU model from /proc/cpuinfo (Linux) with its family and model numbers (virtual
    machines here all call themselves "AMD EPYC"; family 25 is Zen 3/4, 26 is Zen 5, and the
    compiled bank runs at different speeds on them), else what platform knows."""
    try:
        info: dict[str, str] = {}
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            info.setdefault(key.strip(), value.strip())
        if "model name" in info:
            family, model = info.get("cpu family", "?"), info.get("model", "?")
            return f"{info['model name']} (family {family}, model {model})"
    except OSError:
        pass
    return platform.processor() or "unknown"


def preamble(title: str, versions: str = "") -> list[str]:
    """A result file's first lines: ``title``, then the command that ran (as typed), the
    machine (``versions`` appended: library versions that matter) and the date."""
    return [
        f"# {title}",
        "",
        f"- command: `{' '.join(['.venv/bin/python', *sys.argv])}`",
        f"- machine: {cpu_name()}, {os.cpu_count()} logical CPUs,"
        f" Python {platform.python_version()}{versions}",
        f"- date: {datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')}",
    ]
