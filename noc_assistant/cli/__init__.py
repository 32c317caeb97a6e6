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

import sys
from collections.abc import Sequence

import typer

from noc_assistant.cli import bus as bus_cmd
from noc_assistant.cli import email as email_cmd
from noc_assistant.cli import eval as eval_cmd
from noc_assistant.cli import incident as incident_cmd
from noc_assistant.cli import llm as llm_cmd
from noc_assistant.cli import maintenance as maintenance_cmd
from noc_assistant.cli import pack as pack_cmd
from noc_assistant.cli import pm as pm_cmd
from noc_assistant.cli import prom as prom_cmd
from noc_assistant.cli import run as run_cmd
from noc_assistant.cli import serve as serve_cmd
from noc_assistant.cli import simulate as simulate_cmd
from noc_assistant.cli import tune as tune_cmd
from noc_assistant.cli import user as user_cmd
from noc_assistant.cli import watch as watch_cmd
from noc_assistant.cli._console import err_console
from noc_assistant.errors import NocError, UnreachableError
from noc_assistant.stream.collector import tune_collector

__all__ = ["app", "main", "run"]

app = typer.Typer(
    name="noc",
    help="noc-assistant: streaming anomaly detection and root-cause triage for a NOC.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
run_cmd.register(app)
serve_cmd.register(app)
simulate_cmd.register(app)
watch_cmd.register(app)
app.add_typer(eval_cmd.app, name="eval")
app.add_typer(incident_cmd.app, name="incident")
app.add_typer(email_cmd.app, name="email")
app.add_typer(maintenance_cmd.app, name="maintenance")
app.add_typer(tune_cmd.app, name="tune")
app.add_typer(pack_cmd.app, name="pack")
app.add_typer(llm_cmd.app, name="llm")
app.add_typer(bus_cmd.app, name="bus")
app.add_typer(prom_cmd.app, name="prom")
app.add_typer(pm_cmd.app, name="pm")
app.add_typer(user_cmd.app, name="user")


def run(argv: Sequence[str] | None = None) -> int:
    """Run the CLI with ``argv`` and return the exit status instead of exiting."""
    try:
        # standalone mode: usage errors print their message and exit 2, --help exits 0
        app(args=list(argv) if argv is not None else None, prog_name="noc")
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
