"""Drafters judged on the product's own requests: τ and speed-up at the served block size.

The requests are a traffic log of the built-in server (``noc llm serve --record``), written
while the drafting stage narrated reports and answered chat questions about simulated
incidents (``bench/bench_drafting.py --record FILE``). The drafters were trained on the logs
of other simulated days (``noc llm train-drafter --traffic``), so these requests are held out.

Every recorded body is sent again, as recorded (its JSON Schema or tools, temperature 0,
penalties), to one built-in server per variant in this process: target-only, DSpine and the
DFlash-style baseline, each at the block sizes asked. The variants take each request in turn,
so a change of machine load hits all of them alike. Reports τ (tokens committed per verify
round, the grammar's forced tokens included: under a grammar they are drafted and verified in
the round, see :mod:`noc_assistant.serving.grammar_drafts`), the share of drafts accepted, the
verify rounds, the wall time of the whole log against target-only's, and checks each answer is
identical to target-only's. Every variant writes the same answers, so the τ ratio of two
drafters is the inverse ratio of their verify rounds. With
``--busy`` the log is sent a second time beside a process that spins on one core.

    .venv/bin/python bench/bench_traffic.py --log TRAFFIC.jsonl --dspine DIR --dflash DIR \
        [--also NAME=DIR] [--blocks 3] [--threads 1] [--limit 0] [--busy]
        [--out bench/traffic_results.md]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from _machine import preamble  # bench/ helper, found beside this script

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Tally:
    """One variant's sums over the log."""

    rounds: int = 0
    committed: float = 0.0
    drafts: int = 0
    accepted: int = 0
    forced: int = 0
    tokens: int = 0
    wall_s: float = 0.0
    same: int = 0
    answers: list[str] = field(default_factory=list)

    @property
    def tau(self) -> float:
        return self.committed / self.rounds if self.rounds else float("nan")


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--log", type=Path, required=True, help="held-out traffic log")
    ap.add_argument("--dspine", type=Path, required=True, help="DSpine checkpoint folder")
    ap.add_argument("--dflash", type=Path, required=True, help="DFlash-style checkpoint folder")
    ap.add_argument(
        "--also",
        action="append",
        default=[],
        metavar="NAME=DIR",
        help="another drafter checkpoint to compare (repeatable)",
    )
    ap.add_argument("--blocks", default="3", help="block sizes, comma-separated")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--limit", type=int, default=0, help="first N requests only (0: all)")
    ap.add_argument("--busy", action="store_true", help="again beside a busy process")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "traffic_results.md")
    return ap.parse_args()


def start_servers(args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, Any]]:
    """One server thread per variant over one loaded target: name → (thread, train info)."""
    import torch

    from noc_assistant.serving.backends import load_default
    from noc_assistant.serving.draft_heads import load_drafter
    from noc_assistant.serving.engine import Engine
    from noc_assistant.serving.server import ServerThread, create_app

    torch.set_num_threads(args.threads)
    target = load_default()
    drafters: dict[str, Any] = {"target-only": None}
    info: dict[str, Any] = {}
    others = [tuple(a.split("=", 1)) for a in args.also]
    for b in (int(x) for x in args.blocks.split(",")):
        named = [("DSpine", args.dspine), ("DFlash-style", args.dflash)]
        for name, folder in [*named, *((n, Path(d)) for n, d in others)]:
            drafters[f"{name} B={b}"] = load_drafter(folder, target, block_size=b)
            info[name] = json.loads((folder / "train.json").read_text())
    servers = {
        name: ServerThread(create_app(Engine(target, d, max_running=1))).start()
        for name, d in drafters.items()
    }
    return servers, info


def send(client: httpx.Client, port: int, body: dict[str, Any]) -> tuple[dict[str, Any], float]:
    t0 = time.perf_counter()
    r = client.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=body)
    r.raise_for_status()
    return r.json(), time.perf_counter() - t0


def replay(
    servers: dict[str, Any], bodies: list[dict[str, Any]], tallies: dict[str, Tally]
) -> None:
    """Each body to every variant in turn; the sums go to ``tallies``."""
    with httpx.Client(timeout=600) as client:
        for body in bodies:
            ref: str | None = None
            for name, srv in servers.items():
                out, wall = send(client, srv.port, body)
                msg = out["choices"][0]["message"]
                calls = [c["function"] for c in msg.get("tool_calls") or []]  # ids differ
                text = json.dumps(calls) if calls else msg["content"]
                spec = out["noc"]["spec"]
                t = tallies[name]
                t.rounds += spec["rounds"]
                t.committed += spec["mean_accept_length"] * spec["rounds"]
                t.drafts += spec["draft_tokens"]
                t.accepted += spec["accepted_tokens"]
                t.forced += out["noc"]["forced_tokens"]
                t.tokens += out["usage"]["completion_tokens"]
                t.wall_s += wall
                ref = text if ref is None else ref
                t.same += text == ref


def table(tallies: dict[str, Tally], n: int) -> list[str]:
    base = tallies["target-only"].wall_s
    out = [
        "| variant | τ | drafts accepted | rounds | output tokens (forced) | wall s | "
        "speed-up | same answer as target-only |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, t in tallies.items():
        acc = f"{t.accepted / t.drafts:.1%}" if t.drafts else "-"
        tau = f"{t.tau:.3f}" if t.drafts else "1 (no drafts)"
        out.append(
            f"| {name} | {tau} | {acc} | {t.rounds} | {t.tokens} ({t.forced}) | "
            f"{t.wall_s:.1f} | {base / t.wall_s:.2f}× | {t.same}/{n} |"
        )
    return out


def main() -> None:
    args = parse_args()
    from noc_assistant.serving.traffic import read_traffic

    recs = [r for r in read_traffic(args.log) if r.endpoint == "chat"]
    if args.limit:
        recs = recs[: args.limit]
    bodies = [r.body for r in recs]
    servers, info = start_servers(args)
    runs: dict[str, dict[str, Tally]] = {}
    try:
        with httpx.Client(timeout=600) as client:  # warm-up: first-call costs paid
            for srv in servers.values():
                send(client, srv.port, {**bodies[0], "max_tokens": 4})
        modes = ["idle", "beside a busy process"] if args.busy else ["idle"]
        for mode in modes:
            spin = None
            if mode != "idle":
                spin = subprocess.Popen([sys.executable, "-c", "while True: pass"])
            try:
                runs[mode] = {name: Tally() for name in servers}
                replay(servers, bodies, runs[mode])
            finally:
                if spin is not None:
                    spin.kill()
    finally:
        for srv in servers.values():
            srv.stop()
    lines = preamble(
        "Drafters on the product's own requests (SmolLM2-135M-Instruct, native CPU engine)",
        f", {args.threads} thread(s)",
    )
    lines += report(args, recs, runs, info)
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def _trained_on(info: dict[str, Any]) -> str:
    what = (
        "traffic logs " + ", ".join(Path(t).name for t in info["traffic"])
        if info.get("traffic")
        else f"the template corpus ({info.get('prompts')} prompts)"
    )
    return f"{info.get('steps')} steps at B={info.get('block_size')} on {what}"


def report(
    args: argparse.Namespace, recs: list[Any], runs: dict[str, dict[str, Tally]], info: Any
) -> list[str]:
    prompt = sorted(len(r.prompt) for r in recs)
    lines = [
        f"- requests: {len(recs)} chat requests of `{args.log.name}` (held out: other simulated "
        f"days than the training logs), prompts {prompt[0]}–{prompt[-1]} tokens "
        f"(median {prompt[len(prompt) // 2]}), sent as recorded (temperature 0)",
        "- drafters (trained at block size B, run truncated at a smaller one): "
        + "; ".join(f"{k}: {_trained_on(v)}" for k, v in info.items()),
        "",
    ]
    for mode, tallies in runs.items():
        lines += [f"## {mode}", "", *table(tallies, len(recs)), ""]
    idle = runs["idle"]
    for b in args.blocks.split(","):
        d, f = idle.get(f"DSpine B={b}"), idle.get(f"DFlash-style B={b}")
        if d is not None and f is not None and f.drafts and d.drafts:
            lines.append(
                f"- B={b}: τ(DSpine) / τ(DFlash-style) = {d.tau / f.tau:.3f} (target ≥ 1.10)"
            )
    return lines


if __name__ == "__main__":
    main()
