"""Concurrent requests on one engine: forwards shared, every output as if served alone."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import openai
import pytest

from noc_assistant.serving.engine import DEFAULT_MAX_RUNNING, Engine, Request
from noc_assistant.serving.grammar import ConstraintFactory, json_schema_grammar
from noc_assistant.serving.loading import ByteTokenizer, TargetModel
from noc_assistant.serving.native import NativeTargetModel, load_native_gguf
from noc_assistant.serving.power import RaplMeter
from noc_assistant.serving.server import ServerThread, create_app
from noc_assistant.serving.speculative import (
    GenerationStats,
    constrained_greedy_reference,
    greedy_reference,
)
from tests.serving.test_native import write_tiny_gguf
from tests.serving.test_power import _tree

QUESTIONS = [
    "amf-2 registration success rate fell to 71%",
    "GTP-U path failure between upf-3 and gnb-17",
    "N4 session setup latency 41 ms on smf-1",
    "Summarize the 5G core alarms of the last hour",
]


@pytest.fixture(scope="module")
def native(tmp_path_factory: pytest.TempPathFactory) -> NativeTargetModel:
    path = write_tiny_gguf(tmp_path_factory.mktemp("batch") / "tiny.gguf", seed=3)
    return load_native_gguf(path, tokenizer=ByteTokenizer(), n_taps=2)


def _concurrently(engine: Engine, reqs: list[Request]) -> list[list[int]]:
    """Generate every request in its own thread, all started together."""
    out: list[list[int]] = [[] for _ in reqs]
    errors: list[BaseException] = []
    go = threading.Barrier(len(reqs))

    def run(i: int) -> None:
        try:
            go.wait()
            out[i] = engine.generate(reqs[i])[0]
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(reqs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    return out


def _prompts(engine: Engine) -> list[list[int]]:
    return [engine.encode_chat([{"role": "user", "content": q}]) for q in QUESTIONS]


def test_native_requests_share_forwards_and_match_greedy(native: NativeTargetModel) -> None:
    engine = Engine(native, name="tiny", context=256)
    assert engine.max_running == DEFAULT_MAX_RUNNING
    prompts = _prompts(engine)
    want = [greedy_reference(native, p, 40) for p in prompts]
    got = _concurrently(engine, [Request(p, 40) for p in prompts])
    assert got == want
    st = engine.batcher.stats
    assert st.largest > 1, st  # decoding steps of several requests shared a call
    assert st.calls < st.forwards
    assert engine.batcher.active == 0


def test_batched_constrained_and_sampled_requests(native: NativeTargetModel) -> None:
    """Grammar and sampling run per request; their forwards are shared all the same."""
    engine = Engine(native, name="tiny", context=256)
    schema = {
        "type": "object",
        "properties": {"nf": {"type": "string", "maxLength": 8}, "ok": {"type": "boolean"}},
        "required": ["nf", "ok"],
    }
    make = ConstraintFactory(native, json_schema_grammar(schema, param="response_format"))
    prompts = _prompts(engine)
    reqs = [Request(prompts[0], 30, constraint=make()), Request(prompts[1], 30)]
    reqs += [Request(p, 30, temperature=0.8, seed=7) for p in prompts[2:]]
    got = _concurrently(engine, reqs)
    alone = Engine(native, name="tiny", context=256, max_running=1)
    assert got[0] == constrained_greedy_reference(native, prompts[0], make, 30)
    assert got[1] == greedy_reference(native, prompts[1], 30)
    for r, g in zip(reqs[2:], got[2:], strict=True):
        assert g == alone.generate(Request(r.prompt, 30, temperature=0.8, seed=7))[0]


def test_a_target_without_shared_forwards_still_serves_concurrent_requests(
    tiny: TargetModel,
) -> None:
    engine = Engine(tiny, name="tiny", context=256)
    assert engine.max_running == 1  # the server runs one at a time by default
    prompts = _prompts(engine)[:3]
    got = _concurrently(engine, [Request(p, 16) for p in prompts])
    assert got == [greedy_reference(tiny, p, 16) for p in prompts]


def test_overlapping_requests_have_no_measured_energy_of_their_own(
    native: NativeTargetModel, tmp_path: Path
) -> None:
    _tree(tmp_path, 1_000_000)  # a powercap tree as test_power writes it
    engine = Engine(native, name="tiny", context=256, meter=RaplMeter.open(tmp_path))
    prompts = _prompts(engine)
    _, alone = engine.generate(Request(prompts[0], 8))
    assert alone.measured_j is not None
    # the first request is held open after its first tokens while the second runs whole, so
    # they overlap whatever the machine's speed (two threads racing need not)
    first = GenerationStats()
    held = engine.stream(Request(prompts[0], 24), first)
    assert next(held)
    _, second = engine.generate(Request(prompts[1], 24))
    assert list(held)
    assert [first.measured_j, second.measured_j] == [None, None]


def test_server_runs_four_chats_at_once(native: NativeTargetModel) -> None:
    """Over HTTP: four chat requests run together (one queue slot each) and still answer
    exactly what each would alone."""
    engine = Engine(native, name="tiny", context=256)
    srv = ServerThread(create_app(engine, max_tokens_default=32)).start()
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{srv.port}/v1", api_key="x")
    want = [native.tokenizer.decode(greedy_reference(native, p, 32)) for p in _prompts(engine)]
    got: list[str] = ["" for _ in QUESTIONS]

    def ask(i: int) -> None:
        r = client.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": QUESTIONS[i]}], max_tokens=32
        )
        got[i] = r.choices[0].message.content or ""

    try:
        threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(QUESTIONS))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
    finally:
        srv.stop()
    assert got == want
    assert engine.batcher.stats.largest > 1


def test_interleaved_conversations_each_reuse_their_own_cache(native: NativeTargetModel) -> None:
    """Two users' chats take turns: each next turn forwards only its new message (the single
    cache of the last request would have been the other user's), with the same output as a
    fresh prefill; requests running at once take different caches."""
    warm = Engine(native, name="tiny", context=256)
    cold = Engine(native, name="tiny", context=256, prefix_cache=False)
    chat = native.tokenizer.chat_prompt
    first = {u: [{"role": "user", "content": QUESTIONS[i]}] for i, u in enumerate("AB")}
    turn1 = {u: chat(m) for u, m in first.items()}
    answers = {u: warm.generate(Request(p, 24))[0] for u, p in turn1.items()}
    for u in "AB":
        msgs = [
            *first[u],
            {"role": "assistant", "content": native.tokenizer.decode(answers[u])},
            {"role": "user", "content": "and the next check?"},
        ]
        p2 = chat(msgs)
        out, st = warm.generate(Request(p2, 24))
        assert st.cached_tokens >= len(turn1[u]) - 1
        assert out == cold.generate(Request(p2, 24))[0]
    both = _concurrently(warm, [Request(turn1["A"], 16), Request(turn1["A"], 16)])
    assert both[0] == both[1] == cold.generate(Request(turn1["A"], 16))[0]
    assert warm.prefixes is not None and len(warm.prefixes) <= warm.prefixes.capacity


def test_a_shared_prompt_prefix_is_copied_not_taken(native: NativeTargetModel) -> None:
    """Another user's request under the same long system prompt gets a copy of that part of
    the cache: no forward for it, same output, and the first user's cache stays whole."""
    warm = Engine(native, name="tiny", context=256)
    cold = Engine(native, name="tiny", context=256, prefix_cache=False)
    system = {"role": "system", "content": "You are the NOC assistant. Cite evidence ids."}
    chat = native.tokenizer.chat_prompt
    pa = chat([system, {"role": "user", "content": QUESTIONS[0]}])
    pb = chat([system, {"role": "user", "content": QUESTIONS[1]}])
    warm.generate(Request(pa, 12))
    out, st = warm.generate(Request(pb, 12))
    shared = next(i for i, (a, b) in enumerate(zip(pa, pb, strict=False)) if a != b)
    assert st.cached_tokens == shared > 20
    assert out == cold.generate(Request(pb, 12))[0]
    assert warm.prefixes is not None
    assert sorted(len(e.tokens) for e in warm.prefixes.entries()) == sorted(
        [len(pa) + 11, len(pb) + 11]
    )


def test_n_choices_run_at_once_and_each_is_a_request_of_its_own(native: NativeTargetModel) -> None:
    """OpenAI ``n``: choices share decoding steps; greedy choices are the greedy answer, sampled
    choice i is the answer of one request with seed + i; streamed, chunks carry their index."""
    engine = Engine(native, name="tiny", context=256)
    srv = ServerThread(create_app(engine, max_tokens_default=16)).start()
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{srv.port}/v1", api_key="x")
    msgs: Any = [{"role": "user", "content": QUESTIONS[2]}]
    try:
        greedy = client.chat.completions.create(model="tiny", messages=msgs, n=3, max_tokens=16)
        want = native.tokenizer.decode(greedy_reference(native, _prompts(engine)[2], 16))
        assert [c.message.content for c in greedy.choices] == [want] * 3
        assert [c.index for c in greedy.choices] == [0, 1, 2]
        assert greedy.usage is not None and greedy.usage.completion_tokens == 48
        sampled = client.chat.completions.create(
            model="tiny", messages=msgs, n=2, max_tokens=16, temperature=1.0, seed=11
        )
        one_by_one = [
            client.chat.completions.create(
                model="tiny", messages=msgs, max_tokens=16, temperature=1.0, seed=s
            )
            .choices[0]
            .message.content
            for s in (11, 12)
        ]
        assert [c.message.content for c in sampled.choices] == one_by_one
        assert one_by_one[0] != one_by_one[1]
        texts = ["", ""]
        reasons: list[str | None] = [None, None]
        for ch in client.chat.completions.create(
            model="tiny", messages=msgs, n=2, max_tokens=16, temperature=1.0, seed=11, stream=True
        ):
            for c in ch.choices:
                texts[c.index] += c.delta.content or ""
                reasons[c.index] = c.finish_reason or reasons[c.index]
        assert texts == one_by_one and None not in reasons
        comp = client.completions.create(model="tiny", prompt="upf-3 alarm", n=2, max_tokens=8)
        assert len(comp.choices) == 2 and comp.choices[0].text == comp.choices[1].text
        with pytest.raises(openai.BadRequestError):
            client.chat.completions.create(model="tiny", messages=msgs, n=9)
    finally:
        srv.stop()
    assert engine.batcher.stats.largest > 1
