"""The state of one run and the steps every strategy is built from.

A strategy searches, asks the model and writes the answer only through a :class:`Run`, so
that events, citations, timings and tool-call records stay consistent whatever strategy
runs and wherever it stops.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from service.agent.citations import CitationFilter
from service.agent.events import (
    AgentEvent,
    AnswerDelta,
    SourcesFound,
    ToolCallCompleted,
    ToolCallStarted,
)
from service.agent.model import ChatModel, TextDelta, ToolCallRequest
from service.agent.prompts import NO_ANSWER_MESSAGE
from service.agent.sources import SourceBook
from service.agent.tools import TOOL_NAME, result_summary, server_call_id
from service.domain import (
    AnswerMode,
    ConversationTurn,
    Deadline,
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
from service.errors import DeadlineExceeded, RagAgentError
from service.retrieval.base import Retriever

DEFAULT_MAX_RESULTS = 5


@dataclass(slots=True)
class AgentRequest:
    """One question to answer. ``threshold``/``temperature`` None: the configured default."""

    query: str
    max_results: int = DEFAULT_MAX_RESULTS
    threshold: float | None = None
    temperature: float | None = None
    filters: SearchFilters | None = None
    deadline: Deadline = field(default_factory=Deadline)
    history: list[ConversationTurn] = field(default_factory=list)
    request_id: str = ""
    session_id: str = ""


@dataclass(frozen=True, slots=True)
class Outcome:
    """How a strategy ended; the run turns it into the RunResult."""

    status: ResponseStatus
    finish_reason: str
    model: str = ""


@dataclass(slots=True)
class Turn:
    """One model turn: everything it wrote (unfiltered), its tool calls, how it ended."""

    text: str
    tool_calls: list[ToolCallRequest]
    finish_reason: str
    model: str


class Run:
    """Mutable state of one run; strategies call its steps, the orchestrator reads it."""

    def __init__(
        self,
        request: AgentRequest,
        *,
        retriever: Retriever,
        threshold: float,
        emit: Callable[[AgentEvent], Awaitable[None]],
        strategy: str,
        answer_mode: AnswerMode,
    ) -> None:
        self.request = request
        self.threshold = threshold
        self.strategy = strategy
        self.answer_mode = answer_mode
        self.created_at = datetime.now(UTC)
        self.phase = "tool"
        self.book = SourceBook()
        self.citations = CitationFilter(self.book)
        self.tool_calls: list[ToolCallRecord] = []
        self.usage = Usage()
        self.model_name = ""
        self._retriever = retriever
        self._emit = emit
        self._started = time.perf_counter()
        self._retrieval_s = 0.0
        self._first_text_s: float | None = None
        self._answer: list[str] = []
        self._call_started: dict[int, float] = {}

    @property
    def deadline(self) -> Deadline:
        return self.request.deadline

    @property
    def answer(self) -> str:
        return "".join(self._answer)

    def elapsed(self) -> float:
        return time.perf_counter() - self._started

    # --- retrieval ------------------------------------------------------------------------
    async def retrieve(self, query: str, limit: int) -> list[Source]:
        """A search the strategy runs itself, reported as a qdrant_retrieval tool call.

        The call gets a server id ("srv_..."); its arguments are what was searched.
        """
        record = await self.start_call(
            server_call_id(), TOOL_NAME, {"query": query, "top_k": limit}
        )
        return await self.run_retrieval(record, query, limit)

    async def run_retrieval(self, record: ToolCallRecord, query: str, limit: int) -> list[Source]:
        """Executes a started retrieval call: searches, reports the sources, ends the call.

        The sources that passed the threshold are numbered; SourcesFound names the call and
        comes only when something was found. A failed search ends the call with ERROR and
        is raised; a deadline is raised with the call still open, for the run to time out.
        """
        try:
            sources = self.book.add(await self._search(query, limit))
        except DeadlineExceeded:
            raise  # the run ends with TIMEOUT and closes every open call
        except RagAgentError as exc:
            await self.end_call(record, ToolCallStatus.ERROR, error=exc.message)
            raise
        if sources:
            await self._emit(SourcesFound(record.id, sources))
        await self.end_call(record, ToolCallStatus.COMPLETED, result=result_summary(sources))
        return sources

    async def _search(self, query: str, limit: int) -> list[ScoredChunk]:
        """Hits passing the threshold, best first, found within the deadline."""
        self.phase = "tool"
        if self.deadline.expired:
            raise DeadlineExceeded("the deadline ran out before the search")
        started = time.perf_counter()
        try:
            # Bounded here as well: a store that ignores the deadline must not hold the run.
            async with asyncio.timeout(self.deadline.remaining()):
                hits = await self._retriever.search(
                    query,
                    limit=limit,
                    threshold=self.threshold,
                    filters=self.request.filters,
                    deadline=self.deadline,
                )
        except TimeoutError:
            raise DeadlineExceeded("the deadline ran out while searching") from None
        finally:
            self._retrieval_s += time.perf_counter() - started
        return [hit for hit in hits if hit.score >= self.threshold]

    # --- tool calls -----------------------------------------------------------------------
    async def start_call(
        self, call_id: str, name: str, arguments: dict[str, Any]
    ) -> ToolCallRecord:
        """Records a call as EXECUTING (RunResult.tool_calls keeps the start order)."""
        record = ToolCallRecord(
            id=call_id,
            name=name,
            arguments=arguments,
            status=ToolCallStatus.EXECUTING,
            started_at=datetime.now(UTC),
        )
        self.tool_calls.append(record)
        self._call_started[id(record)] = time.perf_counter()
        await self._emit(ToolCallStarted(replace(record)))
        return record

    async def end_call(
        self,
        record: ToolCallRecord,
        status: ToolCallStatus,
        *,
        result: dict[str, Any] | None = None,
        error: str = "",
    ) -> None:
        record.status = status
        record.result = result
        record.error = error
        record.duration_s = time.perf_counter() - self._call_started.pop(id(record))
        await self._emit(ToolCallCompleted(replace(record)))

    async def time_out_open_calls(self) -> None:
        for record in self.tool_calls:
            if id(record) in self._call_started:
                await self.end_call(
                    record, ToolCallStatus.TIMEOUT, error="the request's deadline ran out"
                )

    # --- the model and the answer ---------------------------------------------------------
    async def model_turn(
        self,
        model: ChatModel,
        messages: Sequence[dict[str, Any]],
        *,
        temperature: float,
        tools: Sequence[dict[str, Any]] = (),
        tool_choice: str | None = None,
    ) -> Turn:
        """Streams one turn into the answer as it comes.

        Text the model writes before asking for tools in the same turn is part of the
        answer too: it has streamed before the turn's end says that tools come next.
        """
        self.phase = "model"
        self.model_name = self.model_name or model.name  # until the endpoint names itself
        text: list[str] = []
        stream = model.stream(
            messages,
            temperature=temperature,
            deadline=self.deadline,
            tools=tools,
            tool_choice=tool_choice,
        )
        async with aclosing(stream) as events:
            async for event in events:
                if isinstance(event, TextDelta):
                    if not text and self._answer:
                        await self.write("\n\n")  # a later turn starts a new paragraph
                    await self.write(event.text)
                    text.append(event.text)
                    continue
                self.usage += event.usage
                self.model_name = event.model
                return Turn("".join(text), event.tool_calls, event.finish_reason, event.model)
        raise AssertionError("a model turn ends with TurnEnd")  # the ChatModel contract

    async def write(self, model_text: str) -> None:
        """Model text, with citations to sources that do not exist taken out."""
        await self._say(self.citations.feed(model_text))

    async def end_answer(self) -> None:
        await self._say(self.citations.finish())

    async def no_answer(self) -> Outcome:
        await self.end_answer()
        await self._say(NO_ANSWER_MESSAGE)
        return Outcome(ResponseStatus.NO_ANSWER, "no_answer")

    async def _say(self, text: str) -> None:
        if not text:
            return
        if self._first_text_s is None:
            self._first_text_s = self.elapsed()
        self._answer.append(text)
        await self._emit(AnswerDelta(text))

    # --- the result -----------------------------------------------------------------------
    def result(self, outcome: Outcome) -> RunResult:
        cited = [] if outcome.status is ResponseStatus.NO_ANSWER else self.citations.cited
        return RunResult(
            request_id=self.request.request_id,
            session_id=self.request.session_id,
            answer=self.answer,
            sources=[] if outcome.status is ResponseStatus.NO_ANSWER else self.book.final(cited),
            confidence=self.book.confidence(cited),
            tool_calls=[replace(record) for record in self.tool_calls],
            status=outcome.status,
            finish_reason=outcome.finish_reason,
            usage=self.usage,
            timings=Timings(
                retrieval_s=self._retrieval_s,
                time_to_first_token_s=self._first_text_s,
                total_s=self.elapsed(),
            ),
            model=outcome.model or self.model_name,
            created_at=self.created_at,
            answer_mode=self.answer_mode,
            strategy=self.strategy,
        )
