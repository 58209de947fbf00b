"""The chat model as the orchestrator sees it, and its implementation over AsyncOpenAI.

One model turn is one streamed Chat Completions call. The turn yields text as it arrives and
ends with one :class:`TurnEnd` holding the assembled tool calls, the finish reason and the
usage. Every failure leaves as a :class:`RagAgentError`; the HTTP stream is closed as soon
as the consumer stops reading, whether it finished, failed, was cancelled or closed early.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

import openai
from openai.types.chat import ChatCompletionChunk

from service.config import Settings
from service.domain import Deadline, Usage
from service.errors import (
    ConfigurationError,
    DeadlineExceeded,
    ModelAuthFailed,
    ModelRateLimited,
    ModelRequestRejected,
    ModelStalled,
    ModelUnavailable,
    RagAgentError,
)

# Local servers need no key but the client insists on one.
PLACEHOLDER_API_KEY = "not-needed"
_DEADLINE_SLACK_S = 0.05


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

        calls: dict[int, _PartialCall] = {}
        finish_reason = ""
        usage = Usage()
        model = ""
        async with response:
            while True:
                chunk = await self._next_chunk(response, deadline)
                if chunk is None:
                    break
                model = model or chunk.model
                if chunk.usage is not None:
                    usage = Usage(chunk.usage.prompt_tokens, chunk.usage.completion_tokens)
                for choice in chunk.choices:
                    finish_reason = choice.finish_reason or finish_reason
                    delta = choice.delta
                    if delta is None:
                        continue
                    for fragment in delta.tool_calls or []:
                        _merge_fragment(calls, fragment)
                    if delta.content:
                        yield TextDelta(delta.content)
        requests = [
            ToolCallRequest(c.id or f"call_{uuid.uuid4().hex[:24]}", c.name, "".join(c.arguments))
            for _, c in sorted(calls.items())
        ]
        # Servers that end without a finish reason finished normally as far as we can tell.
        finish = finish_reason or ("tool_calls" if requests else "stop")
        yield TurnEnd(finish, requests, usage, model or self._model)

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


def model_error(exc: Exception, deadline: Deadline) -> RagAgentError:  # noqa: PLR0911
    """The service's error for a failure of the model endpoint."""
    if isinstance(exc, openai.RateLimitError):
        error = ModelRateLimited(f"the model endpoint is rate limiting requests: {exc.message}")
        error.retry_after_s = _retry_after(exc.response.headers.get("retry-after"))
        return error
    if isinstance(exc, openai.AuthenticationError | openai.PermissionDeniedError):
        return ModelAuthFailed(
            f"the model endpoint rejected the credentials (HTTP {exc.status_code}): "
            "check RAGAGENT_LLM_API_KEY"
        )
    if isinstance(exc, openai.APITimeoutError):
        # The attempt's timeout was the deadline's remainder when that was the shorter.
        left = deadline.remaining()
        if left is not None and left < _DEADLINE_SLACK_S:
            return DeadlineExceeded("the deadline ran out while waiting for the model")
        return ModelUnavailable("the model endpoint did not answer in time (RAGAGENT_LLM_TIMEOUT)")
    if isinstance(exc, openai.APIStatusError):
        if exc.status_code >= 500:
            return ModelUnavailable(f"the model endpoint failed with HTTP {exc.status_code}")
        return ModelRequestRejected(
            f"the model endpoint rejected the request (HTTP {exc.status_code}): {exc.message[:300]}"
        )
    if isinstance(exc, openai.APIConnectionError):
        return ModelUnavailable(f"the model endpoint cannot be reached or hung up: {exc}")
    if isinstance(exc, openai.APIError):
        return ModelUnavailable(f"the model endpoint reported an error: {exc.message[:300]}")
    return ModelUnavailable(f"the model endpoint sent a malformed stream: {exc}")


def _retry_after(value: str | None) -> float | None:
    try:
        return max(0.0, float(value)) if value is not None else 1.0
    except ValueError:
        return 1.0
