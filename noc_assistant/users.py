"""Named users of the API, their roles and their tokens (kept hashed).

A role allows what the roles before it in :data:`ROLES` allow. Tokens are random (32 bytes);
the store keeps only their SHA-256, so a copy of the database holds no usable credential.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from noc_assistant.errors import UserError

__all__ = ["RESERVED_USER_NAMES", "ROLES", "USER_NAME_PATTERN", "Role", "User"]


Role = Literal["viewer", "operator", "approver", "admin"]
ROLES: tuple[Role, ...] = ("viewer", "operator", "approver", "admin")
"""The roles, each allowed what the ones before it are: a ``viewer`` reads, an ``operator``
acknowledges, judges, declares maintenance and raised bars, keeps chat turns, drafts, edits
and rejects e-mails, an ``approver`` also approves and sends them, an ``admin`` also manages
the users."""

USER_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$"
RESERVED_USER_NAMES = frozenset({"api-token", "read-token"})
"""The names of the shared tokens (``NOC_API_TOKEN``, ``NOC_API_READ_TOKEN``): no user's."""


class User(BaseModel):
    """A named user of the API with a role and a bearer token, of which only the SHA-256 is
    kept (the token itself is shown once, when it is made):

    >>> ana, token = User.issue("ana", "approver", at=0.0)
    >>> ana.holds(token), ana.holds(token + "x"), ana.may("operator"), ana.may("admin")
    (True, False, True, False)
    >>> token in ana.model_dump_json()
    False
    """

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=USER_NAME_PATTERN)
    role: Role
    token_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    created_at: float
    token_at: float
    """When its current token was made (``noc user token`` makes a new one)."""

    @staticmethod
    def hash_token(token: str) -> str:
        """The SHA-256 of a token (hex), as kept in the store."""
        return hashlib.sha256(token.encode()).hexdigest()

    @classmethod
    def issue(cls, name: str, role: str, at: float) -> tuple[User, str]:
        """A new user and its token (:class:`UserError` for a name or role not allowed)."""
        if name in RESERVED_USER_NAMES:
            raise UserError(f"{name!r} names a shared token; choose another user name")
        if not re.fullmatch(USER_NAME_PATTERN, name):
            raise UserError(
                f"user name {name!r}: letters, digits and . _ @ - (up to 64, no leading sign)"
            )
        if role not in ROLES:
            raise UserError(f"role {role!r}: one of {', '.join(ROLES)}")
        token = cls.new_token()
        user = cls(
            name=name, role=role, token_sha256=cls.hash_token(token), created_at=at, token_at=at
        )
        return user, token

    @staticmethod
    def new_token() -> str:
        """A fresh random token (32 bytes, URL-safe, with a ``noc_`` prefix that secret
        scanners can look for)."""
        return "noc_" + secrets.token_urlsafe(32)

    def with_new_token(self, at: float) -> tuple[User, str]:
        """The user with a new token (the old one stops working once saved), and the token."""
        token = self.new_token()
        return self.model_copy(
            update={"token_sha256": self.hash_token(token), "token_at": at}
        ), token

    def holds(self, token: str) -> bool:
        """Whether ``token`` is this user's (compared in constant time)."""
        return hmac.compare_digest(self.hash_token(token), self.token_sha256)

    def may(self, role: Role) -> bool:
        """Whether the user's role is ``role`` or above."""
        return ROLES.index(self.role) >= ROLES.index(role)
