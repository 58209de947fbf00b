"""Conversions between domain types and ragagent.v1 messages, shared by every servicer."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from google.protobuf import duration_pb2, struct_pb2, timestamp_pb2
from ragagent.v1 import agent_pb2, types_pb2

from service.domain import (
    AnswerMode,
    CitationSpan,
    Grounding,
    ResponseStatus,
    RunResult,
    ScoredChunk,
    SearchFilters,
    Source,
    Timings,
    ToolCallRecord,
    ToolCallStatus,
    Usage,
)

_TOOL_STATUS = {
    ToolCallStatus.PENDING: types_pb2.TOOL_CALL_STATUS_PENDING,
    ToolCallStatus.EXECUTING: types_pb2.TOOL_CALL_STATUS_EXECUTING,
    ToolCallStatus.COMPLETED: types_pb2.TOOL_CALL_STATUS_COMPLETED,
    ToolCallStatus.ERROR: types_pb2.TOOL_CALL_STATUS_ERROR,
    ToolCallStatus.TIMEOUT: types_pb2.TOOL_CALL_STATUS_TIMEOUT,
}
_RESPONSE_STATUS = {
    ResponseStatus.SUCCESS: agent_pb2.RESPONSE_STATUS_SUCCESS,
    ResponseStatus.NO_ANSWER: agent_pb2.RESPONSE_STATUS_NO_ANSWER,
    ResponseStatus.ERROR: agent_pb2.RESPONSE_STATUS_ERROR,
    ResponseStatus.TIMEOUT: agent_pb2.RESPONSE_STATUS_TIMEOUT,
    ResponseStatus.CANCELLED: agent_pb2.RESPONSE_STATUS_CANCELLED,
}
_ANSWER_MODE = {
    AnswerMode.GENERATIVE: agent_pb2.ANSWER_MODE_GENERATIVE,
    AnswerMode.EXTRACTIVE: agent_pb2.ANSWER_MODE_EXTRACTIVE,
}


def timestamp(moment: datetime | None) -> timestamp_pb2.Timestamp | None:
    if moment is None:
        return None
    stamp = timestamp_pb2.Timestamp()
    stamp.FromDatetime(moment if moment.tzinfo else moment.replace(tzinfo=UTC))
    return stamp


def duration(seconds: float | None) -> duration_pb2.Duration | None:
    if seconds is None:
        return None
    value = duration_pb2.Duration()
    value.FromNanoseconds(round(seconds * 1e9))
    return value


def struct(value: dict[str, Any] | None) -> struct_pb2.Struct | None:
    if value is None:
        return None
    message = struct_pb2.Struct()
    message.update(value)
    return message


def filters_from_proto(message: types_pb2.SearchFilters) -> SearchFilters:
    return SearchFilters(
        module=message.module, chapter=message.chapter, url_prefix=message.url_prefix
    )


def hit_to_proto(hit: ScoredChunk, citation: int = 0) -> types_pb2.SourceInfo:
    chunk = hit.chunk
    return types_pb2.SourceInfo(
        chunk_id=chunk.chunk_id,
        document_id=chunk.document_id,
        url=chunk.url,
        title=chunk.title,
        module=chunk.module,
        chapter=chunk.chapter,
        section=chunk.section,
        heading=chunk.heading,
        position=chunk.position,
        content=chunk.text,
        score=hit.score,
        citation=citation,
    )


def source_to_proto(source: Source) -> types_pb2.SourceInfo:
    info = hit_to_proto(source.hit, source.citation)
    info.cited = source.citation > 0
    return info


def tool_call_to_proto(call: ToolCallRecord) -> types_pb2.ToolCallInfo:
    return types_pb2.ToolCallInfo(
        id=call.id,
        name=call.name,
        arguments=struct(call.arguments),
        result=struct(call.result),
        status=_TOOL_STATUS[call.status],
        started_at=timestamp(call.started_at),
        duration=duration(call.duration_s),
        error=call.error,
        origin=(
            types_pb2.TOOL_CALL_ORIGIN_SERVICE
            if call.origin == "service" or (not call.origin and call.id.startswith("srv_"))
            else types_pb2.TOOL_CALL_ORIGIN_MODEL
        ),
    )


def usage_to_proto(usage: Usage) -> types_pb2.Usage:
    return types_pb2.Usage(
        prompt_tokens=usage.prompt_tokens,
        completion_tokens=usage.completion_tokens,
        total_tokens=usage.total_tokens,
        estimated=usage.estimated,
    )


def citation_to_proto(citation: CitationSpan) -> types_pb2.Citation:
    return types_pb2.Citation(
        start=citation.start,
        end=citation.end,
        source=citation.source,
        quote_start=citation.quote_start,
        quote_end=citation.quote_end,
        support=citation.support,
    )


def grounding_to_proto(grounding: Grounding | None) -> types_pb2.Grounding | None:
    if grounding is None:
        return None
    return types_pb2.Grounding(
        cites_nothing=grounding.cites_nothing,
        sentences=[
            types_pb2.SentenceSupport(
                text=s.text, citations=s.citations, support=s.support, supported=s.supported
            )
            for s in grounding.sentences
        ],
        supported_share=grounding.supported_share,
    )


def timings_to_proto(timings: Timings) -> types_pb2.Timings:
    return types_pb2.Timings(
        retrieval=duration(timings.retrieval_s),
        time_to_first_token=duration(timings.time_to_first_token_s),
        total=duration(timings.total_s),
    )


def result_to_proto(result: RunResult) -> agent_pb2.AgentResponse:
    return agent_pb2.AgentResponse(
        request_id=result.request_id,
        session_id=result.session_id,
        answer=result.answer,
        sources=[source_to_proto(s) for s in result.sources],
        confidence=result.confidence,
        tool_calls=[tool_call_to_proto(c) for c in result.tool_calls],
        status=_RESPONSE_STATUS[result.status],
        finish_reason=result.finish_reason,
        usage=usage_to_proto(result.usage),
        timings=timings_to_proto(result.timings),
        model=result.model,
        created_at=timestamp(result.created_at),
        answer_mode=_ANSWER_MODE[result.answer_mode],
        strategy=result.strategy,
        grounding=grounding_to_proto(result.grounding),
        turn_id=result.turn_id,
        no_answer_reason=result.no_answer_reason,
        downgraded_reason=result.downgraded_reason,
        citations=[citation_to_proto(c) for c in result.citations],
    )
