"""What the endpoints of maintenance windows and raised bars share (both are spans,
:class:`noc_assistant.models.Maintenance` and :class:`noc_assistant.models.Tuning`): the body
that ends one early, declaring one from a request body, and loading one to end."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, TypeVar

from fastapi import HTTPException
from pydantic import BaseModel, ConfigDict, Field

from noc_assistant.api.deps import Caller, acting

__all__ = ["Ending", "declared", "loader"]

T = TypeVar("T")


class Ending(BaseModel):
    model_config = ConfigDict(extra="forbid")

    by: str | None = Field(default=None, min_length=1, max_length=200)
    """Who (needed with the shared token; a named user is recorded as itself)."""


class _Declaration(Protocol):
    by: str | None

    def model_dump(self, *, exclude: set[str]) -> dict[str, object]: ...


def declared(
    caller: Caller,
    body: _Declaration,
    build: Callable[..., T],
    refused: type[Exception],
    clock: Callable[[], float],
    **checks: object,
) -> T:
    """``build(**fields, by=..., now=clock(), **checks)``: a span as declared by a request
    body whose fields (but ``by``) are ``build``'s arguments of the same names; who declares it
    is who :func:`acting` records. A ``refused`` error of ``build`` answers 422 with its
    message."""
    by = acting(caller, body.by, "by") or ""
    try:
        return build(**body.model_dump(exclude={"by"}), by=by, now=clock(), **checks)
    except refused as exc:
        raise HTTPException(422, str(exc)) from None


def loader(get: Callable[[str], T | None], span_id: str, what: str) -> Callable[[], T]:
    """A loader of the span ``span_id`` (``get`` reads it), for :func:`locked_step`: 404
    naming ``what`` when there is none."""

    def load() -> T:
        span = get(span_id)
        if span is None:
            raise HTTPException(404, f"{what} {span_id} not found")
        return span

    return load
