"""Quarantine: input that could not be used is kept aside with the reason, never dropped."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import orjson

__all__ = ["Quarantine", "QuarantineRecord"]


@dataclass(frozen=True)
class QuarantineRecord:
    source: str
    line: int | None
    reason: str
    raw: str


@dataclass
class Quarantine:
    """Collects quarantined input; appends each record to ``path`` (JSONL) when one is set.

    ``records`` keeps the first ``keep`` records in memory for reports; ``count`` counts all.
    """

    path: Path | None = None
    keep: int = 1000
    records: list[QuarantineRecord] = field(default_factory=list)
    count: int = 0

    def add(self, source: str, line: int | None, reason: str, raw: str) -> None:
        record = QuarantineRecord(source, line, reason, raw)
        self.count += 1
        if len(self.records) < self.keep:
            self.records.append(record)
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("ab") as fh:
                fh.write(
                    orjson.dumps({"source": source, "line": line, "reason": reason, "raw": raw})
                    + b"\n"
                )
