"""`noc pack ...` commands: validate, show and test a knowledge pack (default or overlay)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from guardrails.masking import Masker, check_examples
from knowledge.pack import Pack, describe, load_pack
from knowledge.rules import run_fixtures
from noc_assistant.cli._console import console, err_console
from noc_assistant.errors import ConfigError

__all__ = ["app"]

app = typer.Typer(help="Validate, show and test knowledge packs.", no_args_is_help=True)

PackDir = Annotated[
    Path | None,
    typer.Argument(help="Pack directory (an overlay extends the default pack); default: built-in."),
]


_Check = tuple[str, str, bool, bool, str]
"""A row of ``noc pack test``: what is checked, on what, a positive case, passed, detail."""


def _load(directory: Path | None) -> Pack:
    if directory is not None and not (directory / "pack.yaml").is_file():
        raise ConfigError(f"{directory}: not a knowledge pack (no pack.yaml)")
    return load_pack(directory)  # PackError, TopologyError: exit 2 naming file and field


@app.command("validate")
def validate(directory: PackDir = None) -> None:
    """Load the pack and check every cross-reference; exit 2 naming file and field if not."""
    pack = _load(directory)
    counts = ", ".join(f"{n} {k.replace('_', ' ')}" for k, n in describe(pack).items())
    console.print(f"[green]ok[/] {pack.meta.name} {pack.meta.version}: {counts}", highlight=False)


@app.command("show")
def show(directory: PackDir = None) -> None:
    """Summary of the pack: what it holds and which rules cover which fault classes."""
    pack = _load(directory)
    console.print(
        f"[bold]{pack.meta.name}[/] {pack.meta.version}  scope: {', '.join(pack.meta.scope)}",
        highlight=False,
    )
    if len(pack.directories) > 1:
        console.print("layers: " + " <- ".join(str(d) for d in pack.directories), highlight=False)
    counts = Table(title="contents")
    counts.add_column("kind")
    counts.add_column("count", justify="right")
    for kind, n in describe(pack).items():
        counts.add_row(kind.replace("_", " "), str(n))
    console.print(counts)
    rules = Table(title="fault classes and rules")
    rules.add_column("fault")
    rules.add_column("rules")
    rules.add_column("references")
    for fault in pack.faults.values():
        ids = [r.id for r in pack.rules.values() if r.fault == fault.id]
        refs = sorted(
            {ref for r in pack.rules.values() if r.fault == fault.id for ref in r.references}
        )
        rules.add_row(fault.id, ", ".join(ids) or "-", ", ".join(refs) or "-")
    console.print(rules)


@app.command("test")
def test(directory: PackDir = None) -> None:
    """Run every rule's fixtures and every masking pattern's examples; exit 1 if any fails."""
    pack = _load(directory)
    masker = Masker.from_pack(pack)
    of = f"of {pack.meta.name} {pack.meta.version}"
    fixtures = [(r.rule_id, r.name, r.positive, r.passed, r.detail) for r in run_fixtures(pack)]
    names = ("rule", "fixture", "positive", "negative")
    failed = _print_checks(f"rule fixtures {of}", names, fixtures)
    examples = [
        (e.pattern_id, escape(e.text), e.positive, e.passed, escape(e.detail))
        for e in check_examples(masker)
    ]
    names = ("pattern", "example", "example", "non-example")
    bad = _print_checks(f"masking examples {of}", names, examples)
    if failed:
        err_console.print(f"[bold red]{failed} fixture(s) failed[/]")
    if bad:
        err_console.print(f"[bold red]{bad} masking example(s) failed[/]")
    if failed or bad:
        raise typer.Exit(1)


def _print_checks(title: str, names: tuple[str, str, str, str], checks: list[_Check]) -> int:
    """Print a table of checks and their tally; the number that failed. ``names``: the first
    two columns' (what is checked, on what), then a positive and a negative case's kind."""
    table = Table(title=title)
    for column in (*names[:2], "kind", "result", "detail"):
        table.add_column(column)
    for name, item, positive, passed, detail in checks:
        kind = names[2] if positive else names[3]
        table.add_row(name, item, kind, "[green]pass[/]" if passed else "[red]FAIL[/]", detail)
    console.print(table)
    failed = sum(not c[3] for c in checks)
    console.print(f"{len(checks) - failed} passed, {failed} failed", highlight=False)
    return failed


@app.command("inhibit-rules")
def inhibit_rules_cmd(
    inventory: Annotated[Path, typer.Option(help="Network inventory JSON (docs/FORMATS.md §4).")],
    directory: PackDir = None,
    out: Annotated[Path | None, typer.Option(help="Write YAML here instead of stdout.")] = None,
) -> None:
    """Export the topology as Alertmanager inhibit_rules (upstream alerts mute dependents)."""
    import yaml

    from noc_assistant.inventory import load_topology
    from noc_assistant.stream.correlate import inhibit_rules

    pack = _load(directory)
    text = yaml.safe_dump(inhibit_rules(load_topology(inventory, pack)), sort_keys=False)
    if out is None:
        console.print(text, highlight=False, markup=False, soft_wrap=True)
    else:
        out.write_text(text, encoding="utf-8")
        console.print(f"inhibit rules written to {out}")
