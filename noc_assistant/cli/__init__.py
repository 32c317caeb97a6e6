"""The ``noc`` command line. Only this package prints or exits.

Each command group lives in its own module (``simulate``, ``demo``, ``eval``, ``pack``,
``llm``, ``incident``, ``email``, ``maintenance``, ``tune``, ``bus``, ``watch``, ``prom``,
``pm``); this module assembles them and is the one place where errors become exit codes:

- 0: done;
- 2: usage, bad input, a setting or pack that cannot be used, or an outside part that refused
  or timed out — every :class:`~noc_assistant.errors.NocError`, raised on purpose with a
  message that names the file, line or part and what to check;
- 1: anything else, which is a bug (the traceback is printed for the report).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

import typer

from noc_assistant.cli._console import err_console
from noc_assistant.errors import NocError, UnreachableError
from noc_assistant.stream.collector import tune_collector

__all__ = ["build_app", "main", "run"]

#: command groups (``noc NAME ...``): the module of each, whose ``app`` is the group
GROUPS = (
    "eval", "incident", "email", "maintenance", "tune", "pack", "llm", "bus", "prom", "pm", "user",
)  # fmt: skip
#: top-level commands: the module whose ``register`` adds each
COMMANDS = {
    "demo": "demo",
    "check": "demo",
    "serve": "serve",
    "replay": "serve",
    "simulate": "simulate",
    "watch": "watch",
}


def _group() -> None:
    """The ``noc`` group itself: nothing to do before a command."""


def build_app(argv: Sequence[str] = ()) -> typer.Typer:
    """The ``noc`` application. Where ``argv`` starts with a command or group, only its
    module is imported and added: a command pays for its own imports (numba, polars, the
    web stack...), not every command's (``noc eval run`` starts about a third of a second
    sooner). Help with no command, or an unknown name, assembles them all."""
    app = typer.Typer(
        name="noc",
        help="noc-assistant: streaming anomaly detection and root-cause triage for a NOC.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
    )
    # a group even when one command is added: Typer runs a lone command as the app itself
    app.callback()(_group)
    first = argv[0] if argv else ""
    if first in GROUPS:
        groups: Sequence[str] = (first,)
        commands: Sequence[str] = ()
    elif first in COMMANDS:
        groups, commands = (), (COMMANDS[first],)
    else:
        groups, commands = GROUPS, tuple(dict.fromkeys(COMMANDS.values()))
    for name in commands:
        importlib.import_module(f"noc_assistant.cli.{name}").register(app)
    for name in groups:
        app.add_typer(importlib.import_module(f"noc_assistant.cli.{name}").app, name=name)
    return app


def run(argv: Sequence[str] | None = None) -> int:
    """Run the CLI with ``argv`` and return the exit status instead of exiting."""
    try:
        # standalone mode: usage errors print their message and exit 2, --help exits 0
        args = list(sys.argv[1:] if argv is None else argv)
        build_app(args)(args=args, prog_name="noc")
    except SystemExit as exc:
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    except UnreachableError as exc:
        hint = "" if "check" in str(exc) else " (check that it runs and that the settings name it)"
        err_console.print(f"[bold red]error:[/] {exc}{hint}", highlight=False)
        return 2
    except NocError as exc:
        err_console.print(f"[bold red]error:[/] {exc}", highlight=False)
        return 2
    return 0


def main() -> None:
    """Console-script entry point (``noc``): the process's collector set for the pipeline
    (:func:`~noc_assistant.stream.collector.tune_collector`), then the command."""
    tune_collector()
    sys.exit(run(sys.argv[1:]))
