"""What the console's endpoints depend on: the application's store, and the write token.

Write endpoints take :data:`Writer`: ``Authorization: Bearer <NOC_API_TOKEN>`` or 401; with no
token configured they are disabled (503), never open. The scheme is matched in any case
(``bearer``, ``BEARER``: RFC 7235 §2.1 makes auth-schemes case-insensitive), the token exactly.

Reads that call the model (a report's narration, a chat answer) are guarded too: with a read
token (``NOC_API_READ_TOKEN``, or ``app.state.api_read_token``) they need it or the write token
(:func:`require_reader`), and each caller gets a budget of them per minute
(:class:`RateLimiter`, ``NOC_CHAT_RATE_PER_MIN``): one slow model is shared by everyone.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import threading
import time
from collections.abc import Callable
from typing import Annotated, TypeVar

from fastapi import Depends, Header, HTTPException, Request

from noc_assistant.settings import get_settings
from noc_assistant.store import Store

__all__ = [
    "RateLimiter",
    "StoreDep",
    "Writer",
    "bearer_token",
    "caller_key",
    "get_store",
    "locked_step",
    "read_token",
    "require_reader",
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


def read_token(request: Request) -> str | None:
    """The read token: ``app.state.api_read_token`` where the application set one (even to
    None), else ``NOC_API_READ_TOKEN``."""
    state = request.app.state
    if hasattr(state, "api_read_token"):
        token: str | None = state.api_read_token
        return token
    secret = get_settings().api_read_token
    return secret.get_secret_value() if secret is not None else None


def _valid_token(request: Request, authorization: str | None) -> str | None:
    """The read or write token the header carries (compared in constant time), else None."""
    scheme, given = bearer_token(authorization)
    if scheme != "bearer" or not given:
        return None
    for token in (read_token(request), request.app.state.api_token):
        if token and hmac.compare_digest(given.encode(), token.encode()):
            return token
    return None


def require_reader(request: Request, authorization: Annotated[str | None, Header()] = None) -> None:
    """With a read token configured: 401 unless the request carries it or the write token.
    Without one: open (the default: the console's reads need no credentials)."""
    if read_token(request) is None:
        return
    if _valid_token(request, authorization) is None:
        raise HTTPException(
            401, "a valid bearer token is required", headers={"WWW-Authenticate": "Bearer"}
        )


def caller_key(request: Request, authorization: str | None) -> str:
    """Who is asking, for rate limits: a valid token (hashed) or else the client's address.

    An invalid token counts as the address: made-up tokens must not buy fresh budgets."""
    token = _valid_token(request, authorization)
    if token is not None:
        return "token:" + hashlib.sha256(token.encode()).hexdigest()[:16]
    host = request.client.host if request.client is not None else "unknown"
    return "addr:" + host


class RateLimiter:
    """A token bucket per caller: ``per_min`` requests at once, refilled at ``per_min`` a
    minute. :meth:`take` raises 429 with ``Retry-After`` (seconds until one is back).

    Thread-safe (sync routes run in a threadpool); full buckets are forgotten once more than
    ``max_callers`` are known, so a scan of addresses cannot grow it without bound."""

    def __init__(
        self,
        per_min: int,
        clock: Callable[[], float] = time.monotonic,
        max_callers: int = 10_000,
    ) -> None:
        self.capacity = float(per_min)
        self.rate = per_min / 60.0
        self.clock = clock
        self.max_callers = max_callers
        self._buckets: dict[str, tuple[float, float]] = {}  # key -> (tokens, at)
        self._lock = threading.Lock()

    def take(self, key: str, what: str = "requests") -> None:
        with self._lock:
            now = self.clock()
            tokens, at = self._buckets.get(key, (self.capacity, now))
            tokens = min(self.capacity, tokens + (now - at) * self.rate)
            if tokens < 1.0:
                self._buckets[key] = (tokens, now)
                wait = max(1, math.ceil((1.0 - tokens) / self.rate))
                raise HTTPException(
                    429,
                    f"too many {what}: at most {self.capacity:.0f} a minute; retry in {wait} s",
                    headers={"Retry-After": str(wait)},
                )
            self._buckets[key] = (tokens - 1.0, now)
            if len(self._buckets) > self.max_callers:
                self._forget_full(now)

    def _forget_full(self, now: float) -> None:
        full = [
            k
            for k, (tokens, at) in self._buckets.items()
            if tokens + (now - at) * self.rate >= self.capacity
        ]
        for k in full:
            del self._buckets[k]


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
