"""Plain domain types shared by retrieval, ingestion, the agent and the API layer.

The API layer converts these to and from protobuf; nothing below it sees a proto message.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from service.access import ReadAccess


@dataclass(frozen=True, slots=True)
class SearchFilters:
    """Restricts a search; empty strings mean no restriction.

    ``access`` is not the caller's choice but what the caller may read (service.access),
    set by the servicer from the authenticated principal; None: no restriction. It rides
    with the filters so that every search path that honours them honours it too.
    """

    module: str = ""
    chapter: str = ""
    url_prefix: str = ""
    access: ReadAccess | None = None

    @property
    def empty(self) -> bool:
        return not (self.module or self.chapter or self.url_prefix) and self.access is None


@dataclass(frozen=True, slots=True)
class Chunk:
    """One stored piece of a document, with the payload the store keeps for it."""

    chunk_id: str
    document_id: str
    text: str
    url: str = ""
    title: str = ""
    module: str = ""
    chapter: str = ""
    section: str = ""
    heading: str = ""
    position: int = 0
    source_file: str = ""
    content_hash: str = ""
    document_hash: str = ""
    chunk_count: int = 0
    created_at: str = ""
    # Who may read it (service.access labels); () = unlabelled.
    access: tuple[str, ...] = ()
    # The vectors of its quotable pieces (service.retrieval.piece_vectors), one row per
    # piece, as the engine stores them (its ``pieces`` multivector); () when the embedder
    # gave none or the store holds none. Not part of what it says.
    piece_vectors: Sequence[Sequence[float]] = field(default=(), repr=False, compare=False)


@dataclass(frozen=True, slots=True)
class ScoredChunk:
    """A chunk found by a search; score in [0, 1] (clamped cosine similarity)."""

    chunk: Chunk
    score: float


@dataclass(frozen=True, slots=True)
class DocumentSummary:
    """What the store knows of one indexed document."""

    document_id: str
    document_hash: str
    chunk_count: int
    url: str = ""
    title: str = ""
    module: str = ""
    chapter: str = ""
    ingested_at: datetime | None = None
    access: tuple[str, ...] = ()  # the document's labels (service.access)


@dataclass(slots=True)
class Deadline:
    """An absolute point in monotonic time by which the work must be done (None: no limit).

    Built from the gRPC context's ``time_remaining()`` and handed down to every model and
    store call, which use :meth:`timeout` to bound what they wait for.
    """

    expires_at: float | None = None

    @classmethod
    def after(cls, seconds: float | None) -> Deadline:
        return cls(None if seconds is None else time.monotonic() + seconds)

    def remaining(self) -> float | None:
        """Seconds left (never negative), or None without a deadline."""
        if self.expires_at is None:
            return None
        return max(0.0, self.expires_at - time.monotonic())

    def timeout(self, cap: float) -> float:
        """The time a single call may take: the configured cap, shortened by the deadline."""
        left = self.remaining()
        return cap if left is None else min(cap, left)

    @property
    def expired(self) -> bool:
        left = self.remaining()
        return left is not None and left <= 0.0


class ToolCallStatus(StrEnum):
    """Lifecycle of one tool call (mirrors ragagent.v1.ToolCallStatus)."""

    PENDING = "pending"
    EXECUTING = "executing"
    COMPLETED = "completed"
    ERROR = "error"
    TIMEOUT = "timeout"


class ResponseStatus(StrEnum):
    """How a run ended (mirrors ragagent.v1.ResponseStatus)."""

    SUCCESS = "success"
    NO_ANSWER = "no_answer"
    ERROR = "error"
    TIMEOUT = "timeout"
    CANCELLED = "cancelled"


class AnswerMode(StrEnum):
    """How the answer text was produced."""

    GENERATIVE = "generative"
    EXTRACTIVE = "extractive"


@dataclass(slots=True)
class ToolCallRecord:
    """One tool call of a run; mutated as the call progresses."""

    id: str
    name: str
    arguments: dict[str, Any]
    status: ToolCallStatus = ToolCallStatus.PENDING
    started_at: datetime | None = None
    duration_s: float | None = None
    result: dict[str, Any] | None = None
    error: str = ""
    # "model" when the model asked for the call, "service" when the service ran it itself;
    # "" (a record read back from storage) is told by the id: the service's start "srv_".
    origin: str = ""


@dataclass(frozen=True, slots=True)
class Source:
    """A retrieved chunk as part of an answer; citation 0 = retrieved but not cited."""

    hit: ScoredChunk
    citation: int = 0


@dataclass(frozen=True, slots=True)
class Usage:
    """Model tokens consumed by a run."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    # Some counts are the service's estimate: the endpoint reported no usage for a turn.
    estimated: bool = False

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            self.estimated or other.estimated,
        )


@dataclass(frozen=True, slots=True)
class Timings:
    """Where a run's time went, in seconds."""

    retrieval_s: float = 0.0
    time_to_first_token_s: float | None = None
    total_s: float = 0.0


@dataclass(frozen=True, slots=True)
class ConversationTurn:
    """An earlier question and its answer, as given to the model for context."""

    question: str
    answer: str


@dataclass(frozen=True, slots=True)
class RunResult:
    """The complete outcome of one run (becomes ragagent.v1.AgentResponse)."""

    request_id: str
    session_id: str
    answer: str
    sources: list[Source]
    confidence: float
    tool_calls: list[ToolCallRecord]
    status: ResponseStatus
    finish_reason: str
    usage: Usage
    timings: Timings
    model: str
    created_at: datetime
    answer_mode: AnswerMode
    strategy: str
    grounding: Grounding | None = None
    turn_id: str = ""  # the stored turn; "" when the server keeps no sessions
    no_answer_reason: str = ""  # NO_ANSWER: why (the model's reason, or the threshold's)
    downgraded_reason: str = ""  # why ``strategy`` is faster than configured (the deadline)
    citations: tuple[CitationSpan, ...] = ()  # each cited claim and its passage span


@dataclass(frozen=True, slots=True)
class CitationSpan:
    """A cited claim: ``answer[start:end]`` rests on ``content[quote_start:quote_end]`` of
    the source numbered ``source``, with ``support`` 0-1 (ragagent.v1.Citation). Offsets
    count Unicode code points."""

    start: int
    end: int
    source: int
    quote_start: int
    quote_end: int
    support: float


@dataclass(frozen=True, slots=True)
class SentenceSupport:
    """One answer sentence, the citations it carries, and how well they support it."""

    text: str
    citations: tuple[int, ...]
    support: float
    supported: bool


@dataclass(frozen=True, slots=True)
class Grounding:
    """Whether an answer rests on its sources (ragagent.v1.Grounding)."""

    cites_nothing: bool
    sentences: tuple[SentenceSupport, ...] = ()

    @property
    def supported_share(self) -> float:
        if not self.sentences:
            return 0.0
        return sum(s.supported for s in self.sentences) / len(self.sentences)
