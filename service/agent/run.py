"""One run, composed of one object per job.

:class:`Searcher` searches and numbers sources, :class:`ToolCallLog` records tool calls,
:class:`ModelTurns` asks the model, :class:`AnswerWriter` filters citations and streams
the answer, and :meth:`Run.result` assembles the result with its grounding check. A
strategy uses them through the :class:`Run` that holds them, so that events, citations,
timings and records stay consistent whatever strategy runs and wherever it stops.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from service.agent.answer import AnswerWriter
from service.agent.events import AgentEvent
from service.agent.grounding import check_grounding
from service.agent.latency import EndpointLatency
from service.agent.model import ChatModel
from service.agent.prompts import Prompts
from service.agent.search import Searcher
from service.agent.sources import SourceBook
from service.agent.tool_log import ToolCallLog
from service.agent.turns import ModelTurns, Turn
from service.domain import (
    AnswerMode,
    ConversationTurn,
    Deadline,
    Grounding,
    ResponseStatus,
    RunResult,
    SearchFilters,
    Source,
    Timings,
    ToolCallRecord,
    ToolCallStatus,
    Usage,
)
from service.retrieval.base import Retriever

__all__ = ["DEFAULT_MAX_RESULTS", "AgentRequest", "Outcome", "Run", "Turn"]

DEFAULT_MAX_RESULTS = 5


@dataclass(slots=True)
class AgentRequest:
    """One question to answer, with the caller's per-request model settings.

    ``threshold``/``temperature``/``model``/``max_tokens`` None: the configured default.
    ``model`` has been checked against the operator's allow-list before it gets here.
    ``instructions`` is the caller's addendum to the system prompt: untrusted text that a
    strategy appends after its grounding rules, delimited, never in their place (empty: none).
    The extractive strategy calls no chat model and ignores model, max_tokens and
    instructions. ``metadata`` is the caller's labels, stored with the run and logged.
    """

    query: str
    max_results: int = DEFAULT_MAX_RESULTS
    threshold: float | None = None
    temperature: float | None = None
    filters: SearchFilters | None = None
    deadline: Deadline = field(default_factory=Deadline)
    history: list[ConversationTurn] = field(default_factory=list)
    request_id: str = ""
    session_id: str = ""
    model: str | None = None
    max_tokens: int | None = None
    instructions: str = ""
    metadata: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Outcome:
    """How a strategy ended; the run turns it into the RunResult."""

    status: ResponseStatus
    finish_reason: str
    model: str = ""
    no_answer_reason: str = ""  # NO_ANSWER: why (the model's words, or the threshold's)


class Run:
    """The pieces of one run; strategies call them, the orchestrator reads the result."""

    def __init__(
        self,
        request: AgentRequest,
        *,
        retriever: Retriever,
        threshold: float,
        emit: Callable[[AgentEvent], Awaitable[None]],
        strategy: str,
        answer_mode: AnswerMode,
        opening: str | None = None,
        latency: EndpointLatency | None = None,
        downgraded_reason: str = "",
        consistent_limit: int = 0,
    ) -> None:
        self.request = request
        self.latency = latency
        # Why the strategy that runs is not the configured one (a deadline too short for it).
        self.downgraded_reason = downgraded_reason
        # The system prompts: the operator's opening (None: the built-in one), the
        # service's grounding rules, the caller's addendum.
        self.prompts = (
            Prompts(instructions=request.instructions)
            if opening is None
            else Prompts(opening, request.instructions)
        )
        self.threshold = threshold
        self.strategy = strategy  # a fallback renames it to what actually ran
        self.answer_mode = answer_mode
        self.created_at = datetime.now(UTC)
        self.phase = "tool"
        self.model_name = ""
        self.stopped = False  # the server stopped the run (Agent.stop_runs)
        self.ended = False  # its final event is made; it can no longer be stopped
        self._started = time.perf_counter()
        self.book = SourceBook()
        self.calls = ToolCallLog(emit)
        self.searcher = Searcher(
            retriever,
            threshold=threshold,
            filters=request.filters,
            deadline=request.deadline,
            book=self.book,
            calls=self.calls,
            emit=emit,
            consistent_limit=consistent_limit,
        )
        self.answer_writer = AnswerWriter(self.book, emit, self._started)
        self._turns: ModelTurns | None = None

    @property
    def deadline(self) -> Deadline:
        return self.request.deadline

    @property
    def answer(self) -> str:
        return self.answer_writer.text

    @property
    def citations(self) -> Any:
        return self.answer_writer.citations

    @property
    def tool_calls(self) -> list[ToolCallRecord]:
        return self.calls.records

    @property
    def usage(self) -> Usage:
        return self._turns.usage if self._turns is not None else Usage()

    def elapsed(self) -> float:
        return time.perf_counter() - self._started

    def turns(self, model: ChatModel) -> ModelTurns:
        """The run's model turns (one object per run, so that usage adds up)."""
        if self._turns is None:
            self._turns = ModelTurns(model, self.answer_writer, self.deadline, self.latency)
        self.phase = "model"
        return self._turns

    # --- delegates the strategies use -----------------------------------------------------
    async def retrieve(self, query: str, limit: int, *, with_pieces: bool = False) -> list[Source]:
        self.phase = "tool"
        return await self.searcher.retrieve(query, limit, with_pieces=with_pieces)

    async def run_retrieval(self, record: ToolCallRecord, query: str, limit: int) -> list[Source]:
        self.phase = "tool"
        return await self.searcher.run(record, query, limit)

    async def ask_call(self, call_id: str, name: str, arguments: dict[str, Any]) -> ToolCallRecord:
        """A call the model asked for, PENDING until :meth:`begin_call`."""
        return await self.calls.ask(call_id, name, arguments, origin="model")

    async def begin_call(self, record: ToolCallRecord) -> None:
        self.phase = "tool"
        await self.calls.begin(record)

    async def end_call(
        self,
        record: ToolCallRecord,
        status: ToolCallStatus,
        *,
        result: dict[str, Any] | None = None,
        error: str = "",
    ) -> None:
        await self.calls.end(record, status, result=result, error=error)

    async def time_out_open_calls(self) -> None:
        await self.calls.time_out_open()

    async def write(self, model_text: str) -> None:
        await self.answer_writer.write(model_text)

    async def end_answer(self) -> None:
        await self.answer_writer.end()

    async def no_answer(self) -> Outcome:
        """Nothing passed the threshold: NO_ANSWER, and the model is not asked."""
        await self.answer_writer.no_answer()
        why = f"no passage scored at least the confidence threshold {self.threshold:g}"
        return Outcome(ResponseStatus.NO_ANSWER, "no_answer", no_answer_reason=why)

    async def declined(self, reason: str, model: str = "") -> Outcome:
        """The model said that the passages do not answer the question: NO_ANSWER with its
        reason, which the answer states too (so the session's turn keeps it)."""
        await self.answer_writer.declined(reason)
        return Outcome(
            ResponseStatus.NO_ANSWER,
            "no_answer",
            model,
            no_answer_reason=reason or "the model found no answer in the passages",
        )

    # --- the result -----------------------------------------------------------------------
    def result(self, outcome: Outcome) -> RunResult:
        no_answer = outcome.status is ResponseStatus.NO_ANSWER
        cited = [] if no_answer else self.citations.cited
        model_name = self._turns.model_name if self._turns is not None else self.model_name
        return RunResult(
            request_id=self.request.request_id,
            session_id=self.request.session_id,
            answer=self.answer,
            sources=[] if no_answer else self.book.final(cited),
            confidence=self.book.confidence(cited),
            tool_calls=self.calls.snapshot(),
            status=outcome.status,
            finish_reason=outcome.finish_reason,
            usage=self.usage,
            timings=Timings(
                retrieval_s=self.searcher.seconds,
                time_to_first_token_s=self.answer_writer.first_text_s,
                total_s=self.elapsed(),
            ),
            model=outcome.model or model_name,
            created_at=self.created_at,
            answer_mode=self.answer_mode,
            strategy=self.strategy,
            grounding=self._grounding(outcome),
            no_answer_reason=outcome.no_answer_reason,
            downgraded_reason=self.downgraded_reason,
            # Sent as the sentences completed; none for NO_ANSWER, which lists no sources.
            citations=() if no_answer else tuple(self.answer_writer.spans),
        )

    def _grounding(self, outcome: Outcome) -> Grounding | None:
        if outcome.status in (
            ResponseStatus.NO_ANSWER,
            ResponseStatus.ERROR,
            ResponseStatus.CANCELLED,
        ):
            return None
        if not self.answer.strip():
            return None

        def passage(number: int) -> str | None:
            return self.book.get(number).hit.chunk.text if number in self.book else None

        return check_grounding(self.answer, passage)
