"""Users and their tokens over HTTP (mounted by :func:`create_app`; :mod:`noc_assistant.users`).

``GET /api/users/me`` says who a token names (any valid token). Managing users needs an admin
(a user of that role, or the shared ``NOC_API_TOKEN``): ``GET /api/users`` lists them (never a
token nor its hash), ``POST /api/users`` adds one and answers its token, once (201), ``POST
/api/users/{name}/token`` replaces a user's token (the old one stops working) and answers the
new one, once, ``DELETE /api/users/{name}`` removes one (204). The store keeps only each
token's SHA-256. ``noc user …`` does the same on the store directly (local admin access).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from fastapi import APIRouter, HTTPException, Response
from pydantic import BaseModel, ConfigDict, Field

from noc_assistant.api.deps import Admin, Caller, StoreDep, Viewer
from noc_assistant.errors import UserError
from noc_assistant.store import Store
from noc_assistant.users import USER_NAME_PATTERN, Role, User

__all__ = ["users_router"]


class NewUser(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=USER_NAME_PATTERN)
    role: Role


class UserOut(BaseModel):
    """A user as the API shows it: no token, no hash."""

    name: str
    role: Role
    created_at: float
    token_at: float

    @classmethod
    def of(cls, user: User) -> UserOut:
        return cls(
            name=user.name, role=user.role, created_at=user.created_at, token_at=user.token_at
        )


class Issued(UserOut):
    """A user with its new token: shown this once, kept only hashed."""

    token: str


class Me(BaseModel):
    name: str
    role: Role
    shared: bool
    """A shared token (``api-token``, ``read-token``), not a named user."""


def users_router(clock: Callable[[], float] = time.time) -> APIRouter:
    """The endpoints (the store is the application's)."""
    router = APIRouter()
    lock = threading.Lock()

    def user_or_404(s: Store, name: str) -> User:
        user = s.get_user(name)
        if user is None:
            raise HTTPException(404, f"user {name} not found")
        return user

    @router.get("/api/users/me")
    def me(caller: Viewer) -> Me:
        if caller is None:
            raise HTTPException(401, "no token given", headers={"WWW-Authenticate": "Bearer"})
        return Me(name=caller.name, role=caller.role, shared=caller.shared)

    @router.get("/api/users")
    def users(s: StoreDep, _: Admin) -> list[UserOut]:
        return [UserOut.of(u) for u in s.list_users()]

    @router.post("/api/users", status_code=201)
    def add(s: StoreDep, _: Admin, new: NewUser) -> Issued:
        with lock:
            if s.get_user(new.name) is not None:
                raise HTTPException(409, f"user {new.name} exists: rotate its token instead")
            try:
                user, token = User.issue(new.name, new.role, clock())
            except UserError as exc:
                raise HTTPException(422, str(exc)) from None
            s.save_user(user)
        return Issued(**UserOut.of(user).model_dump(), token=token)

    @router.post("/api/users/{name}/token")
    def rotate(s: StoreDep, _: Admin, name: str) -> Issued:
        with lock:
            user, token = user_or_404(s, name).with_new_token(clock())
            s.save_user(user)
        return Issued(**UserOut.of(user).model_dump(), token=token)

    @router.delete("/api/users/{name}", status_code=204)
    def remove(s: StoreDep, caller: Admin, name: str) -> Response:
        _not_oneself(caller, name)
        with lock:
            if not s.remove_user(name):
                raise HTTPException(404, f"user {name} not found")
        return Response(status_code=204)

    return router


def _not_oneself(caller: Caller, name: str) -> None:
    """An admin does not remove itself (the last admin would lock the API's users out)."""
    if not caller.shared and caller.name == name:
        raise HTTPException(409, f"{name} may not remove itself: another admin must")
