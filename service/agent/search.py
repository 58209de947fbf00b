"""Searches of one run: within its deadline and threshold, reported as tool calls."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

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

# What decides a search's hits besides its limit: query, threshold, filters.
SearchKey = tuple[str, float, SearchFilters | None]
_Found = tuple[list[Source], dict[str, Any]]


class FoundSearches:
    """The searches one run has completed, by everything that decides their hits.

    The model's first search is usually the question the run has just searched for itself.
    A run answers from one view of the store (an ingest landing during it is seen by the
    next run), so the same query, threshold and filters find what they found the first
    time: such a search is answered from here. Its call is still reported and recorded as
    its own, but the store is not searched. A smaller limit is answered with the first hits
    of a larger search only up to ``consistent_limit``, the retriever's promise that its
    results for such limits are prefixes of each other (SearchPipeline.consistent_limit:
    a reranking or hybrid retriever's top 3 is otherwise not the first 3 of its top 5).
    Only completed searches are kept; concurrent identical calls of one turn both search.
    The memo lives as long as the run.
    """

    __slots__ = ("_consistent", "_found")

    def __init__(self, consistent_limit: int = 0) -> None:
        self._consistent = consistent_limit
        self._found: dict[SearchKey, dict[int, _Found]] = {}

    def get(self, key: SearchKey, limit: int) -> _Found | None:
        """The numbered sources and result summary of a search already made, or None."""
        by_limit = self._found.get(key)
        if not by_limit:
            return None
        found = by_limit.get(limit)
        if found is not None:
            sources, summary = found
            return list(sources), summary  # a caller may reorder its list; the run's stays
        larger = [n for n in by_limit if limit < n <= self._consistent]
        if not larger:
            return None
        first = by_limit[min(larger)][0][:limit]
        return first, result_summary(first)

    def put(
        self, key: SearchKey, limit: int, sources: list[Source], summary: dict[str, Any]
    ) -> None:
        self._found.setdefault(key, {})[limit] = (list(sources), summary)


class Searcher:
    """Runs the retrieval tool for a run, numbering what it finds in the run's book.

    Each distinct query is embedded once per run (:attr:`vectors`), and each distinct
    search is made once (:attr:`found`): the model's first search is usually the question
    the run has just searched for itself.
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
        consistent_limit: int = 0,
    ) -> None:
        """``consistent_limit``: the retriever's results for limits up to this are prefixes
        of each other (see :class:`FoundSearches`); 0: no such promise."""
        self._retriever = retriever
        self._threshold = threshold
        self._filters = filters
        self._deadline = deadline
        self._book = book
        self._calls = calls
        self._emit = emit
        self.vectors = QueryVectors()
        self.found = FoundSearches(consistent_limit)
        self.seconds = 0.0

    async def retrieve(self, query: str, limit: int, *, with_pieces: bool = False) -> list[Source]:
        """A search the service runs itself, reported as a qdrant_retrieval call with a
        server id ("srv_...") and origin "service"; its arguments are what was searched.
        ``with_pieces``: the sources carry their stored piece vectors (for quoting)."""
        record = await self._calls.start(
            server_call_id(), TOOL_NAME, {"query": query, "top_k": limit}, origin="service"
        )
        return await self.run(record, query, limit, with_pieces=with_pieces)

    async def run(
        self, record: ToolCallRecord, query: str, limit: int, *, with_pieces: bool = False
    ) -> list[Source]:
        """Executes a started retrieval call: searches, reports the sources, ends the call.

        The sources that passed the threshold are numbered; SourcesFound names the call and
        comes only when something was found. A failed search ends the call with ERROR and
        is raised; a deadline is raised with the call still open, for the run to time out.
        A search the run has made already is answered with its sources (:attr:`found`).
        """
        key: SearchKey = (query, self._threshold, self._filters)
        if self._deadline.expired:
            raise DeadlineExceeded("the deadline ran out before the search")
        found = self.found.get(key, limit)
        if found is None:
            try:
                sources = self._book.add(await self._search(query, limit, with_pieces))
            except DeadlineExceeded:
                raise  # the run ends with TIMEOUT and closes every open call
            except RagAgentError as exc:
                await self._calls.end(record, ToolCallStatus.ERROR, error=exc.message)
                raise
            summary = result_summary(sources)
            self.found.put(key, limit, sources, summary)
        else:
            # The same hits numbered again would get the numbers they have: the book is
            # unchanged by them, so their sources are those of the first time.
            sources, summary = found
        if sources:
            await self._emit(SourcesFound(record.id, sources))
        await self._calls.end(record, ToolCallStatus.COMPLETED, result=summary)
        return sources

    async def _search(self, query: str, limit: int, with_pieces: bool) -> list[ScoredChunk]:
        """Hits passing the threshold (the retriever applies it), best first, found within
        the deadline (checked before by :meth:`run`)."""
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
                    with_pieces=with_pieces,
                )
        except TimeoutError:
            raise DeadlineExceeded("the deadline ran out while searching") from None
        finally:
            self.seconds += time.perf_counter() - started
        return hits
