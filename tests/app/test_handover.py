"""The shift handover: open incidents with nobody's first, what the shift saw, maintenance in
force and planned, e-mails waiting or partly delivered, kept chats; as Markdown and JSON, over
HTTP and from the CLI."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from noc_assistant.api.app import create_app
from noc_assistant.cli import run
from noc_assistant.models import ChatRecord, EmailDraft, Incident, Review
from noc_assistant.ops.maintenance import new_window
from noc_assistant.ops.raised_bars import new_rule
from noc_assistant.store import SqliteStore, Store
from noc_assistant.triage.handover import handover, render

END = 1_796_292_000.0  # 2026-12-03 10:00 UTC
H = 3600.0


def _inc(i: str, opened: float, resolved: float | None = None, **kw: object) -> Incident:
    return Incident(
        id=i,
        fingerprint=i,
        opened_at=opened,
        updated_at=opened + 60,
        state="resolved" if resolved else "open",
        resolved_at=resolved,
        entities=["upf-3"],
        title=f"title of {i}",
        **kw,  # type: ignore[arg-type]
    )


@pytest.fixture()
def store(tmp_path: Path) -> Iterator[Store]:
    s = SqliteStore(tmp_path / "noc.db")
    s.save_incident(_inc("inc-old-open", END - 30 * H))  # from an earlier shift, still open
    s.save_incident(_inc("inc-taken", END - 2 * H, reopened_at=[END - H]))
    s.save_incident(_inc("inc-untaken", END - 1 * H))
    s.save_incident(_inc("inc-blip", END - 5 * H, resolved=END - 4.5 * H))
    s.save_incident(_inc("inc-earlier", END - 20 * H, resolved=END - 19 * H))  # not this shift
    s.save_review(Review(incident_id="inc-taken").acknowledged("ana", END - 1.9 * H))
    s.save_review(Review(incident_id="inc-old-open").acknowledged("zed", END - 29 * H))
    s.save_review(Review(incident_id="inc-blip").judged("no_fault", "ana", END - 4 * H))
    s.save_maintenance(new_window("smf-1", "ana", END - H, duration_s=3 * H, reason="CHG-1"))
    s.save_maintenance(new_window("upf-2", "bo", END, start=str(END + 4 * H), duration_s=H))
    s.save_maintenance(new_window("amf-1", "bo", END, start=str(END + 20 * H), duration_s=H))
    # over within the shift, and over before it
    s.save_maintenance(new_window("upf-3", "cy", END, start=str(END - 5 * H), duration_s=H))
    s.save_maintenance(new_window("pcf-1", "cy", END, start=str(END - 12 * H), duration_s=H))
    bar = new_rule("gpu-kv-cache-usage", "ana", END - 2 * H, min_score=2.5, reason="inc-3, inc-9")
    s.save_tuning(bar)
    ended = new_rule("amf-registration-success", "bo", END - 30 * H, min_score=3, reason="r")
    s.save_tuning(ended.ended("cy", END - 3 * H))
    draft = EmailDraft(
        id="em-1",
        incident_id="inc-taken",
        to=["noc@partner.example"],
        subject="s",
        body="b",
        created_at=END - H,
    )
    s.save_email(draft)
    sent = draft.model_copy(update={"id": "em-2"}).approved("ana", END - H)
    s.save_email(sent.sent("<m@x>", END - 0.5 * H, undelivered={"duty@p.example": "550 no"}))
    s.save_chat(
        ChatRecord(
            id="c-1",
            incident_id="inc-taken",
            at=END - H,
            asked_by="ana",
            question="why?",
            answer="because",
            generated_by="template",
        )
    )
    yield s
    s.close()


def test_the_handover_puts_what_nobody_has_taken_first(store: Store) -> None:
    h = handover(store, END - 8 * H, END)
    assert [i["id"] for i in h["open"]] == ["inc-untaken", "inc-old-open", "inc-taken"]
    assert h["counts"] == {
        "open": 3,
        "not_taken": 1,
        "opened": 3,
        "resolved": 1,
        "judged_false": 1,
        "pages": 4,  # three openings and one reopening in the shift
    }
    assert [w["entity"] for w in h["maintenance_now"]] == ["smf-1"]
    assert [w["entity"] for w in h["maintenance_planned"]] == ["upf-2"]  # amf-1: beyond 12 h
    assert [w["entity"] for w in h["maintenance_over"]] == ["upf-3"]  # pcf-1: before the shift
    assert [m["id"] for m in h["emails_waiting"]] == ["em-1"]
    assert h["emails_partly_delivered"][0]["undelivered"] == {"duty@p.example": "550 no"}
    assert h["chats"] == {"inc-taken": 1}
    text = render(h)
    assert text.startswith("# Shift handover, 2026-12-03 02:00 → 10:00 UTC")
    assert "**1 not taken by anyone**" in text and "1 judged false (inc-blip)" in text
    lines = text.splitlines()
    assert lines.index(next(ln for ln in lines if "NOT TAKEN" in ln)) < lines.index(
        next(ln for ln in lines if "taken by zed" in ln)
    )
    assert "in force: smf-1" in text and "planned: upf-2" in text and "amf-1" not in text
    assert "over this shift: upf-3 2026-12-03 05:00 → 2026-12-03 06:00 UTC (cy)" in text
    assert "waiting for approval" in text and "not delivered to duty@p.example" in text
    assert [t["kpi"] for t in h["tuning_now"]] == ["gpu-kv-cache-usage"]
    assert [t["ended_by"] for t in h["tuning_over"]] == ["cy"]
    assert "in force: gpu-kv-cache-usage on * pages from score 2.5" in text
    assert "over this shift: amf-registration-success on * (from score 3), ended by cy" in text


def test_the_handover_over_http_and_from_the_cli(
    store: Store, use_store: Callable[..., None], capsys: pytest.CaptureFixture[str]
) -> None:
    c = TestClient(create_app(store))
    r = c.get("/api/handover", params={"until": str(END)})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/markdown")
    assert "NOT TAKEN" in r.text
    data = c.get("/api/handover", params={"until": str(END), "format": "json"}).json()
    assert data["counts"]["not_taken"] == 1
    assert c.get("/api/handover", params={"hours": 0}).status_code == 422
    assert c.get("/api/handover", params={"until": "noon"}).status_code == 422
    use_store(store)
    assert run(["incident", "handover", "--until", "2026-12-03T10:00:00Z"]) == 0
    assert "NOT TAKEN" in capsys.readouterr().out
    assert run(["incident", "handover", "--until", "noon"]) == 2
