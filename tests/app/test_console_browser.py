"""The web console in a real browser: headless Chromium renders the incident list and the
live feed's script connects to the server-sent event stream."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from noc_assistant.models import Incident
from noc_assistant.store import Store

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _dump_dom(url: str) -> str:
    assert CHROMIUM, "chromium is not installed: run `make test` (scripts/system-deps.sh)"
    with tempfile.TemporaryDirectory() as profile:
        proc = subprocess.run(
            [
                CHROMIUM,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                f"--user-data-dir={profile}",
                "--timeout=5000",
                "--dump-dom",
                url,
            ],
            capture_output=True,
            text=True,
            timeout=90,
            check=False,
        )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def test_incident_list_renders_and_live_feed_connects(
    served: tuple[str, Store, object], tmp_path: Path
) -> None:
    base, store, _ = served
    store.save_incident(
        Incident(
            id="inc-7",
            fingerprint="f",
            opened_at=1.0e9,
            updated_at=1.0e9,
            entities=["gpu-srv-1"],
            kpis=["gpu-kv-cache-usage"],
            max_score=8.0,
            title="gpu-kv-cache-usage up on gpu-srv-1",
        )
    )
    dom = _dump_dom(base + "/")
    assert "gpu-kv-cache-usage up on gpu-srv-1" in dom
    assert 'id="open-count">1<' in dom
    assert "live feed: connected" in dom
    assert 'id="declare" data-ready="1"' in dom  # the maintenance form's script ran


def test_an_incident_page_with_its_report_e_mail_and_chat(
    served_with_drafting: tuple[str, Store, object],
) -> None:
    from test_drafting import PACK, case

    from knowledge.topology import load_inventory
    from noc_assistant.models import ChatRecord

    base, store, _ = served_with_drafting
    inc, diagnosis, findings = case(
        "roaming-partner-registration", 0, load_inventory(PACK.fixture_path("inventory.yaml"), PACK)
    )
    store.save_incident(inc)
    store.save_findings(findings, incident_id=inc.id)
    store.save_diagnosis(diagnosis)
    # a kept question that tries to close the page's script: shown as text, the script runs
    hostile = "why?</script><script>document.title='pwned'</script>"
    store.save_chat(
        ChatRecord(
            id="chat-1",
            incident_id=inc.id,
            at=inc.opened_at,
            asked_by="E. Night",
            question=hostile,
            answer="Because [ev-1].",
            generated_by="template",
        )
    )
    dom = _dump_dom(f"{base}/incidents/{inc.id}")
    assert "pwned" not in dom.split("</title>")[0]
    assert "E. Night » why?&lt;/script&gt;" in dom
    assert f"<title>{inc.id} · noc-assistant</title>" in dom
    assert "Most likely roaming partner outage on sepp-01" in dom
    assert "Draft an e-mail to partner 262-01" in dom
    assert 'id="chat" data-ready="1"' in dom  # the page's script ran
    assert "live feed: connected" in dom
