"""What a run reports as it happens; the servicer turns each event into an AskStreamResponse.

Order: RunStarted; then for each retrieval ToolCallPending (asked for), ToolCallStarted
(executing), SourcesFound (when it found something) and ToolCallCompleted (the calls a model
asks for in one turn are all pending before the first of them starts); then AnswerDelta
events; then Completed. Heartbeats may come in between. Every retrieval is a
qdrant_retrieval tool call, also those a strategy runs itself (ids "srv_..."), so each
SourcesFound names the running call that found it. One exception, in the agentic strategy
only: text a model writes before asking for tools in the same turn has streamed already, so
that turn's tool events follow answer deltas (see :mod:`service.agent.agentic`).

A run that fails once started (the model, the store or a bug) or that the server stops
(:meth:`~service.agent.orchestrator.Agent.stop_runs`) still ends with Completed, with status
ERROR or CANCELLED, the answer so far and the error, which the consumer reports after it,
so that a caller keeps the partial text and knows it is partial. Only a run whose consumer
went away (cancelled) ends without one: there is nobody to send it to.

Events are snapshots: a ToolCallRecord inside an event is a copy, so a consumer that reads it
late never sees a later state of the call.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from service.domain import CitationSpan, RunResult, Source, ToolCallRecord


@dataclass(frozen=True, slots=True)
class RunStarted:
    request_id: str
    session_id: str
    created_at: datetime


@dataclass(frozen=True, slots=True)
class ToolCallPending:
    """A tool call was asked for and has not started (status PENDING, no ``started_at``)."""

    call: ToolCallRecord


@dataclass(frozen=True, slots=True)
class ToolCallStarted:
    """A tool call started executing (status EXECUTING); its ToolCallPending came before."""

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
class CitationFound:
    """A cited claim of the answer, sent once the sentence carrying it is complete (its
    AnswerDelta came before); all of them, in order, are the final ``citations``."""

    citation: CitationSpan


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """Sent when the run has been silent for a heartbeat interval; phase: "model" or "tool"."""

    elapsed_s: float
    phase: str


@dataclass(frozen=True, slots=True)
class Completed:
    """The last event of every run that its consumer did not abandon.

    ``error`` is set when the run failed (``result.status`` ERROR) or the server stopped it
    (CANCELLED): the result holds what was streamed, and the consumer reports the error after
    it (a non-RagAgentError is a bug, reported as INTERNAL).
    """

    result: RunResult
    error: Exception | None = None


AgentEvent = (
    RunStarted
    | ToolCallPending
    | ToolCallStarted
    | SourcesFound
    | ToolCallCompleted
    | AnswerDelta
    | CitationFound
    | Heartbeat
    | Completed
)
