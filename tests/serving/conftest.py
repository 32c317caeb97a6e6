"""Shared fixtures of the serving tests: a tiny seeded target and drafters for it."""

from __future__ import annotations

import os
import tempfile

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from noc_assistant.serving.draft_heads import BlockDrafterModel, DrafterConfig
from noc_assistant.serving.loading import TargetModel, tiny_qwen3
from noc_assistant.serving.train import TrainConfig, prepare_data, train_drafter

# One intra-op thread: the tiny models are dominated by per-op overhead, and on the shared
# 2-core machine a second OpenMP thread under oversubscription made the suite 2-5x slower.
torch.set_num_threads(int(os.environ.get("NOC_TEST_THREADS", "1")))


@pytest.fixture(scope="session")
def tiny() -> TargetModel:
    return tiny_qwen3(seed=0)


@pytest.fixture(scope="session")
def tiny_trained(tiny: TargetModel) -> dict[int, BlockDrafterModel]:
    """DSpine drafters trained for a few seconds on the tiny model's own answers (B=4, 8)."""
    work = tempfile.mkdtemp()
    vocab, data = prepare_data(tiny, work, n_prompts=12, max_new_tokens=48, vocab_size=200)
    out = {}
    for b in (4, 8):
        cfg = DrafterConfig.for_target(tiny, block_size=b, dspine=True, draft_vocab=vocab)
        tcfg = TrainConfig(steps=60, seed=1, seqs_per_step=2, anchors_per_seq=8)
        out[b] = train_drafter(tiny, cfg, data, tcfg)
    return out
