"""The one tool the model may call, and how its calls and results are read and written.

A model's arguments are untrusted text: whatever it sends becomes either valid arguments or
an error result the model reads and can correct, never an exception.
"""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from service.agent import boundaries
from service.domain import Source

TOOL_NAME = "qdrant_retrieval"
# Ids of the calls the server makes on its own; model ids look like "call_...".
SERVER_CALL_PREFIX = "srv_"
DEFAULT_TOP_K = 5
MAX_TOP_K = 10
MAX_QUERY_CHARS = 1000

RETRIEVAL_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": TOOL_NAME,
        "description": (
            "Search the indexed documents for passages relevant to a query. Returns the best "
            "passages, each with its source number [n], title and text. Cite a passage in your "
            "answer by its number, like [2]. If the passages do not answer the question, call "
            "the tool again with a different, more specific query."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "query": {
                    "type": "string",
                    "description": (
                        "What to search for, as a self-contained phrase or question. For a "
                        "follow-up question, name the subject explicitly instead of 'it'."
                    ),
                },
                "top_k": {
                    "type": "integer",
                    "description": "How many passages to return.",
                    "default": DEFAULT_TOP_K,
                    "minimum": 1,
                    "maximum": MAX_TOP_K,
                },
            },
            "required": ["query"],
            "additionalProperties": False,
        },
    },
}


def server_call_id() -> str:
    """A new id for a retrieval the strategy runs itself: "srv_" and 24 hex digits."""
    return f"{SERVER_CALL_PREFIX}{uuid.uuid4().hex[:24]}"


@dataclass(frozen=True, slots=True)
class RetrievalArguments:
    query: str
    top_k: int = DEFAULT_TOP_K


@dataclass(frozen=True, slots=True)
class ParsedCall:
    """A model's call read as far as possible: what to record, and either arguments or why not.

    ``recorded`` is the argument object as sent, or ``{"raw": text}`` when the text was not
    a JSON object (the contract of ToolCallInfo.arguments).
    """

    recorded: dict[str, Any]
    arguments: RetrievalArguments | None
    error: str = ""


class _Invalid(ValueError):
    """Why a call's arguments were refused; the message is written for the model."""


def parse_call(name: str, raw_arguments: str) -> ParsedCall:
    """Validates one call of the model against the tool's schema."""
    try:
        value = json.loads(raw_arguments) if raw_arguments.strip() else {}
    except json.JSONDecodeError as exc:
        return ParsedCall({"raw": raw_arguments}, None, f"arguments are not valid JSON: {exc}")
    if not isinstance(value, dict):
        return ParsedCall({"raw": raw_arguments}, None, "arguments must be a JSON object")
    if name != TOOL_NAME:
        return ParsedCall(value, None, f"unknown tool {name!r}; the only tool is {TOOL_NAME!r}")
    try:
        arguments = RetrievalArguments(_query(value.get("query")), _top_k(value.get("top_k")))
    except _Invalid as exc:
        return ParsedCall(value, None, str(exc))
    return ParsedCall(value, arguments)


def _query(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _Invalid("'query' is required and must be a non-empty string")
    if len(value) > MAX_QUERY_CHARS:
        raise _Invalid(f"'query' must be at most {MAX_QUERY_CHARS} characters")
    return value.strip()


def _top_k(value: Any) -> int:
    if value is None:
        return DEFAULT_TOP_K
    # JSON has one number type: 3.0 is the integer 3, while true is no number at all.
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise _Invalid("'top_k' must be an integer")
    if not 1 <= value <= MAX_TOP_K:
        raise _Invalid(f"'top_k' must be between 1 and {MAX_TOP_K}, not {value}")
    return value


def format_sources(sources: list[Source], code: str = "") -> str:
    """Retrieved passages as the model reads them: numbered so that it can cite them, between
    markers carrying the run's ``code`` (see :mod:`service.agent.boundaries`)."""
    if not sources:
        return (
            "No passage is relevant enough to this query. Try another query, or say that "
            "the documents do not cover the question."
        )
    return passages_block(sources, code)


def passages_block(sources: Sequence[Source], code: str = "") -> str:
    """Numbered passages between the markers the instructions name (carrying the run's
    ``code``); whatever in a passage looks like a marker or a passage number is defused,
    so that a document can neither close the block nor pose as another source."""
    opening, closing = boundaries.markers(boundaries.PASSAGES, code)
    body = "\n\n".join(describe_source(source) for source in sources)
    return f"{opening}\n{body}\n{closing}"


def describe_source(source: Source) -> str:
    chunk = source.hit.chunk
    where = " > ".join(boundaries.one_line(p) for p in (chunk.title, chunk.heading) if p)
    header = f"[{source.citation}] {where}" if where else f"[{source.citation}]"
    if chunk.url:
        header += f" ({boundaries.one_line(chunk.url)})"
    return f"{header}\n{boundaries.defuse(chunk.text.strip())}"


def format_error(message: str) -> str:
    return f"Error: {message}. Correct the call and try again."


def result_summary(sources: list[Source]) -> dict[str, Any]:
    """ToolCallRecord.result of a retrieval: how many hits, which chunks, how they scored."""
    return {
        "hits": len(sources),
        "sources": [
            {
                "citation": s.citation,
                "chunk_id": s.hit.chunk.chunk_id,
                "score": round(s.hit.score, 4),
            }
            for s in sources
        ],
    }
