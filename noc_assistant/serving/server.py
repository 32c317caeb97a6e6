"""OpenAI-compatible HTTP server over an :class:`~noc_assistant.serving.engine.Engine`.

Routes: ``POST /v1/chat/completions`` and ``POST /v1/completions`` (SSE streaming or not),
``GET /v1/models``, ``GET /health``, ``GET /metrics`` (Prometheus text).

Requests are queued behind an asyncio lock and run one at a time in a worker thread. Errors
come back as OpenAI error bodies ``{"error": {"message", "type", "param", "code"}}`` with 4xx
codes: 400 for malformed JSON, wrong types, a ``seed`` outside 0..2**63-1 and prompts longer
than the context, 404 for an unknown model.

Load is bounded, because one slow model is shared by every client: a body over
``max_body_bytes`` (1 MiB) is refused with 413 before it is parsed; at most ``max_waiting``
(16) requests wait behind the running one, the next gets 429 with ``Retry-After``; parsing,
tokenisation and grammar compilation run in worker threads so ``/health`` (an async route that
takes no lock) answers while a big prompt is tokenised. A client that goes away is noticed
(``request.is_disconnected()`` polled while queued and while generating): a queued request
never starts, a running one stops after the decode round in flight.

``temperature`` defaults to 0 (greedy, lossless speculative decoding).
Responses carry ``usage`` and, as an extension, ``noc`` (speculative-decoding counters, the
SIMPLE energy estimate, ``constrained`` and ``forced_tokens``).

Structured output (:mod:`noc_assistant.serving.grammar`): ``response_format`` ``json_schema``
or ``json_object`` (both routes, streaming or not) constrains decoding to the schema.

Tool calling on ``/v1/chat/completions``: ``tools`` (functions with JSON-schema parameters),
``tool_choice`` (``"auto"``, the default with tools, ``"none"``, ``"required"`` or
``{"type": "function", "function": {"name": ...}}``) and ``parallel_tool_calls`` (accepted;
at most one call is made per turn). The model is told about the tools in the system message
and decoding is constrained to either one ``<tool_call>{"name": ..., "arguments": {...}}
</tool_call>`` or the content, so a call always parses; it comes back in the OpenAI shape
(``message.tool_calls``, ``content: null``, ``finish_reason: "tool_calls"``; when streaming, in
one delta chunk at the end). Earlier calls (assistant messages with ``tool_calls``) and their
results (``tool`` messages with ``tool_call_id``) are rendered into the prompt as text.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any, Literal

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from jinja2 import TemplateError
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel, ConfigDict, Field

from noc_assistant.serving.engine import Engine
from noc_assistant.serving.engine import Request as GenRequest
from noc_assistant.serving.errors import RequestError, ServingError
from noc_assistant.serving.grammar import (
    TOOL_CALL_OPEN,
    Constraint,
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
from noc_assistant.serving.speculative import GenerationStats

__all__ = ["BodyLimit", "ClientGone", "ServerThread", "create_app"]


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


class StreamOptions(BaseModel):
    include_usage: bool = False


class _Common(BaseModel):
    model_config = ConfigDict(extra="ignore")
    model: str
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    seed: int | None = Field(default=None, ge=0, le=2**63 - 1)
    """torch's generator takes 64-bit seeds; a bigger one was a 500."""
    stream: bool = False
    stream_options: StreamOptions | None = None
    stop: str | list[str] | None = None
    n: int = Field(default=1, ge=1, le=1)
    response_format: ResponseFormat | None = None


class ChatRequest(_Common):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    tools: list[Tool] | None = None
    tool_choice: Literal["auto", "none", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool | None = None


class CompletionRequest(_Common):
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


def _error(
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
        resp = _error(413, msg, "invalid_request_error", None, "request_too_large")
        await resp(scope, receive, send)


def _stops(stop: str | list[str] | None) -> list[str]:
    if stop is None:
        return []
    return [stop] if isinstance(stop, str) else [s for s in stop if s]


@dataclass
class _ChatPlan:
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


def _plan_chat(body: ChatRequest) -> _ChatPlan:
    """Prompt messages and grammar of a chat request (``response_format`` and ``tools``)."""
    rf = body.response_format.model_dump() if body.response_format is not None else None
    schema = response_format_schema(rf)
    tools = [
        ToolSpec(t.function.name, t.function.description or "", t.function.parameters or {})
        for t in body.tools or []
    ]
    mode, function = _tool_choice(body, bool(tools))
    plan = _ChatPlan(_render_messages(body), content_schema=schema, tools=tools)
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


def _tool_call_message(text: str) -> dict[str, Any] | None:
    """The OpenAI ``tool_calls`` entry for a reply that is a complete call, else None."""
    call = parse_tool_call(text) if text.startswith(TOOL_CALL_OPEN) else None
    if call is None:
        return None
    return {
        "id": "call_" + uuid.uuid4().hex[:24],
        "type": "function",
        "function": {"name": call[0], "arguments": json.dumps(call[1], ensure_ascii=False)},
    }


def create_app(
    engine: Engine,
    *,
    max_tokens_default: int = 256,
    max_body_bytes: int = 1 << 20,
    max_waiting: int = 16,
    disconnect_poll_s: float = 0.05,
) -> FastAPI:
    """Build the FastAPI app serving ``engine`` under the model id ``engine.name``.

    ``max_body_bytes``: larger request bodies get 413. ``max_waiting``: how many requests may
    wait behind the running one before the next gets 429. ``disconnect_poll_s``: how often a
    waiting or running request checks that its client is still there."""
    app = FastAPI(title="noc-assistant LLM server")
    app.add_middleware(BodyLimit, limit=max_body_bytes)
    queue_lock = asyncio.Lock()
    waiting = engine.metrics.waiting.labels(engine.name)
    queued = 0  # requests waiting for queue_lock (the gauge above is for Prometheus only)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        errs = exc.errors()
        first = errs[0] if errs else {}
        loc = [str(x) for x in first.get("loc", ()) if x != "body"]
        if first.get("type") == "json_invalid":
            return _error(
                400, "request body is not valid JSON", "invalid_request_error", None, None
            )
        msg = f"{'.'.join(loc) or 'body'}: {first.get('msg', 'invalid request')}"
        return _error(400, msg, "invalid_request_error", ".".join(loc) or None, None)

    @app.exception_handler(ApiError)
    async def _api(_: Request, exc: ApiError) -> JSONResponse:
        return _error(exc.status, exc.message, exc.type, exc.param, exc.code, exc.headers)

    @app.exception_handler(ClientGone)
    async def _gone(_: Request, exc: ClientGone) -> Response:
        return Response(status_code=499)  # nginx's "client closed request": nobody reads it

    @app.exception_handler(RequestError)
    async def _req(_: Request, exc: RequestError) -> JSONResponse:
        return _error(400, str(exc), "invalid_request_error", exc.param, exc.code)

    def check_model(name: str) -> None:
        if name != engine.name:
            raise ApiError(
                404, f"The model `{name}` does not exist.", param="model", code="model_not_found"
            )

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok", "model": engine.name}

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(generate_latest(engine.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        card = {
            "id": engine.name,
            "object": "model",
            "created": 0,
            "owned_by": "noc-assistant",
            "max_model_len": engine.context,
        }
        return {"object": "list", "data": [card]}

    def admit() -> None:
        """429 when ``max_waiting`` requests already wait (checked again on queueing)."""
        if queued >= max_waiting:
            raise ApiError(
                429,
                f"the server is busy: {queued} requests are waiting; retry later",
                type_="rate_limit_error",
                code="queue_full",
                headers={"Retry-After": "1"},
            )

    async def watch(request: Request, gone: asyncio.Event, stop: threading.Event) -> None:
        """Set ``gone`` and ``stop`` once the client has disconnected."""
        while not await request.is_disconnected():
            await asyncio.sleep(disconnect_poll_s)
        gone.set()
        stop.set()

    async def enter_queue(gone: asyncio.Event) -> None:
        """Wait for ``queue_lock``; :class:`ClientGone` (lock not held) if the client leaves
        first, so a request whose client left never starts."""
        nonlocal queued
        admit()
        queued += 1
        waiting.inc()
        acq = asyncio.ensure_future(queue_lock.acquire())
        left = asyncio.ensure_future(gone.wait())
        held = False
        try:
            await asyncio.wait({acq, left}, return_when=asyncio.FIRST_COMPLETED)
            held = acq.done() and not acq.cancelled()
        finally:
            queued -= 1
            waiting.dec()
            left.cancel()
            if not acq.done():
                acq.cancel()
            elif not acq.cancelled() and not held:  # granted while we were being cancelled
                queue_lock.release()
        if gone.is_set() or not held:
            if held:
                queue_lock.release()
            raise ClientGone

    async def run_stream(
        req: GenRequest, stats: GenerationStats, request: Request | None = None
    ) -> AsyncGenerator[list[int], None]:
        """Queue behind other requests, then pump the engine's thread into this coroutine.

        The worker checks ``stop_flag`` after every decode round: it is set when the consumer
        stops (a stop string, a closed stream) or the client disconnects (``watch``)."""
        loop = asyncio.get_running_loop()
        q: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        stop_flag = threading.Event()
        gone = asyncio.Event()

        def work() -> None:
            gen = engine.stream(req, stats)
            try:
                for part in gen:
                    loop.call_soon_threadsafe(q.put_nowait, ("tok", part))
                    if stop_flag.is_set():
                        break
                loop.call_soon_threadsafe(q.put_nowait, ("end", None))
            except Exception as exc:  # handed to the request coroutine
                loop.call_soon_threadsafe(q.put_nowait, ("err", exc))
            finally:
                close = getattr(gen, "close", None)
                if close is not None:
                    close()  # releases the engine lock now, not when collected

        watcher = (
            asyncio.create_task(watch(request, gone, stop_flag)) if request is not None else None
        )
        try:
            await enter_queue(gone)
            try:
                fut = loop.run_in_executor(None, work)
                try:
                    while True:
                        kind, val = await q.get()
                        if kind == "tok":
                            yield val
                        elif kind == "err":
                            raise val
                        else:
                            break
                finally:
                    stop_flag.set()
                    await fut
            finally:
                queue_lock.release()
            if gone.is_set():
                raise ClientGone
        finally:
            if watcher is not None:
                watcher.cancel()

    def prepare(body: _Common, prompt: list[int]) -> GenRequest:
        check_model(body.model)
        mt = body.max_tokens
        if isinstance(body, ChatRequest) and body.max_completion_tokens is not None:
            mt = body.max_completion_tokens
        req = GenRequest(prompt, mt or max_tokens_default, body.temperature, body.seed)
        return engine.check(req)

    def compile_json(schema: Any, param: str) -> None:
        Constraint.compile(engine.target, json_schema_grammar(schema, param=param), param=param)

    def blame(plan: _ChatPlan) -> None:
        """Raise the error of the schema that made the tools grammar invalid (if one alone)."""
        if plan.content_schema is not None:
            compile_json(plan.content_schema, "response_format")
        for t in plan.tools:
            try:
                compile_json(t.call_schema(), "tools")
            except RequestError as exc:
                why = str(exc).removeprefix("invalid tools: ")
                raise RequestError(
                    f"invalid parameters of tool {t.name!r}: {why}", param="tools"
                ) from None

    async def constrain(req: GenRequest, grammar: str | None, param: str, plan: _ChatPlan) -> None:
        """Compile ``grammar`` into ``req.constraint`` off the event loop (a 400 if invalid)."""
        if grammar is None:
            return
        try:
            req.constraint = await asyncio.to_thread(
                Constraint.compile, engine.target, grammar, param=param
            )
        except RequestError:
            if param == "tools":  # name the schema at fault
                await asyncio.to_thread(blame, plan)
            raise

    def encode_messages(msgs: list[dict[str, str]]) -> list[int]:
        """Chat prompt ids; ``tool`` messages become ``user`` ones where the template refuses."""
        try:
            return engine.encode_chat(msgs)
        except (TemplateError, ValueError, TypeError, KeyError):
            if not any(m["role"] == "tool" for m in msgs):
                raise
        return engine.encode_chat(
            [{**m, "role": "user"} if m["role"] == "tool" else m for m in msgs]
        )

    def extension(st: GenerationStats) -> dict[str, Any]:
        e = engine.energy(st)
        return {
            "spec": {
                "rounds": st.rounds,
                "draft_tokens": st.draft_tokens,
                "accepted_tokens": st.accepted_tokens,
                "mean_accept_length": st.mean_accept_length,
            },
            "energy_j": {"prefill": e.prefill, "kv_read": e.kv_read, "per_token": e.per_token},
            "constrained": st.constrained,
            "forced_tokens": st.forced_tokens,
        }

    def usage(st: GenerationStats) -> dict[str, int]:
        return {
            "prompt_tokens": st.prompt_tokens,
            "completion_tokens": st.output_tokens,
            "total_tokens": st.prompt_tokens + st.output_tokens,
        }

    async def complete(
        req: GenRequest, stops: list[str], request: Request
    ) -> tuple[str, str, GenerationStats]:
        st = GenerationStats()
        toks: list[int] = []
        text = ""
        reason: str | None = None
        async with aclosing(run_stream(req, st, request)) as parts:  # a break frees the lock now
            async for part in parts:
                toks += part
                text = engine.target.tokenizer.decode(toks)
                cut = _first_stop(text, stops)
                if cut is not None:
                    text, reason = text[:cut], "stop"
                    break
        return text, reason or st.finish_reason, st

    async def sse(
        req: GenRequest,
        stops: list[str],
        chat: bool,
        body: _Common,
        request: Request,
        tool_mode: bool = False,
    ) -> AsyncIterator[str]:
        """SSE chunks; with ``tool_mode`` a reply that begins with ``<`` (a tool call: the
        grammar keeps content from beginning so) is held back and sent as one final delta."""
        st = GenerationStats()
        rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex[:24]
        created = int(time.time())
        obj = "chat.completion.chunk" if chat else "text_completion"

        def chunk(
            delta: str | None,
            reason: str | None,
            role: bool = False,
            tool_call: dict[str, Any] | None = None,
        ) -> str:
            if chat:
                d: dict[str, Any] = {}
                if role:
                    d["role"] = "assistant"
                if delta is not None:
                    d["content"] = delta
                if tool_call is not None:
                    d["tool_calls"] = [{"index": 0, **tool_call}]
                choice: dict[str, Any] = {"index": 0, "delta": d, "finish_reason": reason}
            else:
                choice = {
                    "index": 0,
                    "text": delta or "",
                    "finish_reason": reason,
                    "logprobs": None,
                }
            msg = {
                "id": rid,
                "object": obj,
                "created": created,
                "model": engine.name,
                "choices": [choice],
            }
            return f"data: {json.dumps(msg)}\n\n"

        if chat:
            yield chunk("", None, role=True)
        toks: list[int] = []
        sent = text = ""
        reason: str | None = None
        holding: bool | None = None if tool_mode else False  # None: not known yet
        try:
            async for part in run_stream(req, st, request):
                toks += part
                text = engine.target.tokenizer.decode(toks)
                cut = _first_stop(text, stops)
                if cut is not None:
                    text, reason = text[:cut], "stop"
                if holding is None and text:
                    holding = text.startswith("<")
                if holding is not False:  # maybe a tool call: sent whole at the end
                    if reason is None:
                        continue
                    break
                if text.endswith("\ufffd") and reason is None:
                    continue  # wait for the rest of a multi-byte character
                # hold back a tail that may still grow into a stop string
                safe = text if reason is not None else text[: len(text) - _stop_prefix(text, stops)]
                if len(safe) > len(sent):
                    yield chunk(safe[len(sent) :], None)
                    sent = safe
                if reason is not None:
                    break
        except ClientGone:
            return
        except (RequestError, ApiError) as exc:  # a 429 here: the queue filled since admit()
            api = exc if isinstance(exc, ApiError) else None
            err = {
                "error": {
                    "message": api.message if api else str(exc),
                    "type": api.type if api else "invalid_request_error",
                    "param": exc.param,
                    "code": exc.code,
                }
            }
            yield f"data: {json.dumps(err)}\n\n"
            return
        call = _tool_call_message(text) if holding else None
        if call is not None:
            yield chunk(None, None, tool_call=call)
            reason = "tool_calls"
        elif len(text) > len(sent):
            yield chunk(text[len(sent) :], None)
        yield chunk(None if chat else "", reason or st.finish_reason)
        if body.stream_options is not None and body.stream_options.include_usage:
            msg = {
                "id": rid,
                "object": obj,
                "created": created,
                "model": engine.name,
                "choices": [],
                "usage": usage(st),
                "noc": extension(st),
            }
            yield f"data: {json.dumps(msg)}\n\n"
        yield "data: [DONE]\n\n"

    def plan_and_encode(body: ChatRequest) -> tuple[_ChatPlan, list[int]]:
        plan = _plan_chat(body)
        return plan, encode_messages(plan.messages)

    @app.post("/v1/chat/completions", response_model=None)
    async def chat(body: ChatRequest, request: Request) -> JSONResponse | StreamingResponse:
        check_model(body.model)
        admit()  # before tokenising: a full queue costs the server nothing more
        plan, prompt = await asyncio.to_thread(plan_and_encode, body)
        req = prepare(body, prompt)
        await constrain(req, plan.grammar, plan.param, plan)
        stops = _stops(body.stop)
        if body.stream:
            admit()
            return StreamingResponse(
                sse(req, stops, True, body, request, plan.tool_mode),
                media_type="text/event-stream",
            )
        text, reason, st = await complete(req, stops, request)
        message: dict[str, Any] = {"role": "assistant", "content": text}
        call = _tool_call_message(text) if plan.tool_mode else None
        if call is not None:
            message = {"role": "assistant", "content": None, "tool_calls": [call]}
            reason = "tool_calls"
        return JSONResponse(
            {
                "id": "chatcmpl-" + uuid.uuid4().hex[:24],
                "object": "chat.completion",
                "created": int(time.time()),
                "model": engine.name,
                "choices": [
                    {
                        "index": 0,
                        "message": message,
                        "finish_reason": reason,
                        "logprobs": None,
                    }
                ],
                "usage": usage(st),
                "noc": extension(st),
            }
        )

    @app.post("/v1/completions", response_model=None)
    async def completions(
        body: CompletionRequest, request: Request
    ) -> JSONResponse | StreamingResponse:
        check_model(body.model)
        prompt = body.prompt
        if isinstance(prompt, list):
            if len(prompt) != 1:
                raise ApiError(400, "only one prompt per request is supported", param="prompt")
            prompt = prompt[0]
        admit()
        req = prepare(body, await asyncio.to_thread(engine.target.tokenizer.encode, prompt))
        rf = body.response_format.model_dump() if body.response_format is not None else None
        schema = response_format_schema(rf)
        if schema is not None:
            grammar = json_schema_grammar(schema, param="response_format")
            await constrain(req, grammar, "response_format", _ChatPlan([]))
        stops = _stops(body.stop)
        if body.stream:
            admit()
            return StreamingResponse(
                sse(req, stops, False, body, request), media_type="text/event-stream"
            )
        text, reason, st = await complete(req, stops, request)
        return JSONResponse(
            {
                "id": "cmpl-" + uuid.uuid4().hex[:24],
                "object": "text_completion",
                "created": int(time.time()),
                "model": engine.name,
                "choices": [{"index": 0, "text": text, "finish_reason": reason, "logprobs": None}],
                "usage": usage(st),
                "noc": extension(st),
            }
        )

    return app


def _stop_prefix(text: str, stops: list[str]) -> int:
    r"""Length of the longest tail of ``text`` that begins some stop string (not all of it).

    A stream must not send those characters yet: the next tokens may complete the stop string,
    which the client must never see.

    >>> _stop_prefix("the answer is 42\n\nUs", ["\n\nUser:"])
    4
    >>> _stop_prefix("done.", ["STOP"]), _stop_prefix("x ST", ["STOP", "T"])
    (0, 2)
    """
    best = 0
    for stop in stops:
        for n in range(min(len(stop) - 1, len(text)), best, -1):
            if text.endswith(stop[:n]):
                best = n
                break
    return best


def _first_stop(text: str, stops: list[str]) -> int | None:
    """Index where the earliest stop string starts, or None.

    >>> _first_stop("a b STOP c", ["STOP", "c"])
    4
    """
    hits = [i for i in (text.find(s) for s in stops) if i >= 0]
    return min(hits) if hits else None


class ServerThread:
    """Runs uvicorn for ``app`` in a daemon thread on ``host:port`` (port 0 = any free one)."""

    def __init__(self, app: FastAPI, host: str = "127.0.0.1", port: int = 0) -> None:
        import uvicorn

        self.config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="off")
        self.server = uvicorn.Server(self.config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def port(self) -> int:
        servers = getattr(self.server, "servers", [])
        for s in servers:
            for sock in s.sockets:
                return int(sock.getsockname()[1])
        return int(self.config.port)

    def start(self, timeout: float = 30.0) -> ServerThread:
        self.thread.start()
        t0 = time.monotonic()
        while not self.server.started:
            if time.monotonic() - t0 > timeout or not self.thread.is_alive():
                raise ServingError("uvicorn did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
