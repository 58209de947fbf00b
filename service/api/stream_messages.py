"""Agent events as the stream messages of AskStream (and ResumeStream)."""

from __future__ import annotations

from ragagent.v1 import agent_pb2

from service.agent import (
    AgentEvent,
    AnswerDelta,
    CitationFound,
    Completed,
    Heartbeat,
    RunStarted,
    SourcesFound,
    ToolCallCompleted,
    ToolCallPending,
    ToolCallStarted,
)
from service.api.convert import (
    citation_to_proto,
    duration,
    result_to_proto,
    source_to_proto,
    timestamp,
    tool_call_to_proto,
)


def event_message(
    event: AgentEvent, sequence: int, run_id: str = ""
) -> agent_pb2.AskStreamResponse:
    """``event`` as stream message number ``sequence``; ``run_id`` names a background run."""
    message = agent_pb2.AskStreamResponse(sequence=sequence)
    if type(event) is AnswerDelta:  # most messages of a stream: checked first
        message.answer_delta.text = event.text
        return message
    match event:
        case RunStarted():
            message.run_started.CopyFrom(
                agent_pb2.RunStarted(
                    request_id=event.request_id,
                    session_id=event.session_id,
                    created_at=timestamp(event.created_at),
                    run_id=run_id,
                )
            )
        case ToolCallPending() | ToolCallStarted():
            message.tool_call_started.CopyFrom(tool_call_to_proto(event.call))
        case SourcesFound():
            message.sources_found.CopyFrom(
                agent_pb2.SourcesFound(
                    tool_call_id=event.tool_call_id,
                    sources=[source_to_proto(s) for s in event.sources],
                )
            )
        case ToolCallCompleted():
            message.tool_call_completed.CopyFrom(tool_call_to_proto(event.call))
        case CitationFound():
            message.citation.CopyFrom(citation_to_proto(event.citation))
        case Heartbeat():
            message.heartbeat.CopyFrom(
                agent_pb2.Heartbeat(elapsed=duration(event.elapsed_s), phase=event.phase)
            )
        case Completed():
            message.completed.CopyFrom(result_to_proto(event.result))
            message.completed.run_id = run_id
    return message
