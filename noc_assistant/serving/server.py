"""OpenAI-compatible HTTP server over an :class:`~noc_assistant.serving.engine.Engine`.

Routes: ``POST /v1/chat/completions`` and ``POST /v1/completions`` (SSE streaming or not),
``GET /v1/models``, ``GET /health``, ``GET /metrics`` (Prometheus text).

Requests are queued behind an asyncio lock and run one at a time in a worker thread. Errors
come back as OpenAI error bodies ``{"error": {"message", "type", "param", "code"}}`` with 4xx
codes: 400 for malformed JSON, wrong types and prompts longer than the context, 404 for an
unknown model. ``temperature`` defaults to 0 (greedy, lossless speculative decoding).
Responses carry ``usage`` and, as an extension, ``noc`` (speculative-decoding counters and the
SIMPLE energy estimate).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any, Literal

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel, ConfigDict, Field

from noc_assistant.serving.engine import Engine
from noc_assistant.serving.engine import Request as GenRequest
from noc_assistant.serving.errors import RequestError, ServingError
from noc_assistant.serving.speculative import GenerationStats

__all__ = ["ServerThread", "create_app"]


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")
    role: Literal["system", "user", "assistant", "tool", "developer"]
    content: str


class StreamOptions(BaseModel):
    include_usage: bool = False


class _Common(BaseModel):
    model_config = ConfigDict(extra="ignore")
    model: str
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    seed: int | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    stop: str | list[str] | None = None
    n: int = Field(default=1, ge=1, le=1)


class ChatRequest(_Common):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)


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
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = (
            status,
            message,
            type_,
            param,
            code,
        )


def _error(
    status: int, message: str, type_: str, param: str | None, code: str | None
) -> JSONResponse:
    body = {"error": {"message": message, "type": type_, "param": param, "code": code}}
    return JSONResponse(status_code=status, content=body)


def _stops(stop: str | list[str] | None) -> list[str]:
    if stop is None:
        return []
    return [stop] if isinstance(stop, str) else [s for s in stop if s]


def create_app(engine: Engine, *, max_tokens_default: int = 256) -> FastAPI:
    """Build the FastAPI app serving ``engine`` under the model id ``engine.name``."""
    app = FastAPI(title="noc-assistant LLM server")
    queue_lock = asyncio.Lock()
    waiting = engine.metrics.waiting.labels(engine.name)

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
        return _error(exc.status, exc.message, exc.type, exc.param, exc.code)

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

    async def run_stream(req: GenRequest, stats: GenerationStats) -> AsyncIterator[list[int]]:
        """Queue behind other requests, then pump the engine's thread into this coroutine."""
        loop = asyncio.get_running_loop()
        q: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        stop_flag = threading.Event()

        def work() -> None:
            try:
                for part in engine.stream(req, stats):
                    loop.call_soon_threadsafe(q.put_nowait, ("tok", part))
                    if stop_flag.is_set():
                        break
                loop.call_soon_threadsafe(q.put_nowait, ("end", None))
            except Exception as exc:  # handed to the request coroutine
                loop.call_soon_threadsafe(q.put_nowait, ("err", exc))

        waiting.inc()
        try:
            await queue_lock.acquire()
        finally:
            waiting.dec()
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

    def prepare(body: _Common, prompt: list[int]) -> GenRequest:
        check_model(body.model)
        mt = body.max_tokens
        if isinstance(body, ChatRequest) and body.max_completion_tokens is not None:
            mt = body.max_completion_tokens
        req = GenRequest(prompt, mt or max_tokens_default, body.temperature, body.seed)
        return engine.check(req)

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
        }

    def usage(st: GenerationStats) -> dict[str, int]:
        return {
            "prompt_tokens": st.prompt_tokens,
            "completion_tokens": st.output_tokens,
            "total_tokens": st.prompt_tokens + st.output_tokens,
        }

    async def complete(req: GenRequest, stops: list[str]) -> tuple[str, str, GenerationStats]:
        st = GenerationStats()
        toks: list[int] = []
        text = ""
        reason: str | None = None
        async for part in run_stream(req, st):
            toks += part
            text = engine.target.tokenizer.decode(toks)
            cut = _first_stop(text, stops)
            if cut is not None:
                text, reason = text[:cut], "stop"
                break
        return text, reason or st.finish_reason, st

    async def sse(
        req: GenRequest, stops: list[str], chat: bool, body: _Common
    ) -> AsyncIterator[str]:
        st = GenerationStats()
        rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex[:24]
        created = int(time.time())
        obj = "chat.completion.chunk" if chat else "text_completion"

        def chunk(delta: str | None, reason: str | None, role: bool = False) -> str:
            if chat:
                d: dict[str, Any] = {}
                if role:
                    d["role"] = "assistant"
                if delta is not None:
                    d["content"] = delta
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
        try:
            async for part in run_stream(req, st):
                toks += part
                text = engine.target.tokenizer.decode(toks)
                cut = _first_stop(text, stops)
                if cut is not None:
                    text, reason = text[:cut], "stop"
                if text.endswith("\ufffd") and reason is None:
                    continue  # wait for the rest of a multi-byte character
                # hold back a tail that may still grow into a stop string
                safe = text if reason is not None else text[: len(text) - _stop_prefix(text, stops)]
                if len(safe) > len(sent):
                    yield chunk(safe[len(sent) :], None)
                    sent = safe
                if reason is not None:
                    break
        except RequestError as exc:
            err = {
                "error": {
                    "message": str(exc),
                    "type": "invalid_request_error",
                    "param": exc.param,
                    "code": exc.code,
                }
            }
            yield f"data: {json.dumps(err)}\n\n"
            return
        if len(text) > len(sent):
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

    @app.post("/v1/chat/completions", response_model=None)
    async def chat(body: ChatRequest) -> JSONResponse | StreamingResponse:
        check_model(body.model)
        msgs = [{"role": m.role, "content": m.content} for m in body.messages]
        req = prepare(body, engine.encode_chat(msgs))
        stops = _stops(body.stop)
        if body.stream:
            return StreamingResponse(sse(req, stops, True, body), media_type="text/event-stream")
        text, reason, st = await complete(req, stops)
        return JSONResponse(
            {
                "id": "chatcmpl-" + uuid.uuid4().hex[:24],
                "object": "chat.completion",
                "created": int(time.time()),
                "model": engine.name,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": text},
                        "finish_reason": reason,
                        "logprobs": None,
                    }
                ],
                "usage": usage(st),
                "noc": extension(st),
            }
        )

    @app.post("/v1/completions", response_model=None)
    async def completions(body: CompletionRequest) -> JSONResponse | StreamingResponse:
        check_model(body.model)
        prompt = body.prompt
        if isinstance(prompt, list):
            if len(prompt) != 1:
                raise ApiError(400, "only one prompt per request is supported", param="prompt")
            prompt = prompt[0]
        req = prepare(body, engine.target.tokenizer.encode(prompt))
        stops = _stops(body.stop)
        if body.stream:
            return StreamingResponse(sse(req, stops, False, body), media_type="text/event-stream")
        text, reason, st = await complete(req, stops)
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
