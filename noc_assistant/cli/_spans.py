"""What `noc maintenance` and `noc tune` share: their records are both spans
(:class:`noc_assistant.models.Maintenance`, :class:`noc_assistant.models.Tuning`), listed in
one kind of table and ended early in one way."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TypeVar

from rich.markup import escape
from rich.table import Table

from noc_assistant.cli._console import console
from noc_assistant.errors import BadInputError
from noc_assistant.models import Maintenance, Tuning
from noc_assistant.settings import get_settings
from noc_assistant.store import Store, open_store

__all__ = ["end_span", "print_spans", "span_state"]

S = TypeVar("S", bound=Maintenance | Tuning)


def span_state(span: Maintenance | Tuning, now: float) -> str:
    """A maintenance window's or raised bar's state for a table: in force, planned or over,
    and who ended it early."""
    state = "in force" if span.active(now) else ("over" if span.end < now else "planned")
    return state + (f" (ended by {span.ended_by})" if span.ended_by else "")


def print_spans(
    columns: Sequence[str],
    spans: Callable[[Store, float], Sequence[S]],
    every: bool,
    cells: Callable[[S], Sequence[str]],
) -> None:
    """Print the spans not yet over (``every``: all on record) that ``spans`` reads, by start:
    a row of ``cells`` under ``columns`` each, then its state."""
    store = open_store(get_settings().db_url)
    now = time.time()
    table = Table(*columns, "state")
    for span in spans(store, float("-inf") if every else now):
        table.add_row(*(escape(c) for c in (*cells(span), span_state(span, now))))
    console.print(table)


def end_span(
    span_id: str,
    by: str,
    what: str,
    get: Callable[[Store, str], S | None],
    save: Callable[[Store, S], None],
    end: Callable[[S, str, float], S],
) -> tuple[S, S]:
    """End the span ``span_id`` now (``end``), keep it and say so; the span as it was and as
    ended. :class:`BadInputError` naming ``what`` when the store holds none."""
    store = open_store(get_settings().db_url)
    span = get(store, span_id)
    if span is None:
        raise BadInputError(f"no {what} {span_id!r} in {store.path}")
    ended = end(span, by, time.time())
    save(store, ended)
    console.print(f"{span_id} ended by {by}", highlight=False)
    return span, ended
