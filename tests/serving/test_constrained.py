"""Grammar-constrained decoding (llguidance): masks, lossless composition with speculative
decoding, and tool-call grammars."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import torch

from noc_assistant.serving.cache import KVCache
from noc_assistant.serving.draft_heads import BlockDrafterModel, NeuralDrafter, OracleDrafter
from noc_assistant.serving.errors import RequestError
from noc_assistant.serving.grammar import (
    Constraint,
    ConstraintFactory,
    ToolSpec,
    json_schema_grammar,
    ll_tokenizer,
    parse_tool_call,
    response_format_grammar,
    tool_call_grammar,
)
from noc_assistant.serving.loading import TargetModel, TargetOutput
from noc_assistant.serving.penalties import Penalties
from noc_assistant.serving.speculative import (
    constrained_greedy_reference,
    generate,
    greedy_reference,
)

ALARM = {
    "type": "object",
    "properties": {
        "severity": {"enum": ["critical", "major", "minor"]},
        "node": {"type": "string", "pattern": "^(amf|smf|upf)-[0-9]$"},
        "cleared": {"type": "boolean"},
    },
    "required": ["severity", "node", "cleared"],
    "additionalProperties": False,
}
NESTED = {
    "type": "object",
    "properties": {
        "links": {
            "type": "array",
            "maxItems": 3,
            "items": {
                "type": "array",
                "minItems": 2,
                "maxItems": 2,
                "items": {"type": "string", "pattern": "^[a-z]{3}-[0-9]$"},
            },
        },
        "loss": {"type": "integer", "minimum": 0, "maximum": 100},
    },
    "required": ["links", "loss"],
    "additionalProperties": False,
}
ENUM = {"enum": ["up", "down", "degraded"]}
TOOLS = [
    ToolSpec(
        "get_alarms",
        "List the active alarms of a node",
        {
            "type": "object",
            "properties": {
                "node": {"type": "string", "pattern": "^(amf|smf|upf)-[0-9]$"},
                "limit": {"type": "integer", "minimum": 1, "maximum": 9},
            },
            "required": ["node", "limit"],
            "additionalProperties": False,
        },
    ),
    ToolSpec(
        "ping",
        "Reachability check",
        {
            "type": "object",
            "properties": {"host": {"enum": ["amf-1", "upf-2"]}},
            "required": ["host"],
            "additionalProperties": False,
        },
    ),
]

SCHEMAS: dict[str, str] = {
    "alarm": json_schema_grammar(ALARM, param="response_format"),
    "nested": json_schema_grammar(NESTED, param="response_format"),
    "enum": json_schema_grammar(ENUM, param="response_format"),
    "tool_required": tool_call_grammar(TOOLS, "required") or "",
}

PROMPTS = [
    "Classify the alarm: AMF registration success rate dropped to 71.5% on amf-2.",
    "PFCP heartbeat failures between smf-1 and upf-3 since 14:05; which links are down?",
]


def _prompt(t: TargetModel, i: int = 0) -> list[int]:
    return t.tokenizer.chat_prompt([{"role": "user", "content": PROMPTS[i]}])


def _check_alarm(obj: Any) -> None:
    assert set(obj) == {"severity", "node", "cleared"}
    assert obj["severity"] in ALARM["properties"]["severity"]["enum"]  # type: ignore[index]
    assert re.fullmatch(r"(amf|smf|upf)-[0-9]", obj["node"])
    assert isinstance(obj["cleared"], bool)


def _check_nested(obj: Any) -> None:
    assert set(obj) == {"links", "loss"}
    assert isinstance(obj["links"], list) and len(obj["links"]) <= 3
    for pair in obj["links"]:
        assert len(pair) == 2 and all(re.fullmatch(r"[a-z]{3}-[0-9]", s) for s in pair)
    assert isinstance(obj["loss"], int) and 0 <= obj["loss"] <= 100


def _check_tool(text: str) -> None:
    call = parse_tool_call(text)
    assert call is not None, text
    name, args = call
    if name == "get_alarms":
        assert set(args) == {"node", "limit"} and 1 <= args["limit"] <= 9
        assert re.fullmatch(r"(amf|smf|upf)-[0-9]", args["node"])
    else:
        assert name == "ping" and args in ({"host": "amf-1"}, {"host": "upf-2"})


def _check(kind: str, text: str) -> None:
    if kind == "alarm":
        _check_alarm(json.loads(text))
    elif kind == "nested":
        _check_nested(json.loads(text))
    elif kind == "enum":
        assert json.loads(text) in ENUM["enum"]
    else:
        _check_tool(text)


class Counting:
    """A target proxy that counts forwards (all else delegated)."""

    def __init__(self, inner: TargetModel) -> None:
        self.inner = inner
        self.forwards = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def forward(
        self, ids: Sequence[int], cache: KVCache, *, all_logits: bool = True
    ) -> TargetOutput:
        self.forwards += 1
        return self.inner.forward(ids, cache, all_logits=all_logits)


# ------------------------------------------------------------------------------------ masks


def test_byte_tokenizer_masks_and_rollback(tiny: TargetModel) -> None:
    c = ConstraintFactory(tiny, SCHEMAS["enum"])()
    m = c.mask()
    assert m.dtype == torch.bool and m.shape == (tiny.vocab_size,)
    assert m.nonzero().flatten().tolist() == [ord('"')]  # a JSON string must open
    assert c.single(c.allowed()) == ord('"')
    c.consume(list(b'"d'))
    assert c.forced_tokens() == []  # "down" or "degraded"
    assert set(c.mask().nonzero().flatten().tolist()) == {ord("o"), ord("e")}
    c.consume(list(b'own"'))
    assert c.is_accepting() and c.is_stopped()
    assert c.mask().nonzero().flatten().tolist() == [257]  # only EOS
    c.rollback(5)
    assert set(c.mask().nonzero().flatten().tolist()) == {ord("u"), ord("d")}
    c.consume([ord("u")])
    assert c.forced_tokens() == list(b'p"')
    assert not c.is_accepting()
    with pytest.raises(RequestError):
        c.consume([ord("x")])


def test_model_vocab_padding_is_never_allowed(tiny: TargetModel) -> None:
    """Embedding tables are often padded past the tokenizer's vocabulary: those ids stay out."""
    any_text = tool_call_grammar(TOOLS, "auto") or ""
    c = Constraint(ll_tokenizer(tiny), any_text, 320, param="tools")
    allowed = c.allowed()
    assert allowed.shape == (320,) and not allowed[260:].any()
    assert allowed[ord("a")] and allowed[ord("<")] and allowed[257]
    assert not allowed[256] and not allowed[258]  # specials other than EOS


def test_invalid_schemas_name_their_param(tiny: TargetModel) -> None:
    with pytest.raises(RequestError) as exc:
        Constraint.compile(
            tiny, json_schema_grammar({"type": "strin"}, param="x"), param="response_format"
        )
    assert exc.value.param == "response_format" and "strin" in str(exc.value)
    bad = ToolSpec("f", "", {"type": "object", "properties": {"a": {"pattern": "(("}}})
    with pytest.raises(RequestError) as exc:
        Constraint.compile(tiny, tool_call_grammar([bad], "auto") or "", param="tools")
    assert exc.value.param == "tools"
    with pytest.raises(RequestError) as exc:
        ToolSpec("no spaces allowed")
    assert exc.value.param == "tools"
    with pytest.raises(RequestError) as exc:
        tool_call_grammar(TOOLS, "function", function="reboot")
    assert exc.value.param == "tool_choice"
    with pytest.raises(RequestError):
        response_format_grammar({"type": "json_schema"})
    assert response_format_grammar({"type": "text"}) is None
    assert response_format_grammar(None) is None


# ------------------------------------------------------------------------------------ lossless


@pytest.mark.parametrize("kind", list(SCHEMAS))
def test_constrained_plain_is_lossless_and_jumps_forward(tiny: TargetModel, kind: str) -> None:
    f = ConstraintFactory(tiny, SCHEMAS[kind])
    prompt = _prompt(tiny)
    ref = constrained_greedy_reference(tiny, prompt, f, 160)
    _check(kind, tiny.tokenizer.decode(ref))
    counting = Counting(tiny)
    res = generate(counting, None, prompt, 160, constraint=f())  # type: ignore[arg-type]
    assert res.tokens == ref
    assert res.stats.finish_reason == "stop" and res.stats.constrained
    assert res.stats.forced_tokens > 0
    # forced runs cost no extra forwards: one prefill + one per model decision at most
    assert counting.forwards <= 1 + len(ref) - res.stats.forced_tokens + 1


@pytest.mark.parametrize("block", [4, 8])
@pytest.mark.parametrize("kind", list(SCHEMAS))
def test_constrained_dspine_is_lossless(
    tiny: TargetModel, tiny_trained: dict[int, BlockDrafterModel], kind: str, block: int
) -> None:
    f = ConstraintFactory(tiny, SCHEMAS[kind])
    for i in range(len(PROMPTS)):
        prompt = _prompt(tiny, i)
        ref = constrained_greedy_reference(tiny, prompt, f, 160)
        res = generate(tiny, NeuralDrafter(tiny_trained[block]), prompt, 160, constraint=f())
        assert res.tokens == ref, (kind, block, i)
        assert res.stats.rounds >= 1
        assert res.stats.accepted_tokens <= res.stats.draft_tokens


def test_constrained_max_tokens_and_oracle(tiny: TargetModel) -> None:
    f = ConstraintFactory(tiny, SCHEMAS["nested"])
    prompt = _prompt(tiny, 1)
    full = constrained_greedy_reference(tiny, prompt, f, 160)
    for n in (1, 7, 23):
        assert constrained_greedy_reference(tiny, prompt, f, n) == full[:n]
        for drafter in (None, OracleDrafter(full, 8)):
            res = generate(tiny, drafter, prompt, n, constraint=f())
            assert res.tokens == full[:n] and res.stats.finish_reason == "length"
    res = generate(tiny, OracleDrafter(full, 8), prompt, 160, constraint=f())
    assert res.tokens == full and res.stats.mean_accept_length > 3


def test_free_text_content_is_lossless(
    tiny: TargetModel, tiny_trained: dict[int, BlockDrafterModel]
) -> None:
    """``tool_choice=auto``: content is any UTF-8 text not starting with ``<`` (the byte model's
    own argmax is often a stray continuation byte, which the grammar rules out)."""
    prompt = _prompt(tiny)
    f = ConstraintFactory(tiny, tool_call_grammar(TOOLS, "auto") or "", param="tools")
    ref = constrained_greedy_reference(tiny, prompt, f, 40)
    assert ref[0] != ord("<") and ref != greedy_reference(tiny, prompt, 40)
    for drafter in (None, NeuralDrafter(tiny_trained[4]), NeuralDrafter(tiny_trained[8])):
        res = generate(tiny, drafter, prompt, 40, constraint=f())
        assert res.tokens == ref
        assert res.stats.finish_reason == "length"
        if drafter is not None:  # drafts the grammar allowed but the target rejected
            assert res.stats.draft_tokens > res.stats.accepted_tokens


@pytest.mark.parametrize("kind", ["alarm", "nested", "tool_required"])
def test_constrained_sampling_stays_in_grammar(
    tiny: TargetModel, tiny_trained: dict[int, BlockDrafterModel], kind: str
) -> None:
    f = ConstraintFactory(tiny, SCHEMAS[kind])
    for seed in range(3):
        for drafter in (None, NeuralDrafter(tiny_trained[4])):
            gen = torch.Generator().manual_seed(seed)
            res = generate(
                tiny, drafter, _prompt(tiny), 200, temperature=0.9, generator=gen, constraint=f()
            )
            assert res.stats.finish_reason == "stop"
            _check(kind, tiny.tokenizer.decode(res.tokens))


# ------------------------------------------------------------------------------------ SmolLM2


@pytest.mark.slow
def test_smollm2_constrained_is_lossless() -> None:
    from noc_assistant.serving.backends import load_default
    from noc_assistant.serving.draft_heads import load_drafter

    smol = load_default()
    schema = {
        "type": "object",
        "properties": {
            "severity": {"enum": ["critical", "major", "minor"]},
            "node": {"type": "string", "pattern": "^(amf|smf|upf)-[0-9]$"},
        },
        "required": ["severity", "node"],
        "additionalProperties": False,
    }
    f = ConstraintFactory(smol, json_schema_grammar(schema, param="response_format"))
    q = "Classify this alarm as JSON: AMF registration success rate dropped to 71% on amf-2."
    prompt = smol.tokenizer.chat_prompt([{"role": "user", "content": q}])
    ref = constrained_greedy_reference(smol, prompt, f, 40)
    obj = json.loads(smol.tokenizer.decode(ref))
    assert obj["severity"] in ("critical", "major", "minor")
    assert re.fullmatch(r"(amf|smf|upf)-[0-9]", obj["node"])
    res = generate(smol, None, prompt, 40, constraint=f())
    assert res.tokens == ref and res.stats.finish_reason == "stop"
    assert res.stats.forced_tokens > 0
    weights = (
        Path(__file__).resolve().parents[2] / "noc_assistant/serving/weights/smollm2-dspine-b8"
    )
    drafter = None
    if (weights / "model.safetensors").is_file():  # the committed DSpine drafter
        drafter = load_drafter(weights, smol)
        assert generate(smol, NeuralDrafter(drafter), prompt, 40, constraint=f()).tokens == ref
    tf = ConstraintFactory(smol, tool_call_grammar(TOOLS, "required") or "", param="tools")
    ref = constrained_greedy_reference(smol, prompt, tf, 48)
    _check_tool(smol.tokenizer.decode(ref))
    assert generate(smol, None, prompt, 48, constraint=tf()).tokens == ref
    if drafter is not None:
        assert generate(smol, NeuralDrafter(drafter), prompt, 48, constraint=tf()).tokens == ref


# ------------------------------------------------------------------------------ prefix cache


@pytest.mark.parametrize("block", [None, 4])
def test_the_next_turn_reuses_the_conversation_so_far(
    tiny: TargetModel, tiny_trained: dict[int, BlockDrafterModel], block: int | None
) -> None:
    """A chat's next turn resends the conversation: only the new part is forwarded, and the
    output is the fresh prefill's, token for token (plain, DSpine, constrained or not)."""
    from noc_assistant.serving.engine import Engine, Request

    drafter = tiny_trained[block] if block is not None else None
    warm = Engine(tiny, drafter)
    cold = Engine(tiny, drafter, prefix_cache=False)
    f = ConstraintFactory(tiny, SCHEMAS["alarm"])
    first = [{"role": "user", "content": PROMPTS[0]}]
    p1 = tiny.tokenizer.chat_prompt(first)
    out1, st1 = warm.generate(Request(p1, 40))
    assert st1.cached_tokens == 0
    answer = tiny.tokenizer.decode(out1)
    second = [*first, {"role": "assistant", "content": answer}, {"role": "user", "content": "ok?"}]
    p2 = tiny.tokenizer.chat_prompt(second)
    for constraint in (None, f):
        req = Request(p2, 60, constraint=constraint() if constraint else None)
        ref, _ = cold.generate(Request(p2, 60, constraint=constraint() if constraint else None))
        out2, st2 = warm.generate(req)
        assert out2 == ref
        assert st2.cached_tokens >= len(p1) - 1
    # an unrelated prompt reuses nothing it should not
    p3 = tiny.tokenizer.chat_prompt([{"role": "user", "content": PROMPTS[1]}])
    out3, st3 = warm.generate(Request(p3, 30))
    assert out3 == cold.generate(Request(p3, 30))[0]
    assert st3.cached_tokens < 3


def test_penalised_dspine_equals_penalised_greedy(
    tiny: TargetModel, tiny_trained: dict[int, BlockDrafterModel]
) -> None:
    """OpenAI frequency and presence penalties, applied at every verified position with the
    counts up to it, keep speculative decoding lossless: it equals penalised constrained
    greedy decoding token for token, and the penalties do change what greedy writes."""
    penalties = Penalties(frequency=2.0, presence=2.0)
    changed = 0
    for kind in ("alarm", "nested"):
        f = ConstraintFactory(tiny, SCHEMAS[kind])
        for i in range(len(PROMPTS)):
            prompt = _prompt(tiny, i)
            ref = constrained_greedy_reference(tiny, prompt, f, 160, penalties)
            _check(kind, tiny.tokenizer.decode(ref))
            for drafter in (None, NeuralDrafter(tiny_trained[4])):
                res = generate(tiny, drafter, prompt, 160, constraint=f(), penalties=penalties)
                assert res.tokens == ref, (kind, i, drafter)
            changed += ref != constrained_greedy_reference(tiny, prompt, f, 160)
    assert changed > 0
