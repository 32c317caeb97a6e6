"""``noc check`` asks each outside part the settings name, the real ones on loopback: the
store, the pack, the LLM endpoint (closed here: failed, with the reason), an SMTP server
(aiosmtpd), Alertmanager and NATS JetStream; nothing is sent or changed."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import Inbox, _free_port

from noc_assistant.cli import run
from noc_assistant.ops.readiness import check_all
from noc_assistant.settings import Settings
from noc_assistant.store import SqliteStore

NATS = "nats://127.0.0.1:4222"


def test_every_configured_part_is_asked(
    tmp_path: Path,
    alertmanager: str,
    smtp_server: tuple[Inbox, int],
) -> None:
    inbox, port = smtp_server
    free_port = _free_port()  # nothing listens there (the fixture's is the SMTP server's)
    db = f"sqlite:///{tmp_path / 'noc.db'}"
    SqliteStore(tmp_path / "noc.db").close()
    settings = Settings(
        db_url=db,
        llm_base_url=f"http://127.0.0.1:{free_port}/v1",
        smtp_host="127.0.0.1",
        smtp_port=port,
        alertmanager_url=alertmanager,
        nats_url=NATS,
        nats_stream="NOCTEST_CHECK_NONE",
        nats_findings_stream="NOCTEST_CHECK_NONE_F",
    )
    checks = {c.part: c for c in check_all(settings)}
    assert list(checks) == ["store", "pack", "llm", "smtp", "alertmanager", "nats"]
    assert checks["store"].status == "ok" and checks["store"].detail.startswith("0 incidents")
    assert checks["pack"].status == "ok" and "noc-default" in checks["pack"].detail
    assert checks["llm"].status == "failed" and "cannot connect" in checks["llm"].detail
    assert checks["smtp"].status == "ok" and checks["smtp"].detail.startswith("EHLO accepted")
    assert inbox.envelopes == []  # a session, no mail
    assert checks["alertmanager"].status == "ok"
    assert checks["alertmanager"].detail.startswith("ready, version ")
    assert checks["nats"].status == "ok" and "not made yet" in checks["nats"].detail
    assert "stream NOCTEST_CHECK_NONE_F not made yet" in checks["nats"].detail

    # unset parts are not configured; a wrong port or a bad pack is a failure that names it
    broken = tmp_path / "pack"
    broken.mkdir()
    (broken / "pack.yaml").write_text("name: x\nversion: nope\nextends: default\n")
    bad = Settings(
        db_url=db,
        pack_dir=broken,
        smtp_host="127.0.0.1",
        smtp_port=free_port,
        alertmanager_url=None,
        nats_url=f"nats://127.0.0.1:{free_port}",
    )
    checks = {c.part: c for c in check_all(bad)}
    assert checks["pack"].status == "failed" and "version" in checks["pack"].detail
    assert checks["smtp"].status == "failed" and "cannot connect" in checks["smtp"].detail
    assert checks["alertmanager"].status == "not configured"
    assert checks["nats"].status == "failed" and "cannot connect to NATS" in checks["nats"].detail


def test_the_cli_exits_2_when_a_configured_part_fails(
    tmp_path: Path,
    use_store: Callable[..., None],
    free_port: int,
    capsys: pytest.CaptureFixture[str],
) -> None:
    store = SqliteStore(tmp_path / "noc.db")
    use_store(store, NOC_LLM_BASE_URL=f"http://127.0.0.1:{free_port}/v1", NOC_NATS_URL=NATS)
    assert run(["check"]) == 2
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("ok             store")
    assert "failed         llm" in out and "not configured smtp" in out
    store.close()
