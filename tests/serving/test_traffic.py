"""The server's traffic log: what it records, and drafter training data made from it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import openai
import pytest
import torch

from noc_assistant.errors import BadInputError
from noc_assistant.serving.engine import Engine
from noc_assistant.serving.loading import TargetModel
from noc_assistant.serving.server import ServerThread, create_app
from noc_assistant.serving.speculative import greedy_reference
from noc_assistant.serving.traffic import TrafficLog, read_traffic
from noc_assistant.serving.train import Sample, extract_features, prepare_data, traffic_samples

SCHEMA = {
    "type": "object",
    "properties": {"cause": {"type": "string", "maxLength": 12}},
    "required": ["cause"],
}


def _serve_and_ask(tiny: TargetModel, log: Path) -> tuple[Engine, list[dict[str, str]], list[str]]:
    """Four requests to a server logging to ``log``: the engine, the chat messages and the
    two JSON choices' texts."""
    engine = Engine(tiny, name="tiny", context=400)
    srv = ServerThread(create_app(engine, max_tokens_default=16, traffic=TrafficLog(log))).start()
    client = openai.OpenAI(
        base_url=f"http://127.0.0.1:{srv.port}/v1", api_key="local", max_retries=0
    )
    msgs: list[Any] = [{"role": "user", "content": "Why did upf-3 drop packets?"}]
    fmt: Any = {
        "type": "json_schema",
        "json_schema": {"name": "c", "schema": SCHEMA, "strict": True},
    }
    try:
        client.chat.completions.create(model="tiny", messages=msgs, max_tokens=12)
        r = client.chat.completions.create(
            model="tiny",
            messages=msgs,
            max_tokens=20,
            n=2,
            temperature=0.7,
            seed=3,
            response_format=fmt,
        )
        client.completions.create(model="tiny", prompt="The AMF", max_tokens=5)
        for _ in client.chat.completions.create(
            model="tiny",
            messages=msgs,
            max_tokens=5,
            stream=True,
        ):
            pass
    finally:
        srv.stop()
    return engine, msgs, [c.message.content or "" for c in r.choices]


def test_server_records_prompts_and_answers(tiny: TargetModel, tmp_path: Path) -> None:
    log = tmp_path / "traffic.jsonl"
    engine, msgs, texts = _serve_and_ask(tiny, log)
    recs = read_traffic(log)
    assert log.stat().st_mode & 0o777 == 0o600
    # streamed answers are not logged; the three others are, in order
    assert [r.endpoint for r in recs] == ["chat", "chat", "completions"]
    plain, schema, comp = recs
    prompt = engine.encode_chat(msgs)
    assert plain.prompt == prompt
    assert plain.completions == [greedy_reference(tiny, prompt, 12)]
    assert plain.body["messages"] == msgs and plain.body["max_tokens"] == 12
    # both choices, each the grammar-constrained text the client got
    assert schema.body["response_format"]["json_schema"]["schema"] == SCHEMA
    assert [tiny.tokenizer.decode(ids) for ids in schema.completions] == texts
    assert all(t.startswith('{"cause"') for t in texts)
    assert comp.prompt == tiny.tokenizer.encode("The AMF") and len(comp.completions[0]) == 5


def test_training_data_from_traffic(tiny: TargetModel, tmp_path: Path) -> None:
    log = tmp_path / "traffic.jsonl"
    _serve_and_ask(tiny, log)
    samples = traffic_samples([log])
    recs = read_traffic(log)
    assert len(samples) == sum(len(r.completions) for r in recs) == 4
    assert samples[0].tokens == [*recs[0].prompt, *recs[0].completions[0]]
    assert samples[0].prompt_len == len(recs[0].prompt)
    vocab, data = prepare_data(tiny, tmp_path / "work", n_prompts=0, vocab_size=50, traffic=[log])
    assert [len(d.tokens) for d in data] == [len(s.tokens) for s in samples]
    assert len(vocab) <= 50 + len(tiny.eos_token_ids)
    # a second call reads the cached corpus and features
    again = prepare_data(tiny, tmp_path / "work", n_prompts=0, vocab_size=50, traffic=[log])
    assert again[0] == vocab


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("{not json", "not JSON"),
        ('{"endpoint": "embed", "body": {}, "prompt": [1], "completions": [[2]]}', "endpoint"),
        ('{"endpoint": "chat", "body": {}, "prompt": [1, -2], "completions": [[2]]}', "prompt"),
        ('{"endpoint": "chat", "body": {}, "prompt": [1], "completions": []}', "completions"),
    ],
)
def test_bad_log_line_names_file_and_line(tmp_path: Path, line: str, why: str) -> None:
    p = tmp_path / "t.jsonl"
    good = '{"endpoint": "chat", "body": {}, "prompt": [1], "completions": [[2]]}'
    p.write_text(good + "\n\n" + line + "\n")
    with pytest.raises(BadInputError, match=why) as exc:
        read_traffic(p)
    assert exc.value.line == 3 and exc.value.source == str(p)


def test_features_reuse_the_shared_prefix_exactly(tiny: TargetModel) -> None:
    base = tiny.tokenizer.encode("The SMF lost its N4 association to upf-3 at 02:10.")
    samples = [
        Sample(tokens=[*base, 5, 6, 7], prompt_len=len(base)),
        Sample(tokens=[*base, 5, 9, 9, 9], prompt_len=len(base) + 1),  # shares base + [5]
        Sample(tokens=[*base[:4], 8, 8], prompt_len=4),
        Sample(tokens=[*base[:4], 8, 8], prompt_len=4),  # the same again: one row re-run
    ]
    vocab = list(range(0, 256, 3))
    together = extract_features(tiny, samples, vocab)
    for got, s in zip(together, samples, strict=True):
        alone = extract_features(tiny, [s], vocab)[0]
        assert got.tokens.tolist() == s.tokens and got.prompt_len == s.prompt_len
        assert torch.allclose(got.features.float(), alone.features.float(), atol=2e-3)
        assert torch.equal(got.q_idx[1:, :3], alone.q_idx[1:, :3])
        assert torch.allclose(got.q_val.float(), alone.q_val.float(), atol=1e-3)
