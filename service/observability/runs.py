"""Subscribers to a run's events: metrics, tool-call spans and the run log.

The agent emits each event once; the servicer hands every event of a run (of its answer
deltas only the first) to each :class:`RunSubscriber` it got from the listeners, and says
how the run ended. Subscribers must be quick and must not raise: they run on the call's
task between two stream messages.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from opentelemetry.trace import SpanKind, Status, StatusCode

from service.agent.events import AgentEvent, AnswerDelta, Completed, ToolCallCompleted
from service.domain import ToolCallRecord
from service.errors import DeadlineExceeded, RagAgentError
from service.observability.logging import get_logger
from service.observability.metrics import Metrics
from service.observability.tracing import Tracing

log = get_logger("ragagent.run")


class RunSubscriber(Protocol):
    def event(self, event: AgentEvent) -> None: ...

    def ended(self, error: BaseException | None) -> None:
        """The run is over: ``error`` is what ended it (None after Completed)."""


class RunListener(Protocol):
    def run_started(self, strategy: str) -> RunSubscriber: ...


def ended_status(error: BaseException) -> str:
    """The answers_total status of a run that ended with ``error`` instead of Completed."""
    if isinstance(error, DeadlineExceeded):
        return "timeout"
    return "error" if isinstance(error, Exception) else "cancelled"


class RunMetrics:
    """ragagent_time_to_first_token_seconds, ragagent_tool_calls_total, ragagent_answers_total."""

    def __init__(self, metrics: Metrics) -> None:
        self._m = metrics

    def run_started(self, strategy: str) -> RunSubscriber:
        return _RunCounts(self._m, strategy)


class _RunCounts:
    def __init__(self, metrics: Metrics, strategy: str) -> None:
        self._m = metrics
        self._strategy = strategy
        self._started = time.perf_counter()
        self._answered = False
        self._status = ""

    def event(self, event: AgentEvent) -> None:
        if isinstance(event, AnswerDelta) and not self._answered:
            self._answered = True
            self._m.first_token.observe(time.perf_counter() - self._started)
        elif isinstance(event, ToolCallCompleted):
            call = event.call
            self._m.tool_calls.labels(self._m.tool_name(call.name), call.status.value).inc()
        elif isinstance(event, Completed):
            self._status = event.result.status.value

    def ended(self, error: BaseException | None) -> None:
        status = self._status or ended_status(error or RuntimeError())
        self._m.answers.labels(status, self._strategy).inc()


class RunTracing:
    """A span per tool call, timed from the call's own record (the event comes after it)."""

    def __init__(self, tracing: Tracing) -> None:
        self._tracing = tracing

    def run_started(self, strategy: str) -> RunSubscriber:
        return _ToolSpans(self._tracing)


def _ns(moment: datetime) -> int:
    return int(moment.timestamp() * 1e9)


class _ToolSpans:
    def __init__(self, tracing: Tracing) -> None:
        self._tracer = tracing.tracer
        self._content = tracing.record_content

    def event(self, event: AgentEvent) -> None:
        if not isinstance(event, ToolCallCompleted) or event.call.started_at is None:
            return
        call = event.call
        start = _ns(call.started_at)  # type: ignore[arg-type]
        span = self._tracer.start_span(
            f"execute_tool {call.name}",
            kind=SpanKind.INTERNAL,
            start_time=start,
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": call.name,
                "gen_ai.tool.call.id": call.id,
                "ragagent.tool.status": call.status.value,
                "ragagent.tool.origin": call.origin,
                **({"gen_ai.tool.call.arguments": repr(call.arguments)} if self._content else {}),
            },
        )
        if call.error:
            span.set_status(Status(StatusCode.ERROR, call.status.value))
        span.end(start + int((call.duration_s or 0.0) * 1e9))

    def ended(self, error: BaseException | None) -> None:
        return None


class RunLog:
    """One INFO line per tool call and one per run: names, statuses, durations, counts; never
    the question, the arguments (they hold the query) or the answer."""

    def run_started(self, strategy: str) -> RunSubscriber:
        return _RunLines(strategy)


class _RunLines:
    def __init__(self, strategy: str) -> None:
        self._strategy = strategy
        self._started = time.perf_counter()

    def event(self, event: AgentEvent) -> None:
        if isinstance(event, ToolCallCompleted):
            _log_tool_call(event.call)
        elif isinstance(event, Completed):
            result = event.result
            log.info(
                "run finished",
                strategy=self._strategy,
                status=result.status.value,
                finish_reason=result.finish_reason,
                model=result.model,
                tool_calls=len(result.tool_calls),
                sources=len(result.sources),
                prompt_tokens=result.usage.prompt_tokens,
                completion_tokens=result.usage.completion_tokens,
                answer_chars=len(result.answer),
                duration_ms=round((time.perf_counter() - self._started) * 1000, 1),
            )

    def ended(self, error: BaseException | None) -> None:
        if error is not None:
            reason = error.reason if isinstance(error, RagAgentError) else type(error).__name__
            log.info(
                "run ended",
                strategy=self._strategy,
                status=ended_status(error),
                error=reason,
                duration_ms=round((time.perf_counter() - self._started) * 1000, 1),
            )


def _log_tool_call(call: ToolCallRecord) -> None:
    hits = (call.result or {}).get("sources") if isinstance(call.result, dict) else None
    log.info(
        "tool call",
        tool=call.name,
        tool_call_id=call.id,
        status=call.status.value,
        origin=call.origin,
        duration_ms=round((call.duration_s or 0.0) * 1000, 1),
        results=len(hits) if isinstance(hits, list) else None,
        error=call.error[:200] or None,
    )


class Subscribers:
    """Every listener's subscriber for one run, fed together; told of the end once.

    Of the answer's deltas, most of a run's events, only the first is handed on: it marks
    the first token, and the text they add up to comes with Completed."""

    def __init__(self, listeners: Sequence[RunListener], strategy: str) -> None:
        self._subs = [listener.run_started(strategy) for listener in listeners]
        self._ended = False
        self._answering = False

    def event(self, event: AgentEvent) -> None:
        if type(event) is AnswerDelta:
            if self._answering:
                return
            self._answering = True
        for sub in self._subs:
            sub.event(event)

    def ended(self, error: BaseException | None) -> None:
        if self._ended:
            return
        self._ended = True
        for sub in self._subs:
            sub.ended(error)
