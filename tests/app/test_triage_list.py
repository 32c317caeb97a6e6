"""The console's index is triage-first: open incidents on top, narrowed by state, entity,
cause, text and time."""

from __future__ import annotations

import re
import time

import httpx

from noc_assistant.api.events import Broadcaster
from noc_assistant.models import Hypothesis, Incident
from noc_assistant.store import Store


def _listed(html: str) -> list[str]:
    table = html.split('<table id="incidents">')[1].split("</table>")[0]
    return re.findall(r'<a href="/incidents/([^"]+)">', table)


def test_open_incidents_come_first_and_filters_narrow_the_list(
    served: tuple[str, Store, Broadcaster],
) -> None:
    url, store, _ = served
    now = time.time()
    pfcp = Hypothesis(fault="pfcp_association_loss", entity="upf-2", confidence=0.8)
    rows = [
        ("inc-old-open", now - 7200, "open", ["upf-2", "smf-1"], [pfcp]),
        ("inc-new-done", now - 600, "resolved", ["amf-1"], []),
        ("inc-mid-open", now - 3600, "open", ["amf-2"], []),
    ]
    for inc_id, t, state, entities, hyps in rows:
        store.save_incident(
            Incident(
                id=inc_id,
                fingerprint=inc_id,
                opened_at=t,
                updated_at=t,
                entities=entities,
                state=state,
                hypotheses=hyps,
                resolved_at=t + 60 if state == "resolved" else None,
            )
        )
    page = httpx.get(url, timeout=30).text
    assert _listed(page) == ["inc-mid-open", "inc-old-open", "inc-new-done"]
    assert page.index('<table id="incidents">') < page.index('<table id="maintenance">')
    assert "pfcp association loss on upf-2" in page  # the assistant's, labelled as such
    cases = {
        "state=resolved": ["inc-new-done"],
        "entity=upf-*": ["inc-old-open"],
        "fault=pfcp_association_loss": ["inc-old-open"],
        "q=AMF-2": ["inc-mid-open"],
        "hours=1.5&state=open": ["inc-mid-open"],
        "entity=gnb-*": [],
    }
    for query, expected in cases.items():
        got = httpx.get(f"{url}/?{query}", timeout=30)
        assert got.status_code == 200 and _listed(got.text) == expected, query
    assert httpx.get(f"{url}/?q={'x' * 300}", timeout=30).status_code == 422
    assert httpx.get(f"{url}/?hours=-1", timeout=30).status_code == 422
