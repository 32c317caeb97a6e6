"""DSpine on a GPU: a larger target trained on the device, drafters trained there, batch-1 speed.

One prepared run for a lent GPU machine (issue 5: "≥ 2.5× at batch 1 with a larger target
trained or built there", one script that finishes within 10 minutes). No model can be fetched
on the device and the 135M default does not fit in what travels (64 MiB), so the target is
trained there, from scratch, on the token ids of the NOC corpus that the default model
answered here (prompts and answers, ids only: no tokenizer is needed on the device).

Stages, each with a wall-clock cap so the whole run ends in time:

1. train the target (Qwen3-style, ~250M parameters by default, bf16 autocast, AdamW);
2. the target answers the training prompts greedily (its own text: the drafters' corpus);
3. tap features and sparse teacher distributions (:func:`extract_features`);
4. a DSpine drafter and the DFlash-style baseline, same step budget (:func:`train_drafter`);
5. batch-1 greedy decoding of held-out prompts: target-only, DSpine and DFlash-style at several
   block sizes; τ, tokens/s, speed-up, token-identical outputs, and energy per token when NVML
   reads the GPU's energy counter.

The ids travel with the repository: ``bench/data/gpu_corpus_ids.json.gz`` (80 kB), made here
from the corpus that ``noc llm train-drafter --prompts 1024`` cached (see
noc_assistant/serving/weights/README.md) by::

    .venv/bin/python bench/gpu_dspine.py prepare \
        --corpus /tmp/drafter/work/corpus-smollm2-135m-instruct-n1024-s0-m96.json

The device's image has torch but an older transformers (5.17, whose forward still takes
``past_key_values``); carry the tested one as a wheel (pure Python, 13.5 MB; ``.whl/`` is
git-ignored)::

    .venv/bin/python -m pip download --no-deps --only-binary=:all: -d .whl transformers==5.24.0

On the device (the ``run`` tool with ``carry: [".whl"]`` and ``timeout_s: 600``; the stage caps
add up to about 8 minutes on an H200 by estimate: nothing here has run on one yet)::

    python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl &&
    PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 python3 bench/gpu_dspine.py run --out "$OUT"

``$OUT`` then holds gpu_dspine.json, gpu_dspine.md and the log; copy the table into
BENCHMARKS.md with the date and the device.

CPU smoke run of the whole pipeline at toy sizes (what the tests and this machine can check)::

    .venv/bin/python bench/gpu_dspine.py run --out /tmp/g --smoke --device cpu

and of the full-size shapes (the 250M target, a couple of steps each; about 1 min here)::

    .venv/bin/python bench/gpu_dspine.py run --out /tmp/g --device cpu --samples 8 \
        --target-steps 2 --target-batch 2 --max-new-tokens 8 --drafter-steps 2 \
        --prompts 1 --max-tokens 8 --block 8
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import platform
import random
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
#: the committed ids (prepare's output): 1024 NOC prompts answered by SmolLM2-135M-Instruct
DATA = ROOT / "bench" / "data" / "gpu_corpus_ids.json.gz"

import torch  # noqa: E402

from noc_assistant.serving.draft_heads import (  # noqa: E402
    BlockDrafterModel,
    DrafterConfig,
    NeuralDrafter,
)
from noc_assistant.serving.loading import TargetModel, resolve_device  # noqa: E402
from noc_assistant.serving.speculative import generate  # noqa: E402
from noc_assistant.serving.train import (  # noqa: E402
    Sample,
    TrainConfig,
    answer_prompts,
    build_draft_vocab,
    extract_features,
    train_drafter,
)


class IdTokenizer:
    """Token ids in, token ids out: the device never needs the text."""

    def __init__(self, eos: Sequence[int]) -> None:
        self._eos = frozenset(int(e) for e in eos)

    @property
    def eos_token_ids(self) -> frozenset[int]:
        return self._eos

    def encode(self, text: str) -> list[int]:
        raise NotImplementedError("the GPU bench works on token ids")

    def decode(self, ids: Sequence[int]) -> str:
        return " ".join(str(i) for i in ids)

    def chat_prompt(self, messages: Sequence[dict[str, str]]) -> list[int]:
        raise NotImplementedError("the GPU bench works on token ids")


# -- prepare (CPU, here) ----------------------------------------------------------------------


def prepare(corpus: Path | None, out: Path, held_out: int, tiny: bool) -> None:
    """Write the ids the device needs: training samples, held-out prompts, EOS, vocabulary."""
    from noc_assistant.serving.backends import load_default
    from noc_assistant.serving.corpus import noc_prompts
    from noc_assistant.serving.loading import tiny_qwen3

    target = tiny_qwen3() if tiny else load_default()
    if corpus is not None:
        raw = json.loads(corpus.read_text())
        samples = [{"tokens": r["tokens"], "prompt_len": r["prompt_len"]} for r in raw]
    else:  # the tiny model answers a few prompts itself (smoke data)
        enc = [
            target.tokenizer.chat_prompt([{"role": "user", "content": p}])
            for p in noc_prompts(32, seed=0)
        ]
        samples = [
            {"tokens": s.tokens, "prompt_len": s.prompt_len}
            for s in answer_prompts(target, enc, max_new_tokens=24)
        ]
    texts = noc_prompts(held_out, seed=12345)
    prompts = [target.tokenizer.chat_prompt([{"role": "user", "content": t}]) for t in texts]
    blob = {
        "source_model": target.name,
        "vocab_size": target.vocab_size,
        "eos": sorted(target.eos_token_ids),
        "train": samples,
        "held_out": prompts,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(blob, separators=(",", ":"))
    if out.suffix == ".gz":
        out.write_bytes(gzip.compress(text.encode(), mtime=0))
    else:
        out.write_text(text)
    print(
        f"wrote {out}: {len(samples)} training samples, {len(prompts)} held-out prompts, "
        f"{out.stat().st_size / 1e6:.1f} MB"
    )


# -- run (the device) ------------------------------------------------------------------------


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


class Energy:
    """Total GPU energy (J) from NVML's counter, or None where it cannot be read."""

    def __init__(self, dev: torch.device) -> None:
        self.handle: Any = None
        if dev.type != "cuda":
            return
        try:
            import pynvml  # type: ignore[import-not-found, unused-ignore]

            pynvml.nvmlInit()
            self.handle = pynvml.nvmlDeviceGetHandleByIndex(dev.index or 0)
            self._read = pynvml.nvmlDeviceGetTotalEnergyConsumption
            self._read(self.handle)
        except Exception:  # any NVML failure means "no energy figures"
            self.handle = None

    def joules(self) -> float | None:
        if self.handle is None:
            return None
        return float(self._read(self.handle)) / 1000.0


def build_target(vocab: int, eos: Sequence[int], smoke: bool, size: str) -> Any:
    from transformers import Qwen3Config, Qwen3ForCausalLM

    keys: tuple[str, ...] = ("hidden_size", "num_hidden_layers", "num_attention_heads")
    keys += ("num_key_value_heads", "head_dim", "intermediate_size")
    shapes = {  # in the order of ``keys``
        "toy": (64, 2, 4, 2, 16, 128),
        "250m": (1024, 16, 16, 8, 64, 2816),
        "600m": (1536, 20, 16, 8, 96, 4096),
    }
    shape: dict[str, Any] = dict(zip(keys, shapes["toy" if smoke else size], strict=True))
    cfg = Qwen3Config(
        vocab_size=vocab,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=list(eos),
        pad_token_id=min(eos),
        **shape,
    )
    model = Qwen3ForCausalLM(cfg)
    model.config._attn_implementation = "sdpa"
    return model


def train_target(
    model: Any,
    samples: Sequence[dict[str, Any]],
    dev: torch.device,
    *,
    seconds: float,
    max_steps: int,
    batch: int,
    lr: float,
    seed: int,
    log: Callable[[str], None],
) -> dict[str, Any]:
    """Causal-LM training on whole samples (prompt and answer), bf16 autocast on a GPU."""
    model.to(dev).train()
    rng = random.Random(seed)
    pad = int(model.config.pad_token_id)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01, betas=(0.9, 0.95))
    warm = max(1, max_steps // 20)
    t0 = time.perf_counter()
    step, loss_v = 0, float("nan")
    amp = dev.type == "cuda"
    while step < max_steps and time.perf_counter() - t0 < seconds:
        prog = max(step / max_steps, (time.perf_counter() - t0) / seconds)
        f = min(1.0, (step + 1) / warm) * 0.5 * (1.0 + math.cos(math.pi * min(prog, 1.0)))
        for g in opt.param_groups:
            g["lr"] = lr * max(f, 0.02)
        rows = [rng.choice(samples)["tokens"] for _ in range(batch)]
        width = max(len(r) for r in rows)
        ids = torch.full((batch, width), pad, dtype=torch.long)
        mask = torch.zeros((batch, width), dtype=torch.long)
        for i, r in enumerate(rows):
            ids[i, : len(r)] = torch.tensor(r)
            mask[i, : len(r)] = 1
        ids, mask = ids.to(dev), mask.to(dev)
        labels = ids.masked_fill(mask == 0, -100)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=amp):
            loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        if step % 50 == 0 or step == 1:
            loss_v = float(loss.detach())
            log(f"target step {step} loss {loss_v:.3f} ({time.perf_counter() - t0:.0f}s)")
    loss_v = float(loss.detach()) if step else loss_v
    model.eval()
    return {"steps": step, "seconds": round(time.perf_counter() - t0, 1), "final_loss": loss_v}


def bench_variants(
    target: TargetModel,
    drafters: dict[str, tuple[BlockDrafterModel, DrafterConfig]],
    blocks: Sequence[int],
    prompts: Sequence[Sequence[int]],
    max_tokens: int,
    energy: Energy,
) -> dict[str, dict[str, Any]]:
    """Greedy batch-1 decoding of every prompt by every variant, interleaved prompt by prompt."""
    variants: dict[str, BlockDrafterModel | None] = {"target-only": None}
    for name, (model, cfg) in drafters.items():
        for b in blocks:
            if b <= cfg.block_size:
                m = BlockDrafterModel(replace(cfg, block_size=b)).to(target.device)
                m.load_state_dict(model.state_dict())
                m.bind(target)
                variants[f"{name} B={b}"] = m.eval()
    dev = target.device
    for d in variants.values():  # warm-up (kernels, allocator)
        generate(target, NeuralDrafter(d) if d is not None else None, list(prompts[0]), 16)
    acc: dict[str, dict[str, Any]] = {
        n: {
            "tokens": 0,
            "seconds": 0.0,
            "rounds": 0,
            "accepted": 0,
            "outputs": [],
            "joules": 0.0,
            "energy_ok": True,
        }
        for n in variants
    }
    for p in prompts:
        for name, d in variants.items():
            _sync(dev)
            e0 = energy.joules()
            t0 = time.perf_counter()
            r = generate(target, NeuralDrafter(d) if d is not None else None, list(p), max_tokens)
            _sync(dev)
            dt = time.perf_counter() - t0
            e1 = energy.joules()
            a = acc[name]
            a["tokens"] += r.stats.output_tokens
            a["seconds"] += dt
            a["rounds"] += r.stats.rounds
            a["accepted"] += r.stats.accepted_tokens
            a["outputs"].append(r.tokens)
            if e0 is None or e1 is None:
                a["energy_ok"] = False
            else:
                a["joules"] += e1 - e0
    ref = acc["target-only"]
    base = ref["tokens"] / ref["seconds"]
    out: dict[str, dict[str, Any]] = {}
    for name, a in acc.items():
        tps = a["tokens"] / a["seconds"] if a["seconds"] else 0.0
        same = sum(x == y for x, y in zip(a["outputs"], ref["outputs"], strict=True))
        out[name] = {
            "tau": (a["accepted"] + a["rounds"]) / a["rounds"] if a["rounds"] else 1.0,
            "tokens_per_s": tps,
            "speedup": tps / base if base else 0.0,
            "identical": f"{same}/{len(prompts)}",
            "joules_per_token": a["joules"] / a["tokens"]
            if a["energy_ok"] and a["tokens"]
            else None,
        }
    return out


Log = Callable[[str], None]


def _open_log(out: Path, t_start: float) -> Log:
    """A logger that prints each line, stamped with the seconds since ``t_start``, and appends
    it to ``out``/gpu_dspine.log."""
    log_f = (out / "gpu_dspine.log").open("w")

    def log(msg: str) -> None:
        line = f"[{time.perf_counter() - t_start:6.1f}s] {msg}"
        print(line, flush=True)
        log_f.write(line + "\n")
        log_f.flush()

    return log


def _target(
    args: argparse.Namespace,
    blob: dict[str, Any],
    samples: Sequence[dict[str, Any]],
    dev: torch.device,
    log: Log,
) -> tuple[TargetModel, int, dict[str, Any]]:
    """1. The target, built and trained: the model, its parameter count and training info."""
    smoke = args.smoke
    eos = blob["eos"]
    model = build_target(blob["vocab_size"], eos, smoke, args.size)
    n_params = sum(p.numel() for p in model.parameters())
    log(f"target: {n_params / 1e6:.0f}M parameters ({'toy' if smoke else args.size})")
    tinfo = train_target(
        model,
        samples,
        dev,
        seconds=5.0 if smoke else args.target_seconds,
        max_steps=20 if smoke else args.target_steps,
        batch=4 if smoke else args.target_batch,
        lr=args.target_lr,
        seed=args.seed,
        log=log,
    )
    log(f"target trained: {tinfo}")
    target = TargetModel(model, IdTokenizer(eos), f"gpu-target-{args.size}", n_taps=3, device=dev)
    return target, n_params, tinfo


def _own_answers(
    args: argparse.Namespace, target: TargetModel, samples: Sequence[dict[str, Any]], log: Log
) -> list[Sample]:
    """2. The target's own answers to the training prompts."""
    smoke = args.smoke
    prompts = [s["tokens"][: s["prompt_len"]] for s in samples]
    t0 = time.perf_counter()
    own: list[Sample] = answer_prompts(
        target,
        prompts,
        max_new_tokens=16 if smoke else args.max_new_tokens,
        batch_size=8 if smoke else 128,
    )
    n_ans = sum(len(s.tokens) - s.prompt_len for s in own)
    log(f"corpus: {len(own)} answers, {n_ans} tokens in {time.perf_counter() - t0:.1f}s")
    return own


def _features(
    args: argparse.Namespace, target: TargetModel, own: list[Sample], log: Log
) -> tuple[list[int], Any]:
    """3. The draft vocabulary and the target's features over its own answers."""
    t0 = time.perf_counter()
    vocab = build_draft_vocab(own, args.vocab, always=sorted(target.eos_token_ids))
    data = extract_features(target, own, vocab)
    log(f"features: draft vocab {len(vocab)}, {time.perf_counter() - t0:.1f}s")
    return vocab, data


def _drafter(
    args: argparse.Namespace,
    target: TargetModel,
    variant: str,
    vocab: list[int],
    data: Any,
    log: Log,
) -> tuple[BlockDrafterModel, DrafterConfig, dict[str, Any]]:
    """4. One drafter (``DSpine`` or ``DFlash-style``) trained: the model, its configuration and
    its training info."""
    smoke = args.smoke
    dsp = variant == "DSpine"
    mcfg = DrafterConfig.for_target(
        target,
        num_layers=2,
        block_size=args.block,
        dspine=dsp,
        inject_layers=dsp,
        refine=dsp,
        draft_vocab=vocab,
    )
    steps = 5 if smoke else args.drafter_steps
    tcfg = TrainConfig(
        steps=steps,
        seed=args.seed,
        seqs_per_step=4 if smoke else 16,
        max_seconds=None if smoke else args.drafter_seconds,
    )
    done = 0

    def count(step: int, m: dict[str, float], v: str = variant) -> None:
        nonlocal done
        done = step + 1
        if step % 200 == 0:
            log(f"{v} step {step} " + " ".join(f"{k}={x:.3g}" for k, x in m.items()))

    t0 = time.perf_counter()
    d = train_drafter(target, mcfg, data, tcfg, log=count)
    info = {
        "steps": steps,
        "steps_done": done,
        "seconds": round(time.perf_counter() - t0, 1),
    }
    return d, mcfg, info


def _write_results(
    out: Path,
    results: dict[str, Any],
    res: dict[str, dict[str, Any]],
    log: Log,
) -> None:
    """gpu_dspine.json (``results``) and gpu_dspine.md (the table of ``res``), the table logged."""
    (out / "gpu_dspine.json").write_text(json.dumps(results, indent=1))
    lines = [
        "| variant | τ | tokens/s | speed-up vs target-only | identical | J/token |",
        "|---|---|---|---|---|---|",
    ]
    for name, r in res.items():
        jt = f"{r['joules_per_token']:.3f}" if r["joules_per_token"] is not None else "–"
        lines.append(
            f"| {name} | {r['tau']:.2f} | {r['tokens_per_s']:.1f} | "
            f"{r['speedup']:.2f}× | {r['identical']} | {jt} |"
        )
    (out / "gpu_dspine.md").write_text("\n".join(lines) + "\n")
    log("\n" + "\n".join(lines))


def run(args: argparse.Namespace) -> None:
    t_start = time.perf_counter()
    dev = resolve_device(args.device)
    torch.manual_seed(args.seed)
    raw = Path(args.data).read_bytes()
    blob = json.loads(gzip.decompress(raw) if args.data.suffix == ".gz" else raw)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    log = _open_log(out, t_start)
    smoke = args.smoke
    samples = blob["train"][: 64 if smoke else args.samples]
    held = blob["held_out"][: 3 if smoke else args.prompts]
    gpu = torch.cuda.get_device_name(dev) if dev.type == "cuda" else platform.processor() or "cpu"
    log(
        f"device {dev} ({gpu}), torch {torch.__version__}, {len(samples)} samples, "
        f"{len(held)} held-out prompts, source {blob['source_model']}"
    )
    target, n_params, tinfo = _target(args, blob, samples, dev, log)
    own = _own_answers(args, target, samples, log)
    vocab, data = _features(args, target, own, log)
    # 4. drafters, same step budget (a wall-clock cap only as a safety net; steps done recorded)
    drafters: dict[str, tuple[BlockDrafterModel, DrafterConfig]] = {}
    dinfo: dict[str, Any] = {}
    for variant in ("DSpine", "DFlash-style"):
        d, mcfg, dinfo[variant] = _drafter(args, target, variant, vocab, data, log)
        log(f"{variant} drafter: {dinfo[variant]}")
        drafters[variant] = (d, mcfg)
    # 5. speed at batch 1
    energy = Energy(dev)
    blocks = [b for b in (4, 8, 16) if b <= args.block] if not smoke else [4]
    res = bench_variants(target, drafters, blocks, held, 24 if smoke else args.max_tokens, energy)
    results = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "device": gpu,
        "torch": torch.__version__,
        "smoke": smoke,
        "target": {"parameters": n_params, "size": args.size, **tinfo},
        "drafters": dinfo,
        "held_out_prompts": len(held),
        "max_tokens": args.max_tokens,
        "results": res,
        "wall_s": round(time.perf_counter() - t_start, 1),
        "command": " ".join(sys.argv),
    }
    _write_results(out, results, res, log)
    log(f"done in {time.perf_counter() - t_start:.0f}s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare", help="write the carried ids (CPU, here)")
    p.add_argument("--corpus", type=Path, help="corpus JSON cached by noc llm train-drafter")
    p.add_argument("--out", type=Path, default=DATA)
    p.add_argument("--held-out", type=int, default=16)
    p.add_argument("--tiny", action="store_true", help="tiny model's own answers (smoke data)")
    r = sub.add_parser("run", help="train and measure on the device")
    r.add_argument("--data", type=Path, default=DATA)
    r.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "/tmp/gpu_dspine")))
    r.add_argument("--device", default="auto")
    r.add_argument("--smoke", action="store_true", help="toy sizes, a few steps (CPU check)")
    r.add_argument("--size", choices=("250m", "600m"), default="250m")
    r.add_argument("--target-seconds", type=float, default=150.0)
    r.add_argument("--target-steps", type=int, default=3000)
    r.add_argument("--target-batch", type=int, default=32)
    r.add_argument("--target-lr", type=float, default=1e-3)
    r.add_argument("--max-new-tokens", type=int, default=96)
    r.add_argument("--vocab", type=int, default=4096)
    r.add_argument("--block", type=int, default=16)
    r.add_argument("--drafter-steps", type=int, default=2000)
    r.add_argument("--drafter-seconds", type=float, default=90.0)
    r.add_argument("--prompts", type=int, default=16)
    r.add_argument("--samples", type=int, default=None, help="use the first N training samples")
    r.add_argument("--max-tokens", type=int, default=128)
    r.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if args.cmd == "prepare":
        prepare(args.corpus, args.out, args.held_out, args.tiny)
    else:
        run(args)


if __name__ == "__main__":
    main()
