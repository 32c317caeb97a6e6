"""Reading evaluation inputs (a JSON file, or a :class:`BadInputError` naming file and line),
and writing reports as strict JSON."""

from __future__ import annotations

import json
import math
import numbers
from pathlib import Path
from typing import Any

from noc_assistant.errors import BadInputError

__all__ = ["json_safe", "read_json_object"]


def read_json_object(path: Path, what: str = "a JSON object") -> dict[str, Any]:
    """Parse ``path`` as a JSON object; missing file, bad JSON or another type → BadInputError."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BadInputError("file not found", source=str(path)) from None
    except json.JSONDecodeError as exc:
        raise BadInputError(exc.msg, source=str(path), line=exc.lineno) from None
    if not isinstance(data, dict):
        raise BadInputError(f"expected {what}", source=str(path))
    return data


def json_safe(value: Any) -> Any:
    """``value`` with every non-finite float as ``null``: a figure that is undefined (the
    no-fault accuracy of a run without no-fault windows) is JSON's null, not ``NaN``, which
    strict JSON readers refuse.

    >>> import numpy as np
    >>> json_safe({"a": [float("nan"), 1.0], "b": np.float32("inf"), "c": 2})
    {'a': [None, 1.0], 'b': None, 'c': 2}
    """
    if isinstance(value, numbers.Real) and not isinstance(value, numbers.Integral):
        number = float(value)  # numpy's floats too
        return number if math.isfinite(number) else None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return value
