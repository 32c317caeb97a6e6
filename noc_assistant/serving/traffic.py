"""A log of the requests a server answered, for training and judging drafters on real traffic.

``noc llm serve --record FILE`` appends one JSON line per answered non-streamed request: the
endpoint, the request body as sent, the prompt's token ids and each choice's completion ids.
A drafter trained on such a log learns the product's own prompts (the drafting stage's
structured reports, tool-using chat turns) instead of a template corpus, and a benchmark can
send the held-out bodies again to a server with another drafter.

The log holds what the server was sent. The drafting stage masks subscriber identifiers before
a prompt leaves it, so the log holds no more than the model saw; keep it where the prompts may
be kept; a new log is created readable by its owner only.

>>> import tempfile, pathlib
>>> p = pathlib.Path(tempfile.mkdtemp()) / "t.jsonl"
>>> log = TrafficLog(p)
>>> log.write("chat", {"model": "m", "messages": []}, [1, 2], [[3, 4]])
>>> [(r.endpoint, r.prompt, r.completions) for r in read_traffic(p)]
[('chat', [1, 2], [[3, 4]])]
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from noc_assistant.errors import BadInputError

__all__ = ["Recorded", "TrafficLog", "read_traffic"]

_ENDPOINTS = ("chat", "completions")


@dataclass(frozen=True)
class Recorded:
    """One answered request: ``body`` as sent, ``prompt`` ids, one id list per choice."""

    endpoint: str
    body: dict[str, Any]
    prompt: list[int]
    completions: list[list[int]]


class TrafficLog:
    """Appends answered requests to a JSON-lines file (thread-safe; one line per request)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # readable by its owner only: prompts may carry what the model was shown
        os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))
        self._lock = threading.Lock()

    def write(
        self,
        endpoint: str,
        body: dict[str, Any],
        prompt: Sequence[int],
        completions: Sequence[Sequence[int]],
    ) -> None:
        line = json.dumps(
            {
                "endpoint": endpoint,
                "body": body,
                "prompt": list(prompt),
                "completions": [list(c) for c in completions],
            },
            separators=(",", ":"),
        )
        with self._lock, self.path.open("a", encoding="utf-8") as f:
            f.write(line + "\n")


def _ids(value: Any, field: str) -> list[int]:
    if not isinstance(value, list) or not all(
        isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in value
    ):
        raise ValueError(f"field {field!r}: expected a list of token ids")
    return list(value)


def _record(raw: Any) -> Recorded:
    if not isinstance(raw, dict):
        raise ValueError("expected a JSON object")
    endpoint = raw.get("endpoint")
    if endpoint not in _ENDPOINTS:
        raise ValueError(f"field 'endpoint' must be one of {', '.join(_ENDPOINTS)}")
    body = raw.get("body")
    if not isinstance(body, dict):
        raise ValueError("field 'body' must be an object")
    comps = raw.get("completions")
    if not isinstance(comps, list) or not comps:
        raise ValueError("field 'completions' must be a non-empty list")
    return Recorded(
        endpoint=endpoint,
        body=body,
        prompt=_ids(raw.get("prompt"), "prompt"),
        completions=[_ids(c, "completions") for c in comps],
    )


def read_traffic(path: str | Path) -> list[Recorded]:
    """Every request of a log; a bad line raises :class:`BadInputError` naming file and line."""
    p = Path(path)
    out: list[Recorded] = []
    with p.open(encoding="utf-8") as f:
        for n, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                out.append(_record(json.loads(line)))
            except json.JSONDecodeError as exc:
                raise BadInputError(f"not JSON ({exc.msg})", source=str(p), line=n) from None
            except ValueError as exc:
                raise BadInputError(str(exc), source=str(p), line=n) from None
    return out
