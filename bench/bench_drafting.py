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

``--record FILE`` makes the built-in server log every request it answers
(:mod:`noc_assistant.serving.traffic`): the product's own prompts, to train and judge drafters
on (``bench/bench_traffic.py``). ``--questions N`` asks N of the five questions per incident.

Usage: .venv/bin/python bench/bench_drafting.py [--days 1] [--seed 7] [--limit 0]
       [--questions 2] [--record FILE] [--base-url URL --model NAME] [--out FILE]
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
from _machine import preamble  # bench/ helper, found beside this script

from knowledge.pack import load_pack
from noc_assistant.integrations.llm import LlmClient
from noc_assistant.inventory import load_topology
from noc_assistant.simulate import ScenarioConfig, build_scenario, write_scenario
from noc_assistant.stream.replay import run_replay
from noc_assistant.triage.drafting import Drafter

if TYPE_CHECKING:
    from knowledge.pack import Pack
    from knowledge.topology import Topology
    from noc_assistant.models import Diagnosis, Incident
    from noc_assistant.stream.replay import ReplayResult

ROOT = Path(__file__).resolve().parent.parent
QUESTIONS = (
    "When did it start?",
    "Why do the rules think so?",
    "What else could it be?",
    "Which entities are involved?",
    "What should I check first?",
)


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
    "names a date in words",
    "cites a value its evidence lacks",
    "repeats an earlier sentence",
    "no detail held",
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


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    ap.add_argument("--days", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--limit", type=int, default=0, help="first N incidents only (0: all)")
    ap.add_argument("--max-tokens", type=int, default=160)
    ap.add_argument("--threads", type=int, default=2, help="the built-in server's threads")
    ap.add_argument("--base-url", default=os.environ.get("NOC_LLM_BASE_URL"))
    ap.add_argument("--model", default=os.environ.get("NOC_LLM_MODEL", "smollm2-135m-instruct"))
    ap.add_argument("--questions", type=int, default=2, help="questions asked per incident")
    ap.add_argument("--record", type=Path, help="the built-in server logs its traffic here")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "drafting_results.md")
    return ap.parse_args()


def simulate(
    args: argparse.Namespace, pack: Pack
) -> tuple[ReplayResult, Topology, list[tuple[Incident, Diagnosis]]]:
    """The simulated day replayed through the pipeline: its result, topology and the diagnosed
    incidents (the first ``--limit``)."""
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
    return result, topology, cases


def start_server(args: argparse.Namespace) -> tuple[subprocess.Popen[bytes] | None, str]:
    """The built-in server started on a free port (none with ``--base-url``), and its base URL."""
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
                *(["--record", str(args.record)] if args.record else []),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        base = f"http://127.0.0.1:{port}/v1"
    return server, base


def wait_for(base: str) -> None:
    for _ in range(600):
        try:
            if httpx.get(f"{base}/models", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    else:
        sys.exit(f"the LLM server at {base} did not answer")


@dataclass
class Tally:
    """The latencies, outcomes and samples of the texts drafted."""

    template_s: list[float] = field(default_factory=list)
    narrate_s: list[float] = field(default_factory=list)
    chat_s: list[float] = field(default_factory=list)
    narrated: collections.Counter[str] = field(default_factory=collections.Counter)
    answered: collections.Counter[str] = field(default_factory=collections.Counter)
    partial: int = 0
    shown: list[str] = field(default_factory=list)
    table: list[str] = field(default_factory=list)
    calls_made: int = 0
    max_tool_calls: int = 0
    per_incident: int = 2


def draft_case(
    drafter: Drafter,
    result: ReplayResult,
    tally: Tally,
    k: int,
    case: tuple[Incident, Diagnosis],
    n_cases: int,
) -> None:
    """The ``k``-th incident: the template report, the narrated one, and its chat answers."""
    inc, diagnosis = case
    findings = [f for f in result.findings if f.id in set(inc.finding_ids)]
    t = time.perf_counter()
    drafter.report(inc, diagnosis)
    tally.template_s.append(time.perf_counter() - t)
    t = time.perf_counter()
    r = drafter.report(inc, diagnosis, narrate=True)
    tally.narrate_s.append(time.perf_counter() - t)
    tally.narrated[_reason(r.narration_withheld)] += 1
    if r.generated_by == "llm":
        tally.shown.append(f"{inc.id} ({inc.title}), summary: {r.summary}")
    per = tally.per_incident
    for j in range(per):
        q = QUESTIONS[(k * per + j) % len(QUESTIONS)]
        t = time.perf_counter()
        a = drafter.answer(inc, diagnosis, q, findings=findings)
        tally.chat_s.append(time.perf_counter() - t)
        tally.answered[_reason(a.note if a.generated_by == "template" else None)] += 1
        tally.partial += bool(a.generated_by == "llm" and a.removed)
        tally.calls_made += len(a.tool_calls)
        if a.generated_by == "llm":
            tally.shown.append(f"{inc.id} ({inc.title}), asked {q!r}: {a.text}")
        if len(tally.table) < 10 and (j == 0 or k >= n_cases - 5):
            looked = "; ".join(
                f"{c['name']}({', '.join(f'{v}' for v in c['arguments'].values())})"
                for c in a.tool_calls
            )
            source = "model" if a.generated_by == "llm" else "fallback"
            cell = " ".join(a.text.split()).replace("|", "/")
            tally.table.append(f"| {inc.id} | {q} | {looked or '-'} | {source} | {cell} |")


def draft_all(
    args: argparse.Namespace,
    pack: Pack,
    topology: Topology,
    result: ReplayResult,
    cases: list[tuple[Incident, Diagnosis]],
) -> Tally:
    """Every case drafted against the server (started here, and stopped, unless ``--base-url``)."""
    server, base = start_server(args)
    try:
        wait_for(base)
        llm = LlmClient(base, args.model, max_tokens=args.max_tokens)
        drafter = Drafter(pack, topology, llm=llm, narrate_tokens=args.max_tokens)
        tally = Tally(max_tool_calls=drafter.max_tool_calls, per_incident=args.questions)
        for k, case in enumerate(cases):
            draft_case(drafter, result, tally, k, case, len(cases))
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=30)
    return tally


def report(args: argparse.Namespace, n: int, tally: Tally) -> list[str]:
    """bench/drafting_results.md's lines, for ``n`` incidents."""
    q = n * tally.per_incident
    template_s, narrate_s, chat_s = tally.template_s, tally.narrate_s, tally.chat_s
    narrated, answered = tally.narrated, tally.answered
    where = args.base_url or f"the built-in server (`noc llm serve --threads {args.threads}`)"
    out = preamble(f"Drafting with {args.model}, structured and citation-constrained")
    out += [
        f"- server: {where}",
        f"- data: `noc simulate --days {args.days:g} --seed {args.seed} --faults all` replayed "
        f"through the pipeline: {n} diagnosed incidents; model answers at most "
        f"{args.max_tokens} tokens, greedy, under a per-incident JSON Schema; chat: "
        f"{tally.per_incident} questions per incident, up to {tally.max_tool_calls} look-ups each "
        f"({tally.calls_made} made in all)",
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
        f"{tally.partial} with sentences removed) | {_pct(chat_s, 50):.1f} | "
        f"{_pct(chat_s, 95):.1f} | {_pct(chat_s, 50) / _pct(template_s, 50):,.0f} |",
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
        *tally.table[:10],
        "",
        "The model's texts that were shown, as shown (for a person to judge: the checks vouch",
        "for the numbers and names, not for the sense):",
        "",
        *[f"- {' '.join(t.split())}" for t in tally.shown],
        "",
    ]
    return out


def main() -> None:
    args = parse_args()
    pack = load_pack()
    result, topology, cases = simulate(args, pack)
    tally = draft_all(args, pack, topology, result, cases)
    out = report(args, len(cases), tally)
    args.out.write_text("\n".join(out))
    print("\n".join(out))


if __name__ == "__main__":
    main()
