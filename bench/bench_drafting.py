"""Drafting with the built-in LLM server: how often the model's texts pass the checks, and
what a narrated report or a chat answer costs against the template alone.

Simulates a day (``make run``'s: seed 7, every fault class), replays it through the pipeline,
then starts ``noc llm serve`` (SmolLM2-135M-Instruct, CPU) on a free loopback port — or uses
the OpenAI-compatible server of ``--base-url`` / ``NOC_LLM_BASE_URL`` (vLLM, SGLang …, with
``--model``) — and, for every incident with a diagnosis: the template report (the baseline), a
narrated report (structured, citation-constrained), and the triage chat's answers to two of
five questions (when did it start, why, what else, which entities, what to check; taken in
turn), with the read-only look-ups the model made. Reports the share of model texts shown
(they passed grounding and vetting) and why the others were withheld, the latency of each
path, ten answers with their look-ups for a person to judge, and writes
bench/drafting_results.md (``--out`` for another file).

Usage: .venv/bin/python bench/bench_drafting.py [--days 1] [--seed 7] [--limit 0]
       [--base-url URL --model NAME] [--out FILE]
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from _machine import preamble  # bench/ helper, found beside this script

from knowledge.pack import load_pack
from noc_assistant.integrations.llm import LlmClient
from noc_assistant.inventory import load_topology
from noc_assistant.simulate import ScenarioConfig, build_scenario, write_scenario
from noc_assistant.stream.pipeline import run_replay
from noc_assistant.triage.drafting import Drafter

ROOT = Path(__file__).resolve().parent.parent
QUESTIONS = (
    "When did it start?",
    "Why do the rules think so?",
    "What else could it be?",
    "Which entities are involved?",
    "What should I check first?",
)
PER_INCIDENT = 2


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


_KINDS = (
    "repeats the prompt",
    "repeats itself",
    "echoes the prompt's data",
    "cites no evidence",
    "names entities outside the incident",
    "does not name the diagnosed entity",
    "nothing the model said was supported",
    "the language model failed",
)


def _reason(text: str | None) -> str:
    """A withheld text's reason without its particulars: the check that failed."""
    if not text:
        return "shown"
    issues = sorted(
        set(
            re.findall(
                r"\b(unknown_evidence|unknown_reference|uncited_number|"
                r"number_mismatch)\b",
                text,
            )
        )
    )
    if issues:
        return "not supported by the evidence (" + ", ".join(issues) + ")"
    return next((k for k in _KINDS if k in text), text)


def _pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q) - 1] if len(values) > 1 else values[0]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--days", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--limit", type=int, default=0, help="first N incidents only (0: all)")
    ap.add_argument("--max-tokens", type=int, default=160)
    ap.add_argument("--threads", type=int, default=2, help="the built-in server's threads")
    ap.add_argument("--base-url", default=os.environ.get("NOC_LLM_BASE_URL"))
    ap.add_argument("--model", default=os.environ.get("NOC_LLM_MODEL", "smollm2-135m-instruct"))
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "drafting_results.md")
    args = ap.parse_args()

    pack = load_pack()
    with tempfile.TemporaryDirectory() as tmp:
        paths = write_scenario(
            build_scenario(ScenarioConfig(days=args.days, faults="all", seed=args.seed)),
            Path(tmp),
        )
        result = run_replay(paths["telemetry"], inventory=paths["inventory"])
        topology = load_topology(paths["inventory"], pack)
    cases = [(i, result.diagnoses[i.id]) for i in result.incidents if i.id in result.diagnoses]
    if args.limit:
        cases = cases[: args.limit]

    server = None
    if args.base_url:
        base = args.base_url.rstrip("/")
    else:
        port = _free_port()
        server = subprocess.Popen(
            [
                str(ROOT / ".venv/bin/noc"),
                "llm",
                "serve",
                "--port",
                str(port),
                "--threads",
                str(args.threads),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        base = f"http://127.0.0.1:{port}/v1"
    try:
        for _ in range(600):
            try:
                if httpx.get(f"{base}/models", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        else:
            sys.exit(f"the LLM server at {base} did not answer")
        llm = LlmClient(base, args.model, max_tokens=args.max_tokens)
        drafter = Drafter(pack, topology, llm=llm, narrate_tokens=args.max_tokens)
        template_s: list[float] = []
        narrate_s: list[float] = []
        chat_s: list[float] = []
        narrated: collections.Counter[str] = collections.Counter()
        answered: collections.Counter[str] = collections.Counter()
        partial = 0
        shown: list[str] = []
        table: list[str] = []
        calls_made = 0
        for k, (inc, diagnosis) in enumerate(cases):
            findings = [f for f in result.findings if f.id in set(inc.finding_ids)]
            t = time.perf_counter()
            drafter.report(inc, diagnosis)
            template_s.append(time.perf_counter() - t)
            t = time.perf_counter()
            r = drafter.report(inc, diagnosis, narrate=True)
            narrate_s.append(time.perf_counter() - t)
            narrated[_reason(r.narration_withheld)] += 1
            if r.generated_by == "llm":
                shown.append(f"{inc.id} ({inc.title}), summary: {r.summary}")
            for j in range(PER_INCIDENT):
                q = QUESTIONS[(k * PER_INCIDENT + j) % len(QUESTIONS)]
                t = time.perf_counter()
                a = drafter.answer(inc, diagnosis, q, findings=findings)
                chat_s.append(time.perf_counter() - t)
                answered[_reason(a.note if a.generated_by == "template" else None)] += 1
                partial += bool(a.generated_by == "llm" and a.removed)
                calls_made += len(a.tool_calls)
                if a.generated_by == "llm":
                    shown.append(f"{inc.id} ({inc.title}), asked {q!r}: {a.text}")
                if len(table) < 10 and (j == 0 or k >= len(cases) - 5):
                    looked = "; ".join(
                        f"{c['name']}({', '.join(f'{v}' for v in c['arguments'].values())})"
                        for c in a.tool_calls
                    )
                    source = "model" if a.generated_by == "llm" else "fallback"
                    cell = " ".join(a.text.split()).replace("|", "/")
                    table.append(f"| {inc.id} | {q} | {looked or '-'} | {source} | {cell} |")
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=30)

    n, q = len(cases), len(cases) * PER_INCIDENT
    where = args.base_url or f"the built-in server (`noc llm serve --threads {args.threads}`)"
    out = preamble(f"Drafting with {args.model}, structured and citation-constrained")
    out += [
        f"- server: {where}",
        f"- data: `noc simulate --days {args.days:g} --seed {args.seed} --faults all` replayed "
        f"through the pipeline: {n} diagnosed incidents; model answers at most "
        f"{args.max_tokens} tokens, greedy, under a per-incident JSON Schema; chat: "
        f"{PER_INCIDENT} questions per incident, up to {drafter.max_tool_calls} look-ups each "
        f"({calls_made} made in all)",
        "- shown: the model's text passed the pack's grounding check (every number matches "
        "the evidence it cites, every cited id exists) and the vetting (cites evidence, names "
        "the diagnosed entity and no entity outside the incident, does not echo its prompt, "
        "does not loop); otherwise the template's text is shown and the reason recorded",
        "",
        "| path | texts | shown | p50 s | p95 s | ratio to the template report (p50) |",
        "|---|---|---|---|---|---|",
        f"| template report (baseline) | {n} | {n} (100 %) | {_pct(template_s, 50):.4f} | "
        f"{_pct(template_s, 95):.4f} | 1 |",
        f"| narrated report | {n} | {narrated['shown']} ({100 * narrated['shown'] / n:.0f} %) "
        f"| {_pct(narrate_s, 50):.1f} | {_pct(narrate_s, 95):.1f} | "
        f"{_pct(narrate_s, 50) / _pct(template_s, 50):,.0f} |",
        f"| chat answer | {q} | {answered['shown']} ({100 * answered['shown'] / q:.0f} %; "
        f"{partial} with sentences removed) | {_pct(chat_s, 50):.1f} | {_pct(chat_s, 95):.1f} | "
        f"{_pct(chat_s, 50) / _pct(template_s, 50):,.0f} |",
        "",
        "Why narrations were withheld:",
        "",
        *[f"- {k}: {v}" for k, v in narrated.most_common() if k != "shown"],
        "",
        "Why chat answers fell back to the diagnosis alone:",
        "",
        *[f"- {k}: {v}" for k, v in answered.most_common() if k != "shown"],
        "",
        "Ten chat answers and the look-ups the model made for them (for a person to judge):",
        "",
        "| incident | question | look-ups | source | answer |",
        "|---|---|---|---|---|",
        *table[:10],
        "",
        "The model's texts that were shown, as shown (for a person to judge: the checks vouch",
        "for the numbers and names, not for the sense):",
        "",
        *[f"- {' '.join(t.split())}" for t in shown],
        "",
    ]
    args.out.write_text("\n".join(out))
    print("\n".join(out))


if __name__ == "__main__":
    main()
