"""What a run reports as it happens; the servicer turns each event into an AskStreamResponse.

Order: RunStarted; then for each retrieval ToolCallStarted, SourcesFound (when it found
something) and ToolCallCompleted; then AnswerDelta events; then Completed. Heartbeats may
come in between. Every retrieval is a qdrant_retrieval tool call, also those a strategy
runs itself (ids "srv_..."), so each SourcesFound names the running call that found it.
One exception, in the agentic strategy only: text a model writes before asking for tools
in the same turn has streamed already, so that turn's tool events follow answer deltas
(see :mod:`service.agent.agentic`).

A failed run ends with its error alone, except when the model's answer broke off (its stream
ended without a finish reason, or it finished without writing anything): then Completed still
comes last, with status ERROR, the answer so far and the error, which the consumer reports
after it, so that a caller keeps the partial text and knows it is partial.

Events are snapshots: a ToolCallRecord inside an event is a copy, so a consumer that reads it
late never sees a later state of the call.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from service.domain import RunResult, Source, ToolCallRecord
from service.errors import RagAgentError


@dataclass(frozen=True, slots=True)
class RunStarted:
    request_id: str
    session_id: str
    created_at: datetime


@dataclass(frozen=True, slots=True)
class ToolCallStarted:
    call: ToolCallRecord


@dataclass(frozen=True, slots=True)
class SourcesFound:
    """Sources one retrieval found, best first, with the citation numbers the answer uses.

    ``tool_call_id`` names the tool call that found them, which is running (started and not
    yet completed). Never empty: sent only when the retrieval found something.
    """

    tool_call_id: str
    sources: list[Source]


@dataclass(frozen=True, slots=True)
class ToolCallCompleted:
    """A tool call ended: completed, failed (ERROR) or ran out of time (TIMEOUT)."""

    call: ToolCallRecord


@dataclass(frozen=True, slots=True)
class AnswerDelta:
    """The next piece of the answer; never empty. All of them concatenated = the answer."""

    text: str


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """Sent when the run has been silent for a heartbeat interval; phase: "model" or "tool"."""

    elapsed_s: float
    phase: str


@dataclass(frozen=True, slots=True)
class Completed:
    """The last event of every run that did not fail, and of one whose model answer broke off.

    ``error`` is set, and ``result.status`` is ERROR, in the second case: the result holds
    what was streamed, and the consumer reports the error after it.
    """

    result: RunResult
    error: RagAgentError | None = None


AgentEvent = (
    RunStarted
    | ToolCallStarted
    | SourcesFound
    | ToolCallCompleted
    | AnswerDelta
    | Heartbeat
    | Completed
)
