"""`noc pack test` also runs the masking patterns' own examples and non-examples."""

from __future__ import annotations

from pathlib import Path

import pytest

from knowledge.pack import load_pack
from noc_assistant.cli import run
from noc_assistant.cli._console import console

_OVERLAY_PACK = "name: acme-noc\nversion: 1.0.0\nextends: default\n"


@pytest.fixture(autouse=True)
def _wide_console(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(console, "width", 240)


def _overlay(tmp_path: Path, masking_yaml: str) -> Path:
    root = tmp_path / "acme"
    (root / "guardrails").mkdir(parents=True)
    (root / "pack.yaml").write_text(_OVERLAY_PACK)
    (root / "guardrails" / "masking.yaml").write_text(masking_yaml)
    return root


def test_default_pack_examples_pass(capsys: pytest.CaptureFixture[str]) -> None:
    pack = load_pack()
    n = sum(len(p.examples) + len(p.non_examples) for p in pack.masking)
    assert run(["pack", "test"]) == 0
    out = capsys.readouterr().out
    assert "masking examples of noc-default" in out
    assert f"{n} passed, 0 failed" in out
    assert "imsi-26201<masked>" in out


def test_leaky_pattern_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = _overlay(
        tmp_path,
        "masking:\n"
        "  - id: cust\n"
        "    identifier: customer number\n"
        "    regex: '\\bcust-(\\d{4})(\\d{6})\\b'\n"
        "    replacement: 'cust-\\2<masked>'\n"
        "    examples: ['cust-1234567890']\n"
        "    non_examples: ['cust-12']\n",
    )
    assert run(["pack", "test", str(root)]) == 1
    captured = capsys.readouterr()
    assert "identifier digits survive: 567890" in captured.out
    assert "1 masking example(s) failed" in captured.err


def test_unenforceable_pattern_is_a_config_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _overlay(
        tmp_path,
        "masking:\n"
        "  - id: cust\n"
        "    identifier: customer number\n"
        "    regex: '\\bcust-\\d{10}\\b'\n"
        "    replacement: 'cust-\\1<masked>'\n",
    )
    assert run(["pack", "test", str(root)]) == 2
    assert "masking pattern cust" in capsys.readouterr().err
