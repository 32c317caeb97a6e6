"""Benchmark: DSpine vs DFlash-style drafting on SmolLM2-135M-Instruct (CPU).

Same held-out NOC prompts (corpus seed 12345; training used seed 0), same target, drafters
trained with the same fixed number of optimiser steps (`noc llm train-drafter --steps N`, same
cached corpus). Variants: target-only greedy decoding, DSpine, DSpine without the final
correction (same checkpoint, argmax of the backbone logits), DSpine without in-layer injection
(separately trained, keeps the final correction) and the DFlash-style baseline (no injection,
no correction), each at every requested block size. A smaller block size runs the B=8-trained
drafters on truncated blocks (exact for a causal block, see ``load_drafter``).

Variants run interleaved prompt by prompt, so a change of machine load during the run hits all
of them alike; the load average is sampled every 5 s and reported. Reports τ (accepted drafts +
bonus per verify round), per-position acceptance, decode tokens/s against target-only decoding,
and checks every output is identical to target-only greedy decoding.

    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_dspine.py --threads 1 --prompts 10 \
        --max-tokens 48 --blocks 8,4,2 --ablation-blocks 8

(1 thread: on the shared 2-core machine two OpenMP threads under oversubscription made every
forward about 2x slower.)

Writes bench/dspine_results.md and bench/dspine_results.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from noc_assistant.serving.backends import load_default
from noc_assistant.serving.corpus import noc_prompts
from noc_assistant.serving.draft_heads import BlockDrafterModel, NeuralDrafter, load_drafter
from noc_assistant.serving.loading import TargetModel
from noc_assistant.serving.speculative import GenerationResult, generate

ROOT = Path(__file__).resolve().parents[1]
WEIGHTS = ROOT / "noc_assistant/serving/weights/smollm2-dspine-b8"
CACHE = Path.home() / ".cache" / "noc-assistant" / "drafters"


class LoadSampler:
    """Samples the 1-minute load average every ``period`` seconds in a daemon thread."""

    def __init__(self, period: float = 5.0) -> None:
        self.period = period
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.samples.append(os.getloadavg()[0])
            self._stop.wait(self.period)

    def __enter__(self) -> LoadSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def checkpoints(trained_block: int) -> dict[str, Path]:
    """Folders of the DSpine drafter and the two baselines trained at block size
    ``trained_block``: the committed DSpine checkpoint for 8, the local cache otherwise."""
    dspine = WEIGHTS if trained_block == 8 else CACHE / f"smollm2-dspine-b{trained_block}"
    return {
        "dspine": dspine,
        "dspine-noinject": CACHE / f"smollm2-dspine-noinject-b{trained_block}",
        "dflash": CACHE / f"smollm2-dflash-b{trained_block}",
    }


def _variants(
    target: TargetModel,
    blocks: list[int],
    ablation_blocks: set[int],
    ckpt: dict[str, Path],
    extra: dict[str, Path] | None = None,
) -> dict[str, BlockDrafterModel | None]:
    """target-only, then per block size DSpine and DFlash-style, plus both ablations at the
    block sizes in ``ablation_blocks`` and any ``extra`` checkpoints (name → folder)."""
    out: dict[str, BlockDrafterModel | None] = {"target-only": None}
    for b in blocks:
        out[f"DSpine B={b}"] = load_drafter(ckpt["dspine"], target, block_size=b)
        for name, folder in (extra or {}).items():
            out[f"{name} B={b}"] = load_drafter(folder, target, block_size=b)
        named = [("DFlash-style (no injection, no correction)", ckpt["dflash"])]
        if b in ablation_blocks:
            nocorr = load_drafter(ckpt["dspine"], target, block_size=b)
            nocorr.cfg = replace(nocorr.cfg, refine=False)
            out[f"DSpine, no final correction B={b}"] = nocorr
            named.insert(0, ("DSpine, no in-layer injection", ckpt["dspine-noinject"]))
        for name, folder in named:
            if (folder / "model.safetensors").is_file():
                out[f"{name} B={b}"] = load_drafter(folder, target, block_size=b)
    return out


def verify_cost(target: TargetModel, prompt: list[int], reps: int = 5) -> dict[int, float]:
    """Median ms of one target forward over n new tokens after the prompt (n = 1..16)."""
    out: dict[int, float] = {}
    for n in (1, 2, 4, 8, 16):
        times = []
        for _ in range(reps):
            cache = target.new_cache()
            target.forward(prompt, cache)
            t0 = time.perf_counter()
            target.forward(prompt[:n], cache)
            times.append(1e3 * (time.perf_counter() - t0))
        out[n] = sorted(times)[len(times) // 2]
    return out


def _train_info(ckpt: dict[str, Path], extra: dict[str, Path] | None = None) -> dict[str, Any]:
    info: dict[str, Any] = {}
    for name, folder in (*ckpt.items(), *(extra or {}).items()):
        f = folder / "train.json"
        if f.is_file():
            info[name] = json.loads(f.read_text())
    return info


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--prompts", type=int, default=10)
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--blocks", default="8,4,3,2", help="comma-separated block sizes")
    ap.add_argument(
        "--ablation-blocks", default="8,4", help="block sizes that also run both ablations"
    )
    ap.add_argument("--out", type=Path, default=ROOT / "bench")
    ap.add_argument(
        "--drafter",
        action="append",
        default=[],
        metavar="NAME=FOLDER",
        help="also run this checkpoint at every block size (e.g. a longer-trained drafter)",
    )
    ap.add_argument(
        "--trained-block",
        type=int,
        default=8,
        help="block size the drafters were trained at (8: the committed DSpine checkpoint; "
        "others: ~/.cache/noc-assistant/drafters/smollm2-<variant>-b<N>)",
    )
    ap.add_argument("--stem", default="dspine_results", help="name of the result files")
    ap.add_argument(
        "--prompt-seed",
        type=int,
        default=12345,
        help="seed of the held-out prompts (12345 reports; pick variants on another seed)",
    )
    return ap.parse_args()


@dataclass
class Setup:
    """The target, the prompts, the drafter checkpoints and variants, and the verify cost."""

    target: TargetModel
    prompts: list[list[int]]
    ckpt: dict[str, Path]
    extra: dict[str, Path]
    variants: dict[str, BlockDrafterModel | None]
    cost: dict[int, float]


def prepare(args: argparse.Namespace) -> Setup:
    """Load the target and the drafters, warm each variant up, and time the target's forward."""
    extra = {k: Path(v) for k, v in (d.split("=", 1) for d in args.drafter)}
    torch.set_num_threads(args.threads)
    blocks = [int(x) for x in args.blocks.split(",")]
    target = load_default()
    texts = noc_prompts(args.prompts, seed=args.prompt_seed)
    prompts = [target.tokenizer.chat_prompt([{"role": "user", "content": t}]) for t in texts]
    abl = {int(x) for x in args.ablation_blocks.split(",") if x}
    ckpt = checkpoints(args.trained_block)
    if not (ckpt["dspine"] / "model.safetensors").is_file():
        raise SystemExit(f"no DSpine checkpoint in {ckpt['dspine']} (train it first)")
    variants = _variants(target, blocks, abl, ckpt, extra)
    for d in variants.values():  # warm-up
        generate(target, NeuralDrafter(d) if d is not None else None, prompts[0], 8)
    cost = verify_cost(target, prompts[0])
    return Setup(target, prompts, ckpt, extra, variants, cost)


def _accumulate(a: dict[str, Any], r: GenerationResult) -> None:
    """Add one generation's statistics and output to a variant's totals."""
    st = r.stats
    a["tokens"] += st.output_tokens
    a["decode_s"] += st.time_total - st.time_prefill
    a["rounds"] += st.rounds
    a["accepted"] += st.accepted_tokens
    a["draft_s"] += st.time_draft
    a["verify_s"] += st.time_verify
    pp = st.accepted_per_pos
    a["per_pos"] = [x + y for x, y in zip(a["per_pos"] or [0] * len(pp), pp, strict=True)]
    a["outputs"].append(r.tokens)


def run_prompts(
    args: argparse.Namespace, s: Setup
) -> tuple[dict[str, dict[str, Any]], float, tuple[float, float, float], list[float]]:
    """Every variant on every prompt, interleaved prompt by prompt: the totals per variant, the
    wall time, the load average at the start and the load samples during the run."""
    acc: dict[str, dict[str, Any]] = {
        name: {
            "tokens": 0,
            "decode_s": 0.0,
            "rounds": 0,
            "accepted": 0,
            "draft_s": 0.0,
            "verify_s": 0.0,
            "per_pos": [],
            "outputs": [],
        }
        for name in s.variants
    }
    t_start = time.perf_counter()
    load_start = os.getloadavg()
    with LoadSampler() as sampler:
        for i, p in enumerate(s.prompts):
            for name, d in s.variants.items():
                r = generate(
                    s.target, NeuralDrafter(d) if d is not None else None, p, args.max_tokens
                )
                _accumulate(acc[name], r)
            print(
                f"prompt {i + 1}/{len(s.prompts)} done ({time.perf_counter() - t_start:.0f}s)",
                flush=True,
            )
    wall = time.perf_counter() - t_start
    return acc, wall, load_start, sampler.samples


def summarise(acc: dict[str, dict[str, Any]], n_prompts: int) -> dict[str, dict[str, Any]]:
    """Per variant: τ, decode speed and speed-up over target-only, the time per round, the
    per-position acceptance, and whether its outputs equal target-only's."""
    ref = acc["target-only"]["outputs"]
    base_tok_s = acc["target-only"]["tokens"] / acc["target-only"]["decode_s"]
    results: dict[str, dict[str, Any]] = {}
    for name, a in acc.items():
        rounds = a["rounds"]
        tok_s = a["tokens"] / a["decode_s"]
        results[name] = {
            "tokens": a["tokens"],
            "rounds": rounds,
            "tau": (a["accepted"] + rounds) / rounds if rounds else 1.0,
            "decode_s": a["decode_s"],
            "tok_s": tok_s,
            "speedup": tok_s / base_tok_s,
            "draft_s": a["draft_s"],
            "verify_s": a["verify_s"],
            "draft_ms_per_round": 1e3 * a["draft_s"] / rounds if rounds else 0.0,
            "verify_ms_per_round": 1e3 * a["verify_s"] / max(rounds, 1)
            if rounds
            else 1e3 * a["verify_s"] / max(a["tokens"] - n_prompts, 1),
            "per_pos": [x / rounds for x in a["per_pos"]] if rounds else [],
            "lossless": a["outputs"] == ref,
        }
    return results


def make_meta(
    args: argparse.Namespace,
    s: Setup,
    wall: float,
    load_start: tuple[float, float, float],
    samples: list[float],
) -> dict[str, Any]:
    """The run's date, machine, command, wall time, load, training and verify cost."""
    loads = samples or [load_start[0]]
    return {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"torch {torch.__version__}, {args.threads} threads, fp32 compute",
        "command": "HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_dspine.py "
        f"--threads {args.threads} --prompts {args.prompts} --max-tokens {args.max_tokens} "
        f"--blocks {args.blocks} --ablation-blocks {args.ablation_blocks}"
        + "".join(f" --drafter '{d}'" for d in args.drafter)
        + (f" --trained-block {args.trained_block}" if args.trained_block != 8 else "")
        + (f" --stem {args.stem}" if args.stem != "dspine_results" else ""),
        "wall_s": wall,
        "load_avg_1min": {
            "start": load_start[0],
            "mean": sum(loads) / len(loads),
            "min": min(loads),
            "max": max(loads),
            "samples": len(loads),
        },
        "training": _train_info(s.ckpt, s.extra),
        "trained_block": args.trained_block,
        "verify_ms_by_tokens": s.cost,
    }


def main() -> None:
    args = parse_args()
    s = prepare(args)
    acc, wall, load_start, samples = run_prompts(args, s)
    results = summarise(acc, len(s.prompts))
    meta = make_meta(args, s, wall, load_start, samples)
    _write(args, meta, results)


def _write(args: argparse.Namespace, meta: dict[str, Any], results: dict[str, Any]) -> None:
    la = meta["load_avg_1min"]
    steps = "/".join(
        str(x)
        for x in sorted(
            {int(v.get("steps_done", v.get("steps", 0))) for v in meta["training"].values()}
        )
    )
    lines = [
        "# DSpine benchmark (SmolLM2-135M-Instruct, CPU)"
        + (
            f", drafters trained at B={meta['trained_block']}" if meta["trained_block"] != 8 else ""
        ),
        "",
        f"- date: {meta['date']}",
        f"- machine: {meta['machine']}",
        f"- command: `{meta['command']}`",
        f"- 1-min load average during the run: mean {la['mean']:.1f}, min {la['min']:.1f}, "
        f"max {la['max']:.1f} ({la['samples']} samples, 5 s apart; 2 cores, shared machine)",
        f"- drafters: trained at B={meta['trained_block']} with the same fixed budget of {steps} "
        "optimiser steps each (see noc_assistant/serving/weights/README.md); smaller B runs the "
        "same checkpoints on truncated blocks (exact for the causal block)",
        f"- prompts: {args.prompts} held-out NOC prompts (seed {args.prompt_seed}),"
        f" {args.max_tokens} max tokens, greedy; variants interleaved prompt by prompt",
        "",
        "| drafter | τ (mean accepted length incl. bonus) | decode tok/s | speed-up vs "
        "target-only | draft ms/round | verify ms/round | identical to target-only |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, r in results.items():
        lines.append(
            f"| {name} | {r['tau']:.3f} | {r['tok_s']:.1f} | {r['speedup']:.2f}× | "
            f"{r['draft_ms_per_round']:.1f} | {r['verify_ms_per_round']:.1f} | "
            f"{'yes' if r['lossless'] else 'NO'} |"
        )
    cost = meta["verify_ms_by_tokens"]
    lines += [
        "",
        "Cost of one target forward over n new tokens (median of 5, after the first prompt): "
        + ", ".join(f"n={n}: {ms:.0f} ms" for n, ms in cost.items())
        + ".",
    ]
    width = max((len(r["per_pos"]) for r in results.values()), default=0)
    lines += [
        "",
        "Target-only: verify ms/round is ms per decoded token.",
        "",
        "Per-position acceptance rate (fraction of rounds whose draft k was accepted):",
        "",
        "| drafter | " + " | ".join(f"k={k}" for k in range(1, width + 1)) + " |",
        "|---|" + "---|" * width,
    ]
    for name, r in results.items():
        pp = r["per_pos"]
        if pp:
            cells = [f"{x:.3f}" for x in pp] + ["–"] * (width - len(pp))
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    for b in sorted({int(n.rsplit("=", 1)[1]) for n in results if "B=" in n}, reverse=True):
        dfl = results.get(f"DFlash-style (no injection, no correction) B={b}")
        dsp = results.get(f"DSpine B={b}")
        if dfl and dsp:
            lines.append("")
            lines.append(
                f"τ(DSpine) / τ(DFlash-style) at B={b} = {dsp['tau'] / dfl['tau']:.3f} "
                "(target ≥ 1.10)."
            )
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.stem}.md").write_text("\n".join(lines) + "\n")
    (args.out / f"{args.stem}.json").write_text(
        json.dumps({"meta": meta, "results": results}, indent=1)
    )
    print("\n".join(lines))


if __name__ == "__main__":
    main()
