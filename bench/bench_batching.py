"""Benchmark: concurrent chat requests on the built-in engine (SmolLM2-135M Q4_1, native CPU).

Issue 35's target: 4 concurrent chat requests finish in ≤ 1.5× the time of one. The server
(``noc llm serve``) runs up to ``Engine.max_running`` (4) requests at once and their decoding
steps share one forward (:mod:`noc_assistant.serving.batching`). Measured here, over loopback
HTTP with the openai client against the real server in this process:

* ``alone``: each prompt on its own, one after another (what the server did before: one at a
  time); per request wall time, and the sum;
* ``together``: all prompts sent at once; wall time until the last answer.

Both give greedy answers, which must be identical text. Each conversation has the static part
of the product's triage-chat system prompt (``prompts/templates/chat_system.txt.j2``) and a
shift log of its own; after the first turn every user sends a follow-up (the conversation so
far plus one question), again alone and all at once. The rounds run with the engine's prefix
store (``reuse``: a next turn forwards only its new message, another user's prompt copies the
shared system prompt's cache) and without it (``no reuse``: every prompt prefilled whole, as
the engine did for all but the last request). With the store, every measured phase starts from
the same state (:func:`two_turns`), so no phase reuses what an earlier phase computed for it.
Also measured: the cost of one batched decoding step (S sequences × 1 new token,
``NativeLlama.forward_many``) against one forward of one sequence over S new tokens (a verify
round), S = 1, 2, 4, 8; and, with ``--busy``, the rounds beside a second busy process (a
pure-Python spin loop).

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


def conversations(n: int, words: int) -> list[list[dict[str, str]]]:
    """``n`` first turns: the triage chat's static system prompt, then a different shift log
    of about ``words`` words and a question."""
    from noc_assistant.serving.corpus import noc_prompts

    head = (ROOT / "prompts" / "templates" / "chat_system.txt.j2").read_text().split("{{")[0]
    pool = noc_prompts(60 * n, seed=777)
    out = []
    for i in range(n):
        parts = ["Here is the shift log of the NOC. What should the next shift look at first?"]
        j = i * 60
        while sum(len(p.split()) for p in parts) < words:
            parts.append(pool[j])
            j += 1
        out.append(
            [
                {"role": "system", "content": head.strip()},
                {"role": "user", "content": "\n".join(parts)},
            ]
        )
    return out


FOLLOW_UP = "Which of these should I escalate to the partner NOC, and why?"


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


def _ask(client: Any, msgs: list[dict[str, str]], max_tokens: int) -> tuple[str, float]:
    t0 = time.perf_counter()
    r = client.chat.completions.create(
        model="smollm2-135m-instruct", messages=msgs, max_tokens=max_tokens, temperature=0
    )
    return r.choices[0].message.content or "", time.perf_counter() - t0


def one_by_one(client: Any, convs: list[list[dict[str, str]]], max_tokens: int) -> dict[str, Any]:
    """The conversations' next requests one after another: answers and each one's time."""
    res = [_ask(client, c, max_tokens) for c in convs]
    return {"answers": [a for a, _ in res], "alone_s": [t for _, t in res]}


def at_once(client: Any, convs: list[list[dict[str, str]]], max_tokens: int) -> dict[str, Any]:
    """The conversations' next requests all at once: answers and the time to the last one."""
    got: list[tuple[str, float] | None] = [None] * len(convs)

    def run(i: int) -> None:
        got[i] = _ask(client, convs[i], max_tokens)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(convs))]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {"answers": [g[0] if g else None for g in got], "wall_s": time.perf_counter() - t0}


def two_turns(
    client: Any,
    store: Any,
    first: list[list[dict[str, str]]],
    other: list[dict[str, str]],
    max_tokens: int,
) -> dict[str, dict[str, Any]]:
    """First turns one by one and at once, then follow-ups one by one and at once.

    Every measured phase starts from the same store: emptied, then holding one earlier
    conversation under the same system prompt (``other``, another user), and for the
    follow-ups also the first turns just answered (each user's conversation so far), as a
    server in use would hold them."""

    def prepare(then: list[list[dict[str, str]]] | None = None) -> None:
        if store is None:
            return
        store.clear()
        _ask(client, other, max_tokens)
        for c in then or []:
            _ask(client, c, max_tokens)

    prepare()
    alone1 = one_by_one(client, first, max_tokens)
    prepare()
    tog1 = at_once(client, first, max_tokens)
    nxt = [
        [*c, {"role": "assistant", "content": a}, {"role": "user", "content": FOLLOW_UP}]
        for c, a in zip(first, alone1["answers"], strict=True)
    ]
    prepare(first)
    alone2 = one_by_one(client, nxt, max_tokens)
    prepare(first)
    tog2 = at_once(client, nxt, max_tokens)
    out = {}
    for turn, a, t in (("first turn", alone1, tog1), ("next turn", alone2, tog2)):
        same = [x == y for x, y in zip(a["answers"], t["answers"], strict=True)]
        out[turn] = {"alone_s": a["alone_s"], "together_s": t["wall_s"], "identical": same}
    return out


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
    store = engine.prefixes
    *first, other = conversations(args.requests + 1, args.words)
    prompts = [engine.encode_chat(c) for c in first]
    srv = ServerThread(create_app(engine, max_tokens_default=args.max_tokens)).start()
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{srv.port}/v1", api_key="x", timeout=600)
    runs: dict[str, list[dict[str, dict[str, Any]]]] = {}
    try:
        _ask(client, first[0], 4)  # warm-up: kernels loaded, first-call costs paid
        rows = curve(target, prompts)
        modes = [("reuse", store), ("no reuse", None)]
        if args.busy:
            modes.append(("reuse, busy machine", store))
        for name, prefixes in modes:
            engine.prefixes = prefixes
            spin = _spin() if "busy" in name else None
            try:
                runs[name] = []
                for _ in range(args.rounds):
                    runs[name].append(two_turns(client, prefixes, first, other, args.max_tokens))
            finally:
                if spin is not None:
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
    runs: dict[str, list[dict[str, dict[str, Any]]]],
    st: Any,
) -> list[str]:
    n = args.requests
    out = [
        f"- {n} chat conversations (the triage chat's static system prompt and a shift log "
        f"each), first prompts of {min(map(len, prompts))}–{max(map(len, prompts))} tokens, "
        f"then a follow-up each; max_tokens {args.max_tokens}, greedy, through the real "
        f"server on loopback (`max_running` {n}); {args.rounds} rounds; every phase starts "
        "from the same store: one other user's conversation under the same system prompt, "
        "and for the next turn the four first turns just answered; medians over rounds",
        f"- load average at the end: {os.getloadavg()[0]:.2f} (1 min)",
        "",
        "| prefix store | turn | one request alone, mean s | all one after another, s | "
        f"{n} at once, s | at once / one alone (target ≤ 1.5) | at once / one after another "
        "| answers identical |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, rs in runs.items():
        for turn in ("first turn", "next turn"):
            ts = [r[turn] for r in rs]
            one = statistics.median(statistics.mean(r["alone_s"]) for r in ts)
            seq = statistics.median(sum(r["alone_s"]) for r in ts)
            tog = statistics.median(r["together_s"] for r in ts)
            same = sum(sum(r["identical"]) for r in ts)
            total = sum(len(r["identical"]) for r in ts)
            out.append(
                f"| {name} | {turn} | {one:.2f} | {seq:.2f} | {tog:.2f} | {tog / one:.2f}× | "
                f"{tog / seq:.2f}× | {same}/{total} |"
            )
    out += [
        "",
        "Batches the server ran (forwards per model call: count): "
        + ", ".join(f"{k}: {v}" for k, v in sorted(st.sizes.items())),
        "",
        "### One decoding step of S sequences vs one forward of S new tokens of one sequence",
        "",
        "Median ms of 7; the sequences hold the first prompts above (~"
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
