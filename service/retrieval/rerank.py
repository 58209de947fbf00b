"""Reranking after retrieval: a second look at the best candidates, in another light.

The store ranks by embedding similarity (or its fusion with BM25); a reranker reorders a
few more candidates than asked for and keeps the best. Scores stay the store's cosine, so
the confidence threshold (applied by the store, before reranking) keeps its meaning: a
reranker changes which of the relevant chunks come first, never whether a question is
answerable.

Only a lexical reranker is shipped: no small cross-encoder could be provisioned from a
registry package here (see the README's retrieval quality section for the measurement).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Protocol

from service.domain import Deadline, ScoredChunk, SearchFilters
from service.retrieval.base import QueryVectors, Retriever
from service.retrieval.lexical import STOPWORDS, TermCheck


class Reranker(Protocol):
    """Reorders candidates for a query; returns them all, best first."""

    async def rerank(
        self, query: str, candidates: Sequence[ScoredChunk], *, deadline: Deadline | None = None
    ) -> list[ScoredChunk]: ...


class LexicalReranker:
    """Cosine plus a bonus for the query's content words found in the chunk's text and
    headings: exact terms (a node name, a parameter) that an embedding blurs."""

    def __init__(self, *, weight: float = 0.1) -> None:
        self.weight = weight

    async def rerank(
        self, query: str, candidates: Sequence[ScoredChunk], *, deadline: Deadline | None = None
    ) -> list[ScoredChunk]:
        terms = {w for w in TermCheck.words(query) if len(w) > 2 and w not in STOPWORDS}
        if not terms or not candidates:
            return list(candidates)
        texts = [_words(c.chunk.title, c.chunk.heading, c.chunk.text) for c in candidates]
        # Words in every candidate tell them apart no better than none: weigh by rarity.
        df = {t: sum(t in words for words in texts) for t in terms}
        idf = {t: math.log(1 + len(texts) / df[t]) if df[t] else 0.0 for t in terms}
        total = sum(idf.values()) or 1.0

        def key(item: tuple[int, ScoredChunk]) -> float:
            i, hit = item
            return hit.score + self.weight * sum(idf[t] for t in terms & texts[i]) / total

        return [hit for _, hit in sorted(enumerate(candidates), key=key, reverse=True)]


@functools.lru_cache(maxsize=1024)
def _words(title: str, heading: str, text: str) -> frozenset[str]:
    """A chunk's words, kept for the chunks searched most (reading them was most of what
    reranking cost: ~0.3 ms for 15 candidates on 2 cores)."""
    return frozenset(TermCheck.words(f"{title} {heading} {text}"))


class RerankingRetriever:
    """A Retriever that asks ``inner`` for ``depth`` times the results and reranks them."""

    def __init__(self, inner: Retriever, reranker: Reranker, *, depth: int = 3) -> None:
        self._inner = inner
        self._reranker = reranker
        self._depth = depth

    async def search(
        self,
        query: str,
        *,
        limit: int,
        threshold: float,
        filters: SearchFilters | None = None,
        deadline: Deadline | None = None,
        vectors: QueryVectors | None = None,
    ) -> list[ScoredChunk]:
        candidates = await self._inner.search(
            query,
            limit=limit * self._depth,
            threshold=threshold,
            filters=filters,
            deadline=deadline,
            vectors=vectors,
        )
        return (await self._reranker.rerank(query, candidates, deadline=deadline))[:limit]
