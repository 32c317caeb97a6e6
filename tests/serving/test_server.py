"""The OpenAI-compatible server, driven over loopback HTTP with the official openai client."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from noc_assistant.serving.draft_heads import BlockDrafterModel
from noc_assistant.serving.engine import Engine
from noc_assistant.serving.grammar import ConstraintFactory, json_schema_grammar
from noc_assistant.serving.loading import TargetModel
from noc_assistant.serving.server import ServerThread, create_app
from noc_assistant.serving.speculative import constrained_greedy_reference, greedy_reference

CONTEXT = 400


@pytest.fixture(scope="module")
def server(
    tiny: TargetModel, tiny_trained: dict[int, BlockDrafterModel]
) -> Iterator[tuple[str, Engine]]:
    engine = Engine(tiny, tiny_trained[4], name="tiny", context=CONTEXT)
    srv = ServerThread(create_app(engine, max_tokens_default=16)).start()
    yield f"http://127.0.0.1:{srv.port}", engine
    srv.stop()


@pytest.fixture()
def client(server: tuple[str, Engine]) -> openai.OpenAI:
    return openai.OpenAI(base_url=server[0] + "/v1", api_key="local", max_retries=0)


def _expected(engine: Engine, content: str, n: int) -> tuple[list[int], list[int]]:
    prompt = engine.encode_chat([{"role": "user", "content": content}])
    return prompt, greedy_reference(engine.target, prompt, n)


def test_models_and_health(client: openai.OpenAI, server: tuple[str, Engine]) -> None:
    ids = [m.id for m in client.models.list()]
    assert ids == ["tiny"]
    r = httpx.get(server[0] + "/health")
    assert r.status_code == 200 and r.json()["status"] == "ok"


def test_chat_matches_greedy_and_usage(client: openai.OpenAI, server: tuple[str, Engine]) -> None:
    engine = server[1]
    prompt, ref = _expected(engine, "Summarize the alarm on upf-3.", 24)
    r = client.chat.completions.create(
        model="tiny",
        messages=[{"role": "user", "content": "Summarize the alarm on upf-3."}],
        max_tokens=24,
        temperature=0,
    )
    assert r.choices[0].message.content == engine.target.tokenizer.decode(ref)
    assert r.choices[0].finish_reason == "length"
    assert r.usage is not None
    assert r.usage.prompt_tokens == len(prompt)
    assert r.usage.completion_tokens == 24
    assert r.usage.total_tokens == len(prompt) + 24
    extra = r.model_extra or {}
    assert extra["noc"]["spec"]["rounds"] >= 1
    assert extra["noc"]["energy_j"]["prefill"] > 0


def test_chat_stream_equals_non_stream(client: openai.OpenAI) -> None:
    msgs = [{"role": "user", "content": "Draft an e-mail to the partner NOC."}]
    full = client.chat.completions.create(model="tiny", messages=msgs, max_tokens=30)  # type: ignore[arg-type]
    parts, reasons, usage = [], [], None
    for ch in client.chat.completions.create(
        model="tiny",
        messages=msgs,
        max_tokens=30,
        stream=True,  # type: ignore[arg-type]
        stream_options={"include_usage": True},
    ):
        if ch.usage is not None:
            usage = ch.usage
        for c in ch.choices:
            if c.delta.content:
                parts.append(c.delta.content)
            if c.finish_reason:
                reasons.append(c.finish_reason)
    assert "".join(parts) == full.choices[0].message.content
    assert reasons == ["length"]
    assert usage is not None and usage.completion_tokens == 30


def test_completions_and_stream(client: openai.OpenAI, server: tuple[str, Engine]) -> None:
    engine = server[1]
    text = "PFCP heartbeat failures on smf-1"
    ref = greedy_reference(engine.target, engine.target.tokenizer.encode(text), 20)
    r = client.completions.create(model="tiny", prompt=text, max_tokens=20)
    assert r.choices[0].text == engine.target.tokenizer.decode(ref)
    streamed = "".join(
        c.choices[0].text
        for c in client.completions.create(model="tiny", prompt=text, max_tokens=20, stream=True)
        if c.choices
    )
    assert streamed == r.choices[0].text


def test_stream_holds_back_a_stop_string_split_over_tokens(
    client: openai.OpenAI, server: tuple[str, Engine]
) -> None:
    engine = server[1]
    tok = engine.target.tokenizer
    text = "GTP-U drops on upf-2 since 14:05"
    ref = greedy_reference(engine.target, tok.encode(text), 20)
    full = tok.decode(ref)
    stop = ""
    for k in range(2, len(ref) - 3):
        head, tail = tok.decode(ref[:k]), tok.decode(ref[: k + 3])
        piece = tail[len(head) :]
        if tail.startswith(head) and len(piece.strip()) >= 3 and full.find(piece) == len(head):
            stop = piece  # spans three tokens, first seen at the end of the k-th
            break
    assert stop, f"no multi-token stop candidate in {full!r}"
    want = full[: full.find(stop)]
    r = client.completions.create(model="tiny", prompt=text, max_tokens=20, stop=[stop])
    assert r.choices[0].text == want and r.choices[0].finish_reason == "stop"
    chunks = [
        c.choices[0].text
        for c in client.completions.create(
            model="tiny", prompt=text, max_tokens=20, stop=[stop], stream=True
        )
        if c.choices
    ]
    assert "".join(chunks) == want  # no piece of the stop string ever reached the client


def test_concurrent_requests_are_not_corrupted(
    client: openai.OpenAI, server: tuple[str, Engine]
) -> None:
    engine = server[1]
    contents = [f"Check amf-{i} registration drop" for i in range(4)]
    want = {c: engine.target.tokenizer.decode(_expected(engine, c, 20)[1]) for c in contents}
    got: dict[str, str] = {}
    errors: list[BaseException] = []

    def ask(c: str, stream: bool) -> None:
        try:
            if stream:
                parts = []
                for ch in client.chat.completions.create(
                    model="tiny",
                    messages=[{"role": "user", "content": c}],
                    max_tokens=20,
                    stream=True,
                ):
                    parts += [x.delta.content or "" for x in ch.choices]
                got[c] = "".join(parts)
            else:
                r = client.chat.completions.create(
                    model="tiny", messages=[{"role": "user", "content": c}], max_tokens=20
                )
                got[c] = r.choices[0].message.content or ""
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=ask, args=(c, i % 2 == 0)) for i, c in enumerate(contents)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors
    assert got == want


def test_unknown_model_is_404(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as exc:
        client.chat.completions.create(model="gpt-9", messages=[{"role": "user", "content": "x"}])
    body = exc.value.body
    assert isinstance(body, dict)
    assert body["code"] == "model_not_found" and body["param"] == "model"


def test_prompt_longer_than_context_is_400(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as exc:
        client.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "x" * (CONTEXT + 10)}]
        )
    body = exc.value.body
    assert isinstance(body, dict) and body["code"] == "context_length_exceeded"


def test_malformed_json_and_wrong_types(server: tuple[str, Engine]) -> None:
    url = server[0] + "/v1/chat/completions"
    r = httpx.post(url, content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 400
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    r = httpx.post(url, json={"model": "tiny", "messages": "hello"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "messages"
    r = httpx.post(
        url,
        json={
            "model": "tiny",
            "messages": [{"role": "user", "content": "x"}],
            "max_tokens": "many",
        },
    )
    assert r.status_code == 400 and r.json()["error"]["param"] == "max_tokens"
    r = httpx.post(server[0] + "/v1/completions", json={"model": "tiny"})
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"


def test_metrics_exposes_vllm_names(client: openai.OpenAI, server: tuple[str, Engine]) -> None:
    before = httpx.get(server[0] + "/metrics").text
    client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "metrics check"}], max_tokens=12
    )
    text = httpx.get(server[0] + "/metrics").text

    def value(body: str, name: str) -> float:
        m = re.search(rf'^{re.escape(name)}\{{model_name="tiny"\}} (\S+)$', body, re.M)
        return float(m.group(1)) if m else 0.0

    assert (
        value(text, "vllm:generation_tokens_total") - value(before, "vllm:generation_tokens_total")
        == 12
    )
    for name in (
        "vllm:num_requests_running",
        "vllm:spec_decode_num_drafts_total",
        "vllm:spec_decode_num_draft_tokens_total",
        "vllm:spec_decode_num_accepted_tokens_total",
        "vllm:time_to_first_token_seconds_bucket",
        "noc_spec_verify_rounds_total",
    ):
        assert name in text, name
    assert (
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name="tiny",position="0"}' in text
    )
    assert 'noc_round_stage_seconds_total{model_name="tiny",stage="verify"}' in text
    assert 'noc_energy_joules_total{model_name="tiny",part="kv_read"}' in text


# ------------------------------------------------------------- structured output and tools

ALARM_SCHEMA = {
    "type": "object",
    "properties": {
        "severity": {"enum": ["critical", "major", "minor"]},
        "node": {"type": "string", "pattern": "^(amf|smf|upf)-[0-9]$"},
        "codes": {
            "type": "array",
            "maxItems": 3,
            "items": {"type": "integer", "minimum": 0, "maximum": 99},
        },
    },
    "required": ["severity", "node", "codes"],
    "additionalProperties": False,
}
TOOLS: Any = [
    {
        "type": "function",
        "function": {
            "name": "get_alarms",
            "description": "List the active alarms of a node",
            "parameters": {
                "type": "object",
                "properties": {
                    "node": {"type": "string", "pattern": "^(amf|smf|upf)-[0-9]$"},
                    "limit": {"type": "integer", "minimum": 1, "maximum": 9},
                },
                "required": ["node", "limit"],
                "additionalProperties": False,
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "ping",
            "description": "Reachability check",
            "parameters": {
                "type": "object",
                "properties": {"host": {"enum": ["amf-1", "upf-2"]}},
                "required": ["host"],
                "additionalProperties": False,
            },
        },
    },
]
ASK: Any = [{"role": "user", "content": "Which alarms are active on amf-2?"}]


def _alarm_ok(obj: Any) -> None:
    assert set(obj) == {"severity", "node", "codes"}
    assert obj["severity"] in ("critical", "major", "minor")
    assert re.fullmatch(r"(amf|smf|upf)-[0-9]", obj["node"])
    assert len(obj["codes"]) <= 3 and all(0 <= c <= 99 for c in obj["codes"])


def _fn(call: Any) -> Any:
    """A tool call's ``function`` (the client types it as a union with custom tool calls)."""
    return call.function


def _args_ok(name: str, arguments: str) -> None:
    args = json.loads(arguments)
    if name == "get_alarms":
        assert set(args) == {"node", "limit"} and 1 <= args["limit"] <= 9
        assert re.fullmatch(r"(amf|smf|upf)-[0-9]", args["node"])
    else:
        assert name == "ping" and args["host"] in ("amf-1", "upf-2")


@pytest.fixture(scope="module")
def tool_client(
    tiny: TargetModel, tiny_trained: dict[int, BlockDrafterModel]
) -> Iterator[openai.OpenAI]:
    """The byte-level prompt with the tool list is ~900 tokens: a longer context."""
    engine = Engine(tiny, tiny_trained[4], name="tiny", context=2048)
    srv = ServerThread(create_app(engine, max_tokens_default=160)).start()
    yield openai.OpenAI(base_url=f"http://127.0.0.1:{srv.port}/v1", api_key="local", max_retries=0)
    srv.stop()


def test_response_format_json_schema_is_lossless(
    client: openai.OpenAI, server: tuple[str, Engine]
) -> None:
    engine = server[1]
    rf: Any = {
        "type": "json_schema",
        "json_schema": {"name": "alarm", "schema": ALARM_SCHEMA, "strict": True},
    }
    msgs: Any = [{"role": "user", "content": "Classify the alarm on amf-2 as JSON."}]
    r = client.chat.completions.create(
        model="tiny", messages=msgs, max_tokens=120, response_format=rf
    )
    text = r.choices[0].message.content or ""
    _alarm_ok(json.loads(text))
    assert r.choices[0].finish_reason == "stop"
    noc = (r.model_extra or {})["noc"]
    assert noc["constrained"] is True and noc["forced_tokens"] > 0
    prompt = engine.encode_chat(msgs)
    grammar = json_schema_grammar(ALARM_SCHEMA, param="response_format")
    ref = constrained_greedy_reference(
        engine.target, prompt, ConstraintFactory(engine.target, grammar), 120
    )
    assert text == engine.target.tokenizer.decode(ref)
    parts: list[str] = []
    reasons: list[str] = []
    for ch in client.chat.completions.create(
        model="tiny", messages=msgs, max_tokens=120, response_format=rf, stream=True
    ):
        for c in ch.choices:
            parts.append(c.delta.content or "")
            if c.finish_reason:
                reasons.append(c.finish_reason)
    assert "".join(parts) == text and reasons == ["stop"]
    plain = client.chat.completions.create(model="tiny", messages=msgs, max_tokens=8)
    assert (plain.model_extra or {})["noc"]["constrained"] is False


def test_response_format_json_object_and_completions(client: openai.OpenAI) -> None:
    r = client.chat.completions.create(
        model="tiny",
        messages=[{"role": "user", "content": [{"type": "text", "text": "State as JSON."}]}],
        max_tokens=200,
        response_format={"type": "json_object"},
    )
    if r.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(r.choices[0].message.content or ""), dict)
    else:  # a random model may nest deeper than max_tokens: still a JSON object's prefix
        assert (r.choices[0].message.content or "").startswith("{")
    c = client.completions.create(
        model="tiny",
        prompt="Alarm severity:",
        max_tokens=20,
        extra_body={
            "response_format": {
                "type": "json_schema",
                "json_schema": {"schema": {"enum": ["critical", "major", "minor"]}},
            }
        },
    )
    assert json.loads(c.choices[0].text) in ("critical", "major", "minor")


def test_tool_choice_required_returns_an_openai_tool_call(tool_client: openai.OpenAI) -> None:
    r = tool_client.chat.completions.create(
        model="tiny",
        messages=ASK,
        tools=TOOLS,
        tool_choice="required",
    )
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    calls = choice.message.tool_calls or []
    assert len(calls) == 1 and calls[0].type == "function"
    assert calls[0].id.startswith("call_")
    fn = _fn(calls[0])
    _args_ok(fn.name, fn.arguments)
    assert (r.model_extra or {})["noc"]["constrained"] is True

    # the follow-up turn: the assistant's call and the tool's result go back in
    follow: Any = [
        *ASK,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": calls[0].id,
                    "type": "function",
                    "function": {"name": fn.name, "arguments": fn.arguments},
                }
            ],
        },
        {"role": "tool", "tool_call_id": calls[0].id, "content": "2 alarms: GTP-U path down"},
    ]
    r2 = tool_client.chat.completions.create(
        model="tiny",
        messages=follow,
        tools=TOOLS,
        max_tokens=40,
    )
    m2 = r2.choices[0].message
    if m2.tool_calls:
        assert r2.choices[0].finish_reason == "tool_calls"
        f2 = _fn(m2.tool_calls[0])
        _args_ok(f2.name, f2.arguments)
    else:
        assert isinstance(m2.content, str) and not m2.content.startswith("<")
        assert r2.choices[0].finish_reason in ("stop", "length")


def test_named_tool_choice_and_streaming(tool_client: openai.OpenAI) -> None:
    named: Any = {"type": "function", "function": {"name": "ping"}}
    r = tool_client.chat.completions.create(
        model="tiny",
        messages=ASK,
        tools=TOOLS,
        tool_choice=named,
    )
    calls = r.choices[0].message.tool_calls or []
    assert len(calls) == 1 and _fn(calls[0]).name == "ping"
    _args_ok("ping", _fn(calls[0]).arguments)
    content: list[str] = []
    deltas: list[Any] = []
    reasons: list[str] = []
    for ch in tool_client.chat.completions.create(
        model="tiny",
        messages=ASK,
        tools=TOOLS,
        tool_choice=named,
        stream=True,
        parallel_tool_calls=False,
    ):
        for c in ch.choices:
            content.append(c.delta.content or "")
            deltas += c.delta.tool_calls or []
            if c.finish_reason:
                reasons.append(c.finish_reason)
    assert "".join(content) == "" and reasons == ["tool_calls"]
    assert len(deltas) == 1 and deltas[0].index == 0 and deltas[0].function is not None
    assert deltas[0].function.name == "ping"
    assert deltas[0].function.arguments == _fn(calls[0]).arguments


def test_tool_choice_none_and_auto_give_content_or_a_call(tool_client: openai.OpenAI) -> None:
    r = tool_client.chat.completions.create(
        model="tiny",
        messages=ASK,
        tools=TOOLS,
        tool_choice="none",
        max_tokens=10,
    )
    assert r.choices[0].message.tool_calls is None
    assert (r.model_extra or {})["noc"]["constrained"] is False
    r = tool_client.chat.completions.create(
        model="tiny",
        messages=ASK,
        tools=TOOLS,
        max_tokens=120,
    )
    m = r.choices[0].message
    if m.tool_calls:
        _args_ok(_fn(m.tool_calls[0]).name, _fn(m.tool_calls[0]).arguments)
    else:
        assert m.content is not None and not m.content.startswith("<")
    parts: list[str] = []
    calls: list[Any] = []
    reasons: list[str] = []
    for ch in tool_client.chat.completions.create(
        model="tiny",
        messages=ASK,
        tools=TOOLS,
        max_tokens=120,
        stream=True,
    ):
        for c in ch.choices:
            parts.append(c.delta.content or "")
            calls += c.delta.tool_calls or []
            if c.finish_reason:
                reasons.append(c.finish_reason)
    assert reasons == [r.choices[0].finish_reason]
    if m.tool_calls:
        assert calls and calls[0].function.name == _fn(m.tool_calls[0]).name
    else:
        assert "".join(parts) == m.content and not calls


def test_bad_schemas_and_tool_choice_are_400(tool_client: openai.OpenAI) -> None:
    url = str(tool_client.base_url).rstrip("/") + "/chat/completions"
    base: dict[str, Any] = {"model": "tiny", "messages": [{"role": "user", "content": "x"}]}
    rf = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "strin"}}}
    r = httpx.post(url, json={**base, "response_format": rf})
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["param"] == "response_format" and err["type"] == "invalid_request_error"
    bad_tool = {
        "type": "function",
        "function": {"name": "f", "parameters": {"properties": {"a": {"pattern": "(("}}}},
    }
    r = httpx.post(url, json={**base, "tools": [bad_tool]})
    assert r.status_code == 400 and r.json()["error"]["param"] == "tools"
    r = httpx.post(
        url,
        json={
            **base,
            "tools": TOOLS,
            "tool_choice": {"type": "function", "function": {"name": "x"}},
        },
    )
    assert r.status_code == 400 and r.json()["error"]["param"] == "tool_choice"
    r = httpx.post(url, json={**base, "response_format": {"type": "xml"}})
    assert r.status_code == 400 and r.json()["error"]["param"].startswith("response_format")
