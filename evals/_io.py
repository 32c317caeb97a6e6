"""Reading evaluation inputs: a JSON file, or a :class:`BadInputError` naming file and line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from noc_assistant.errors import BadInputError

__all__ = ["read_json_object"]


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
