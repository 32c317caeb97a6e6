"""Prompt templates (jinja2, ``StrictUndefined``): all wording sent to a language model lives
here, apart from the code that fills it in, and so does the wording of the drafts a person
reads (the template-only root-cause report, the partner-NOC e-mail, the shift handover).

``templates/`` holds one file per text:

* ``report.md.j2``: the root-cause report body (Markdown), written from the diagnosis alone;
* ``summary.txt.j2``: its one-paragraph summary (the LLM may narrate one instead);
* ``narrate_system.txt.j2`` / ``narrate_user.txt.j2``: the narration prompt;
* ``chat_system.txt.j2``: the triage chat's grounding (the incident, its evidence);
* ``chat_fallback.txt.j2``: the chat's answer when no model answers or nothing it said held;
* ``chat_repeat.txt.j2``: what the chat's model is told when it repeats a look-up;
* ``partner_email.txt.j2`` / ``partner_subject.txt.j2``: the partner-NOC e-mail;
* ``handover.md.j2``: the shift handover (:mod:`noc_assistant.triage.handover`; no model writes it);
* ``triage_tools.yaml``: the triage chat's tools as the model reads them (:func:`tool_texts`).

>>> env = environment()
>>> env.get_template("partner_subject.txt.j2").render(
...     plmn="262-01", start="2026-11-29 12:30", reference="inc-1", network="noc")
'[noc] Roaming registrations from PLMN 262-01 failing since 2026-11-29 12:30 UTC (our ref inc-1)'
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache
from importlib import resources

import jinja2
import yaml

__all__ = ["cite", "environment", "tool_texts"]


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    """The templates' environment: undefined names fail, no HTML escaping (plain text and
    Markdown; the console escapes what it shows), blocks trimmed."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(resources.files("prompts") / "templates")),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=False,
    )
    env.filters["cite"] = cite
    return env


def cite(ids: Iterable[str], prefix: str = "") -> str:
    """Ids as citations, the form grounding reads (``[ev-…]``, ``[ref:…]``).

    >>> cite(["ev-f-1", "ev-f-2"]), cite(["ts-29-244"], "ref:")
    ('[ev-f-1] [ev-f-2]', '[ref:ts-29-244]')
    """
    return " ".join(f"[{prefix}{i}]" for i in ids)


@lru_cache(maxsize=1)
def tool_texts() -> dict[str, dict[str, object]]:
    """The triage tools' descriptions and parameter descriptions, by tool name.

    >>> sorted(tool_texts())[:2]
    ['evidence_item', 'fault_rule']
    """
    path = resources.files("prompts") / "templates" / "triage_tools.yaml"
    loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
    return {str(k): dict(v) for k, v in loaded.items()}
