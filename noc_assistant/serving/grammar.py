"""Grammar-constrained decoding with llguidance: JSON Schema outputs and tool calls.

A request's ``response_format`` (OpenAI: ``json_schema`` / ``json_object`` / ``text``) or its
``tools`` become one llguidance grammar; :class:`Constraint` wraps an ``llguidance.LLMatcher``
for that grammar and tells the decoding loop (:mod:`noc_assistant.serving.speculative`) which
tokens may come next, consumes what was committed and rolls back what verification rejected.

Why llguidance: its Rust core computes a token mask in tens of microseconds to a millisecond
(SmolLM2's 49k vocabulary), it compiles JSON Schema (``pattern``, ``enum``, ``const``,
``anyOf``, ``maxItems``, ...) and Lark grammars (with inline ``%json{...}`` schemas) in one
engine, supports rollback (speculative decoding) and fast-forward tokens, and it is the
structured-output backend of vLLM and SGLang, so the same ``json_schema`` request behaves the
same there.

JSON is generated in one fixed layout, ``{"a": 1, "b": [2, 3]}`` (``", "`` and ``": "``, no
other whitespace): the layout small models saw most (Python's ``json.dumps``), and a fixed
layout makes many positions forced (a single allowed token) so they cost no model decision.

Tool calls use a text format any chat model can be told about in the system message (SmolLM2
has no native tool format):

>>> render_tool_call("get_alarms", {"node": "amf-2"})
'<tool_call>{"name": "get_alarms", "arguments": {"node": "amf-2"}}</tool_call>'
>>> parse_tool_call(render_tool_call("get_alarms", {"node": "amf-2"}))
('get_alarms', {'node': 'amf-2'})
"""

from __future__ import annotations

import copy
import json
import re
import threading
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import llguidance
import numpy as np
import torch
from numpy.typing import NDArray
from torch import Tensor

from noc_assistant.serving.errors import RequestError
from noc_assistant.serving.loading import ByteTokenizer, HFTokenizer, TargetModel

__all__ = [
    "JSON_LAYOUT",
    "TOOL_CALL_CLOSE",
    "TOOL_CALL_OPEN",
    "Constraint",
    "ConstraintFactory",
    "ToolSpec",
    "json_schema_grammar",
    "ll_tokenizer",
    "parse_tool_call",
    "render_tool_call",
    "render_tool_response",
    "render_tools_prompt",
    "response_format_grammar",
    "response_format_schema",
    "seal",
    "tool_call_grammar",
]

TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"

#: llguidance JSON options: the ``json.dumps`` layout and nothing else (see the module doc).
JSON_LAYOUT: dict[str, Any] = {
    "item_separator": ", ",
    "key_separator": ": ",
    "whitespace_flexible": False,
}

_TOOL_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")

ToolChoiceMode = Literal["auto", "none", "required", "function"]


# --------------------------------------------------------------------------------- tokenizers


class _ByteVocab:
    """The duck-typed tokenizer ``llguidance.TokenizerWrapper`` reads (bytes 0..255 + specials)."""

    def __init__(self, tok: ByteTokenizer) -> None:
        self.eos_token_id = tok.EOS
        self.bos_token_id = tok.BOS
        self.tokens = [bytes([i]) for i in range(256)] + [
            b"<bos>",
            b"<eos>",
            b"<user>",
            b"<assistant>",
        ]
        self.special_token_ids = list(range(256, tok.vocab_size))

    def __call__(self, text: bytes | str) -> list[int]:
        return list(text.encode("utf-8") if isinstance(text, str) else text)


_LL_CACHE: weakref.WeakKeyDictionary[TargetModel, llguidance.LLTokenizer] = (
    weakref.WeakKeyDictionary()
)
_LL_LOCK = threading.Lock()


def ll_tokenizer(target: TargetModel) -> llguidance.LLTokenizer:
    """The llguidance tokenizer of ``target``, built once per model (~0.6 s for SmolLM2).

    Its EOS tokens are the model's (``<|im_end|>`` and ``<|endoftext|>`` for ChatML models), so
    the mask allows ending wherever the grammar is complete.
    """
    with _LL_LOCK:
        hit = _LL_CACHE.get(target)
        if hit is not None:
            return hit
        tok = target.tokenizer
        eos = sorted(target.eos_token_ids)
        if isinstance(tok, ByteTokenizer):
            ll = llguidance.LLTokenizer(llguidance.TokenizerWrapper(_ByteVocab(tok)), eos_token=eos)
        elif isinstance(tok, HFTokenizer):
            from llguidance.hf import from_tokenizer  # imports transformers

            try:
                ll = from_tokenizer(tok.tokenizer, eos_token=eos)
            except ValueError as exc:  # a slow (Python) tokenizer
                raise RequestError(
                    f"structured output needs a fast tokenizer: {exc}", param="response_format"
                ) from exc
        elif hasattr(tok, "backend"):  # a tokenizers.Tokenizer driven directly (FastTokenizer)
            backend = copy.copy(tok.backend)
            backend.no_padding()
            backend.no_truncation()
            ll = llguidance.LLTokenizer(backend.to_str(), eos_token=eos)
        else:
            raise RequestError(
                f"structured output is not supported for {type(tok).__name__}",
                param="response_format",
            )
        _LL_CACHE[target] = ll
        return ll


# --------------------------------------------------------------------------------- constraint


class Constraint:
    """One request's grammar state: next-token masks, consume, rollback, forced tokens.

    Masks cover the *model's* vocabulary (``target.vocab_size``); ids the tokenizer does not
    have (padding rows of the embedding) are never allowed. Build it with :meth:`compile`,
    which turns an invalid grammar into a :class:`RequestError` naming ``param``.
    """

    def __init__(
        self, tokenizer: llguidance.LLTokenizer, grammar: str, vocab_size: int, *, param: str
    ) -> None:
        self.grammar = grammar
        self.param = param
        self.vocab_size = vocab_size
        self.eos_token_ids = frozenset(int(t) for t in tokenizer.eos_tokens)
        self._n_tok = min(int(tokenizer.vocab_size), vocab_size)
        # log_level 0: llguidance would otherwise print grammar warnings to stderr
        self._m = llguidance.LLMatcher(tokenizer, grammar, log_level=0)
        if self._m.is_error():
            raise RequestError(f"invalid {param}: {self._m.get_error()}", param=param)
        self.consumed = 0

    @classmethod
    def compile(cls, target: TargetModel, grammar: str, *, param: str) -> Constraint:
        """A constraint for ``target`` (its llguidance tokenizer is cached per model)."""
        return cls(ll_tokenizer(target), grammar, target.vocab_size, param=param)

    def allowed(self) -> NDArray[np.bool_]:
        """Bool mask [vocab_size] of the tokens allowed next (EOS only where complete)."""
        bits = np.frombuffer(self._m.compute_bitmask(), dtype=np.uint8)
        out = np.zeros(self.vocab_size, dtype=np.bool_)
        out[: self._n_tok] = np.unpackbits(bits, bitorder="little")[: self._n_tok].astype(bool)
        if self._m.is_error():
            raise RequestError(f"grammar error: {self._m.get_error()}", param=self.param)
        return out

    def mask(self) -> Tensor:
        """:meth:`allowed` as a torch bool tensor (CPU)."""
        return torch.from_numpy(self.allowed())

    @staticmethod
    def single(allowed: NDArray[np.bool_]) -> int | None:
        """The one allowed token when the grammar forces it, else None."""
        if int(np.count_nonzero(allowed)) != 1:
            return None
        return int(np.flatnonzero(allowed)[0])

    def consume(self, tokens: Sequence[int]) -> None:
        """Advance over committed (or drafted) ``tokens``; they must be allowed."""
        if not tokens:
            return
        if not self._m.consume_tokens([int(t) for t in tokens]):
            raise RequestError(f"grammar rejected a token: {self._m.get_error()}", param=self.param)
        self.consumed += len(tokens)

    def rollback(self, n: int) -> None:
        """Undo the last ``n`` consumed tokens (drafts the target rejected)."""
        if n <= 0:
            return
        if n > self.consumed or not self._m.rollback(n):
            raise RequestError(f"grammar rollback of {n} failed", param=self.param)
        self.consumed -= n

    def forced_tokens(self) -> list[int]:
        """Fast-forward tokens: the canonical tokenisation of the bytes the grammar forces now.

        With a BPE tokenizer the mask may still allow other tokenisations of those bytes, so
        the loop uses them as drafts (verified), not as commitments.
        """
        return [int(t) for t in self._m.compute_ff_tokens()]

    def is_accepting(self) -> bool:
        """The output so far is a complete sentence of the grammar (EOS would be allowed)."""
        return bool(self._m.is_accepting())

    def is_stopped(self) -> bool:
        """Nothing but EOS can follow: generation is over."""
        return bool(self._m.is_stopped())

    def reset(self) -> None:
        self._m.reset()
        self.consumed = 0


class ConstraintFactory:
    """Makes fresh :class:`Constraint` objects for one model and grammar (e.g. for references).

    Each call compiles the grammar again; the llguidance tokenizer is shared.
    """

    def __init__(self, target: TargetModel, grammar: str, *, param: str = "response_format"):
        self.target = target
        self.grammar = grammar
        self.param = param

    def __call__(self) -> Constraint:
        return Constraint.compile(self.target, self.grammar, param=self.param)


# --------------------------------------------------------------------------------- grammars


_OPEN_KEYS = ("additionalProperties", "patternProperties", "unevaluatedProperties")
_SUB_ONE = ("items", "additionalProperties", "not", "if", "then", "else", "contains")
_SUB_LIST = ("anyOf", "oneOf", "allOf", "prefixItems", "items")
_SUB_MAP = ("properties", "$defs", "definitions", "patternProperties")


def seal(schema: Any) -> Any:
    """``schema`` with every object that lists ``properties`` and says nothing of others closed
    (``additionalProperties: false``), as OpenAI's strict mode requires them to be.

    JSON Schema leaves such objects open, and then a small model pads tool arguments with
    keys copied from the schema (SmolLM2 wrote ``"type": "object", "properties": ...`` into
    its arguments). Objects without ``properties`` (``{"type": "object"}``: any object) stay
    open, as does one that says ``additionalProperties: true``.

    >>> seal({"type": "object", "properties": {"a": {"type": "object", "properties": {}}}})
    {'type': 'object', 'properties': {'a': {'type': 'object', 'properties': {}, \
'additionalProperties': False}}, 'additionalProperties': False}
    >>> seal({"type": "object"})
    {'type': 'object'}
    """
    if not isinstance(schema, Mapping):
        return schema
    out = dict(schema)
    for key in _SUB_ONE:
        if isinstance(out.get(key), Mapping):
            out[key] = seal(out[key])
    for key in _SUB_LIST:
        if isinstance(out.get(key), list):
            out[key] = [seal(x) for x in out[key]]
    for key in _SUB_MAP:
        if isinstance(out.get(key), Mapping):
            out[key] = {k: seal(v) for k, v in out[key].items()}
    if isinstance(out.get("properties"), Mapping) and not any(k in out for k in _OPEN_KEYS):
        out["additionalProperties"] = False
    return out


def _with_layout(schema: Mapping[str, Any]) -> dict[str, Any]:
    """``schema`` with :data:`JSON_LAYOUT` under ``x-guidance`` (the schema's own keys win)."""
    own = schema.get("x-guidance")
    return {**schema, "x-guidance": {**JSON_LAYOUT, **(own if isinstance(own, dict) else {})}}


def _check_schema(schema: Any, param: str) -> dict[str, Any]:
    if schema is True or schema is None:
        return {}
    if not isinstance(schema, Mapping):
        raise RequestError("a JSON schema must be an object", param=param)
    return dict(schema)


def json_schema_grammar(schema: Mapping[str, Any] | bool | None, *, param: str) -> str:
    """An llguidance grammar for JSON documents valid under ``schema`` (``{}``: any JSON), its
    objects with listed properties closed (:func:`seal`).

    Schema errors surface when the grammar is compiled (:meth:`Constraint.compile`).

    >>> json.loads(json_schema_grammar({"enum": ["up", "down"]}, param="response_format"))[
    ...     "grammars"][0]["json_schema"]["enum"]
    ['up', 'down']
    """
    s = seal(_check_schema(schema, param))
    return str(llguidance.LLMatcher.grammar_from_json_schema(_with_layout(s)))


def response_format_grammar(response_format: Mapping[str, Any] | None) -> str | None:
    """The grammar of an OpenAI ``response_format``; None for ``text`` or no format.

    ``{"type": "json_object"}`` is any JSON object; ``{"type": "json_schema", "json_schema":
    {"name", "schema", "strict"}}`` follows ``schema`` (always enforced, ``strict`` or not).

    >>> response_format_grammar({"type": "text"}) is None
    True
    """
    schema = response_format_schema(response_format)
    return None if schema is None else json_schema_grammar(schema, param="response_format")


def response_format_schema(response_format: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The JSON schema a ``response_format`` asks for, or None when the output is free text."""
    if response_format is None:
        return None
    kind = response_format.get("type", "text")
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "object"}
    if kind == "json_schema":
        spec = response_format.get("json_schema")
        if not isinstance(spec, Mapping):
            raise RequestError(
                "response_format.json_schema must be an object", param="response_format"
            )
        return _check_schema(spec.get("schema"), "response_format")
    raise RequestError(f"unknown response_format type {kind!r}", param="response_format")


@dataclass(frozen=True)
class ToolSpec:
    """A function the model may call: its name, description and JSON-schema parameters."""

    name: str
    description: str = ""
    parameters: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not _TOOL_NAME.match(self.name):
            raise RequestError(
                f"tool name {self.name!r} must match {_TOOL_NAME.pattern}", param="tools"
            )
        if not isinstance(self.parameters, Mapping):
            raise RequestError(f"parameters of tool {self.name!r} must be an object", param="tools")

    def call_schema(self) -> dict[str, Any]:
        """Schema of this tool's call object ``{"name": <name>, "arguments": <parameters>}``
        (the parameters' objects closed by :func:`seal`; no parameters: ``{}`` only)."""
        params = seal(dict(self.parameters) or {"type": "object", "properties": {}})
        return _with_layout(
            {
                "type": "object",
                "properties": {"name": {"const": self.name}, "arguments": params},
                "required": ["name", "arguments"],
                "additionalProperties": False,
            }
        )


def _lark_str(s: str) -> str:
    return json.dumps(s)


def tool_call_grammar(
    tools: Sequence[ToolSpec],
    mode: ToolChoiceMode,
    *,
    function: str | None = None,
    content_schema: Mapping[str, Any] | None = None,
) -> str | None:
    """A Lark grammar for one assistant turn with ``tools``; None when unconstrained.

    ``auto``: a tool call or the content; ``required``: a call of any tool; ``function``: a
    call of ``function``; ``none``: the content only. The content follows ``content_schema``
    when given (a ``response_format``), else it is free text that does not begin with ``<``
    (so that a reply is a call exactly when it begins with :data:`TOOL_CALL_OPEN`). A call is
    ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``, arguments valid under that
    tool's ``parameters``.

    >>> t = ToolSpec("ping", "reachability", {"type": "object"})
    >>> tool_call_grammar([t], "none") is None
    True
    >>> "%json" in (tool_call_grammar([t], "required") or "")
    True
    """
    names = [t.name for t in tools]
    if len(set(names)) != len(names):
        raise RequestError("tool names must be unique", param="tools")
    if mode != "none" and not tools:
        raise RequestError(f"tool_choice {mode!r} needs tools", param="tool_choice")
    if mode == "function":
        tools = [t for t in tools if t.name == function]
        if not tools:
            raise RequestError(f"tool_choice names unknown tool {function!r}", param="tool_choice")
    if content_schema is not None:
        content = "%json" + json.dumps(_with_layout(seal(content_schema)))
    else:
        content = r"/(?s:[^<].*)/ | " + _lark_str("")
    if mode == "none":
        if content_schema is None:
            return None
        return str(llguidance.LLMatcher.grammar_from_lark(f"start: {content}\n"))
    lines = []
    if mode == "auto":
        lines.append("start: call | content")
        lines.append(f"content: {content}")
    else:
        lines.append("start: call")
    alts = " | ".join(f"call_{i}" for i in range(len(tools)))
    lines.append(f"call: {_lark_str(TOOL_CALL_OPEN)} ({alts}) {_lark_str(TOOL_CALL_CLOSE)}")
    for i, t in enumerate(tools):
        lines.append(f"call_{i}: %json{json.dumps(t.call_schema())}")
    return str(llguidance.LLMatcher.grammar_from_lark("\n".join(lines) + "\n"))


# --------------------------------------------------------------------------------- prompts


def render_tool_call(name: str, arguments: Any) -> str:
    """The text of one tool call, as the model is told to write it."""
    body = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
    return f"{TOOL_CALL_OPEN}{body}{TOOL_CALL_CLOSE}"


def render_tool_response(content: str, name: str | None) -> str:
    """A tool result as the model reads it (``name`` when the call is known).

    >>> render_tool_response("3 alarms", "get_alarms")
    '<tool_response name="get_alarms">3 alarms</tool_response>'
    """
    attr = f" name={json.dumps(name)}" if name else ""
    return f"<tool_response{attr}>{content}</tool_response>"


def parse_tool_call(text: str) -> tuple[str, Any] | None:
    """``(name, arguments)`` when ``text`` is one complete tool call, else None."""
    s = text.strip()
    if not (s.startswith(TOOL_CALL_OPEN) and s.endswith(TOOL_CALL_CLOSE)):
        return None
    try:
        obj = json.loads(s[len(TOOL_CALL_OPEN) : len(s) - len(TOOL_CALL_CLOSE)])
    except ValueError:
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or "arguments" not in obj:
        return None
    return obj["name"], obj["arguments"]


def render_tools_prompt(
    tools: Sequence[ToolSpec], mode: ToolChoiceMode, function: str | None = None
) -> str:
    """The system-message block that tells a model without native tools how to call them."""
    lines = [
        "You can call the following tools. Each is given as JSON with its name, description "
        "and parameters (a JSON Schema):",
        "<tools>",
    ]
    for t in tools:
        spec = {"name": t.name, "description": t.description, "parameters": dict(t.parameters)}
        lines.append(json.dumps(spec, ensure_ascii=False))
    lines.append("</tools>")
    lines.append(
        "To call a tool, reply with only "
        f'{TOOL_CALL_OPEN}{{"name": <tool name>, "arguments": <arguments object>}}'
        f"{TOOL_CALL_CLOSE}. Tool results come back inside <tool_response> tags."
    )
    if mode == "none":
        lines.append("Do not call a tool in this reply; answer directly.")
    elif mode == "required":
        lines.append("Call exactly one tool in this reply.")
    elif mode == "function":
        lines.append(f"Call the tool {function} in this reply.")
    else:
        lines.append("If no tool is needed, answer directly.")
    return "\n".join(lines)
