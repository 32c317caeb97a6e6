"""Rich consoles used by the CLI modules (stdout for results, stderr for diagnostics)."""

from __future__ import annotations

from rich.console import Console

__all__ = ["console", "err_console"]

console = Console()
err_console = Console(stderr=True)
