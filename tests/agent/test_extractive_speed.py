"""What keeps the extractive strategy's first delta close to its retrieval: few pieces
embedded, in one batched call, remembered across questions, and the answer streamed piece
by piece. (How close is measured by ``python -m tests.bench extractive``.)"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from service.agent import AnswerDelta
from service.agent.extractive import EMBEDDED_CANDIDATES, prerank
from service.agent.quote_context import Candidate
from service.agent.sentence_vectors import SentenceVectors
from service.domain import Deadline, ResponseStatus, ScoredChunk, Source
from service.retrieval.base import Embedder, QueryVectors, query_vector
from service.retrieval.embedders import FastEmbedEmbedder
from service.text.sentences import Piece
from tests.agent.support import FakeRetriever, chunk, collect, completed, make_agent, request
from tests.helpers import local_embedder


class CountingEmbedder:
    """The real embedder, recording what each embed_documents call was given."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.calls: list[list[str]] = []

    @property
    def model_name(self) -> str:
        return self.inner.model_name

    @property
    def dimension(self) -> int:
        return self.inner.dimension

    @property
    def max_tokens(self) -> int:
        return self.inner.max_tokens

    def count_tokens(self, text: str) -> int:
        return self.inner.count_tokens(text)

    async def embed_documents(
        self, texts: Sequence[str], *, deadline: Deadline | None = None
    ) -> list[list[float]]:
        self.calls.append(list(texts))
        return await self.inner.embed_documents(texts, deadline=deadline)

    async def embed_query(self, text: str, *, deadline: Deadline | None = None) -> list[float]:
        return (await self.embed_documents([text], deadline=deadline))[0]


@pytest.fixture
def counting() -> CountingEmbedder:
    return CountingEmbedder(local_embedder())


PIECES = [
    "A URDF link describes one rigid body of the robot.",
    "A joint connects a parent link to a child link.",
    "Gazebo simulates physics for the robot model.",
]


async def test_pieces_are_embedded_in_one_call_and_remembered(
    counting: CountingEmbedder,
) -> None:
    vectors = SentenceVectors(counting)
    matrix = await vectors.pieces(PIECES, None)
    assert counting.calls == [PIECES]
    direct = np.asarray(await counting.inner.embed_documents(PIECES))
    np.testing.assert_allclose(matrix, direct, atol=1e-5)

    again = await vectors.pieces(PIECES[::-1], None)
    assert len(counting.calls) == 1, "nothing new to embed"
    np.testing.assert_array_equal(again, matrix[::-1])

    await vectors.pieces([PIECES[0], "A new sentence here."], None)
    assert counting.calls[1] == ["A new sentence here."]
    assert (await vectors.pieces([], None)).shape == (0, counting.dimension)
    assert len(counting.calls) == 2


async def test_the_question_vector_is_the_one_the_run_already_has(
    counting: CountingEmbedder,
) -> None:
    vectors = SentenceVectors(counting)
    run_vectors = QueryVectors()
    made = await query_vector(counting, "What is a link?", run_vectors, None)
    asked = await vectors.question("What is a link?", run_vectors, None)
    assert counting.calls == [["What is a link?"]]
    np.testing.assert_array_equal(asked, np.asarray(made, dtype=np.float32))


async def test_the_least_recently_used_vectors_are_forgotten(counting: CountingEmbedder) -> None:
    vectors = SentenceVectors(counting, capacity=2)
    await vectors.pieces(PIECES[:2], None)  # p0, p1
    await vectors.pieces(PIECES[:1], None)  # p1 is now the oldest
    await vectors.pieces(PIECES[2:], None)  # p1 goes
    assert len(vectors) == 2
    await vectors.pieces(PIECES[1:2], None)
    assert counting.calls[-1] == [PIECES[1]]
    # More pieces than the cache holds are still all returned.
    matrix = await vectors.pieces([*PIECES, "Another one."], None)
    assert matrix.shape == (4, counting.dimension)


def _candidate(text: str, score: float, position: int) -> Candidate:
    hit = ScoredChunk(chunk(f"doc-{score}", text), score)
    return Candidate(Source(hit=hit, citation=1), position, Piece(text, "sentence"))


def test_prerank_keeps_the_best_by_words_then_chunk_score_in_their_order() -> None:
    candidates = [_candidate(f"piece {i}", score, i) for i, score in enumerate((0.9, 0.4, 0.4))]
    candidates.append(_candidate("piece 3", 0.4, 3))
    lexical = np.array([0.0, 0.0, 0.8, 0.3])
    assert prerank(candidates, lexical, 2) == [2, 3]  # 0.8+0.2, 0.3+0.2 > 0.0+0.45
    assert prerank(candidates, lexical, 3) == [0, 2, 3]
    assert prerank(candidates, lexical, 10) == [0, 1, 2, 3]


def test_short_texts_share_a_model_call_and_long_ones_do_not() -> None:
    embedder = local_embedder()
    assert isinstance(embedder, FastEmbedEmbedder)
    short = [f"Sentence number {i} is short." for i in range(30)]
    long = ["word " * 200, "text " * 150]
    batches = embedder.batches([*long, *short])
    assert sorted(i for b in batches for i in b) == list(range(32))
    assert [0] in batches, "a long text fills a call of its own"
    assert [1] in batches
    sizes = sorted(len(b) for b in batches if 0 not in b and 1 not in b)
    assert sum(sizes) == 30
    assert len(sizes) < 5, sizes


async def test_batched_vectors_equal_vectors_embedded_one_at_a_time() -> None:
    embedder = local_embedder()
    texts = [*PIECES, "A longer sentence about the robot's joints and links, and more words."]
    assert isinstance(embedder, FastEmbedEmbedder)
    together = np.asarray(await embedder.embed_documents(texts))
    alone = np.asarray([await embedder.embed_query(t) for t in texts])
    np.testing.assert_allclose(together, alone, atol=1e-4)


LONG_PAGE = " ".join(
    f"Sentence {i} says that the robot arm moves joint {i} with a motor and a gearbox."
    for i in range(40)
)


async def test_a_run_embeds_a_bounded_number_of_pieces_and_quotes_as_many_as_asked(
    counting: CountingEmbedder,
) -> None:
    question = "Which motor moves joint 7 of the robot arm?"
    retriever = FakeRetriever()
    retriever.add(question, (chunk("arm", LONG_PAGE), 0.8), (chunk("arm2", LONG_PAGE[::-1]), 0.5))
    agent, _ = make_agent(
        None, retriever, strategy="extractive", embedder=counting, extractive_sentences=3
    )
    events = await collect(agent.run(request(question)))
    result = completed(events).result
    assert result.status is ResponseStatus.SUCCESS
    question_call, call = counting.calls
    assert question_call == [question], "the search's, reused to rank the pieces"
    assert len(call) == EMBEDDED_CANDIDATES, "the pre-ranked pieces, in one call"
    assert "Sentence 7 says that the robot arm moves joint 7 with a motor and a gearbox." in call
    deltas = [e.text for e in events if isinstance(e, AnswerDelta)]
    assert result.answer.count("Sentence ") == 3, result.answer
    assert "".join(deltas) == result.answer


async def test_pieces_with_stored_vectors_cost_no_model_call_but_the_question(
    counting: CountingEmbedder,
) -> None:
    from dataclasses import replace

    from service.text.sentences import split_pieces

    text = LONG_PAGE
    pieces = [p.text for p in split_pieces(text)]
    stored = np.asarray(await counting.inner.embed_documents(pieces))
    arm = replace(chunk("arm", text), piece_vectors=stored.tolist())
    question = "Which motor moves joint 7 of the robot arm?"
    retriever = FakeRetriever()
    retriever.add(question, (arm, 0.8))
    agent, _ = make_agent(
        None, retriever, strategy="extractive", embedder=counting, extractive_sentences=2
    )
    result = completed(await collect(agent.run(request(question)))).result
    assert counting.calls == [[question]]
    assert "joint 7 with a motor" in result.answer
