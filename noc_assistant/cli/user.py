"""`noc user ...`: the API's named users (:mod:`noc_assistant.users`): add one with a role
(its token is printed once), list them, give one a new token, remove one.

These commands work on the store directly (``NOC_DB_URL``): whoever can run them there is a
local admin, as with every other command that writes the store. Only each token's SHA-256 is
kept: a lost token is replaced (``noc user token``), never shown again.

Roles, each allowed what the ones before it are: ``viewer`` (reads), ``operator``
(acknowledge, judge, maintenance, raised bars, kept chat, drafting, editing and rejecting
e-mails), ``approver`` (approving and sending e-mails), ``admin`` (managing users).
"""

from __future__ import annotations

import time
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from noc_assistant.cli._console import console, err_console, utc
from noc_assistant.errors import UserError
from noc_assistant.settings import get_settings
from noc_assistant.store import Store, open_store
from noc_assistant.users import ROLES, User

__all__ = ["app"]

app = typer.Typer(help="Users of the API: roles and tokens.", no_args_is_help=True)

NameArg = Annotated[str, typer.Argument(help="User name")]


def _user(store: Store, name: str) -> User:
    user = store.get_user(name)
    if user is None:
        raise UserError(f"no user {name!r} in {store.path}")
    return user


def _show_token(user: User, token: str) -> None:
    console.print(token, markup=False, highlight=False, soft_wrap=True)
    err_console.print(
        f"{user.name} ({user.role}): the token above is shown this once; only its hash is kept",
        highlight=False,
    )


@app.command("add")
def add(
    name: NameArg,
    role: Annotated[str, typer.Option("--role", help=f"One of {', '.join(ROLES)}")],
) -> None:
    """Add a user with a role; its bearer token is printed once."""
    store = open_store(get_settings().db_url)
    if store.get_user(name) is not None:
        raise UserError(f"user {name!r} exists: `noc user token {name}` gives it a new token")
    user, token = User.issue(name, role, time.time())
    store.save_user(user)
    _show_token(user, token)


@app.command("list")
def list_users() -> None:
    """The users with their roles (never a token)."""
    table = Table("name", "role", "added", "token made")
    for u in open_store(get_settings().db_url).list_users():
        table.add_row(escape(u.name), u.role, utc(u.created_at), utc(u.token_at))
    console.print(table)


@app.command("token")
def rotate(name: NameArg) -> None:
    """Give a user a new token (printed once); the old one stops working."""
    store = open_store(get_settings().db_url)
    user, token = _user(store, name).with_new_token(time.time())
    store.save_user(user)
    _show_token(user, token)


@app.command("remove")
def remove(name: NameArg) -> None:
    """Remove a user: its token stops working (what it did stays recorded by name)."""
    store = open_store(get_settings().db_url)
    if not store.remove_user(name):
        raise UserError(f"no user {name!r} in {store.path}")
    console.print(f"{name} removed", highlight=False)
