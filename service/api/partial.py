"""What a run had produced when its caller went away, rebuilt from the events it sent.

A caller that cancels its call can be sent nothing, but its turn is still recorded, as
CANCELLED with the answer text and tool calls produced so far. The agent's run is gone by
then (cancelled with the call), so the servicer keeps what its events said.
"""

from __future__ import annotations

import time
from dataclasses import replace
from datetime import UTC, datetime

from service.agent import (
    AgentEvent,
    AnswerDelta,
    RunStarted,
    SourcesFound,
    ToolCallCompleted,
    ToolCallPending,
    ToolCallStarted,
)
from service.domain import (
    AnswerMode,
    ResponseStatus,
    RunResult,
    Source,
    Timings,
    ToolCallRecord,
    ToolCallStatus,
    Usage,
)

_OPEN = (ToolCallStatus.PENDING, ToolCallStatus.EXECUTING)


class PartialRun:
    """Follows one run's events; :meth:`result` is what they add up to."""

    def __init__(self, *, request_id: str, session_id: str, strategy: str) -> None:
        self._request_id = request_id
        self._session_id = session_id
        self._strategy = strategy
        self._created_at = datetime.now(UTC)
        self._started = time.perf_counter()
        self._text: list[str] = []
        self._calls: dict[str, ToolCallRecord] = {}  # in the order they were asked for
        self._sources: list[Source] = []

    def see(self, event: AgentEvent) -> None:
        match event:
            case RunStarted(created_at=created_at):
                self._created_at = created_at
            case AnswerDelta(text=text):
                self._text.append(text)
            case (
                ToolCallPending(call=call)
                | ToolCallStarted(call=call)
                | ToolCallCompleted(call=call)
            ):
                self._calls[call.id] = call
            case SourcesFound(sources=sources):
                self._sources.extend(sources)
            case _:
                pass

    def result(self, why: str) -> RunResult:
        """A CANCELLED result; calls still open are ended as ERROR with ``why``."""
        calls = [
            replace(call, status=ToolCallStatus.ERROR, error=why) if call.status in _OPEN else call
            for call in self._calls.values()
        ]
        return RunResult(
            request_id=self._request_id,
            session_id=self._session_id,
            answer="".join(self._text),
            sources=list(self._sources),
            confidence=0.0,
            tool_calls=calls,
            status=ResponseStatus.CANCELLED,
            finish_reason="cancelled",
            usage=Usage(),
            timings=Timings(total_s=time.perf_counter() - self._started),
            model="",
            created_at=self._created_at,
            answer_mode=(
                AnswerMode.EXTRACTIVE if self._strategy == "extractive" else AnswerMode.GENERATIVE
            ),
            strategy=self._strategy,
        )
