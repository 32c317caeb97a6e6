"""Rich consoles used by the CLI modules (stdout for results, stderr for diagnostics), and
the small formats their options and tables share."""

from __future__ import annotations

from datetime import UTC, datetime

from rich.console import Console

from noc_assistant.errors import BadInputError

__all__ = ["console", "duration", "err_console", "utc"]

console = Console()
err_console = Console(stderr=True)


def utc(ts: float) -> str:
    """``2026-03-16 09:30 UTC``: a time in a table."""
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M UTC")


def duration(text: str, flag: str = "--for") -> float:
    """``90m``, ``2h``, ``1d`` or seconds (:class:`BadInputError` naming ``flag``).

    >>> duration("90m"), duration("2h"), duration("1.5d"), duration("30")
    (5400.0, 7200.0, 129600.0, 30.0)
    """
    units = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
    try:
        if text and text[-1] in units:
            return float(text[:-1]) * units[text[-1]]
        return float(text)
    except ValueError:
        raise BadInputError(f"{flag}: {text!r} is not a duration (90m, 2h, 1d)") from None
