"""Times as people and files read them: every formatter of the project, in one place.

Inside the application a time is epoch seconds (float, UTC); files and APIs carry RFC 3339.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime


def rfc3339(ts: float) -> str:
    """Epoch seconds → RFC 3339 UTC with ``Z`` (fractional seconds only when needed).

    >>> rfc3339(1795910400.0)
    '2026-11-29T00:00:00Z'
    >>> rfc3339(1795910400.5)
    '2026-11-29T00:00:00.5Z'
    """
    whole = math.floor(ts)
    text = datetime.fromtimestamp(whole, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    frac = round(ts - whole, 6)
    if frac > 0:
        text += f"{frac:.6f}"[1:].rstrip("0")
    return text + "Z"
