"""The chat model as the orchestrator sees it, and its implementation over AsyncOpenAI.

A model turn is one Chat Completions call, streamed (:meth:`ChatModel.stream`: text as it
arrives, then one :class:`TurnEnd`) or not (:meth:`ChatModel.complete`, for deciding tool
calls on servers that cannot stream them). Every failure leaves as a
:class:`RagAgentError`; the HTTP stream is closed as soon as the consumer stops reading.

Two clocks bound a streamed turn: the first chunk may take ``first_token_timeout`` (a CPU
server reads a long RAG prompt before it writes anything), each later gap
``idle_timeout``. A call that outlives either is abandoned and never retried: the model
server is still busy with it, and a second request would queue behind the first. Only
failures before the answer began are retried (429, 5xx that are not about the request,
unreachable endpoints), with backoff and within the deadline: :mod:`service.agent.model_calls`
sends the requests and reads the chunks.

A turn is complete only when the model said how it ended (a finish reason); a stream that
ends without one raises :class:`ModelStreamInterrupted` after the text that did arrive.
"""

from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import AsyncGenerator, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast

import openai
from openai.types.chat import ChatCompletion

from service.agent.assembly import Assembly, TextDelta, ToolCallRequest, TurnEnd, from_completion
from service.agent.capabilities import (
    DEFAULT_CONTEXT_TOKENS,
    Capabilities,
    ToolCalling,
    count_messages,
    known_window,
    probe_context_tokens,
    token_counter,
)
from service.agent.config import ModelClientConfig
from service.agent.model_calls import ModelCalls
from service.agent.wait_clock import WaitClock
from service.domain import Deadline, Usage
from service.errors import (
    ConfigurationError,
)

__all__ = ["ChatModel", "Completion", "OpenAIChatModel", "TextDelta", "ToolCallRequest", "TurnEnd"]

# Local servers need no key but the client insists on one.
PLACEHOLDER_API_KEY = "not-needed"

ModelEvent = TextDelta | TurnEnd


@dataclass(frozen=True, slots=True)
class Completion:
    """A non-streamed turn: its whole text and how it ended."""

    text: str
    end: TurnEnd


class ChatModel(Protocol):
    """Model turns, and what the endpoint can do. Close a stream (``aclosing``) to abandon it."""

    @property
    def name(self) -> str:
        """The configured model name (the endpoint may report a more specific one)."""

    @property
    def max_tokens(self) -> int:
        """Tokens reserved for one answer (a turn may be given fewer to fit the window)."""

    @property
    def capabilities(self) -> Capabilities:
        """What is known of the endpoint; the agent records what it learns here."""

    def count_tokens(self, text: str) -> int: ...

    def count_messages(self, messages: Sequence[dict[str, Any]]) -> int: ...

    async def context_tokens(self) -> int:
        """The model's context window in tokens (asked once, then kept)."""

    def configured(self, *, model: str | None = None, max_tokens: int | None = None) -> ChatModel:
        """This endpoint answering with ``model`` and ``max_tokens`` (None: as configured),
        for one request's settings; ``model`` must already be allowed by the operator."""

    def stream(
        self,
        messages: Sequence[dict[str, Any]],
        *,
        temperature: float,
        deadline: Deadline,
        tools: Sequence[dict[str, Any]] = (),
        tool_choice: str | None = None,
        max_tokens: int | None = None,
    ) -> AsyncGenerator[ModelEvent, None]:
        """TextDelta events, then exactly one TurnEnd."""

    async def complete(
        self,
        messages: Sequence[dict[str, Any]],
        *,
        temperature: float,
        deadline: Deadline,
        tools: Sequence[dict[str, Any]] = (),
        tool_choice: str | None = None,
        max_tokens: int | None = None,
    ) -> Completion: ...


def build_openai_client(
    config: ModelClientConfig, *, http_client: openai.DefaultAsyncHttpxClient | None = None
) -> openai.AsyncOpenAI:
    """The AsyncOpenAI client for the configured endpoint (built by the composition root);
    ``http_client`` lets the root hook the HTTP requests (trace context, attempt count)."""
    if config.api_key is not None:
        key = config.api_key
    elif config.base_url is not None:
        key = PLACEHOLDER_API_KEY
    else:
        raise ConfigurationError(
            "no model endpoint configured: set RAGAGENT_LLM_BASE_URL (a local server) or "
            "RAGAGENT_LLM_API_KEY, or use RAGAGENT_AGENT_STRATEGY=extractive"
        )
    return openai.AsyncOpenAI(
        api_key=key,
        base_url=config.base_url,
        timeout=config.timeout,
        max_retries=config.max_retries,
        http_client=http_client,
    )


class OpenAIChatModel:
    """ChatModel over any OpenAI-compatible Chat Completions endpoint."""

    def __init__(
        self,
        client: openai.AsyncOpenAI,
        *,
        model: str,
        max_tokens: int,
        timeout: float,
        idle_timeout: float,
        first_token_timeout: float | None = None,
        context_tokens: int | None = None,
        tool_calling: ToolCalling | None = None,
        base_url: str | None = None,
    ) -> None:
        self._calls = ModelCalls(client, timeout=timeout)
        self._model = model
        self._max_tokens = max_tokens
        self._timeout = timeout
        self._idle_timeout = idle_timeout
        self._first_token_timeout = first_token_timeout or max(timeout, idle_timeout)
        self._base_url = base_url
        self._capabilities = Capabilities(tool_calling, context_tokens)
        self._tool_calling = tool_calling
        self._count, self._exact = token_counter(model, base_url)
        self._probe_lock = asyncio.Lock()
        # Other models of the same endpoint, one per allowed name (so the set is bounded),
        # each learning its own window and tool calling once.
        self._siblings: dict[str, OpenAIChatModel] = {model: self}

    @classmethod
    def from_config(cls, client: openai.AsyncOpenAI, config: ModelClientConfig) -> OpenAIChatModel:
        return cls(
            client,
            model=config.model,
            max_tokens=config.max_tokens,
            timeout=config.timeout,
            idle_timeout=config.idle_timeout,
            first_token_timeout=config.first_token_timeout,
            context_tokens=config.context_tokens,
            tool_calling=config.tool_calling,
            base_url=config.base_url,
        )

    @property
    def name(self) -> str:
        return self._model

    @property
    def max_tokens(self) -> int:
        return self._max_tokens

    @property
    def capabilities(self) -> Capabilities:
        return self._capabilities

    def configured(
        self, *, model: str | None = None, max_tokens: int | None = None
    ) -> OpenAIChatModel:
        chosen = self._sibling(model) if model else self
        if max_tokens is None or max_tokens == chosen._max_tokens:
            return chosen
        view = copy.copy(chosen)  # shares the client, capabilities and probe lock
        view._max_tokens = max_tokens
        return view

    def _sibling(self, model: str) -> OpenAIChatModel:
        sibling = self._siblings.get(model)
        if sibling is None:
            sibling = copy.copy(self)
            sibling._model = model
            # The configured window (RAGAGENT_LLM_CONTEXT_TOKENS) is the configured model's.
            sibling._capabilities = Capabilities(self._tool_calling, None)
            sibling._count, sibling._exact = token_counter(model, self._base_url)
            sibling._probe_lock = asyncio.Lock()
            self._siblings[model] = sibling
        return sibling

    def count_tokens(self, text: str) -> int:
        return self._count(text)

    def count_messages(self, messages: Sequence[dict[str, Any]]) -> int:
        return count_messages(self._count, messages)

    async def context_tokens(self) -> int:
        async with self._probe_lock:
            if self._capabilities.context_tokens is None:
                window = known_window(self._model) if self._base_url is None else None
                if window is None:
                    window = await probe_context_tokens(
                        self._base_url, self._model, self._calls.api_key
                    )
                self._capabilities.context_tokens = window or DEFAULT_CONTEXT_TOKENS
            return self._capabilities.context_tokens

    async def stream(
        self,
        messages: Sequence[dict[str, Any]],
        *,
        temperature: float,
        deadline: Deadline,
        tools: Sequence[dict[str, Any]] = (),
        tool_choice: str | None = None,
        max_tokens: int | None = None,
    ) -> AsyncGenerator[ModelEvent, None]:
        started = time.monotonic()
        request = self._request(messages, temperature, tools, tool_choice, max_tokens)
        request |= {"stream": True, "stream_options": {"include_usage": True}}
        response = await self._calls.send(
            request, deadline, self._first_token_timeout, streamed=True
        )
        turn = Assembly()
        waits = WaitClock()  # one timer for the stream, not one per chunk
        try:
            async with response:
                while True:
                    if turn.started:
                        wait, clock = self._idle_timeout, "RAGAGENT_LLM_STREAM_IDLE_TIMEOUT"
                    else:
                        wait = self._first_token_timeout - (time.monotonic() - started)
                        clock = "RAGAGENT_LLM_FIRST_TOKEN_TIMEOUT"
                    chunk = await self._calls.next_chunk(
                        response, deadline, waits, wait=wait, clock=clock, turn=turn
                    )
                    if chunk is None:
                        break
                    for text in turn.add(chunk):
                        yield TextDelta(text)
        finally:
            waits.close()
        yield turn.end(self._model, self._estimate(messages, turn.text))

    async def complete(
        self,
        messages: Sequence[dict[str, Any]],
        *,
        temperature: float,
        deadline: Deadline,
        tools: Sequence[dict[str, Any]] = (),
        tool_choice: str | None = None,
        max_tokens: int | None = None,
    ) -> Completion:
        request = self._request(messages, temperature, tools, tool_choice, max_tokens)
        # The whole answer comes at once: reading the prompt, then writing the turn.
        response = await self._calls.send(
            request, deadline, self._first_token_timeout + self._timeout
        )
        text, end = from_completion(
            cast(ChatCompletion, response),
            self._model,
            lambda text: self._estimate(messages, text)(),
        )
        return Completion(text, end)

    def _request(
        self,
        messages: Sequence[dict[str, Any]],
        temperature: float,
        tools: Sequence[dict[str, Any]],
        tool_choice: str | None,
        max_tokens: int | None,
    ) -> dict[str, Any]:
        request: dict[str, Any] = {
            "model": self._model,
            "messages": list(messages),
            "temperature": temperature,
            "max_tokens": max_tokens or self._max_tokens,
        }
        if tools:
            request["tools"] = list(tools)
            # Sent every time: llama.cpp's chat formats ignore tools without it.
            request["tool_choice"] = tool_choice or "auto"
        elif tool_choice is not None:
            request["tool_choice"] = tool_choice
        return request

    def _estimate(self, messages: Sequence[dict[str, Any]], text: str) -> Callable[[], Usage]:
        return lambda: Usage(self.count_messages(messages), self._count(text), estimated=True)
