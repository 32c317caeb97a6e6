"""The `noc` CLI: exit codes and the incident commands."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from noc_assistant.cli import run
from noc_assistant.cli._console import console
from noc_assistant.models import Diagnosis, Evidence, Hypothesis, Incident
from noc_assistant.settings import get_settings
from noc_assistant.store import open_store
from tests.builders import make_finding


@pytest.fixture()
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    url = f"sqlite:///{tmp_path / 'noc.db'}"
    monkeypatch.setenv("NOC_DB_URL", url)
    monkeypatch.setattr(console, "width", 240)
    get_settings.cache_clear()
    yield url
    get_settings.cache_clear()


def test_incident_show_prints_hypotheses_and_findings(
    db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    store = open_store(db)
    store.save_incident(
        Incident(
            id="inc-42",
            fingerprint="x",
            opened_at=1.0e9,
            updated_at=1.0e9,
            entities=["smf-1", "upf-2"],
            title="smf-pfcp-peers down on smf-1",
            hypotheses=[
                Hypothesis(fault="no_fault", entity="", confidence=0.7),
                Hypothesis(
                    fault="pfcp_association_loss",
                    entity="upf-2",
                    confidence=0.3,
                    evidence_ids=("f-1",),
                    references=("ts-29-244",),
                    refuted_by=("e-9",),
                    checks=("N4 heartbeats",),
                ),
            ],
        )
    )
    store.save_findings(
        [
            make_finding(
                "smf-pfcp-peers",
                "smf-1",
                2,
                (2.9, 3.1),
                detector="robust-zscore",
                ts=1.0e9,
                score=9.0,
            )
        ],
        incident_id="inc-42",
    )
    store.save_diagnosis(
        Diagnosis(
            incident_id="inc-42",
            verdict="fault",
            hypotheses=[
                Hypothesis(
                    fault="pfcp_association_loss",
                    entity="upf-2",
                    confidence=0.8,
                    evidence_ids=("e-1",),
                )
            ],
            evidence=[
                Evidence(
                    id="e-1",
                    finding_id="f-1",
                    entity="smf-1",
                    kpi="smf-pfcp-peers",
                    start=1.0e9,
                    end=1.0e9 + 60,
                    values=(2.0,),
                    summary="PFCP peers fell from 3 to 2",
                )
            ],
        )
    )
    assert run(["incident", "show", "inc-42"]) == 0
    out = capsys.readouterr().out
    assert "Evidence" in out and "e-1" in out and "PFCP peers fell from 3 to 2" in out
    assert "pfcp_association_loss" in out and "upf-2" in out and "ts-29-244" in out
    assert "smf-pfcp-peers" in out and "f-1" in out
    # a no-fault verdict says so, and what ranks under it is a candidate with what refutes it
    assert "verdict: no fault" in out and "candidates" in out
    assert "e-9" in out and "N4 heartbeats" in out
    assert run(["incident", "list"]) == 0
    assert "inc-42" in capsys.readouterr().out


def test_unknown_incident_exits_2(db: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["incident", "show", "inc-missing"]) == 2
    assert "inc-missing" in capsys.readouterr().err


def test_usage_error_exits_2() -> None:
    assert run(["incident", "show"]) == 2


def test_pack_inhibit_rules_follow_the_inventory(tmp_path: Path) -> None:
    import json

    import yaml

    inv = tmp_path / "inventory.json"
    inv.write_text(
        json.dumps(
            {
                "entities": [
                    {"id": "smf-1", "type": "smf", "peers": ["upf-7"]},
                    {"id": "smf-2", "type": "smf", "peers": ["upf-7"]},
                    {"id": "upf-7", "type": "upf"},
                    {"id": "upf-8", "type": "upf"},
                ]
            }
        )
    )
    out = tmp_path / "inhibit.yaml"
    assert run(["pack", "inhibit-rules", "--inventory", str(inv), "--out", str(out)]) == 0
    rules = yaml.safe_load(out.read_text())["inhibit_rules"]
    by_source = {r["source_matchers"][0]: r["target_matchers"] for r in rules}
    assert by_source['instance="upf-7"'] == ['instance=~"smf-1|smf-2"']
    assert 'instance="upf-8"' not in by_source  # nothing depends on it
    bad = tmp_path / "bad.json"
    bad.write_text('{"entities": [{"id": "x"}]}')
    assert run(["pack", "inhibit-rules", "--inventory", str(bad)]) == 2


def test_eval_run_bad_labels_or_pack_exit_2_naming_file_and_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    telemetry = tmp_path / "t.jsonl"
    telemetry.write_text("")
    labels = tmp_path / "labels.json"
    labels.write_text('{"incidents": [{"id": "inc-1", "start": "2026-11-29T10:00:00Z"}]}')
    args = ["eval", "run", "--telemetry", str(telemetry), "--labels", str(labels)]
    code = run(args)
    err = capsys.readouterr().err
    assert code == 2
    assert "labels.json" in err and "incidents.0" in err
    labels.write_text("[1, 2]")
    assert run(args) == 2
    labels.write_text('{"incidents": []}')
    pack = tmp_path / "operator"
    pack.mkdir()
    (pack / "pack.yaml").write_text("name: acme\nversion: [1\n")
    capsys.readouterr()
    assert run([*args, "--pack", str(pack)]) == 2
    assert "pack.yaml" in capsys.readouterr().err


def test_llm_ask_answers_one_question(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["llm", "ask", "Why did PFCP fail?", "--tiny", "--max-tokens", "6", "--stats"]) == 0
    captured = capsys.readouterr()
    assert captured.out.strip() and "6 tokens" in captured.err


def test_llm_ask_rejects_a_block_size_the_drafter_cannot_run(tmp_path: Path) -> None:
    from noc_assistant.serving.draft_heads import BlockDrafterModel, DrafterConfig, save_drafter
    from noc_assistant.serving.loading import tiny_qwen3

    target = tiny_qwen3()
    drafter = BlockDrafterModel(DrafterConfig.for_target(target, block_size=4, dspine=True))
    save_drafter(drafter, tmp_path / "d")
    args = ["llm", "ask", "hi", "--tiny", "--max-tokens", "4", "--drafter", str(tmp_path / "d")]
    assert run([*args, "--block-size", "2"]) == 0
    assert run([*args, "--block-size", "9"]) == 2  # longer than trained: a clear error


def test_llm_train_drafter_rejects_a_negative_alignment_weight(tmp_path: Path) -> None:
    args = ["llm", "train-drafter", "--tiny", "--out", str(tmp_path / "d")]
    assert run([*args, "--alignment-weight", "-1"]) == 2
    assert not (tmp_path / "d").exists()


def test_a_command_assembles_only_its_own_module() -> None:
    """`noc eval ...` imports the eval group alone; `noc` with no command lists them all."""
    from noc_assistant.cli import COMMANDS, GROUPS, build_app

    def names(app: object) -> set[str]:
        groups = {g.name for g in getattr(app, "registered_groups", [])}
        return groups | {c.name for c in getattr(app, "registered_commands", [])}

    assert names(build_app(["eval", "run", "--help"])) == {"eval"}
    assert names(build_app(["replay", "--help"])) == {"serve", "replay"}
    assert names(build_app([])) == set(GROUPS) | set(COMMANDS)
    assert names(build_app(["no-such-command"])) == set(GROUPS) | set(COMMANDS)
    # importing a command's module late leaves the package's own names alone
    import noc_assistant.cli as cli

    assert cli.run is run and callable(cli.run)


def test_help_for_a_group_and_an_unknown_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["eval", "--help"]) == 0
    assert "nab" in capsys.readouterr().out
    # a command added alone is still called by its name (not run as the app itself)
    assert run(["simulate", "--help"]) == 0
    assert "Usage: noc simulate" in capsys.readouterr().out
    assert run(["no-such-command"]) == 2
    assert "no-such-command" in capsys.readouterr().err
