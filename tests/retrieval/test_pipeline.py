"""The search pipeline's steps, in order, over a scripted engine: threshold, reranking depth,
page diversity, the reranker's scores as the threshold's input, the URL prefix refined, and
results for small limits that are the first of the results for the consistent limit."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, replace

import pytest

from service.domain import Deadline, ScoredChunk, SearchFilters
from service.retrieval.base import EngineHit
from service.retrieval.pipeline import CONSISTENT_LIMIT, SearchPipeline, SearchSteps, diverse
from tests.helpers import make_chunk


class ScriptedEngine:
    """Returns the given hits (best first), recording what it was asked."""

    def __init__(self, hits: Sequence[tuple[str, str, float]]) -> None:
        self.hits = [
            EngineHit(asdict(replace(make_chunk(doc, text), url=f"https://b/{doc}/x")), score)
            for doc, text, score in hits
        ]
        self.asked: list[tuple[int, float | None]] = []
        self.piece_weights: list[float] = []

    async def nearest(
        self,
        vector: Sequence[float],
        *,
        limit: int,
        filters: SearchFilters | None,
        score_threshold: float | None,
        deadline: Deadline | None,
        piece_weight: float = 0.0,
        with_pieces: bool = False,
    ) -> list[EngineHit]:
        self.asked.append((limit, score_threshold))
        self.piece_weights.append(piece_weight)
        return [h for h in self.hits if score_threshold is None or h.similarity >= score_threshold][
            :limit
        ]

    async def fused(
        self,
        vector: Sequence[float],
        query: str,
        *,
        limit: int,
        filters: SearchFilters | None,
        deadline: Deadline | None,
    ) -> list[EngineHit]:
        raise AssertionError("dense searches only here")


class Embedder:
    model_name, dimension, max_tokens = "fixed", 2, 64

    def count_tokens(self, text: str) -> int:
        return len(text.split())

    async def embed_documents(
        self, texts: Sequence[str], *, deadline: Deadline | None = None
    ) -> list[list[float]]:
        return [[1.0, 0.0] for _ in texts]

    async def embed_query(self, text: str, *, deadline: Deadline | None = None) -> list[float]:
        return [1.0, 0.0]


class Reverse:
    """A reranker that reverses the candidates and scores them by their new place."""

    def __init__(self) -> None:
        self.seen = 0

    async def rerank(
        self, query: str, candidates: Sequence[ScoredChunk], *, deadline: Deadline | None = None
    ) -> list[ScoredChunk]:
        self.seen = len(candidates)
        flipped = list(reversed(candidates))
        return [replace(h, score=1.0 - i / 10) for i, h in enumerate(flipped)]


PAGES = [("a", "a0", 0.9), ("a", "a1", 0.88), ("a", "a2", 0.87), ("b", "b0", 0.8), ("c", "c0", 0.3)]


async def test_without_steps_the_engine_cuts_by_the_threshold() -> None:
    engine = ScriptedEngine(PAGES)
    found = await SearchPipeline(engine, Embedder()).search("q", limit=3, threshold=0.5)
    assert [h.chunk.text for h in found] == ["a0", "a1", "a2"]
    assert engine.asked == [(CONSISTENT_LIMIT, 0.5)]  # a smaller limit reads as many


async def test_the_reranker_sees_depth_times_the_limit_above_the_threshold() -> None:
    engine, reranker = ScriptedEngine(PAGES), Reverse()
    pipeline = SearchPipeline(engine, Embedder(), reranker=reranker)
    found = await pipeline.search("q", limit=6, threshold=0.5)
    assert engine.asked == [(18, 0.5)]
    assert reranker.seen == 4  # c0 is below the threshold
    assert [h.chunk.text for h in found] == ["b0", "a2", "a1", "a0"]


async def test_page_diversity_keeps_at_most_n_chunks_per_document() -> None:
    steps = SearchSteps(per_document=1)
    found = await SearchPipeline(ScriptedEngine(PAGES), Embedder(), steps).search(
        "q", limit=3, threshold=0.0
    )
    assert [h.chunk.text for h in found] == ["a0", "b0", "c0"]
    two = diverse(found + found, 2)
    assert len(two) == 6


async def test_the_threshold_can_read_the_rerankers_scores() -> None:
    engine = ScriptedEngine(PAGES)
    steps = SearchSteps(threshold_on_rerank=True)
    found = await SearchPipeline(engine, Embedder(), steps, reranker=Reverse()).search(
        "q", limit=5, threshold=0.85
    )
    # The engine may not cut (the cosine is not what the threshold reads), c0 at 0.3 is in.
    assert engine.asked == [(15, None)]
    assert [(h.chunk.text, h.score) for h in found] == [("c0", 1.0), ("b0", 0.9)]


async def test_a_url_prefix_not_ending_at_a_slash_is_refined_after_the_engine() -> None:
    engine = ScriptedEngine([("a", "a0", 0.9), ("ab", "b0", 0.8)])
    found = await SearchPipeline(engine, Embedder()).search(
        "q", limit=2, threshold=0.0, filters=SearchFilters(url_prefix="https://b/ab")
    )
    assert [h.chunk.text for h in found] == ["b0"]
    assert engine.asked == [(CONSISTENT_LIMIT * 4, None)]


@pytest.mark.parametrize("weight", [0.0, 0.9])
async def test_piece_scoring_reads_more_candidates_scored_and_cut_by_the_engine(
    weight: float,
) -> None:
    engine = ScriptedEngine(PAGES)
    await SearchPipeline(engine, Embedder(), SearchSteps(piece_weight=weight)).search(
        "q", limit=5, threshold=0.4
    )
    # The engine's score is the chunk's with its pieces: it may cut by the threshold.
    assert engine.asked == ([(20, 0.4)] if weight else [(5, 0.4)])
    assert engine.piece_weights == [weight]


@pytest.mark.parametrize("steps", [SearchSteps(), SearchSteps(per_document=2, piece_weight=0.9)])
async def test_results_for_a_smaller_limit_are_the_first_of_those_for_the_consistent_limit(
    steps: SearchSteps,
) -> None:
    """What lets a run answer the model's search for 3 from its own search for 5
    (service.agent.search.FoundSearches): the same candidates, reranked alike."""
    pages = [(f"p{i % 10}", f"t{i}", 0.99 - i / 100) for i in range(40)]
    engine = ScriptedEngine(pages)
    pipeline = SearchPipeline(engine, Embedder(), steps, reranker=Reverse())
    assert pipeline.consistent_limit == CONSISTENT_LIMIT
    most = await pipeline.search("q", limit=CONSISTENT_LIMIT, threshold=0.5)
    assert len(most) == CONSISTENT_LIMIT
    for limit in range(1, CONSISTENT_LIMIT):
        found = await pipeline.search("q", limit=limit, threshold=0.5)
        assert found == most[:limit]
    # Every one of those searches asked the engine for the same candidates.
    assert len(set(engine.asked)) == 1
    # A larger limit reads more, and its first results may differ (the reranker saw more).
    larger = await pipeline.search("q", limit=CONSISTENT_LIMIT + 1, threshold=0.5)
    assert engine.asked[-1][0] > engine.asked[0][0]
    assert [h.chunk.text for h in larger[:CONSISTENT_LIMIT]] != [h.chunk.text for h in most]
