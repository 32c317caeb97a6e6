"""OpenAI-compatible HTTP server over an :class:`~noc_assistant.serving.engine.Engine`.

Routes: ``POST /v1/chat/completions`` and ``POST /v1/completions`` (SSE streaming or not),
``GET /v1/models``, ``GET /health``, ``GET /metrics`` (Prometheus text).

Up to ``engine.max_running`` requests run at once, each in a worker thread (their decoding
steps share forwards: :mod:`~noc_assistant.serving.batching`); the others queue. Errors
come back as OpenAI error bodies ``{"error": {"message", "type", "param", "code"}}`` with 4xx
codes: 400 for malformed JSON, wrong types, a ``seed`` outside 0..2**63-1 and prompts longer
than the context, 404 for an unknown model.

Load is bounded, because one slow model is shared by every client: a body over
``max_body_bytes`` (1 MiB) is refused with 413 before it is parsed; at most ``max_waiting``
(16) requests wait behind the running ones, the next gets 429 with ``Retry-After``; parsing,
tokenisation and grammar compilation run in worker threads so ``/health`` (an async route that
takes no lock) answers while a big prompt is tokenised. A client that goes away is noticed
(``request.is_disconnected()`` polled while queued and while generating): a queued request
never starts, a running one stops after the decode round in flight.

``temperature`` defaults to 0 (greedy, lossless speculative decoding). ``n`` (up to 8) choices
run at once, each in a queue slot, choice i sampling with ``seed + i``; streamed, their chunks
interleave (:mod:`~noc_assistant.serving.sse`); ``usage`` counts the prompt once and the
completions of every choice. With a :class:`~noc_assistant.serving.traffic.TrafficLog`
(``noc llm serve --record FILE``) every answered non-streamed request is appended to the log.
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
import threading
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from dataclasses import replace
from typing import Any, NamedTuple

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from jinja2 import TemplateError
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from noc_assistant.serving.engine import Engine
from noc_assistant.serving.engine import Request as GenRequest
from noc_assistant.serving.errors import RequestError, ServingError
from noc_assistant.serving.grammar import Constraint, json_schema_grammar, response_format_schema
from noc_assistant.serving.openai_api import (
    ApiError,
    BodyLimit,
    ChatPlan,
    ChatRequest,
    ClientGone,
    CommonRequest,
    CompletionRequest,
    error_response,
    first_stop,
    plan_chat,
    stops_of,
    tool_call_message,
)
from noc_assistant.serving.penalties import Penalties
from noc_assistant.serving.speculative import GenerationStats
from noc_assistant.serving.sse import Choices
from noc_assistant.serving.traffic import TrafficLog

__all__ = ["BodyLimit", "ClientGone", "ServerThread", "create_app"]


class _Done(NamedTuple):
    """One finished choice of a non-streamed answer."""

    text: str
    reason: str
    stats: GenerationStats
    tokens: list[int]


class _Service:
    """The server's state and steps: the queue in front of the engine, request preparation
    and the two response shapes (one JSON body, or SSE chunks)."""

    def __init__(
        self,
        engine: Engine,
        max_tokens_default: int,
        max_waiting: int,
        disconnect_poll_s: float,
        traffic: TrafficLog | None = None,
    ) -> None:
        self.engine = engine
        self.traffic = traffic
        self.max_tokens_default = max_tokens_default
        self.max_waiting = max_waiting
        self.disconnect_poll_s = disconnect_poll_s
        self.queue_lock = asyncio.Semaphore(engine.max_running)
        self.waiting = engine.metrics.waiting.labels(engine.name)
        self.queued = 0  # requests waiting for queue_lock (the gauge is for Prometheus only)

    def check_model(self, name: str) -> None:
        if name != self.engine.name:
            raise ApiError(
                404, f"The model `{name}` does not exist.", param="model", code="model_not_found"
            )

    def admit(self) -> None:
        """429 when ``max_waiting`` requests already wait (checked again on queueing)."""
        if self.queued >= self.max_waiting:
            raise ApiError(
                429,
                f"the server is busy: {self.queued} requests are waiting; retry later",
                type_="rate_limit_error",
                code="queue_full",
                headers={"Retry-After": "1"},
            )

    async def watch(self, request: Request, gone: asyncio.Event, stop: threading.Event) -> None:
        """Set ``gone`` and ``stop`` once the client has disconnected."""
        while not await request.is_disconnected():
            await asyncio.sleep(self.disconnect_poll_s)
        gone.set()
        stop.set()

    async def enter_queue(self, gone: asyncio.Event) -> None:
        """Wait for a ``queue_lock`` slot; :class:`ClientGone` (none held) if the client leaves
        first, so a request whose client left never starts."""
        self.admit()
        self.queued += 1
        self.waiting.inc()
        acq = asyncio.ensure_future(self.queue_lock.acquire())
        left = asyncio.ensure_future(gone.wait())
        held = False
        try:
            await asyncio.wait({acq, left}, return_when=asyncio.FIRST_COMPLETED)
            held = acq.done() and not acq.cancelled()
        finally:
            self.queued -= 1
            self.waiting.dec()
            left.cancel()
            if not acq.done():
                acq.cancel()
            elif not acq.cancelled() and not held:  # granted while we were being cancelled
                self.queue_lock.release()
        if gone.is_set() or not held:
            if held:
                self.queue_lock.release()
            raise ClientGone

    async def run_stream(
        self, req: GenRequest, stats: GenerationStats, request: Request | None = None
    ) -> AsyncGenerator[list[int], None]:
        """Queue behind other requests, then pump the engine's thread into this coroutine.

        The worker checks ``stop_flag`` after every decode round: it is set when the consumer
        stops (a stop string, a closed stream) or the client disconnects (``watch``)."""
        loop = asyncio.get_running_loop()
        q: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        stop_flag = threading.Event()
        gone = asyncio.Event()

        def work() -> None:
            gen = self.engine.stream(req, stats)
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
            asyncio.create_task(self.watch(request, gone, stop_flag))
            if request is not None
            else None
        )
        try:
            await self.enter_queue(gone)
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
                self.queue_lock.release()
            if gone.is_set():
                raise ClientGone
        finally:
            if watcher is not None:
                watcher.cancel()

    def prepare(self, body: CommonRequest, prompt: list[int]) -> GenRequest:
        self.check_model(body.model)
        mt = body.max_tokens or self.max_tokens_default
        if isinstance(body, ChatRequest) and body.max_completion_tokens is not None:
            mt = body.max_completion_tokens
        pen = Penalties(body.frequency_penalty, body.presence_penalty)
        return self.engine.check(GenRequest(prompt, mt, body.temperature, body.seed, None, pen))

    def compile_json(self, schema: Any, param: str) -> None:
        grammar = json_schema_grammar(schema, param=param)
        Constraint.compile(self.engine.target, grammar, param=param)

    def blame(self, plan: ChatPlan) -> None:
        """Raise the error of the schema that made the tools grammar invalid (if one alone)."""
        if plan.content_schema is not None:
            self.compile_json(plan.content_schema, "response_format")
        for t in plan.tools:
            try:
                self.compile_json(t.call_schema(), "tools")
            except RequestError as exc:
                why = str(exc).removeprefix("invalid tools: ")
                raise RequestError(
                    f"invalid parameters of tool {t.name!r}: {why}", param="tools"
                ) from None

    async def constrain(
        self, req: GenRequest, grammar: str | None, param: str, plan: ChatPlan
    ) -> None:
        """Compile ``grammar`` into ``req.constraint`` off the event loop (a 400 if invalid)."""
        if grammar is None:
            return
        try:
            req.constraint = await asyncio.to_thread(
                Constraint.compile, self.engine.target, grammar, param=param
            )
        except RequestError:
            if param == "tools":  # name the schema at fault
                await asyncio.to_thread(self.blame, plan)
            raise

    def encode_messages(self, msgs: list[dict[str, str]]) -> list[int]:
        """Chat prompt ids; ``tool`` messages become ``user`` ones where the template refuses."""
        try:
            return self.engine.encode_chat(msgs)
        except (TemplateError, ValueError, TypeError, KeyError):
            if not any(m["role"] == "tool" for m in msgs):
                raise
        return self.engine.encode_chat(
            [{**m, "role": "user"} if m["role"] == "tool" else m for m in msgs]
        )

    def plan_and_encode(self, body: ChatRequest) -> tuple[ChatPlan, list[int]]:
        plan = plan_chat(body)
        return plan, self.encode_messages(plan.messages)

    def extension(self, st: GenerationStats) -> dict[str, Any]:
        e = self.engine.energy(st)
        return {
            "spec": {
                "rounds": st.rounds,
                "draft_tokens": st.draft_tokens,
                "accepted_tokens": st.accepted_tokens,
                "mean_accept_length": st.mean_accept_length,
            },
            "energy_j": self.engine.calibration.fields(e, st.measured_j),
            "constrained": st.constrained,
            "forced_tokens": st.forced_tokens,
        }

    @staticmethod
    def usage(sts: list[GenerationStats]) -> dict[str, int]:
        """OpenAI usage of an answer: the prompt once, the completions of every choice."""
        done = sum(st.output_tokens for st in sts)
        return {
            "prompt_tokens": sts[0].prompt_tokens,
            "completion_tokens": done,
            "total_tokens": sts[0].prompt_tokens + done,
        }

    async def complete(self, req: GenRequest, stops: list[str], request: Request) -> _Done:
        """One choice's text, finish reason, counters and generated token ids."""
        st = GenerationStats()
        toks: list[int] = []
        text = ""
        reason: str | None = None
        parts = self.run_stream(req, st, request)
        async with aclosing(parts):  # a break frees the queue slot now
            async for part in parts:
                toks += part
                text = self.engine.target.tokenizer.decode(toks)
                cut = first_stop(text, stops)
                if cut is not None:
                    text, reason = text[:cut], "stop"
                    break
        return _Done(text, reason or st.finish_reason, st, toks)

    def record(
        self,
        endpoint: str,
        body: CommonRequest,
        prompt: list[int],
        done: list[_Done],
    ) -> None:
        if self.traffic is not None:
            self.traffic.write(
                endpoint, body.model_dump(exclude_none=True), prompt, [d.tokens for d in done]
            )

    def sse(
        self,
        reqs: list[GenRequest],
        stops: list[str],
        chat: bool,
        body: CommonRequest,
        request: Request,
        tool_mode: bool = False,
    ) -> AsyncIterator[str]:
        """SSE chunks of every choice; with ``tool_mode`` a reply that begins with ``<`` (a
        tool call: the grammar keeps content from beginning so) is held back and sent as one
        final delta."""
        return Choices(self, chat, body, request).events(reqs, stops, tool_mode)

    async def choices(
        self,
        body: CommonRequest,
        prompt: list[int],
        grammar: str | None,
        param: str,
        plan: ChatPlan,
    ) -> list[GenRequest]:
        """The request of each of the body's ``n`` choices: choice i samples with seed
        ``seed + i`` (so choices differ and the whole answer is reproducible), and each has
        the grammar compiled for it (a constraint is consumed by one generation)."""
        base = self.prepare(body, prompt)
        out = []
        for i in range(body.n):
            seed = None if base.seed is None else (base.seed + i) % 2**63
            req = replace(base, seed=seed)
            await self.constrain(req, grammar, param, plan)
            out.append(req)
        return out

    async def chat(self, body: ChatRequest, request: Request) -> JSONResponse | StreamingResponse:
        self.check_model(body.model)
        self.admit()  # before tokenising: a full queue costs the server nothing more
        plan, prompt = await asyncio.to_thread(self.plan_and_encode, body)
        reqs = await self.choices(body, prompt, plan.grammar, plan.param, plan)
        stops = stops_of(body.stop)
        if body.stream:
            self.admit()
            return StreamingResponse(
                self.sse(reqs, stops, True, body, request, plan.tool_mode),
                media_type="text/event-stream",
            )
        done = await asyncio.gather(*(self.complete(r, stops, request) for r in reqs))
        self.record("chat", body, prompt, done)
        choices = []
        for i, (text, reason, *_) in enumerate(done):
            message: dict[str, Any] = {"role": "assistant", "content": text}
            call = tool_call_message(text) if plan.tool_mode else None
            if call is not None:
                message = {"role": "assistant", "content": None, "tool_calls": [call]}
                reason = "tool_calls"
            choices.append(
                {"index": i, "message": message, "finish_reason": reason, "logprobs": None}
            )
        return self._answer("chatcmpl-", "chat.completion", choices, [d.stats for d in done])

    async def completions(
        self, body: CompletionRequest, request: Request
    ) -> JSONResponse | StreamingResponse:
        self.check_model(body.model)
        prompt = body.prompt
        if isinstance(prompt, list):
            if len(prompt) != 1:
                raise ApiError(400, "only one prompt per request is supported", param="prompt")
            prompt = prompt[0]
        self.admit()
        encode = self.engine.target.tokenizer.encode
        ids = await asyncio.to_thread(encode, prompt)
        rf = body.response_format.model_dump() if body.response_format is not None else None
        schema = response_format_schema(rf)
        grammar = None
        if schema is not None:
            grammar = json_schema_grammar(schema, param="response_format")
        reqs = await self.choices(body, ids, grammar, "response_format", ChatPlan([]))
        stops = stops_of(body.stop)
        if body.stream:
            self.admit()
            return StreamingResponse(
                self.sse(reqs, stops, False, body, request), media_type="text/event-stream"
            )
        done = await asyncio.gather(*(self.complete(r, stops, request) for r in reqs))
        self.record("completions", body, ids, done)
        choices = [
            {"index": i, "text": text, "finish_reason": reason, "logprobs": None}
            for i, (text, reason, *_) in enumerate(done)
        ]
        return self._answer("cmpl-", "text_completion", choices, [d.stats for d in done])

    def _answer(
        self, prefix: str, obj: str, choices: list[dict[str, Any]], sts: list[GenerationStats]
    ) -> JSONResponse:
        return JSONResponse(
            {
                "id": prefix + uuid.uuid4().hex[:24],
                "object": obj,
                "created": int(time.time()),
                "model": self.engine.name,
                "choices": choices,
                "usage": self.usage(sts),
                "noc": self.extension(sts[0]),
            }
        )


def create_app(
    engine: Engine,
    *,
    max_tokens_default: int = 256,
    max_body_bytes: int = 1 << 20,
    max_waiting: int = 16,
    disconnect_poll_s: float = 0.05,
    traffic: TrafficLog | None = None,
) -> FastAPI:
    """Build the FastAPI app serving ``engine`` under the model id ``engine.name``.

    ``max_body_bytes``: larger bodies get 413. ``max_waiting``: how many requests may wait
    behind the running ones (``engine.max_running``) before the next gets 429.
    ``disconnect_poll_s``: how often a request checks that its client is still there.
    ``traffic``: where answered non-streamed requests are logged (none: not logged)."""
    app = FastAPI(title="noc-assistant LLM server")
    app.add_middleware(BodyLimit, limit=max_body_bytes)
    _install_errors(app)
    svc = _Service(engine, max_tokens_default, max_waiting, disconnect_poll_s, traffic)

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

    @app.post("/v1/chat/completions", response_model=None)
    async def chat(body: ChatRequest, request: Request) -> JSONResponse | StreamingResponse:
        return await svc.chat(body, request)

    @app.post("/v1/completions", response_model=None)
    async def completions(
        body: CompletionRequest, request: Request
    ) -> JSONResponse | StreamingResponse:
        return await svc.completions(body, request)

    return app


def _install_errors(app: FastAPI) -> None:
    """OpenAI error bodies for every error a route may raise."""

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        errs = exc.errors()
        first = errs[0] if errs else {}
        loc = [str(x) for x in first.get("loc", ()) if x != "body"]
        if first.get("type") == "json_invalid":
            return error_response(
                400, "request body is not valid JSON", "invalid_request_error", None, None
            )
        msg = f"{'.'.join(loc) or 'body'}: {first.get('msg', 'invalid request')}"
        return error_response(400, msg, "invalid_request_error", ".".join(loc) or None, None)

    @app.exception_handler(ApiError)
    async def _api(_: Request, exc: ApiError) -> JSONResponse:
        return error_response(exc.status, exc.message, exc.type, exc.param, exc.code, exc.headers)

    @app.exception_handler(ClientGone)
    async def _gone(_: Request, exc: ClientGone) -> Response:
        return Response(status_code=499)  # nginx's "client closed request": nobody reads it

    @app.exception_handler(RequestError)
    async def _req(_: Request, exc: RequestError) -> JSONResponse:
        return error_response(400, str(exc), "invalid_request_error", exc.param, exc.code)


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
