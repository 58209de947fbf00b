"""Searches of one run: within its deadline and threshold, reported as tool calls."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from service.agent.events import AgentEvent, SourcesFound
from service.agent.sources import SourceBook
from service.agent.tool_log import ToolCallLog
from service.agent.tools import TOOL_NAME, result_summary, server_call_id
from service.domain import (
    Deadline,
    ScoredChunk,
    SearchFilters,
    Source,
    ToolCallRecord,
    ToolCallStatus,
)
from service.errors import DeadlineExceeded, RagAgentError
from service.retrieval.base import QueryVectors, Retriever


class Searcher:
    """Runs the retrieval tool for a run, numbering what it finds in the run's book.

    Each distinct query is embedded once per run (:attr:`vectors`): the model's first search
    is usually the question the run has just searched for itself.
    """

    def __init__(
        self,
        retriever: Retriever,
        *,
        threshold: float,
        filters: SearchFilters | None,
        deadline: Deadline,
        book: SourceBook,
        calls: ToolCallLog,
        emit: Callable[[AgentEvent], Awaitable[None]],
    ) -> None:
        self._retriever = retriever
        self._threshold = threshold
        self._filters = filters
        self._deadline = deadline
        self._book = book
        self._calls = calls
        self._emit = emit
        self.vectors = QueryVectors()
        self.seconds = 0.0

    async def retrieve(self, query: str, limit: int) -> list[Source]:
        """A search the service runs itself, reported as a qdrant_retrieval call with a
        server id ("srv_...") and origin "service"; its arguments are what was searched."""
        record = await self._calls.start(
            server_call_id(), TOOL_NAME, {"query": query, "top_k": limit}, origin="service"
        )
        return await self.run(record, query, limit)

    async def run(self, record: ToolCallRecord, query: str, limit: int) -> list[Source]:
        """Executes a started retrieval call: searches, reports the sources, ends the call.

        The sources that passed the threshold are numbered; SourcesFound names the call and
        comes only when something was found. A failed search ends the call with ERROR and
        is raised; a deadline is raised with the call still open, for the run to time out.
        """
        try:
            sources = self._book.add(await self._search(query, limit))
        except DeadlineExceeded:
            raise  # the run ends with TIMEOUT and closes every open call
        except RagAgentError as exc:
            await self._calls.end(record, ToolCallStatus.ERROR, error=exc.message)
            raise
        if sources:
            await self._emit(SourcesFound(record.id, sources))
        await self._calls.end(record, ToolCallStatus.COMPLETED, result=result_summary(sources))
        return sources

    async def _search(self, query: str, limit: int) -> list[ScoredChunk]:
        """Hits passing the threshold (the retriever applies it), best first, found within
        the deadline."""
        if self._deadline.expired:
            raise DeadlineExceeded("the deadline ran out before the search")
        started = time.perf_counter()
        try:
            # Bounded here as well: a store that ignores the deadline must not hold the run.
            async with asyncio.timeout(self._deadline.remaining()):
                hits = await self._retriever.search(
                    query,
                    limit=limit,
                    threshold=self._threshold,
                    filters=self._filters,
                    deadline=self._deadline,
                    vectors=self.vectors,
                )
        except TimeoutError:
            raise DeadlineExceeded("the deadline ran out while searching") from None
        finally:
            self.seconds += time.perf_counter() - started
        return hits
