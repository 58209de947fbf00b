"""The chat model as the agent sees it, with each turn timed, traced and logged once.

:class:`ObservedChatModel` wraps any ChatModel at the composition root. Per model turn it
writes one INFO line (model, duration, tokens, finish reason, retries, outcome), observes
``ragagent_model_request_seconds{outcome}`` and ``ragagent_model_tokens_total{kind}``, and
opens a CLIENT span with the GenAI semantic-convention attributes. While the wrapped model
sends its request, that span is the current one, so the httpx hook
(:func:`model_request_hook`) puts its ``traceparent`` on the HTTP request and counts the
attempts: the model's own retries happen there, unseen by the agent.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Iterator, Sequence
from contextlib import aclosing, contextmanager
from contextvars import ContextVar
from typing import Any

import httpx2
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from service.agent.capabilities import Capabilities
from service.agent.model import ChatModel, Completion, ModelEvent, TurnEnd
from service.domain import Deadline
from service.errors import DeadlineExceeded, RagAgentError
from service.observability.logging import get_logger
from service.observability.metrics import Metrics
from service.observability.tracing import Tracing, inject_traceparent

log = get_logger("ragagent.model")

# HTTP requests sent for the model turn being made in this task (None outside one).
_ATTEMPTS: ContextVar[list[int] | None] = ContextVar("ragagent_model_attempts", default=None)


async def model_request_hook(request: httpx2.Request) -> None:
    """httpx request hook for the model client: trace context on, attempt counted."""
    attempts = _ATTEMPTS.get()
    if attempts is not None:
        attempts[0] += 1
    await inject_traceparent(request)


class _Turn:
    """One model turn being watched: its span, clock and attempt count."""

    def __init__(self, owner: ObservedChatModel, streamed: bool, request: dict[str, Any]) -> None:
        self._owner = owner
        self.streamed = streamed
        self.started = time.perf_counter()
        self.attempts = [0]
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": "openai",
            "gen_ai.request.model": owner.name,
            "ragagent.model.streamed": streamed,
        }
        for key in ("temperature", "max_tokens"):
            if request.get(key) is not None:
                attributes[f"gen_ai.request.{key}"] = request[key]
        self.span = owner.tracer.start_span(
            f"chat {owner.name}", kind=SpanKind.CLIENT, attributes=attributes
        )

    @contextmanager
    def sending(self) -> Iterator[None]:
        """The span current and attempts counted while the wrapped model works."""
        token = _ATTEMPTS.set(self.attempts)
        try:
            with trace.use_span(self.span, end_on_exit=False):
                yield
        finally:
            _ATTEMPTS.reset(token)

    def finish(self, outcome: str, end: TurnEnd | None, error: BaseException | None) -> None:
        elapsed = time.perf_counter() - self.started
        metrics = self._owner.metrics
        metrics.model_request.labels(outcome).observe(elapsed)
        span = self.span
        fields: dict[str, Any] = {}
        if end is not None:
            usage = end.usage
            metrics.model_tokens.labels("prompt").inc(usage.prompt_tokens)
            metrics.model_tokens.labels("completion").inc(usage.completion_tokens)
            span.set_attributes(
                {
                    "gen_ai.response.model": end.model,
                    "gen_ai.response.finish_reasons": [end.finish_reason],
                    "gen_ai.usage.input_tokens": usage.prompt_tokens,
                    "gen_ai.usage.output_tokens": usage.completion_tokens,
                    "ragagent.usage.estimated": usage.estimated,
                }
            )
            fields = {
                "finish_reason": end.finish_reason,
                "prompt_tokens": usage.prompt_tokens,
                "completion_tokens": usage.completion_tokens,
                "tokens_estimated": usage.estimated,
                "tool_calls": len(end.tool_calls),
            }
        retries = max(0, self.attempts[0] - 1)
        span.set_attribute("ragagent.model.retries", retries)
        if error is not None and outcome != "cancelled":
            reason = error.reason if isinstance(error, RagAgentError) else type(error).__name__
            span.set_status(Status(StatusCode.ERROR, reason))
            span.set_attribute("error.type", reason)
            fields["error"] = reason
        span.end()
        emit = log.info if outcome in ("ok", "cancelled") else log.warning
        emit(
            "model call",
            model=self._owner.name,
            streamed=self.streamed,
            outcome=outcome,
            duration_ms=round(elapsed * 1000, 1),
            retries=retries,
            **fields,
        )


def _outcome(error: BaseException) -> str:
    if isinstance(error, DeadlineExceeded):
        return "timeout"
    if isinstance(error, asyncio.CancelledError | GeneratorExit):
        return "cancelled"
    return "error"


class ObservedChatModel:
    """A ChatModel whose every turn is measured; everything else is the wrapped model's."""

    def __init__(self, model: ChatModel, metrics: Metrics, tracing: Tracing) -> None:
        self.inner = model
        self.metrics = metrics
        self._tracing = tracing
        self.tracer = tracing.tracer

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def max_tokens(self) -> int:
        return self.inner.max_tokens

    @property
    def capabilities(self) -> Capabilities:
        return self.inner.capabilities

    def count_tokens(self, text: str) -> int:
        return self.inner.count_tokens(text)

    def count_messages(self, messages: Sequence[dict[str, Any]]) -> int:
        return self.inner.count_messages(messages)

    async def context_tokens(self) -> int:
        return await self.inner.context_tokens()

    def configured(
        self, *, model: str | None = None, max_tokens: int | None = None
    ) -> ObservedChatModel:
        inner = self.inner.configured(model=model, max_tokens=max_tokens)
        if inner is self.inner:
            return self
        return ObservedChatModel(inner, self.metrics, self._tracing)

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
        turn = _Turn(self, True, {"temperature": temperature, "max_tokens": max_tokens})
        end: TurnEnd | None = None
        inner = self.inner.stream(
            messages,
            temperature=temperature,
            deadline=deadline,
            tools=tools,
            tool_choice=tool_choice,
            max_tokens=max_tokens,
        )
        try:
            async with aclosing(inner):
                # The span is current (and attempts counted) around the wrapped generator's
                # first step, which sends the request and its retries; the later steps only
                # read the response body, and attaching a span for each chunk would cost
                # more than reading it. Never across a yield: the consumer's code must not
                # run inside the model's span.
                with turn.sending():
                    try:
                        event = await anext(inner)
                    except StopAsyncIteration:
                        event = None
                while event is not None:
                    if isinstance(event, TurnEnd):
                        end = event
                    yield event
                    try:
                        event = await anext(inner)
                    except StopAsyncIteration:
                        event = None
        except BaseException as error:
            if end is not None and not isinstance(error, Exception):
                # Closed after the turn ended: the agent stops reading at TurnEnd.
                turn.finish("ok", end, None)
            else:
                turn.finish(_outcome(error), end, error)
            raise
        turn.finish("ok", end, None)

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
        turn = _Turn(self, False, {"temperature": temperature, "max_tokens": max_tokens})
        try:
            with turn.sending():
                completion = await self.inner.complete(
                    messages,
                    temperature=temperature,
                    deadline=deadline,
                    tools=tools,
                    tool_choice=tool_choice,
                    max_tokens=max_tokens,
                )
        except BaseException as error:
            turn.finish(_outcome(error), None, error)
            raise
        turn.finish("ok", completion.end, None)
        return completion
