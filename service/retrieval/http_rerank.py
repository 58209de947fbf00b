"""A cross-encoder behind the ``/rerank`` API that TEI, vLLM, llama.cpp's server, Jina and
Cohere share: ``POST {query, documents, top_n}`` -> ``{results: [{index, relevance_score}]}``
(TEI answers with the bare list and names the score ``score``: both forms are read).

A cross-encoder reads the question and each passage together, so it can tell a passage
that names the thing asked about from one that states the asked fact, which no embedding
score can. The call is bounded by the search's deadline and by its own timeout; when it
fails in any way (timeout, refused, 5xx, a body that is not the API's), the lexical
reranker orders the candidates instead, a WARNING is logged and ``on_fallback`` is told
why (the composition root counts it in ragagent_reranker_fallbacks_total).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import httpx

from service.domain import Deadline, ScoredChunk
from service.observability.logging import get_logger
from service.retrieval.rerank import Reranker

log = get_logger("ragagent.rerank")


class RerankResponseError(ValueError):
    """The endpoint answered, but not with the rerank API's body."""


def read_ranking(body: object, count: int) -> list[tuple[int, float]]:
    """(index, score) pairs of a rerank response over ``count`` documents, best first.

    Every index must be a document's, at most once; every score a finite number.
    """
    results = body.get("results") if isinstance(body, dict) else body
    if not isinstance(results, list):
        raise RerankResponseError("no results list")
    ranking: list[tuple[int, float]] = []
    seen: set[int] = set()
    for item in results:
        if not isinstance(item, dict):
            raise RerankResponseError("a result is not an object")
        index = item.get("index")
        score = item.get("relevance_score", item.get("score"))
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < count:
            raise RerankResponseError(f"index {index!r} is not one of the {count} documents")
        if index in seen:
            raise RerankResponseError(f"index {index} ranked twice")
        if isinstance(score, bool) or not isinstance(score, int | float):
            raise RerankResponseError(f"score {score!r} of index {index} is not a number")
        if not math.isfinite(score):
            raise RerankResponseError(f"score {score!r} of index {index} is not a number")
        seen.add(index)
        ranking.append((index, float(score)))
    if not ranking:
        raise RerankResponseError("empty results")
    ranking.sort(key=lambda pair: pair[1], reverse=True)
    return ranking


class HttpReranker:
    """Reranks through a ``/rerank`` endpoint (see the module docstring)."""

    def __init__(
        self,
        client: httpx.AsyncClient,
        *,
        url: str,
        fallback: Reranker,
        timeout: float = 2.0,
        model: str | None = None,
        api_key: str | None = None,
        replace_scores: bool = False,
        on_fallback: Callable[[str], None] = lambda reason: None,
    ) -> None:
        self._client = client
        self._url = url
        self._fallback = fallback
        self._timeout = timeout
        self._model = model
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        # The endpoint's scores replace the retrieval scores (the threshold then reads them).
        self.replace_scores = replace_scores
        self._on_fallback = on_fallback

    async def rerank(
        self, query: str, candidates: Sequence[ScoredChunk], *, deadline: Deadline | None = None
    ) -> list[ScoredChunk]:
        if not candidates:
            return []
        budget = self._timeout if deadline is None else deadline.timeout(self._timeout)
        try:
            # A spent deadline times out at once (asyncio.timeout(0) fails the first await).
            async with asyncio.timeout(max(0.0, budget)):
                ranking = await self._ask(query, candidates)
        except (TimeoutError, httpx.HTTPError, RerankResponseError) as exc:
            reason = _reason(exc)
            log.warning(
                "the reranker endpoint failed; the lexical reranker ordered the results",
                reason=reason,
                error=str(exc) or type(exc).__name__,
                url=self._url,
            )
            self._on_fallback(reason)
            return await self._fallback.rerank(query, candidates, deadline=deadline)
        ordered = [self._scored(candidates[index], score) for index, score in ranking]
        # Documents the endpoint left out (a top_n it capped) follow in retrieval order.
        ranked = {index for index, _ in ranking}
        ordered.extend(c for i, c in enumerate(candidates) if i not in ranked)
        return ordered

    async def _ask(self, query: str, candidates: Sequence[ScoredChunk]) -> list[tuple[int, float]]:
        body: dict[str, Any] = {
            "query": query,
            "documents": [_document(hit) for hit in candidates],
            "top_n": len(candidates),
        }
        if self._model:
            body["model"] = self._model
        response = await self._client.post(self._url, json=body, headers=self._headers)
        response.raise_for_status()
        try:
            payload = response.json()
        except ValueError as exc:
            raise RerankResponseError("the body is not JSON") from exc
        return read_ranking(payload, len(candidates))

    def _scored(self, hit: ScoredChunk, score: float) -> ScoredChunk:
        if not self.replace_scores:
            return hit
        return replace(hit, score=max(0.0, min(1.0, score)))


def _document(hit: ScoredChunk) -> str:
    """What the cross-encoder reads of a chunk: its heading path and its text."""
    heading = hit.chunk.heading or hit.chunk.title
    return f"{heading}\n\n{hit.chunk.text}" if heading else hit.chunk.text


def _reason(exc: BaseException) -> str:
    """A metric label: timeout, status (an HTTP error status), connection or malformed."""
    if isinstance(exc, TimeoutError | httpx.TimeoutException):
        return "timeout"
    if isinstance(exc, httpx.HTTPStatusError):
        return "status"
    if isinstance(exc, RerankResponseError):
        return "malformed"
    return "connection"
