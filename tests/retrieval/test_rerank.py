"""The lexical reranker reorders by the query's rarer words, keeps scores, and the reranking
retriever asks its store for more candidates than it returns."""

from __future__ import annotations

from service.domain import Deadline, ScoredChunk, SearchFilters
from service.retrieval.base import QueryVectors
from service.retrieval.rerank import LexicalReranker, RerankingRetriever
from tests.helpers import make_chunk


def hit(doc: str, text: str, score: float) -> ScoredChunk:
    return ScoredChunk(chunk=make_chunk(doc, text), score=score)


async def test_rare_query_words_in_a_chunk_lift_it_and_scores_stay() -> None:
    candidates = [
        hit("a", "robots use sensors", 0.62),
        hit("b", "the safety_validator_node checks robots plans", 0.60),
    ]
    reranked = await LexicalReranker().rerank("which node validates plans for safety?", candidates)
    assert [h.chunk.document_id for h in reranked] == ["b", "a"]
    assert [h.score for h in reranked] == [0.60, 0.62]


async def test_a_query_of_stopwords_changes_nothing() -> None:
    candidates = [hit("a", "x", 0.5), hit("b", "y", 0.4)]
    assert await LexicalReranker().rerank("what is the", candidates) == candidates


class Recording:
    def __init__(self) -> None:
        self.asked: list[int] = []

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
        self.asked.append(limit)
        return [hit(f"d{i}", f"text {i}", 0.9 - i / 100) for i in range(limit)]


async def test_the_retriever_fetches_depth_times_and_returns_limit() -> None:
    inner = Recording()
    found = await RerankingRetriever(inner, LexicalReranker(), depth=3).search(
        "text", limit=4, threshold=0.3
    )
    assert inner.asked == [12]
    assert len(found) == 4
