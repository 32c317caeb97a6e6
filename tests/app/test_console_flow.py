"""An engineer's day in a real browser (Debian's headless Chromium, driven by Playwright):
incident list → incident page → evidence plot visible → acknowledge → verdict → a partner
e-mail drafted and edited by one user, refused to that user's approval (four eyes), and
approved by another. Screenshots of each step are kept under ``test-artifacts/console/``."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Dialog, Page, expect, sync_playwright
from test_drafting import PACK, case

from knowledge.topology import load_inventory
from noc_assistant.store import Store
from noc_assistant.users import User

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
SHOTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "console"


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    assert CHROMIUM, "chromium is not installed: run `make test` (scripts/system-deps.sh)"
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        yield b
        b.close()


def _as(browser: Browser, base: str, token: str, name: str) -> Page:
    """A page of a browser profile signed in with ``token``; every prompt for a name is
    answered ``name``."""
    context = browser.new_context(viewport={"width": 1280, "height": 1600})
    context.add_init_script(
        f"sessionStorage.setItem('noc-token', {token!r});"
        f"sessionStorage.setItem('noc-name', {name!r});"
    )
    page = context.new_page()

    def answer(dialog: Dialog) -> None:
        dialog.accept(name)

    page.on("dialog", answer)
    page.goto(base + "/")
    return page


def _shot(page: Page, step: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{step}.png"), full_page=True)


def test_list_incident_plot_ack_verdict_and_four_eyes_e_mail(
    served_with_drafting: tuple[str, Store, object], browser: Browser
) -> None:
    base, store, _ = served_with_drafting
    topo = load_inventory(PACK.fixture_path("inventory.yaml"), PACK)
    inc, diagnosis, findings = case("roaming-partner-registration", 0, topo)
    store.save_incident(inc)
    store.save_findings(findings, incident_id=inc.id)
    store.save_diagnosis(diagnosis)
    now = time.time()
    ana, ana_token = User.issue("ana", "approver", now)  # may approve, but not her own
    bo, bo_token = User.issue("bo", "approver", now)
    store.save_user(ana)
    store.save_user(bo)

    page = _as(browser, base, ana_token, "ana")
    expect(page.locator("#incidents")).to_contain_text(inc.id)
    _shot(page, "1-list")
    page.click(f'a[href="/incidents/{inc.id}"]')
    expect(page.locator("svg.evidence-plot").first).to_be_visible()
    _shot(page, "2-incident")

    page.click('button[data-act="ack"]')
    expect(page.locator("#review")).to_contain_text("Taken by ana")
    page.select_option("#verdict", "fault")
    page.click('button[data-act="judge"]')
    expect(page.locator("#review")).to_contain_text("Verdict: fault")
    expect(page.locator("#review")).to_contain_text("by ana")
    _shot(page, "3-judged")

    page.click('button[data-act="draft"]')
    box = page.locator("div.email").first
    expect(box).to_contain_text("draft")
    page.click('button[data-act="edit"]')
    area = page.locator("div.email textarea")
    area.fill(area.input_value() + "\n\nEdited by the shift: please confirm the S8 path.")
    page.click("div.email button:has-text('Save')")
    expect(page.locator("div.email pre.body")).to_contain_text("please confirm the S8 path")
    page.click('button[data-act="approve"]')  # ana drafted and edited it: not hers to approve
    expect(page.locator("#email-status")).to_contain_text("four eyes")
    _shot(page, "4-refused")

    other = _as(browser, base, bo_token, "bo")
    other.goto(f"{base}/incidents/{inc.id}")
    other.click('button[data-act="approve"]')
    expect(other.locator("div.email").first).to_contain_text("approved by bo")
    _shot(other, "5-approved")

    [draft] = store.list_emails(inc.id)
    assert draft.status == "approved" and draft.approved_by == "bo"
    assert "please confirm the S8 path" in draft.body
    assert [e.by for e in draft.history if e.action == "edited"] == ["ana"]
    review = store.get_review(inc.id)
    assert review is not None and (review.acknowledged_by, review.verdict_by) == ("ana", "ana")
    assert all((SHOTS / f"{s}.png").stat().st_size > 10_000 for s in ("1-list", "5-approved"))
