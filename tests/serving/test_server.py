"""The OpenAI-compatible server, driven over loopback HTTP with the official openai client."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator

import httpx
import openai
import pytest

from noc_assistant.serving.drafters import BlockDrafterModel
from noc_assistant.serving.engine import Engine
from noc_assistant.serving.models import TargetModel
from noc_assistant.serving.server import ServerThread, create_app
from noc_assistant.serving.speculative import greedy_reference

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
