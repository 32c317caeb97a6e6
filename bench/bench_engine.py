"""Benchmark: the built-in LLM engine against llama.cpp on the packaged SmolLM2-135M Q4_1 GGUF.

Engines, each measured in its own subprocess (so peak RSS is that engine's alone) with the same
token ids and the same thread count:

* ``llamacpp``: llama.cpp through ``llama-cpp-python`` (``pip install -e '.[bench]'``; it builds
  from source), on the same GGUF file, ``n_threads = n_threads_batch = threads``;
* ``native``: ``load_default(backend="native")`` (noc_assistant.serving.native);
* ``transformers``: ``load_default(backend="transformers")``, the previous default (bf16 cache,
  fp32 forward, ``DynamicCache``).

Per prompt (~300-token chat prompts built from the offline NOC corpus): prefill tokens/s, then
plain greedy decoding of ``--new-tokens`` tokens (EOS ignored, so every engine decodes the same
number) and its tokens/s. The prompt's forward asks for the last row's logits only
(``forward(..., all_logits=False)``; llama.cpp computes no more). Rounds interleave engines
and thread counts, so a change of machine load hits all of them alike; the load average is
recorded with every run. The native and
transformers workers also measure the cost of one forward over n = 1..16 new tokens after the
first prompt (what a speculative verify round costs).

    .venv/bin/python bench/bench_engine.py --threads 1,2 --rounds 3

Writes bench/engine_results.md (``--out``) and the raw runs next to it as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

ENGINES = ("llamacpp", "native", "transformers")
CURVE = (1, 2, 3, 4, 6, 8, 16)


def build_prompts(n: int, target_tokens: int) -> list[list[int]]:
    """``n`` chat prompts of about ``target_tokens`` tokens (SmolLM2 chat template)."""
    from noc_assistant.serving.corpus import noc_prompts
    from noc_assistant.serving.loading import default_gguf_path, model_cache_dir
    from noc_assistant.serving.native import gguf_tokenizer

    tok = gguf_tokenizer(default_gguf_path(), model_cache_dir() / "smollm2-135m-instruct-tokenizer")
    pool = noc_prompts(40 * n, seed=777)
    out: list[list[int]] = []
    for i in range(n):
        parts = ["Here is the shift log of the NOC. Summarize it for the morning handover."]
        j = i * 40
        while True:
            ids = tok.chat_prompt([{"role": "user", "content": "\n".join(parts)}])
            if len(ids) >= target_tokens:
                break
            parts.append(pool[j])
            j += 1
        out.append(ids)
    return out


# -- workers (one engine per process) ---------------------------------------------------------


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _argmax(x: Any) -> int:
    import numpy as np

    return int(np.argmax(x))


def _run_llamacpp(threads: int, prompts: list[list[int]], new: int) -> dict[str, Any]:
    import numpy as np
    from llama_cpp import Llama

    from noc_assistant.serving.loading import default_gguf_path

    need = max(len(p) for p in prompts) + new + 8
    n_ctx = 512
    while n_ctx < need:
        n_ctx *= 2
    t0 = time.perf_counter()
    llm = Llama(
        model_path=str(default_gguf_path()),
        n_ctx=n_ctx,
        n_threads=threads,
        n_threads_batch=threads,
        n_batch=512,
        verbose=False,
    )
    load_s = time.perf_counter() - t0
    n_vocab = llm.n_vocab()

    def last_logits() -> Any:
        # Llama.eval keeps no logits unless logits_all; the context holds the last row's
        return np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(n_vocab,))

    llm.eval(prompts[0][:16])  # warm-up
    llm.reset()
    runs = []
    for p in prompts:
        llm.reset()
        t0 = time.perf_counter()
        llm.eval(p)
        prefill = time.perf_counter() - t0
        tok = _argmax(last_logits())
        toks = [tok]
        t0 = time.perf_counter()
        for _ in range(new - 1):
            llm.eval([tok])
            tok = _argmax(last_logits())
            toks.append(tok)
        decode = time.perf_counter() - t0
        runs.append({"prefill_s": prefill, "decode_s": decode, "n_prompt": len(p), "tokens": toks})
    return {"load_s": load_s, "runs": runs}


def _run_target(
    backend: str, threads: int, prompts: list[list[int]], new: int, curve: bool
) -> dict[str, Any]:
    import torch

    from noc_assistant.serving.backends import load_default

    torch.set_num_threads(threads)
    t0 = time.perf_counter()
    target = load_default(backend=backend)
    load_s = time.perf_counter() - t0

    def step(ids: list[int], cache: Any) -> int:
        # the prompt's prefill needs the last row's logits only (as llama.cpp computes them)
        out = target.forward(ids, cache, all_logits=len(ids) == 1)
        return int(torch.argmax(out.logits[-1]))

    warm = target.new_cache()
    step(prompts[0][:16], warm)
    for _ in range(4):
        step([5], warm)
    del warm
    runs = []
    for p in prompts:
        cache = target.new_cache()
        t0 = time.perf_counter()
        tok = step(p, cache)
        prefill = time.perf_counter() - t0
        toks = [tok]
        t0 = time.perf_counter()
        for _ in range(new - 1):
            tok = step([tok], cache)
            toks.append(tok)
        decode = time.perf_counter() - t0
        runs.append({"prefill_s": prefill, "decode_s": decode, "n_prompt": len(p), "tokens": toks})
    costs: dict[str, list[float]] = {}
    if curve:
        cache = target.new_cache()
        base = len(prompts[0])
        step(prompts[0], cache)
        for n in CURVE:
            ids = runs[0]["tokens"][:n]
            times = []
            for _ in range(7):
                cache.crop(base)
                t0 = time.perf_counter()
                target.forward(ids, cache)
                times.append(time.perf_counter() - t0)
            costs[str(n)] = times
    return {"load_s": load_s, "runs": runs, "curve": costs}


def _greedy(target: Any, prompt: list[int], new: int) -> tuple[list[int], Any]:
    import torch

    cache = target.new_cache()
    out = target.forward(prompt, cache)
    first = out.logits
    toks = [int(torch.argmax(out.logits[-1]))]
    for _ in range(new - 1):
        toks.append(int(torch.argmax(target.forward([toks[-1]], cache).logits[-1])))
    return toks, first


def _run_fidelity(n_prompts: int, new: int) -> dict[str, Any]:
    """Greedy tokens and prompt logits of the native engine and of the previous default (bf16
    safetensors cache, transformers) against the fp32 dequantisation of the GGUF."""
    import torch

    from noc_assistant.serving.backends import load_default
    from noc_assistant.serving.corpus import noc_prompts
    from noc_assistant.serving.loading import default_gguf_path, load_gguf

    torch.set_num_threads(1)
    ref = load_gguf(default_gguf_path())
    engines = {
        "native": load_default(backend="native"),
        "transformers (bf16 cache)": load_default(backend="transformers"),
    }
    qs = noc_prompts(n_prompts, seed=4242)
    rows: dict[str, Any] = {
        name: {"equal": 0, "prefix": [], "max_logit_diff": 0.0} for name in engines
    }
    for q in qs:
        prompt = ref.tokenizer.chat_prompt([{"role": "user", "content": q}])
        want, ref_logits = _greedy(ref, prompt, new)
        scale = float(ref_logits.abs().max())
        for name, eng in engines.items():
            got, logits = _greedy(eng, prompt, new)
            k = 0
            while k < new and got[k] == want[k]:
                k += 1
            r = rows[name]
            r["prefix"].append(k)
            r["equal"] += sum(a == b for a, b in zip(got, want, strict=True))
            diff = float((logits - ref_logits).abs().max()) / scale
            r["max_logit_diff"] = max(r["max_logit_diff"], diff)
    return {"prompts": len(qs), "new": new, "rows": rows}


def worker(args: argparse.Namespace) -> None:
    if args.worker == "fidelity":
        print("RESULT " + json.dumps(_run_fidelity(args.fidelity_prompts, args.fidelity_tokens)))
        return
    prompts = json.loads(Path(args.prompts_file).read_text())
    load0 = os.getloadavg()[0]
    if args.worker == "llamacpp":
        res = _run_llamacpp(args.threads, prompts, args.new_tokens)
    else:
        res = _run_target(args.worker, args.threads, prompts, args.new_tokens, args.curve)
    res.update(
        engine=args.worker,
        threads=args.threads,
        peak_rss_mb=_rss_mb(),
        load=[load0, os.getloadavg()[0]],
    )
    print("RESULT " + json.dumps(res))


# -- driver -----------------------------------------------------------------------------------


def _spawn(
    engine: str,
    threads: int,
    prompts_file: Path,
    new: int,
    curve: bool,
    extra: tuple[str, ...] = (),
) -> dict[str, Any]:
    env = dict(os.environ)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env[var] = str(threads)
    cmd = [
        sys.executable,
        __file__,
        "--worker",
        engine,
        "--threads",
        str(threads),
        "--prompts-file",
        str(prompts_file),
        "--new-tokens",
        str(new),
        *extra,
    ]
    if curve:
        cmd.append("--curve")
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            res: dict[str, Any] = json.loads(line[len("RESULT ") :])
            return res
    raise RuntimeError(f"{engine} x{threads} failed:\n{out.stderr[-3000:]}")


def _summary(runs: list[dict[str, Any]]) -> dict[str, float]:
    """Per worker run: tokens/s over all its prompts (total tokens / total time)."""
    pre = sum(r["n_prompt"] for r in runs) / sum(r["prefill_s"] for r in runs)
    dec = sum(len(r["tokens"]) - 1 for r in runs) / sum(r["decode_s"] for r in runs)
    return {"prefill": pre, "decode": dec}


def _fmt_range(xs: list[float], digits: int = 1) -> str:
    med = statistics.median(xs)
    if len(xs) == 1:
        return f"{med:.{digits}f}"
    return f"{med:.{digits}f} ({min(xs):.{digits}f}–{max(xs):.{digits}f})"


def _report_header(
    results: list[dict[str, Any]], args: argparse.Namespace, prompts: list[list[int]]
) -> list[str]:
    """The result file's title, machine and method."""
    import llama_cpp
    import numba
    import torch
    from _machine import preamble

    lines = preamble(
        "Built-in LLM engine vs llama.cpp (SmolLM2-135M-Instruct Q4_1, CPU)",
        f", torch {torch.__version__}, numba {numba.__version__},"
        f" llama-cpp-python {llama_cpp.__version__}",
    )
    lines += [
        f"- prompts: {len(prompts)} chat prompts of {min(map(len, prompts))}–"
        f"{max(map(len, prompts))} tokens; {args.new_tokens} new tokens each, greedy,"
        f" EOS ignored; {args.rounds} rounds, engines and thread counts interleaved",
        "- each engine runs in its own subprocess; tokens/s = tokens / wall time over all"
        " prompts of one run; figures are the median over rounds (min–max in brackets);"
        " peak RSS is the worker's `ru_maxrss`",
        "- 1-min load average during the runs (other jobs share this 2-core machine): "
        + _fmt_range([x for r in results for x in r["load"]], 2),
        "",
    ]
    return lines


def _report_threads(
    by: dict[tuple[str, int], list[dict[str, Any]]], args: argparse.Namespace
) -> list[str]:
    """A table per thread count: each engine's speed and memory against llama.cpp."""
    lines: list[str] = []
    for t in args.threads:
        lines += [
            f"## {t} thread{'s' if t > 1 else ''}",
            "",
            "| engine | decode tok/s | × llama.cpp | prefill tok/s | peak RSS MB | × llama.cpp"
            " | load s |",
            "|---|---|---|---|---|---|---|",
        ]
        ref = by.get(("llamacpp", t), [])
        for e in args.engines:
            rs = by.get((e, t), [])
            if not rs:
                continue
            dec = [_summary(r["runs"])["decode"] for r in rs]
            pre = [_summary(r["runs"])["prefill"] for r in rs]
            rss = [r["peak_rss_mb"] for r in rs]
            ratio = rratio = "–"
            if ref and e != "llamacpp":
                # per round: this engine against llama.cpp measured next to it
                rd = [
                    _summary(a["runs"])["decode"] / _summary(b["runs"])["decode"]
                    for a, b in zip(rs, ref, strict=False)
                ]
                ratio = _fmt_range(rd, 2)
                ref_rss = statistics.median(r["peak_rss_mb"] for r in ref)
                rratio = f"{statistics.median(rss) / ref_rss:.2f}"
            lines.append(
                f"| {e} | {_fmt_range(dec)} | {ratio} | {_fmt_range(pre)} | "
                f"{statistics.median(rss):.0f} | {rratio} | "
                f"{statistics.median(r['load_s'] for r in rs):.1f} |"
            )
        lines.append("")
    return lines


def _report_curves(results: list[dict[str, Any]], args: argparse.Namespace) -> list[str]:
    """The cost of one forward over n new tokens, per engine and thread count (if measured)."""
    lines: list[str] = []
    curves = [r for r in results if r.get("curve")]
    if curves:
        lines += [
            "## Cost of one forward over n new tokens (after the first prompt)",
            "",
            "Median ms of 7 repetitions per run, median over rounds; a verify round of a"
            " B-token block costs the n = B column.",
            "",
            "| engine | threads | " + " | ".join(f"n={n}" for n in CURVE) + " | n=8 / n=1 |",
            "|---|---|" + "---|" * (len(CURVE) + 1),
        ]
        for e in args.engines:
            for t in args.threads:
                rs = [r for r in curves if r["engine"] == e and r["threads"] == t]
                if not rs:
                    continue
                ms = {
                    n: statistics.median(statistics.median(r["curve"][str(n)]) * 1e3 for r in rs)
                    for n in CURVE
                }
                lines.append(
                    f"| {e} | {t} | "
                    + " | ".join(f"{ms[n]:.1f}" for n in CURVE)
                    + f" | {ms[8] / ms[1]:.2f} |"
                )
        lines.append("")
    return lines


def _report_agreement(
    by: dict[tuple[str, int], list[dict[str, Any]]], args: argparse.Namespace
) -> list[str]:
    """Token agreement between engines (first run of each engine at the first thread count)."""
    lines: list[str] = []
    first = {e: by[(e, args.threads[0])][0] for e in args.engines if (e, args.threads[0]) in by}
    if len(first) > 1:
        lines += ["## Greedy tokens, engine against engine", ""]
        names = list(first)
        for i, a in enumerate(names):
            for b in names[i + 1 :]:
                same = total = 0
                prefix = []
                for ra, rb in zip(first[a]["runs"], first[b]["runs"], strict=True):
                    k = 0
                    while k < len(ra["tokens"]) and ra["tokens"][k] == rb["tokens"][k]:
                        k += 1
                    prefix.append(k)
                    same += sum(x == y for x, y in zip(ra["tokens"], rb["tokens"], strict=True))
                    total += len(ra["tokens"])
                lines.append(
                    f"- {a} vs {b}: identical first {prefix} of {args.new_tokens} tokens"
                    f" (per prompt); {same}/{total} positions equal"
                )
        lines.append("")
    return lines


def report(
    results: list[dict[str, Any]], args: argparse.Namespace, prompts: list[list[int]]
) -> list[str]:
    lines = _report_header(results, args, prompts)
    by: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for r in results:
        by.setdefault((r["engine"], r["threads"]), []).append(r)
    lines += _report_threads(by, args)
    lines += _report_curves(results, args)
    lines += _report_agreement(by, args)
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--engines", default=",".join(ENGINES))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--prompts", type=int, default=3)
    ap.add_argument("--prompt-tokens", type=int, default=300)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--out", default=str(ROOT / "bench" / "engine_results.md"))
    ap.add_argument("--fidelity-prompts", type=int, default=5)
    ap.add_argument("--fidelity-tokens", type=int, default=48)
    ap.add_argument("--worker", choices=[*ENGINES, "fidelity"], help=argparse.SUPPRESS)
    ap.add_argument("--prompts-file", help=argparse.SUPPRESS)
    ap.add_argument("--curve", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        args.threads = int(args.threads)
        worker(args)
        return
    args.threads = [int(x) for x in args.threads.split(",")]
    args.engines = [e for e in args.engines.split(",") if e]
    out = Path(args.out)
    prompts = build_prompts(args.prompts, args.prompt_tokens)
    pfile = out.with_suffix(".prompts.json")
    pfile.write_text(json.dumps(prompts))
    results: list[dict[str, Any]] = []
    try:
        if "native" in args.engines:  # numba compiles on a cold cache: not in a timed run
            _spawn("native", 1, pfile, 2, curve=False)
        for rnd in range(args.rounds):
            for t in args.threads:
                for e in args.engines:
                    t0 = time.perf_counter()
                    r = _spawn(e, t, pfile, args.new_tokens, curve=e != "llamacpp")
                    r["round"] = rnd
                    results.append(r)
                    s = _summary(r["runs"])
                    print(
                        f"round {rnd} {e:12s} x{t}: decode {s['decode']:6.1f} tok/s, prefill "
                        f"{s['prefill']:7.1f} tok/s, RSS {r['peak_rss_mb']:5.0f} MB "
                        f"({time.perf_counter() - t0:.0f}s, load {r['load']})",
                        flush=True,
                    )
    finally:
        pfile.unlink(missing_ok=True)
    fid: dict[str, Any] | None = None
    if args.fidelity_prompts > 0:
        extra = (
            "--fidelity-prompts",
            str(args.fidelity_prompts),
            "--fidelity-tokens",
            str(args.fidelity_tokens),
        )
        pfile.write_text(json.dumps(prompts))
        try:
            fid = _spawn("fidelity", 1, pfile, args.new_tokens, curve=False, extra=extra)
        finally:
            pfile.unlink(missing_ok=True)
    out.with_suffix(".json").write_text(json.dumps({"runs": results, "fidelity": fid}))
    lines = report(results, args, prompts)
    if fid is not None:
        lines += [
            "## Losslessness: greedy tokens against the fp32 dequantisation of the GGUF",
            "",
            f"{fid['prompts']} chat prompts (NOC corpus, seed 4242), {fid['new']} greedy tokens"
            " each, against transformers' fp32 dequantisation of the same GGUF (`load_gguf`);"
            " logit difference = max |Δ| over the prompt's rows / max |logit|.",
            "",
            "| engine | tokens equal | identical prefix per prompt | max rel. logit diff |",
            "|---|---|---|---|",
        ]
        for name, r in fid["rows"].items():
            total = fid["prompts"] * fid["new"]
            lines.append(
                f"| {name} | {r['equal']}/{total} | {r['prefix']} | {r['max_logit_diff']:.1e} |"
            )
        lines.append("")
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
