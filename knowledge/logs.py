"""Log patterns of the knowledge pack: which NF log lines support which fault class.

The patterns are data (``knowledge/logs/patterns.yaml``, or an overlay's ``logs/patterns.yaml``
that adds or replaces by id), validated when loaded: a pattern must name a fault class of the
pack and compile as a regular expression.

>>> pats = load_log_patterns()
>>> [p.id for p in pats.matching("PFCP association released by peer", "smf")]
['log-pfcp-association-lost']
>>> pats.matching("PFCP association released by peer", "gpu_server")
[]
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import cached_property
from importlib.resources import files
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from noc_assistant.errors import ConfigError

__all__ = ["LogPattern", "LogPatterns", "load_log_patterns"]


class LogPattern(BaseModel):
    """One pattern: the fault class a matching line supports, on which entity types."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    fault: str
    entities: tuple[str, ...] = ()
    regex: str
    note: str = ""

    @field_validator("regex")
    @classmethod
    def _compiles(cls, v: str) -> str:
        try:
            re.compile(v, re.I)
        except re.error as exc:
            raise ValueError(f"does not compile: {exc}") from None
        return v

    @cached_property
    def compiled(self) -> re.Pattern[str]:
        return re.compile(self.regex, re.I)

    def applies(self, entity_type: str | None) -> bool:
        return not self.entities or entity_type is None or entity_type in self.entities


class LogPatterns(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    patterns: tuple[LogPattern, ...]

    def matching(self, text: str, entity_type: str | None = None) -> list[LogPattern]:
        """The patterns ``text`` matches, for a line of an entity of ``entity_type``."""
        return [p for p in self.patterns if p.applies(entity_type) and p.compiled.search(text)]


def load_log_patterns(
    overlay: Path | None = None, faults: Iterable[str] | None = None
) -> LogPatterns:
    """The default patterns, then an overlay's (same id: replaced), checked against
    ``faults`` (the pack's fault classes) when given. :class:`ConfigError` names the file and
    the field of what does not hold."""
    default = files("knowledge").joinpath("logs/patterns.yaml")
    merged: dict[str, LogPattern] = {}
    sources: list[tuple[str, str]] = [(str(default), default.read_text())]
    if overlay is not None and (overlay / "logs" / "patterns.yaml").is_file():
        path = overlay / "logs" / "patterns.yaml"
        sources.append((str(path), path.read_text()))
    for name, text in sources:
        try:
            loaded = LogPatterns.model_validate(yaml.safe_load(text))
        except (yaml.YAMLError, ValidationError) as exc:
            raise ConfigError(f"{name}: {exc}") from None
        for p in loaded.patterns:
            merged[p.id] = p
    known = set(faults) if faults is not None else None
    for p in merged.values():
        if known is not None and p.fault not in known:
            raise ConfigError(
                f"log pattern {p.id}: fault {p.fault!r} is not a fault class of the pack"
            )
    return LogPatterns(patterns=tuple(merged.values()))
