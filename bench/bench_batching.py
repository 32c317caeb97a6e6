"""Benchmark: concurrent chat requests on the built-in engine (SmolLM2-135M Q4_1, native CPU).

Issue 35's target: 4 concurrent chat requests finish in ≤ 1.5× the time of one. The server
(``noc llm serve``) runs up to ``Engine.max_running`` (4) requests at once and their decoding
steps share one forward (:mod:`noc_assistant.serving.batching`). Measured here, over loopback
HTTP with the openai client against the real server in this process:

* ``alone``: each prompt on its own, one after another (what the server did before: one at a
  time); per request wall time, and the sum;
* ``together``: all prompts sent at once; wall time until the last answer.

Both give greedy answers, which must be identical text. Also measured: the cost of one
batched decoding step (S sequences × 1 new token, ``NativeLlama.forward_many``) against one
forward of one sequence over S new tokens (a verify round), S = 1, 2, 4, 8, and the same
rounds with a second busy process on the machine (``--busy``: a pure-Python spin loop).

    .venv/bin/python bench/bench_batching.py --threads 1 --rounds 3

Writes bench/batching_results.md (``--out``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from _machine import preamble  # noqa: E402

CURVE = (1, 2, 4, 8)


def chat_texts(n: int, words: int) -> list[str]:
    """``n`` different NOC chat questions, each with a shift log of about ``words`` words."""
    from noc_assistant.serving.corpus import noc_prompts

    pool = noc_prompts(60 * n, seed=777)
    out = []
    for i in range(n):
        parts = ["Here is the shift log of the NOC. What should the next shift look at first?"]
        j = i * 60
        while sum(len(p.split()) for p in parts) < words:
            parts.append(pool[j])
            j += 1
        out.append("\n".join(parts))
    return out


def curve(target: Any, prompts: list[list[int]], reps: int = 7) -> list[dict[str, float]]:
    """Median ms of one batched decoding step of S sequences, and of one S-token forward."""
    import numpy as np

    nat = target.native
    taps = np.array(target.tap_layers, np.int64)
    rows = []
    for s in CURVE:
        caches = []
        for i in range(s):
            c = nat.new_cache(capacity=1024)
            nat.forward(np.array(prompts[i % len(prompts)], np.int64), c, taps)
            caches.append(c)
        one = np.array([42], np.int64)
        batched, verify = [], []
        for _ in range(reps):
            lengths = [c.length for c in caches]
            t0 = time.perf_counter()
            nat.forward_many([(one, c) for c in caches], taps)
            batched.append(time.perf_counter() - t0)
            for c, n in zip(caches, lengths, strict=True):
                c.crop(n)
            t0 = time.perf_counter()
            nat.forward(np.full(s, 42, np.int64), caches[0], taps)
            verify.append(time.perf_counter() - t0)
            caches[0].crop(lengths[0])
        rows.append(
            {
                "s": s,
                "batched_ms": 1000 * statistics.median(batched),
                "verify_ms": 1000 * statistics.median(verify),
            }
        )
    return rows


def _ask(client: Any, text: str, max_tokens: int) -> tuple[str, float, int]:
    t0 = time.perf_counter()
    r = client.chat.completions.create(
        model="smollm2-135m-instruct",
        messages=[{"role": "user", "content": text}],
        max_tokens=max_tokens,
        temperature=0,
    )
    return r.choices[0].message.content or "", time.perf_counter() - t0, r.usage.completion_tokens


def one_round(client: Any, texts: list[str], max_tokens: int) -> dict[str, Any]:
    """The prompts one after another, then all at once."""
    alone = [_ask(client, t, max_tokens) for t in texts]
    got: list[tuple[str, float, int] | None] = [None] * len(texts)

    def run(i: int) -> None:
        got[i] = _ask(client, texts[i], max_tokens)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(texts))]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    together = [g for g in got if g is not None]
    return {
        "alone_s": [a[1] for a in alone],
        "tokens": [a[2] for a in alone],
        "together_s": wall,
        "identical": [a[0] == b[0] for a, b in zip(alone, together, strict=True)],
    }


def _spin() -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "while True: pass"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--requests", type=int, default=4)
    ap.add_argument("--words", type=int, default=150, help="shift-log words per prompt")
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--busy", action="store_true", help="also run the rounds beside a spinner")
    ap.add_argument("--out", default=str(ROOT / "bench" / "batching_results.md"))
    args = ap.parse_args()

    import openai
    import torch

    from noc_assistant.serving.backends import load_default
    from noc_assistant.serving.engine import Engine
    from noc_assistant.serving.server import ServerThread, create_app

    torch.set_num_threads(args.threads)
    target = load_default(backend="native")
    engine = Engine(target, context=2048, max_running=args.requests)
    texts = chat_texts(args.requests, args.words)
    prompts = [engine.encode_chat([{"role": "user", "content": t}]) for t in texts]
    srv = ServerThread(create_app(engine, max_tokens_default=args.max_tokens)).start()
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{srv.port}/v1", api_key="x", timeout=600)
    try:
        _ask(client, texts[0], 4)  # warm-up: kernels loaded, first-call costs paid
        rows = curve(target, prompts)
        runs = {"idle": [one_round(client, texts, args.max_tokens) for _ in range(args.rounds)]}
        if args.busy:
            spin = _spin()
            try:
                runs["busy"] = [
                    one_round(client, texts, args.max_tokens) for _ in range(args.rounds)
                ]
            finally:
                spin.kill()
    finally:
        srv.stop()
    st = engine.batcher.stats
    lines = preamble(
        "Concurrent chat requests on the built-in engine (SmolLM2-135M-Instruct Q4_1, CPU)",
        f", torch {torch.__version__}, {args.threads} thread(s)",
    )
    lines += report(args, prompts, rows, runs, st)
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def report(
    args: argparse.Namespace,
    prompts: list[list[int]],
    rows: list[dict[str, float]],
    runs: dict[str, list[dict[str, Any]]],
    st: Any,
) -> list[str]:
    n = args.requests
    out = [
        f"- {n} chat prompts of {min(map(len, prompts))}–{max(map(len, prompts))} tokens, "
        f"max_tokens {args.max_tokens}, greedy, through the real server on loopback "
        f"(`max_running` {n}); {args.rounds} rounds; figures are medians over rounds",
        f"- load average at the end: {os.getloadavg()[0]:.2f} (1 min)",
        "",
        "| machine | one request alone, mean s | all one after another, s | "
        f"{n} at once, s | at once / one alone (target ≤ 1.5) | at once / one after another "
        "| answers identical |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, rs in runs.items():
        one = statistics.median(statistics.mean(r["alone_s"]) for r in rs)
        seq = statistics.median(sum(r["alone_s"]) for r in rs)
        tog = statistics.median(r["together_s"] for r in rs)
        same = sum(sum(r["identical"]) for r in rs)
        total = sum(len(r["identical"]) for r in rs)
        out.append(
            f"| {name} | {one:.2f} | {seq:.2f} | {tog:.2f} | {tog / one:.2f}× | "
            f"{tog / seq:.2f}× | {same}/{total} |"
        )
    toks = runs["idle"][0]["tokens"]
    out += [
        "",
        f"Output tokens per request (round 1): {toks}.",
        "",
        "Batches the server ran (forwards per model call: count): "
        + ", ".join(f"{k}: {v}" for k, v in sorted(st.sizes.items())),
        "",
        "### One decoding step of S sequences vs one forward of S new tokens of one sequence",
        "",
        "Median ms of 7; the sequences hold the prompts above (~"
        f"{statistics.mean(map(len, prompts)):.0f} tokens of context).",
        "",
        "| S | S sequences × 1 token, ms | × S = 1 | 1 sequence × S tokens, ms | × S = 1 |",
        "|---|---|---|---|---|",
    ]
    b1, v1 = rows[0]["batched_ms"], rows[0]["verify_ms"]
    for r in rows:
        out.append(
            f"| {r['s']:.0f} | {r['batched_ms']:.1f} | {r['batched_ms'] / b1:.2f} | "
            f"{r['verify_ms']:.1f} | {r['verify_ms'] / v1:.2f} |"
        )
    return out


if __name__ == "__main__":
    main()
