"""The OpenAI API's shapes, as the built-in server reads and answers them: request models,
error bodies, the body-size limit, stop strings, and how a chat request (messages, tools,
``response_format``) becomes prompt messages and a grammar.

Nothing here runs the model: :mod:`noc_assistant.serving.server` does.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any, Literal

from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from noc_assistant.serving.grammar import (
    TOOL_CALL_OPEN,
    ToolChoiceMode,
    ToolSpec,
    json_schema_grammar,
    parse_tool_call,
    render_tool_call,
    render_tool_response,
    render_tools_prompt,
    response_format_schema,
    tool_call_grammar,
)

__all__ = [
    "ApiError",
    "BodyLimit",
    "ChatPlan",
    "ChatRequest",
    "ClientGone",
    "CommonRequest",
    "CompletionRequest",
    "error_response",
    "first_stop",
    "plan_chat",
    "stop_prefix",
    "stops_of",
    "tool_call_message",
]


class ContentPart(BaseModel):
    model_config = ConfigDict(extra="ignore")
    type: Literal["text"]
    text: str


class FunctionCall(BaseModel):
    model_config = ConfigDict(extra="ignore")
    name: str
    arguments: str = "{}"


class ToolCall(BaseModel):
    model_config = ConfigDict(extra="ignore")
    id: str | None = None
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(BaseModel):
    """One message; ``content`` may be null (an assistant turn with ``tool_calls``) or a list of
    text parts (joined with newlines)."""

    model_config = ConfigDict(extra="ignore")
    role: Literal["system", "user", "assistant", "tool", "developer"]
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None

    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "\n".join(p.text for p in self.content)


class FunctionDef(BaseModel):
    model_config = ConfigDict(extra="ignore")
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None


class Tool(BaseModel):
    model_config = ConfigDict(extra="ignore")
    type: Literal["function"]
    function: FunctionDef


class FunctionName(BaseModel):
    name: str


class NamedToolChoice(BaseModel):
    model_config = ConfigDict(extra="ignore")
    type: Literal["function"]
    function: FunctionName


class ResponseFormat(BaseModel):
    """OpenAI ``response_format``; ``json_schema`` is ``{"name", "schema", "strict"}``."""

    model_config = ConfigDict(extra="ignore")
    type: Literal["text", "json_object", "json_schema"]
    json_schema: dict[str, Any] | None = None


#: Most choices one request may ask for (``n``); each takes a queue slot of the server.
MAX_CHOICES = 8


class StreamOptions(BaseModel):
    include_usage: bool = False


class CommonRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    model: str
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    frequency_penalty: float = Field(default=0.0, ge=-2.0, le=2.0)
    """Subtracted from a token's logit once per time it is already in the output (OpenAI)."""
    presence_penalty: float = Field(default=0.0, ge=-2.0, le=2.0)
    """Subtracted from a token's logit once it is in the output at all (OpenAI)."""
    seed: int | None = Field(default=None, ge=0, le=2**63 - 1)
    """torch's generator takes 64-bit seeds; a bigger one was a 500."""
    stream: bool = False
    stream_options: StreamOptions | None = None
    stop: str | list[str] | None = None
    n: int = Field(default=1, ge=1, le=MAX_CHOICES)
    """Choices to generate; they run at once and share decoding steps (seed + i each)."""
    response_format: ResponseFormat | None = None


class ChatRequest(CommonRequest):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    tools: list[Tool] | None = None
    tool_choice: Literal["auto", "none", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool | None = None


class CompletionRequest(CommonRequest):
    prompt: str | list[str]


class ApiError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        *,
        type_: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = (
            status,
            message,
            type_,
            param,
            code,
        )
        self.headers = headers


class ClientGone(Exception):
    """The client disconnected before its answer was ready (nobody to answer)."""


def error_response(
    status: int,
    message: str,
    type_: str,
    param: str | None,
    code: str | None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    body = {"error": {"message": message, "type": type_, "param": param, "code": code}}
    return JSONResponse(status_code=status, content=body, headers=headers)


class BodyLimit:
    """ASGI middleware: a POST body over ``limit`` bytes is answered 413 before any route reads
    it (a 5 MB prompt used to be parsed and tokenised on the event loop, holding half a GB).

    The declared ``Content-Length`` is refused at once; a chunked body is read up to the limit
    and replayed to the app, so only ``limit`` bytes are ever held."""

    def __init__(self, app: Any, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope.get("method") not in ("POST", "PUT", "PATCH"):
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            await self._refuse(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            msg = await receive()
            if msg["type"] != "http.request":  # gone before the body was in
                return
            chunk = msg.get("body", b"")
            size += len(chunk)
            if size > self.limit:
                await self._refuse(scope, receive, send)
                return
            chunks.append(chunk)
            if not msg.get("more_body", False):
                break
        body = b"".join(chunks)
        sent = False

        async def replay() -> Any:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _refuse(self, scope: Any, receive: Any, send: Any) -> None:
        msg = f"request body is larger than {self.limit} bytes"
        resp = error_response(413, msg, "invalid_request_error", None, "request_too_large")
        await resp(scope, receive, send)


def stops_of(stop: str | list[str] | None) -> list[str]:
    if stop is None:
        return []
    return [stop] if isinstance(stop, str) else [s for s in stop if s]


@dataclass
class ChatPlan:
    """What a chat request turns into before tokenisation."""

    messages: list[dict[str, str]]
    grammar: str | None = None
    param: str = "response_format"  # the request field the grammar comes from
    content_schema: dict[str, Any] | None = None
    tool_mode: bool = False  # the reply may be a tool call
    tools: list[ToolSpec] = field(default_factory=list)


def _tool_choice(body: ChatRequest, has_tools: bool) -> tuple[ToolChoiceMode, str | None]:
    choice = body.tool_choice
    if choice is None:
        return ("auto" if has_tools else "none"), None
    if isinstance(choice, NamedToolChoice):
        return "function", choice.function.name
    if choice == "auto" and not has_tools:
        return "none", None
    return choice, None


def _render_messages(body: ChatRequest) -> list[dict[str, str]]:
    """Messages as plain role/content text: tool calls and tool results become tagged text."""
    names: dict[str, str] = {}
    out: list[dict[str, str]] = []
    for m in body.messages:
        text = m.text()
        if m.role == "assistant" and m.tool_calls:
            parts = [text] if text else []
            for tc in m.tool_calls:
                try:
                    args: Any = json.loads(tc.function.arguments)
                except ValueError:
                    args = tc.function.arguments
                parts.append(render_tool_call(tc.function.name, args))
                if tc.id:
                    names[tc.id] = tc.function.name
            text = "".join(parts)
        elif m.role == "tool":
            text = render_tool_response(text, names.get(m.tool_call_id or "") or m.name)
        out.append({"role": m.role, "content": text})
    return out


def plan_chat(body: ChatRequest) -> ChatPlan:
    """Prompt messages and grammar of a chat request (``response_format`` and ``tools``)."""
    rf = body.response_format.model_dump() if body.response_format is not None else None
    schema = response_format_schema(rf)
    tools = [
        ToolSpec(t.function.name, t.function.description or "", t.function.parameters or {})
        for t in body.tools or []
    ]
    mode, function = _tool_choice(body, bool(tools))
    plan = ChatPlan(_render_messages(body), content_schema=schema, tools=tools)
    if tools:
        block = render_tools_prompt(tools, mode, function)
        msgs = plan.messages
        if msgs[0]["role"] in ("system", "developer"):
            msgs[0] = {"role": msgs[0]["role"], "content": f"{msgs[0]['content']}\n\n{block}"}
        else:
            msgs.insert(0, {"role": "system", "content": block})
    if mode != "none":
        plan.grammar = tool_call_grammar(tools, mode, function=function, content_schema=schema)
        plan.param, plan.tool_mode = "tools", True
    elif schema is not None:
        plan.grammar = json_schema_grammar(schema, param="response_format")
    return plan


def tool_call_message(text: str) -> dict[str, Any] | None:
    """The OpenAI ``tool_calls`` entry for a reply that is a complete call, else None."""
    call = parse_tool_call(text) if text.startswith(TOOL_CALL_OPEN) else None
    if call is None:
        return None
    return {
        "id": "call_" + uuid.uuid4().hex[:24],
        "type": "function",
        "function": {"name": call[0], "arguments": json.dumps(call[1], ensure_ascii=False)},
    }


def stop_prefix(text: str, stops: list[str]) -> int:
    r"""Length of the longest tail of ``text`` that begins some stop string (not all of it).

    A stream must not send those characters yet: the next tokens may complete the stop string,
    which the client must never see.

    >>> stop_prefix("the answer is 42\n\nUs", ["\n\nUser:"])
    4
    >>> stop_prefix("done.", ["STOP"]), stop_prefix("x ST", ["STOP", "T"])
    (0, 2)
    """
    best = 0
    for stop in stops:
        for n in range(min(len(stop) - 1, len(text)), best, -1):
            if text.endswith(stop[:n]):
                best = n
                break
    return best


def first_stop(text: str, stops: list[str]) -> int | None:
    """Index where the earliest stop string starts, or None.

    >>> first_stop("a b STOP c", ["STOP", "c"])
    4
    """
    hits = [i for i in (text.find(s) for s in stops) if i >= 0]
    return min(hits) if hits else None
