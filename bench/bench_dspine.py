"""Benchmark: DSpine vs DFlash-style drafting on SmolLM2-135M-Instruct (CPU).

Same held-out NOC prompts (corpus seed 12345; training used seed 0), same target, drafters
trained with the same wall-clock budget (`noc llm train-drafter --seconds 540`). Reports the
mean accepted length τ (accepted drafts + bonus per verify round), per-position acceptance,
decode tokens/s against target-only greedy decoding, and checks every output is identical to
target-only greedy decoding.

    .venv/bin/python bench/bench_dspine.py --threads 2 --prompts 12 --max-tokens 96

Writes bench/dspine_results.md and bench/dspine_results.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import time
from dataclasses import replace
from pathlib import Path

import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from noc_assistant.serving.corpus import noc_prompts
from noc_assistant.serving.drafters import BlockDrafterModel, NeuralDrafter, load_drafter
from noc_assistant.serving.models import TargetModel, load_default
from noc_assistant.serving.speculative import GenerationStats, generate

ROOT = Path(__file__).resolve().parents[1]
CACHE = Path.home() / ".cache" / "noc-assistant" / "drafters"


def run(
    target: TargetModel, drafter: BlockDrafterModel | None, prompts: list[list[int]], n: int
) -> tuple[list[list[int]], dict[str, float | list[float]]]:
    outs = []
    tot = GenerationStats()
    decode_s = 0.0
    per_pos: list[int] = []
    lengths: list[int] = []
    for p in prompts:
        d = NeuralDrafter(drafter) if drafter is not None else None
        r = generate(target, d, p, n)
        outs.append(r.tokens)
        st = r.stats
        tot.output_tokens += st.output_tokens
        tot.rounds += st.rounds
        tot.accepted_tokens += st.accepted_tokens
        tot.draft_tokens += st.draft_tokens
        tot.time_draft += st.time_draft
        tot.time_verify += st.time_verify
        decode_s += st.time_total - st.time_prefill
        lengths += st.accept_lengths
        if st.accepted_per_pos:
            per_pos = [
                a + b
                for a, b in zip(
                    per_pos or [0] * len(st.accepted_per_pos), st.accepted_per_pos, strict=True
                )
            ]
    res: dict[str, float | list[float]] = {
        "tokens": tot.output_tokens,
        "decode_s": decode_s,
        "tok_s": tot.output_tokens / decode_s,
        "rounds": tot.rounds,
        "tau": tot.mean_accept_length if tot.rounds else 1.0,
        "draft_s": tot.time_draft,
        "verify_s": tot.time_verify,
        "per_pos": [x / tot.rounds for x in per_pos] if tot.rounds else [],
    }
    return outs, res


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompts", type=int, default=12)
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--out", type=Path, default=ROOT / "bench")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    target = load_default()
    texts = noc_prompts(args.prompts, seed=12345)
    prompts = [target.tokenizer.chat_prompt([{"role": "user", "content": t}]) for t in texts]
    variants: dict[str, BlockDrafterModel | None] = {"target-only": None}
    dspine = load_drafter(ROOT / "noc_assistant/serving/weights/smollm2-dspine-b8", target)
    variants["DSpine"] = dspine
    nocorr = load_drafter(ROOT / "noc_assistant/serving/weights/smollm2-dspine-b8", target)
    nocorr.cfg = replace(nocorr.cfg, refine=False)
    variants["DSpine, no final correction"] = nocorr
    for name, folder in (
        ("DSpine, no in-layer injection", "smollm2-dspine-noinject-b8"),
        ("DFlash-style (no injection)", "smollm2-dflash-b8"),
    ):
        if (CACHE / folder / "model.safetensors").is_file():
            variants[name] = load_drafter(CACHE / folder, target)
    generate(target, None, prompts[0], 8)  # warm-up
    results: dict[str, dict[str, float | list[float]]] = {}
    ref: list[list[int]] | None = None
    for name, d in variants.items():
        t0 = time.perf_counter()
        outs, res = run(target, d, prompts, args.max_tokens)
        if ref is None:
            ref = outs
        res["lossless"] = float(outs == ref)
        res["wall_s"] = time.perf_counter() - t0
        results[name] = res
        print(name, {k: v for k, v in res.items() if k != "per_pos"}, flush=True)
    base = results["target-only"]["tok_s"]
    assert isinstance(base, float)
    lines = [
        "# DSpine benchmark (SmolLM2-135M-Instruct, CPU)",
        "",
        f"- date: {dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"torch {torch.__version__}, {args.threads} threads, fp32 compute",
        f"- command: `.venv/bin/python bench/bench_dspine.py --threads {args.threads} "
        f"--prompts {args.prompts} --max-tokens {args.max_tokens}`",
        "- drafters: block size B=8 (7 drafts/round), 2 layers at d=576, draft vocab 4096, "
        "trained with `noc llm train-drafter --variant V --seconds 540` (same wall-clock budget, "
        "1 thread, same cached corpus: 256 NOC prompts answered by the target)",
        f"- prompts: {args.prompts} held-out NOC prompts (seed 12345), "
        f"{args.max_tokens} max tokens, "
        "greedy",
        "",
        "| drafter | τ (mean accepted length incl. bonus) | decode tok/s | speed-up vs target-only "
        "| draft s | verify s | identical to target-only |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, r in results.items():
        tok_s = r["tok_s"]
        assert isinstance(tok_s, float)
        lines.append(
            f"| {name} | {float(r['tau']):.3f} | {tok_s:.1f} | {tok_s / base:.2f}× | "
            f"{float(r['draft_s']):.1f} | {float(r['verify_s']):.1f} | "
            f"{'yes' if r['lossless'] else 'NO'} |"
        )
    lines += [
        "",
        "Per-position acceptance rate (fraction of rounds whose draft k was accepted):",
        "",
    ]
    lines.append("| drafter | " + " | ".join(f"k={k}" for k in range(1, 8)) + " |")
    lines.append("|---|" + "---|" * 7)
    for name, r in results.items():
        pp = r["per_pos"]
        if isinstance(pp, list) and pp:
            lines.append(f"| {name} | " + " | ".join(f"{x:.3f}" for x in pp) + " |")
    if "DFlash-style (no injection)" in results:
        ratio = float(results["DSpine"]["tau"]) / float(
            results["DFlash-style (no injection)"]["tau"]
        )
        lines += ["", f"τ(DSpine) / τ(DFlash-style) = {ratio:.3f} (target ≥ 1.10)."]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "dspine_results.md").write_text("\n".join(lines) + "\n")
    (args.out / "dspine_results.json").write_text(json.dumps(results, indent=1))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
