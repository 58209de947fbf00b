"""The lexical reranker reorders by the query's rarer terms (the engine's analyser: stems,
stop words) and keeps scores."""

from __future__ import annotations

from service.domain import ScoredChunk
from service.retrieval.rerank import LexicalReranker, terms
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


def test_terms_are_the_engines_stems_without_stop_words() -> None:
    # One stem for the inflections, no term for "the", "do", "of".
    assert terms("exchanging messages") == terms("exchange message")
    assert terms("the") == frozenset()
    assert len(terms("How do the nodes of ROS exchange messages?")) == 4
