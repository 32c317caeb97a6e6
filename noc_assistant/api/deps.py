"""What the console's endpoints depend on: the application's store, and the write token.

Write endpoints take :data:`Writer`: ``Authorization: Bearer <NOC_API_TOKEN>`` or 401; with no
token configured they are disabled (503), never open.
"""

from __future__ import annotations

import hmac
from typing import Annotated

from fastapi import Depends, Header, HTTPException, Request

from noc_assistant.storage import Store

__all__ = ["StoreDep", "Writer", "get_store", "require_writer"]


def get_store(request: Request) -> Store:
    """The store of the running application (``app.state.store``)."""
    store: Store = request.app.state.store
    return store


def require_writer(request: Request, authorization: Annotated[str | None, Header()] = None) -> None:
    """401 unless the request carries the application's bearer token (``app.state.api_token``),
    compared in constant time; 503 when the application has none."""
    token: str | None = request.app.state.api_token
    if token is None:
        raise HTTPException(503, "write endpoints are disabled: set NOC_API_TOKEN")
    scheme, _, given = (authorization or "").partition(" ")
    if scheme != "Bearer" or not hmac.compare_digest(given.strip().encode(), token.encode()):
        raise HTTPException(
            401, "a valid bearer token is required", headers={"WWW-Authenticate": "Bearer"}
        )


StoreDep = Annotated[Store, Depends(get_store)]
Writer = Annotated[None, Depends(require_writer)]
