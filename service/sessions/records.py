"""What the session store hands out: sessions, turns, and the handle of a turn in progress.

Plain dataclasses like :mod:`service.domain`; the API layer converts them to protobuf.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum

from service.domain import (
    CitationSpan,
    ConversationTurn,
    ResponseStatus,
    Source,
    Timings,
    ToolCallRecord,
    Usage,
)

MAX_MESSAGE_CHARS = 10_000
"""Longest text kept of one message (question, answer, error); longer is cut with a marker."""

Clock = Callable[[], datetime]
TokenCounter = Callable[[str], int]


class SessionStatus(StrEnum):
    """State of a conversation (mirrors ragagent.v1.SessionStatus)."""

    NEW = "new"
    ACTIVE = "active"
    EXPIRED = "expired"


class RunStatus(StrEnum):
    """State of one turn's run (mirrors ragagent.v1.RunStatus)."""

    ACTIVE = "active"
    COMPLETED = "completed"
    ERROR = "error"
    TIMEOUT = "timeout"
    CANCELLED = "cancelled"


# How the agent's own verdict on a run becomes the turn's state: NO_ANSWER is a completed
# turn (the reply is part of the conversation); the other failures end the turn.
RUN_STATUS_OF_RESPONSE: dict[ResponseStatus, RunStatus] = {
    ResponseStatus.SUCCESS: RunStatus.COMPLETED,
    ResponseStatus.NO_ANSWER: RunStatus.COMPLETED,
    ResponseStatus.ERROR: RunStatus.ERROR,
    ResponseStatus.TIMEOUT: RunStatus.TIMEOUT,
    ResponseStatus.CANCELLED: RunStatus.CANCELLED,
}


@dataclass(frozen=True, slots=True)
class TurnHandle:
    """A turn that :meth:`SessionStore.begin_turn` opened; finish it with complete or abort."""

    turn_id: str
    session_id: str
    history: list[ConversationTurn]
    """Earlier completed turns, oldest first, cut to the store's token budget."""
    new_session: bool = False


@dataclass(frozen=True, slots=True)
class TurnRecord:
    """One question of a session and everything recorded of its run."""

    turn_id: str
    request_id: str
    question: str
    status: RunStatus
    created_at: datetime
    completed_at: datetime | None = None
    answer: str = ""
    error: str = ""
    metadata: dict[str, str] = field(default_factory=dict)
    sources: list[Source] = field(default_factory=list)
    tool_calls: list[ToolCallRecord] = field(default_factory=list)
    confidence: float = 0.0
    usage: Usage = field(default_factory=Usage)
    timings: Timings | None = None
    """None when the run did not complete (no response was recorded)."""
    citations: tuple[CitationSpan, ...] = ()


@dataclass(frozen=True, slots=True)
class SessionRecord:
    """One conversation; ``turns`` is only filled by :meth:`SessionStore.get_session`."""

    session_id: str
    owner: str
    status: SessionStatus
    created_at: datetime
    last_accessed: datetime
    expires_at: datetime
    turn_count: int
    turns: list[TurnRecord] = field(default_factory=list)


def utc_now() -> datetime:
    return datetime.now(UTC)


def approx_tokens(text: str) -> int:
    """A tokenizer-free estimate (about four characters a token for English text).

    Good enough to bound the history sent to a model; callers with the model's tokenizer
    pass their own counter.
    """
    return math.ceil(len(text) / 4)


def truncate(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """``text`` cut to at most ``limit`` characters, saying how much was dropped."""
    if len(text) <= limit:
        return text
    # The marker's length depends on the count it reports, so settle on a cut that fits.
    cut = limit
    while True:
        marker = f"\n[… truncated {len(text) - cut} characters]"
        if cut + len(marker) <= limit:
            return text[:cut] + marker
        cut = limit - len(marker)
