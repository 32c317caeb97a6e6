"""The LLM client side: the only module that talks to an OpenAI-compatible endpoint (the
built-in server in ``noc_assistant.serving`` or any other).

:class:`LlmClient` sends chat messages and returns the answer's text. It never retries on its
own (a NOC user waits for a report; the caller falls back to the template instead), and every
failure — the endpoint unreachable, a timeout, an error status, an empty answer — is an
:class:`~noc_assistant.errors.LlmError` naming the endpoint, never the API key.

What goes into the messages is the drafting stage's business (:mod:`noc_assistant.drafting`):
identifiers masked, untrusted text wrapped as data. This module sends what it is given.

>>> from noc_assistant.settings import Settings
>>> client = LlmClient.from_settings(Settings(llm_base_url="http://127.0.0.1:1/v1"))
>>> client.model, client.base_url
('smollm2-135m-instruct', 'http://127.0.0.1:1/v1')
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypedDict

import openai

from noc_assistant.errors import LlmError

if TYPE_CHECKING:
    from noc_assistant.settings import Settings

__all__ = ["Answer", "LlmClient", "Message"]


class Message(TypedDict):
    """One chat message, as the OpenAI chat API takes it."""

    role: Literal["system", "user", "assistant"]
    content: str


@dataclass(frozen=True)
class Answer:
    """The model's text, why it stopped, and the token counts it reported."""

    text: str
    finish_reason: str
    prompt_tokens: int = 0
    completion_tokens: int = 0


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
        try:
            r = self._openai().chat.completions.create(
                model=self.model,
                messages=[dict(m) for m in messages],  # type: ignore[misc]
                max_tokens=max_tokens or self.max_tokens,
                temperature=self.temperature,
            )
        except openai.OpenAIError as exc:
            raise self._failure(exc, f"model {self.model!r}", self.timeout_s) from None
        if not r.choices or not (r.choices[0].message.content or "").strip():
            raise LlmError(f"{self.base_url}: model {self.model!r} gave an empty answer")
        usage = r.usage
        return Answer(
            text=r.choices[0].message.content or "",
            finish_reason=r.choices[0].finish_reason or "",
            prompt_tokens=usage.prompt_tokens if usage else 0,
            completion_tokens=usage.completion_tokens if usage else 0,
        )
