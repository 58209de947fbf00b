"""The chat model as the orchestrator sees it, and its implementation over AsyncOpenAI.

One model turn is one streamed Chat Completions call. The turn yields text as it arrives and
ends with one :class:`TurnEnd` holding the assembled tool calls, the finish reason and the
usage. Every failure leaves as a :class:`RagAgentError`; the HTTP stream is closed as soon
as the consumer stops reading, whether it finished, failed, was cancelled or closed early.

A turn is complete only when the model said how it ended (a finish reason). A stream that
ends without one, or whose connection breaks mid-body, raises :class:`ModelStreamInterrupted`
after the text that did arrive: a killed model server, a proxy timeout and llama.cpp's answer
to a prompt that overflows its context window (HTTP 200 and an empty body) all look like
that, and none of them is an answer. Nothing here retries a turn that has begun to stream.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

import httpx
import openai
from openai.types.chat import ChatCompletionChunk

from service.agent.model_errors import model_error, stream_broke, stream_ended_early
from service.config import Settings
from service.domain import Deadline, Usage
from service.errors import (
    ConfigurationError,
    DeadlineExceeded,
    ModelStalled,
    ModelStreamInterrupted,
)

# Local servers need no key but the client insists on one.
PLACEHOLDER_API_KEY = "not-needed"


@dataclass(frozen=True, slots=True)
class TextDelta:
    text: str


@dataclass(frozen=True, slots=True)
class ToolCallRequest:
    """A complete tool call of the model; ``arguments`` is the raw text it wrote."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class TurnEnd:
    finish_reason: str
    tool_calls: list[ToolCallRequest]
    usage: Usage
    model: str


ModelEvent = TextDelta | TurnEnd


class ChatModel(Protocol):
    """Streams model turns. Close the generator (``aclosing``) to abandon a turn."""

    @property
    def name(self) -> str:
        """The configured model name (the endpoint may report a more specific one)."""

    def stream(
        self,
        messages: Sequence[dict[str, Any]],
        *,
        temperature: float,
        deadline: Deadline,
        tools: Sequence[dict[str, Any]] = (),
        tool_choice: str | None = None,
    ) -> AsyncGenerator[ModelEvent, None]:
        """TextDelta events, then exactly one TurnEnd."""


def build_openai_client(settings: Settings) -> openai.AsyncOpenAI:
    """The AsyncOpenAI client for the configured endpoint (called by the server wiring)."""
    if settings.llm_api_key is not None:
        key = settings.llm_api_key.get_secret_value()
    elif settings.llm_base_url is not None:
        key = PLACEHOLDER_API_KEY
    else:
        raise ConfigurationError(
            "no model endpoint configured: set RAGAGENT_LLM_BASE_URL (a local server) or "
            "RAGAGENT_LLM_API_KEY, or use RAGAGENT_AGENT_STRATEGY=extractive"
        )
    return openai.AsyncOpenAI(
        api_key=key,
        base_url=settings.llm_base_url,
        timeout=settings.llm_timeout,
        max_retries=settings.llm_max_retries,
    )


@dataclass
class _PartialCall:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


@dataclass
class _Assembly:
    """What the chunks of one turn add up to."""

    calls: dict[int, _PartialCall] = field(default_factory=dict)
    finish_reason: str = ""
    usage: Usage = field(default_factory=Usage)
    model: str = ""
    chunks: int = 0

    def add(self, chunk: ChatCompletionChunk) -> list[str]:
        """Takes in one chunk; returns its text, in order."""
        self.chunks += 1
        self.model = self.model or chunk.model
        if chunk.usage is not None:
            self.usage = Usage(chunk.usage.prompt_tokens, chunk.usage.completion_tokens)
        texts = []
        for choice in chunk.choices:
            self.finish_reason = choice.finish_reason or self.finish_reason
            delta = choice.delta
            if delta is None:
                continue
            for fragment in delta.tool_calls or []:
                _merge_fragment(self.calls, fragment)
            if delta.content:
                texts.append(delta.content)
        return texts

    def end(self, configured_model: str) -> TurnEnd:
        """The turn's end; raises ModelStreamInterrupted if the model never said it ended."""
        if not self.finish_reason:
            raise stream_ended_early(self.chunks)
        requests = [
            ToolCallRequest(c.id or f"call_{uuid.uuid4().hex[:24]}", c.name, "".join(c.arguments))
            for _, c in sorted(self.calls.items())
        ]
        return TurnEnd(self.finish_reason, requests, self.usage, self.model or configured_model)


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
    ) -> None:
        self._client = client
        self._model = model
        self._max_tokens = max_tokens
        self._timeout = timeout
        self._idle_timeout = idle_timeout

    @classmethod
    def from_settings(cls, client: openai.AsyncOpenAI, settings: Settings) -> OpenAIChatModel:
        return cls(
            client,
            model=settings.llm_model,
            max_tokens=settings.llm_max_tokens,
            timeout=settings.llm_timeout,
            idle_timeout=settings.llm_stream_idle_timeout,
        )

    @property
    def name(self) -> str:
        return self._model

    async def stream(
        self,
        messages: Sequence[dict[str, Any]],
        *,
        temperature: float,
        deadline: Deadline,
        tools: Sequence[dict[str, Any]] = (),
        tool_choice: str | None = None,
    ) -> AsyncGenerator[ModelEvent, None]:
        request_timeout = deadline.timeout(self._timeout)
        if request_timeout <= 0:
            raise DeadlineExceeded("the deadline ran out before the model was called")
        extra: dict[str, Any] = {}
        if tools:
            extra["tools"] = list(tools)
        if tool_choice is not None:
            extra["tool_choice"] = tool_choice
        try:
            # The client's own timeout bounds each attempt; this bounds its retries too.
            async with asyncio.timeout(deadline.remaining()):
                response = await self._client.chat.completions.create(
                    model=self._model,
                    messages=cast(Any, list(messages)),
                    temperature=temperature,
                    max_tokens=self._max_tokens,
                    stream=True,
                    stream_options={"include_usage": True},
                    timeout=request_timeout,
                    **extra,
                )
        except TimeoutError:
            raise DeadlineExceeded("the deadline ran out while waiting for the model") from None
        except (openai.OpenAIError, ValueError) as exc:
            raise model_error(exc, deadline) from exc

        turn = _Assembly()
        async with response:
            while True:
                try:
                    chunk = await self._next_chunk(response, deadline)
                except ModelStreamInterrupted:
                    if turn.finish_reason:
                        break  # the answer is whole; only the usage chunk after it was lost
                    raise
                if chunk is None:
                    break
                for text in turn.add(chunk):
                    yield TextDelta(text)
        yield turn.end(self._model)

    async def _next_chunk(
        self, response: openai.AsyncStream[ChatCompletionChunk], deadline: Deadline
    ) -> ChatCompletionChunk | None:
        left = deadline.remaining()
        wait = self._idle_timeout if left is None else min(self._idle_timeout, left)
        try:
            async with asyncio.timeout(wait):
                return await anext(response)
        except StopAsyncIteration:
            return None
        except TimeoutError:
            if left is not None and left <= self._idle_timeout:
                raise DeadlineExceeded("the deadline ran out while the model was writing") from None
            raise ModelStalled(
                f"the model stream sent nothing for {self._idle_timeout:g} s "
                "(RAGAGENT_LLM_STREAM_IDLE_TIMEOUT)"
            ) from None
        except openai.APITimeoutError as exc:
            raise model_error(exc, deadline) from exc
        except (openai.APIConnectionError, httpx.TransportError) as exc:
            # The body broke after the response began (reset, EOF mid-chunk). This SDK wraps
            # transport errors; others let httpx's own escape, which must not become INTERNAL.
            raise stream_broke(exc) from exc
        except (openai.OpenAIError, ValueError) as exc:
            raise model_error(exc, deadline) from exc


def _merge_fragment(calls: dict[int, _PartialCall], fragment: Any) -> None:
    # Servers send id and name first and the arguments in pieces; a few omit the index,
    # in which case a fragment with an id starts a new call and one without continues it.
    index = fragment.index
    if not isinstance(index, int):
        index = len(calls) if fragment.id or not calls else max(calls)
    call = calls.setdefault(index, _PartialCall())
    if fragment.id and not call.id:
        call.id = fragment.id
    function = fragment.function
    if function is not None:
        if function.name and not call.name:
            call.name = function.name
        if function.arguments:
            call.arguments.append(function.arguments)
