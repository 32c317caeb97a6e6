"""Device selection: CPU by default, CUDA on request (the CUDA tests run where torch sees a GPU)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from noc_assistant.cli import run
from noc_assistant.serving.draft_heads import DrafterConfig, NeuralDrafter, new_drafter
from noc_assistant.serving.errors import ModelLoadError
from noc_assistant.serving.loading import resolve_device, tiny_qwen3
from noc_assistant.serving.speculative import generate, greedy_reference

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")
no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA GPU is present")


def test_resolve_device() -> None:
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(ModelLoadError, match="unknown device 'gpu0'"):
        resolve_device("gpu0")


@no_cuda
def test_cuda_without_a_gpu_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ModelLoadError, match="no CUDA GPU"):
        tiny_qwen3(device="cuda")
    assert run(["llm", "ask", "hi", "--tiny", "--max-tokens", "2", "--device", "cuda"]) == 2
    assert "no CUDA GPU" in capsys.readouterr().err


def test_cpu_target_runs_fp32_with_row_major_linears() -> None:
    t = tiny_qwen3()
    assert t.device.type == "cpu" and t.dtype == torch.float32
    kinds = {type(m).__name__ for m in t.model.modules()}
    assert "RowMajorLinear" in kinds and "Linear" not in kinds


@needs_cuda
@pytest.mark.parametrize("block", [2, 8])
def test_lossless_greedy_on_cuda(block: int) -> None:
    t = tiny_qwen3(device="cuda")
    assert t.dtype == torch.bfloat16 and next(t.model.parameters()).is_cuda
    prompt = t.tokenizer.chat_prompt([{"role": "user", "content": "PFCP heartbeat lost on smf-1"}])
    ref = greedy_reference(t, prompt, 37)
    cfg = DrafterConfig.for_target(t, block_size=block, dspine=True)
    res = generate(t, NeuralDrafter(new_drafter(t, cfg, seed=block)), prompt, 37)
    assert res.tokens == ref
    g = torch.Generator().manual_seed(0)
    sampled = generate(
        t, NeuralDrafter(new_drafter(t, cfg)), prompt, 12, temperature=0.8, generator=g
    )
    assert len(sampled.tokens) <= 12


@needs_cuda
def test_train_drafter_cli_on_cuda(tmp_path: Path) -> None:
    out = tmp_path / "d"
    args = ["llm", "train-drafter", "--tiny", "--steps", "3", "--prompts", "4"]
    args += ["--max-new-tokens", "8", "--block-size", "4", "--device", "cuda"]
    assert run([*args, "--work-dir", str(tmp_path / "w"), "--out", str(out)]) == 0
    assert (out / "model.safetensors").is_file()


def test_grouped_attention_equals_transformers_sdpa() -> None:
    from noc_assistant.serving.loading import GROUPED_ATTENTION

    t = tiny_qwen3()
    assert t.model.config._attn_implementation == GROUPED_ATTENTION
    prompt = t.tokenizer.chat_prompt([{"role": "user", "content": "N4 setup latency on upf-3"}])
    outs = {}
    for impl in (GROUPED_ATTENTION, "sdpa"):
        t.model.config._attn_implementation = impl
        cache = t.new_cache()
        t.forward(prompt, cache)
        outs[impl] = [t.forward([65, 66, 67, 68, 69][:n], cache).logits for n in (1, 5)]
    t.model.config._attn_implementation = GROUPED_ATTENTION
    for a, b in zip(outs[GROUPED_ATTENTION], outs["sdpa"], strict=True):
        assert torch.allclose(a, b, atol=1e-5)
