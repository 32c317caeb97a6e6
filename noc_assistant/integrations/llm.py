"""The LLM client side: the only module that talks to an OpenAI-compatible endpoint (the
built-in server in ``noc_assistant.serving`` or any other).

:class:`LlmClient` sends chat messages and returns the answer's text. It never retries on its
own (a NOC user waits for a report; the caller falls back to the template instead), and every
failure — the endpoint unreachable, a timeout, an error status, an empty answer — is an
:class:`~noc_assistant.errors.LlmError` naming the endpoint, never the API key.

What goes into the messages is the drafting stage's business (:mod:`noc_assistant.triage.drafting`):
identifiers masked, untrusted text wrapped as data. This module sends what it is given.

>>> from noc_assistant.settings import Settings
>>> client = LlmClient.from_settings(Settings(llm_base_url="http://127.0.0.1:1/v1"))
>>> client.model, client.base_url
('smollm2-135m-instruct', 'http://127.0.0.1:1/v1')
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypedDict

import openai

from noc_assistant.errors import LlmError

if TYPE_CHECKING:
    from noc_assistant.settings import Settings

__all__ = ["Answer", "LlmClient", "Message", "ToolCall"]


class Message(TypedDict):
    """One chat message, as the OpenAI chat API takes it."""

    role: Literal["system", "user", "assistant"]
    content: str


@dataclass(frozen=True)
class ToolCall:
    """One function call the model asked for (``arguments`` as the JSON text it wrote)."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class Answer:
    """The model's text (or the tool calls it asked for), why it stopped, and the token
    counts it reported."""

    text: str
    finish_reason: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    tool_calls: tuple[ToolCall, ...] = ()


@dataclass
class LlmClient:
    """A chat client for one model on one OpenAI-compatible endpoint (greedy by default:
    a report drafted twice from the same evidence reads the same)."""

    base_url: str
    model: str
    api_key: str = field(default="local", repr=False)
    timeout_s: float = 120.0
    max_tokens: int = 200
    temperature: float = 0.0
    _client: Any = field(default=None, init=False, repr=False)

    @classmethod
    def from_settings(cls, settings: Settings) -> LlmClient:
        """The client for ``NOC_LLM_BASE_URL`` / ``NOC_LLM_MODEL`` / ``NOC_LLM_API_KEY``."""
        return cls(
            base_url=settings.llm_base_url,
            model=settings.llm_model,
            api_key=settings.llm_api_key.get_secret_value(),
            timeout_s=settings.llm_timeout_s,
        )

    def _openai(self) -> openai.OpenAI:
        if self._client is None:
            self._client = openai.OpenAI(
                base_url=self.base_url,
                api_key=self.api_key,
                timeout=self.timeout_s,
                max_retries=0,
            )
        client: openai.OpenAI = self._client
        return client

    def _failure(self, exc: openai.OpenAIError, asked: str, timeout_s: float) -> LlmError:
        """What went wrong asking ``asked``, naming the endpoint (no key, no prompt)."""
        if isinstance(exc, openai.APITimeoutError):  # a kind of connection error: first
            return LlmError(f"{self.base_url}: no answer within {timeout_s:g} s")
        if isinstance(exc, openai.APIConnectionError):
            return LlmError(f"{self.base_url}: cannot connect: {exc.__cause__ or exc}")
        if isinstance(exc, openai.APIStatusError):
            return LlmError(f"{self.base_url}: {asked} answered HTTP {exc.status_code}")
        return LlmError(f"{self.base_url}: {type(exc).__name__}")

    def probe(self, timeout_s: float = 5.0) -> str:
        """Whether the endpoint answers and serves the model (its model list, no generation);
        what it said, or :class:`LlmError` naming the endpoint."""
        try:
            models = self._openai().with_options(timeout=timeout_s).models.list()
            ids = [m.id for m in models.data]
        except openai.OpenAIError as exc:
            raise self._failure(exc, "the model list", timeout_s) from None
        if self.model not in ids:
            raise LlmError(
                f"{self.base_url}: serves {', '.join(ids) or 'no model'}, not {self.model!r}"
            )
        return f"serves {self.model}"

    def chat(self, messages: Sequence[Message], max_tokens: int | None = None) -> Answer:
        """Send ``messages``; the answer (:class:`LlmError` when there is none)."""
        return self.complete(messages, max_tokens=max_tokens)

    def complete(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        schema: Mapping[str, Any] | None = None,
        schema_name: str = "answer",
        tools: Sequence[Mapping[str, Any]] = (),
        tool_choice: str | Mapping[str, Any] | None = None,
        max_tokens: int | None = None,
        timeout_s: float | None = None,
        frequency_penalty: float = 0.0,
    ) -> Answer:
        """Send ``messages`` (OpenAI chat messages, tool calls and tool results included).

        With ``schema``, the answer must be a JSON object of that JSON Schema
        (``response_format: {"type": "json_schema", ..., "strict": true}``, which the built-in
        server, vLLM and SGLang all decode under); with ``tools``, the model may instead ask
        for one of them (``tool_choice``: ``auto``, ``required``, ``none`` or one function).
        ``frequency_penalty`` (OpenAI's; vLLM, SGLang and the built-in server apply it) lowers
        the logit of a token by that much for each time it is already in the answer.
        An answer with neither text nor a tool call is an :class:`LlmError`.
        """
        extra: dict[str, Any] = {}
        if frequency_penalty:
            extra["frequency_penalty"] = frequency_penalty
        if schema is not None:
            extra["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": schema_name, "schema": dict(schema), "strict": True},
            }
        if tools:
            extra["tools"] = [dict(t) for t in tools]
            extra["tool_choice"] = tool_choice or "auto"
            extra["parallel_tool_calls"] = False
        wait = timeout_s or self.timeout_s
        try:
            r = (
                self._openai()
                .with_options(timeout=wait)
                .chat.completions.create(
                    model=self.model,
                    messages=[dict(m) for m in messages],  # type: ignore[misc]
                    max_tokens=max_tokens or self.max_tokens,
                    temperature=self.temperature,
                    **extra,
                )
            )
        except openai.OpenAIError as exc:
            raise self._failure(exc, f"model {self.model!r}", wait) from None
        message = r.choices[0].message if r.choices else None
        calls = tuple(
            ToolCall(c.id, c.function.name, c.function.arguments or "{}")
            for c in (message.tool_calls or [] if message is not None else [])
            if c.type == "function"
        )
        text = (message.content or "") if message is not None else ""
        if not text.strip() and not calls:
            raise LlmError(f"{self.base_url}: model {self.model!r} gave an empty answer")
        usage = r.usage
        return Answer(
            text=text,
            finish_reason=r.choices[0].finish_reason or "",
            prompt_tokens=usage.prompt_tokens if usage else 0,
            completion_tokens=usage.completion_tokens if usage else 0,
            tool_calls=calls,
        )
