"""Streamed answers of the LLM server: OpenAI chunks over server-sent events, one or n choices.

Each choice of a request (``n`` of them) streams its own deltas, tagged with its ``index``;
with n > 1 the choices run at once (their decoding steps share forwards) and their chunks are
sent as they come. A choice whose reply may be a tool call is held back and sent as one final
delta. Usage (``stream_options.include_usage``) comes once, summed over the choices, then
``[DONE]``.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any, Protocol

from noc_assistant.serving.engine import Engine
from noc_assistant.serving.engine import Request as GenRequest
from noc_assistant.serving.errors import RequestError
from noc_assistant.serving.openai_api import (
    ApiError,
    ClientGone,
    CommonRequest,
    first_stop,
    stop_prefix,
    tool_call_message,
)
from noc_assistant.serving.speculative import GenerationStats

__all__ = ["Choices", "Streamed", "error_event"]


class _Service(Protocol):
    engine: Engine

    def run_stream(
        self, req: GenRequest, stats: GenerationStats, request: Any = None
    ) -> AsyncGenerator[list[int], None]: ...

    def usage(self, sts: list[GenerationStats]) -> dict[str, int]: ...

    def extension(self, st: GenerationStats) -> dict[str, Any]: ...


class Choices:
    """One streamed answer: its id, and the chunks of its choices in the OpenAI shape."""

    def __init__(self, svc: _Service, chat: bool, body: CommonRequest, request: Any) -> None:
        self.svc, self.chat, self.body, self.request = svc, chat, body, request
        self.rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex[:24]
        self.created = int(time.time())
        self.obj = "chat.completion.chunk" if chat else "text_completion"

    def chunk(
        self,
        index: int,
        delta: str | None,
        reason: str | None,
        role: bool = False,
        tool_call: dict[str, Any] | None = None,
    ) -> str:
        choice: dict[str, Any]
        if self.chat:
            d: dict[str, Any] = {}
            if role:
                d["role"] = "assistant"
            if delta is not None:
                d["content"] = delta
            if tool_call is not None:
                d["tool_calls"] = [{"index": 0, **tool_call}]
            choice = {"index": index, "delta": d, "finish_reason": reason}
        else:
            choice = {
                "index": index,
                "text": delta or "",
                "finish_reason": reason,
                "logprobs": None,
            }
        return self._data([choice])

    def _data(self, choices: list[dict[str, Any]], **extra: Any) -> str:
        msg = {
            "id": self.rid,
            "object": self.obj,
            "created": self.created,
            "model": self.svc.engine.name,
            "choices": choices,
            **extra,
        }
        return f"data: {json.dumps(msg)}\n\n"

    async def events(
        self, reqs: list[GenRequest], stops: list[str], tool_mode: bool
    ) -> AsyncIterator[str]:
        """Every choice's chunks (interleaved when n > 1), then usage and ``[DONE]``."""
        sts = [GenerationStats() for _ in reqs]
        parts = [
            self.choice(i, r, st, stops, tool_mode)
            for i, (r, st) in enumerate(zip(reqs, sts, strict=True))
        ]
        try:
            if len(parts) == 1:
                async for ev in parts[0]:
                    yield ev
            else:
                async for ev in _merged(parts):
                    yield ev
        except ClientGone:
            return
        except (RequestError, ApiError) as exc:  # a 429 here: the queue filled since admit()
            yield error_event(exc)
            return
        if self.body.stream_options is not None and self.body.stream_options.include_usage:
            yield self._data([], usage=self.svc.usage(sts), noc=self.svc.extension(sts[0]))
        yield "data: [DONE]\n\n"

    async def choice(
        self, index: int, req: GenRequest, st: GenerationStats, stops: list[str], tool_mode: bool
    ) -> AsyncIterator[str]:
        """The chunks of choice ``index``: role, deltas, the finishing chunk."""
        if self.chat:
            yield self.chunk(index, "", None, role=True)
        state = Streamed(stops, holding=None if tool_mode else False)
        decode: Callable[[list[int]], str] = self.svc.engine.target.tokenizer.decode
        parts = self.svc.run_stream(req, st, self.request)
        try:
            async for part in parts:
                delta = state.take(part, decode)
                if delta:
                    yield self.chunk(index, delta, None)
                if state.reason is not None:
                    break
        finally:
            await parts.aclose()  # a break frees the queue slot now
        call = tool_call_message(state.text) if state.holding else None
        reason = state.reason
        if call is not None:
            yield self.chunk(index, None, None, tool_call=call)
            reason = "tool_calls"
        elif len(state.text) > len(state.sent):
            yield self.chunk(index, state.text[len(state.sent) :], None)
        yield self.chunk(index, None if self.chat else "", reason or st.finish_reason)


async def _merged(gens: list[AsyncIterator[str]]) -> AsyncIterator[str]:
    """The items of several async iterators as they come; the first error stops them all."""
    q: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()

    async def pump(g: AsyncIterator[str]) -> None:
        try:
            async for item in g:
                await q.put(("item", item))
            await q.put(("end", None))
        except Exception as exc:  # handed to the consumer
            await q.put(("err", exc))

    tasks = [asyncio.create_task(pump(g)) for g in gens]
    try:
        left = len(tasks)
        while left:
            kind, val = await q.get()
            if kind == "item":
                yield val
            elif kind == "err":
                raise val
            else:
                left -= 1
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


class Streamed:
    """What a stream has decoded and sent: the text, the part already out, a stop reason, and
    whether the reply is held back whole (a possible tool call; None until its first
    character says)."""

    def __init__(self, stops: list[str], holding: bool | None) -> None:
        self.stops, self.holding = stops, holding
        self.toks: list[int] = []
        self.text = self.sent = ""
        self.reason: str | None = None

    def take(self, part: list[int], decode: Any) -> str:
        """Add decoded tokens; the text that may be sent now ('' for none yet)."""
        self.toks += part
        self.text = decode(self.toks)
        cut = first_stop(self.text, self.stops)
        if cut is not None:
            self.text, self.reason = self.text[:cut], "stop"
        if self.holding is None and self.text:
            self.holding = self.text.startswith("<")
        if self.holding is not False:  # maybe a tool call: sent whole at the end
            return ""
        if self.text.endswith("\ufffd") and self.reason is None:
            return ""  # wait for the rest of a multi-byte character
        # hold back a tail that may still grow into a stop string
        safe = self.text
        if self.reason is None:
            safe = self.text[: len(self.text) - stop_prefix(self.text, self.stops)]
        if len(safe) <= len(self.sent):
            return ""
        delta, self.sent = safe[len(self.sent) :], safe
        return delta


def error_event(exc: RequestError | ApiError) -> str:
    api = exc if isinstance(exc, ApiError) else None
    err = {
        "error": {
            "message": api.message if api else str(exc),
            "type": api.type if api else "invalid_request_error",
            "param": exc.param,
            "code": exc.code,
        }
    }
    return f"data: {json.dumps(err)}\n\n"
