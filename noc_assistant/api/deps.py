"""What the console's endpoints depend on: the application's store, and the write token.

Write endpoints take :data:`Writer`: ``Authorization: Bearer <NOC_API_TOKEN>`` or 401; with no
token configured they are disabled (503), never open. The scheme is matched in any case
(``bearer``, ``BEARER``: RFC 7235 §2.1 makes auth-schemes case-insensitive), the token exactly.
"""

from __future__ import annotations

import hmac
import threading
from collections.abc import Callable
from typing import Annotated, TypeVar

from fastapi import Depends, Header, HTTPException, Request

from noc_assistant.storage import Store

__all__ = [
    "StoreDep",
    "Writer",
    "bearer_token",
    "get_store",
    "locked_step",
    "require_writer",
]

T = TypeVar("T")


def get_store(request: Request) -> Store:
    """The store of the running application (``app.state.store``)."""
    store: Store = request.app.state.store
    return store


def bearer_token(authorization: str | None) -> tuple[str, str]:
    """(scheme in lower case, credentials) of an ``Authorization`` header.

    >>> bearer_token("Bearer t0ken"), bearer_token("bearer  t0ken "), bearer_token(None)
    (('bearer', 't0ken'), ('bearer', 't0ken'), ('', ''))
    """
    scheme, _, given = (authorization or "").strip().partition(" ")
    return scheme.lower(), given.strip()


def require_writer(request: Request, authorization: Annotated[str | None, Header()] = None) -> None:
    """401 unless the request carries the application's bearer token (``app.state.api_token``),
    compared in constant time; 503 when the application has none."""
    token: str | None = request.app.state.api_token
    if token is None:
        raise HTTPException(503, "write endpoints are disabled: set NOC_API_TOKEN")
    scheme, given = bearer_token(authorization)
    if scheme != "bearer" or not hmac.compare_digest(given.encode(), token.encode()):
        raise HTTPException(
            401, "a valid bearer token is required", headers={"WWW-Authenticate": "Bearer"}
        )


StoreDep = Annotated[Store, Depends(get_store)]
Writer = Annotated[None, Depends(require_writer)]


def locked_step(
    lock: threading.Lock,
    load: Callable[[], T],
    step: Callable[[T], T],
    save: Callable[[T], None],
    refused: type[Exception],
    status: int,
) -> T:
    """Read, change and save a record under ``lock`` (two requests at once both land, one
    after the other); a ``refused`` error of the step answers ``status`` with its message."""
    with lock:
        try:
            record = step(load())
        except refused as exc:
            raise HTTPException(status, str(exc)) from None
        save(record)
    return record
