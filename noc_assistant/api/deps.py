"""What the console's endpoints depend on: the application's store, and who is calling.

A caller is who its bearer token names (:func:`authenticate`; the scheme is matched in any
case, ``bearer``, ``BEARER``: RFC 7235 §2.1 makes auth-schemes case-insensitive, the token
exactly and in constant time):

- a named user (:class:`noc_assistant.users.User`, ``noc user add``) with its role;
- ``api-token``, an admin: the shared ``NOC_API_TOKEN`` (``app.state.api_token``) of
  deployments from before named users. It names nobody in particular, so the person a request
  names (``by``, ``approver``, ``editor``, ``asked_by``) is recorded as who acted;
- ``read-token``, a viewer: the shared ``NOC_API_READ_TOKEN``.

Each write endpoint needs a role (:func:`need`: :data:`Operator`, :data:`Approver`,
:data:`Admin`): none or an unknown token answers 401, a role below it 403. With neither a write
token nor any user the writes are disabled (503), never open. A named user acts as itself: a
name the request body gives is ignored and the user's own is recorded (:func:`acting`), so no
one records a step in another's name. Reads that call the model or show the kept chat need a
viewer (:func:`require_reader`) once any user exists or a read token is set; each caller gets a
budget of model calls per minute (:class:`RateLimiter`, ``NOC_CHAT_RATE_PER_MIN``).
"""

from __future__ import annotations

import hmac
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, TypeVar

from fastapi import Depends, Header, HTTPException, Request

from noc_assistant.settings import get_settings
from noc_assistant.store import Store
from noc_assistant.users import ROLES, Role, User

__all__ = [
    "Admin",
    "Approver",
    "AuthHeader",
    "Caller",
    "Operator",
    "RateLimiter",
    "StoreDep",
    "Viewer",
    "Writer",
    "acting",
    "authenticate",
    "bearer_token",
    "caller_key",
    "get_store",
    "locked_step",
    "need",
    "read_token",
    "require_reader",
    "require_writer",
]

T = TypeVar("T")
AuthHeader = Annotated[str | None, Header()]
LEGACY_NAME = "api-token"
READ_NAME = "read-token"


@dataclass(frozen=True)
class Caller:
    """Who a request comes from: a user's name and role, or a shared token (``shared``)."""

    name: str
    role: Role
    shared: bool = False

    def may(self, role: Role) -> bool:
        """Whether the caller's role is ``role`` or above."""
        return ROLES.index(self.role) >= ROLES.index(role)


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


def read_token(request: Request) -> str | None:
    """The read token: ``app.state.api_read_token`` where the application set one (even to
    None), else ``NOC_API_READ_TOKEN``."""
    state = request.app.state
    if hasattr(state, "api_read_token"):
        token: str | None = state.api_read_token
        return token
    secret = get_settings().api_read_token
    return secret.get_secret_value() if secret is not None else None


def _same(given: str, token: str | None) -> bool:
    return bool(token) and hmac.compare_digest(given.encode(), (token or "").encode())


def authenticate(request: Request, authorization: str | None) -> Caller | None:
    """Who the bearer token of ``authorization`` names (None: no token, or none we know)."""
    scheme, given = bearer_token(authorization)
    if scheme != "bearer" or not given:
        return None
    if _same(given, request.app.state.api_token):
        return Caller(LEGACY_NAME, "admin", shared=True)
    user = get_store(request).user_by_token_hash(User.hash_token(given))
    if user is not None and user.holds(given):
        return Caller(user.name, user.role)
    if _same(given, read_token(request)):
        return Caller(READ_NAME, "viewer", shared=True)
    return None


def _unauthorized() -> HTTPException:
    return HTTPException(
        401, "a valid bearer token is required", headers={"WWW-Authenticate": "Bearer"}
    )


def need(role: Role) -> Callable[[Request, str | None], Caller]:
    """A dependency: the caller, if its role is ``role`` or above (else 401 or 403; 503
    while there is neither a write token nor a user)."""

    def dependency(request: Request, authorization: AuthHeader = None) -> Caller:
        caller = authenticate(request, authorization)
        if caller is None:
            if request.app.state.api_token is None and not get_store(request).has_users():
                raise HTTPException(
                    503, "write endpoints are disabled: set NOC_API_TOKEN or add a user"
                )
            raise _unauthorized()
        if not caller.may(role):
            raise HTTPException(
                403, f"{caller.name} is a {caller.role}: this needs {role} or above"
            )
        return caller

    dependency.__name__ = f"need_{role}"
    return dependency


def require_writer(request: Request, authorization: AuthHeader = None) -> Caller:
    """An operator or above (:func:`need`): the role of the console's ordinary writes."""
    return need("operator")(request, authorization)


def require_reader(request: Request, authorization: AuthHeader = None) -> Caller | None:
    """Once any user exists or a read token is set: the caller (any role; 401 without a
    valid token). Before: None, open (the console's reads need no credentials)."""
    caller = authenticate(request, authorization)
    if caller is not None:
        return caller
    if read_token(request) is None and not get_store(request).has_users():
        return None
    raise _unauthorized()


def acting(caller: Caller, named: str | None, field: str, *, required: bool = True) -> str | None:
    """Who is recorded as acting: a named user itself (``named``, what the body says, is
    ignored); with the shared write token, the person the body names (422 when ``required``
    and it names nobody: the token alone names no person)."""
    if not caller.shared:
        return caller.name
    if named is None and required:
        raise HTTPException(422, f"{field}: the shared API token names nobody; give a name")
    return named


def caller_key(request: Request, authorization: str | None) -> str:
    """Who is asking, for rate limits: the authenticated caller, or else the client's address.

    An invalid token counts as the address: made-up tokens must not buy fresh budgets."""
    caller = authenticate(request, authorization)
    if caller is not None:
        return f"{'token' if caller.shared else 'user'}:{caller.name}"
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
Viewer = Annotated[Caller | None, Depends(require_reader)]
"""Any caller once users or a read token exist; before, anyone (None)."""
Operator = Annotated[Caller, Depends(need("operator"))]
Approver = Annotated[Caller, Depends(need("approver"))]
Admin = Annotated[Caller, Depends(need("admin"))]
Writer = Operator
"""The ordinary write (an operator); kept for routers written before roles."""


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
