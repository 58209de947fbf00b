"""Rows of the session tables to and from domain values, and the list page token."""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import fields, replace
from datetime import datetime
from typing import Any

from service.domain import (
    Chunk,
    CitationSpan,
    RunResult,
    ScoredChunk,
    Source,
    Timings,
    ToolCallRecord,
    ToolCallStatus,
    Usage,
)
from service.errors import FieldViolation, InvalidArgument
from service.sessions.records import truncate
from service.sessions.schema import AnyRow
from service.sessions.sealing import Content

_CHUNK_FIELDS = frozenset(f.name for f in fields(Chunk))
# Strings, numbers and a tuple of strings (access): JSON values as they are.
_STORED_FIELDS = tuple(f.name for f in fields(Chunk) if f.name != "piece_vectors")


def sources_to_json(
    sources: list[Source], citations: tuple[CitationSpan, ...] = ()
) -> list[dict[str, Any]]:
    # Piece vectors (kilobytes per chunk) serve the extractive ranking only: a turn's record
    # keeps what was said and cited. Each source keeps the citation spans that cite it, with
    # their place in the answer's list ("spans": [[position, start, end, quote_start,
    # quote_end, support], ...]), so that no column is needed for them.
    spans: dict[int, list[list[float]]] = {}
    for position, c in enumerate(citations):
        spans.setdefault(c.source, []).append(
            [position, c.start, c.end, c.quote_start, c.quote_end, c.support]
        )
    return [
        {
            "chunk": _chunk_json(s.hit.chunk),
            "score": s.hit.score,
            "citation": s.citation,
            **({"spans": spans[s.citation]} if s.citation in spans else {}),
        }
        for s in sources
    ]


def _chunk_json(chunk: Chunk) -> dict[str, Any]:
    """The chunk's fields as JSON values, its piece vectors left out (not asdict: it deep
    copies every value, about a fifth of a turn's completion in the writer's thread)."""
    found = {name: getattr(chunk, name) for name in _STORED_FIELDS}
    found["piece_vectors"] = ()
    return found


def citations_from_json(value: list[dict[str, Any]] | None) -> tuple[CitationSpan, ...]:
    """The citation spans kept with the sources (see :func:`sources_to_json`), in order."""
    found: list[tuple[int, CitationSpan]] = []
    for item in value or []:
        for span in item.get("spans") or ():
            position, start, end, quote_start, quote_end, support = span
            found.append(
                (
                    int(position),
                    CitationSpan(
                        int(start),
                        int(end),
                        int(item["citation"]),
                        int(quote_start),
                        int(quote_end),
                        float(support),
                    ),
                )
            )
    return tuple(span for _, span in sorted(found, key=lambda pair: pair[0]))


def sources_from_json(value: list[dict[str, Any]] | None) -> list[Source]:
    sources = []
    for item in value or []:
        # Fields a later release may add to Chunk are dropped, not fatal.
        chunk = Chunk(**{k: v for k, v in item["chunk"].items() if k in _CHUNK_FIELDS})
        sources.append(Source(ScoredChunk(chunk, float(item["score"])), int(item["citation"])))
    return sources


def tool_call_values(
    call: ToolCallRecord,
    *,
    position: int,
    session_id: str,
    turn_id: str,
    now: datetime,
    content: Content,
) -> dict[str, Any]:
    name = f"tool.{position}"
    return {
        "session_id": session_id,
        "turn_id": turn_id,
        "position": position,
        "call_id": call.id[:128],
        "function_name": call.name[:128],
        # NOT NULL: {} stands for arguments not recorded.
        "arguments": content.seal_json(call.arguments, turn_id, f"{name}.arguments") or {},
        "result": content.seal_json(call.result, turn_id, f"{name}.result"),
        "status": call.status.value,
        "error": content.seal(truncate(call.error), turn_id, f"{name}.error"),
        "started_at": call.started_at,
        "duration_s": call.duration_s,
        "created_at": now,
    }


def tool_call_from_row(row: AnyRow) -> ToolCallRecord:
    """The call as stored: sealed values stay sealed (see :func:`open_tool_call`)."""
    return ToolCallRecord(
        id=row.call_id,
        name=row.function_name,
        arguments=row.arguments,
        status=ToolCallStatus(row.status),
        started_at=row.started_at,
        duration_s=row.duration_s,
        result=row.result,
        error=row.error,
    )


def open_tool_call(
    call: ToolCallRecord, *, position: int, turn_id: str, content: Content
) -> ToolCallRecord:
    name = f"tool.{position}"
    return replace(
        call,
        arguments=content.open_json(call.arguments, turn_id, f"{name}.arguments"),
        result=content.open_json(call.result, turn_id, f"{name}.result"),
        error=content.open(call.error, turn_id, f"{name}.error"),
    )


def response_values(
    result: RunResult, *, session_id: str, turn_id: str, now: datetime
) -> dict[str, Any]:
    return {
        "turn_id": turn_id,
        "session_id": session_id,
        "status": result.status.value,
        "confidence": result.confidence,
        "sources": sources_to_json(result.sources, result.citations),
        "prompt_tokens": result.usage.prompt_tokens,
        "completion_tokens": result.usage.completion_tokens,
        "retrieval_s": result.timings.retrieval_s,
        "time_to_first_token_s": result.timings.time_to_first_token_s,
        "total_s": result.timings.total_s,
        "finish_reason": result.finish_reason[:64],
        "model": result.model[:256],
        "created_at": now,
    }


def usage_from_row(row: AnyRow) -> Usage:
    return Usage(row.prompt_tokens, row.completion_tokens)


def timings_from_row(row: AnyRow) -> Timings:
    return Timings(row.retrieval_s, row.time_to_first_token_s, row.total_s)


def encode_page_token(created_at: datetime, session_id: str) -> str:
    """An opaque position in the (created_at, id) order: where the next page starts."""
    raw = json.dumps([created_at.isoformat(), session_id], separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_page_token(token: str) -> tuple[datetime, str]:
    """The position a token names; InvalidArgument on anything we did not issue."""
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        stamp, session_id = json.loads(raw)
        moment = datetime.fromisoformat(stamp)
        if not isinstance(session_id, str) or moment.tzinfo is None:
            raise ValueError("malformed page token")  # noqa: TRY301 (one path for all defects)
    except (ValueError, TypeError, binascii.Error, UnicodeDecodeError):
        raise InvalidArgument(
            [
                FieldViolation(
                    "page_token",
                    "is not a next_page_token from a previous ListSessions response",
                    "INVALID_PAGE_TOKEN",
                )
            ]
        ) from None
    return moment, session_id
