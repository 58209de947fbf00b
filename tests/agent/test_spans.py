"""Citation spans (issue 27): each cited claim of the answer, the passage text supporting it,
and a support score; streamed as the sentences complete, equal to the final list."""

from __future__ import annotations

import asyncio
import itertools
import re
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.agent import AgentEvent, CitationFound
from service.agent.answer import AnswerWriter
from service.agent.sources import SourceBook
from service.agent.spans import _normalized, citation_spans, locate, sentence_spans
from service.domain import ResponseStatus, ScoredChunk
from service.retrieval.base import Embedder
from tests.agent.support import check_citations, chunk, collect, completed, request
from tests.agent.test_extractive import QUESTION as EXTRACTIVE_QUESTION
from tests.agent.test_extractive import answer as extractive_answer
from tests.agent.test_extractive import embedder as extractive_embedder
from tests.agent.test_model_capabilities import QUESTION, WABOT, agent_with, search_call
from tests.fakes.chat_model import FakeChatModel, Scripted

embedder = extractive_embedder  # the module-scoped fixture, under its own name

_CITATION = re.compile(r"\s*\[\d+(?:\s*,\s*\d+)*\]")

# Answers and passages made of words, citations, punctuation, markup and odd characters.
_TOKENS = st.sampled_from(
    [
        "ROS", "2", "uses", "DDS", "nodes", "topics", ".", "!", "?", " ", "  ", "\n", "\n\n",
        "[1]", "[2]", "[1, 2]", "[9]", "[", "]", ",", "**", "`", "é", "🤖", "e.g.", "[1][2]",
    ]
)  # fmt: skip
_TEXTS = st.lists(st.one_of(_TOKENS, st.text(max_size=5)), max_size=40).map(" ".join)


@given(answer=_TEXTS, first=_TEXTS, second=_TEXTS)
def test_no_span_is_ever_out_of_range(answer: str, first: str, second: str) -> None:
    passages = {1: first, 2: second}
    for span in sentence_spans(answer):
        assert 0 <= span[0] < span[1] <= len(answer)
    for c in citation_spans(answer, passages.get):
        assert 0 <= c.start < c.end <= len(answer)
        assert 0 <= c.quote_start <= c.quote_end <= len(passages[c.source])
        assert 0.0 <= c.support <= 1.0


@settings(max_examples=60, deadline=None)
@given(answer=_TEXTS, cuts=st.lists(st.integers(0, 200), max_size=8))
def test_streamed_spans_equal_the_spans_of_the_whole_answer(answer: str, cuts: list[int]) -> None:
    asyncio.run(_stream_and_compare(answer, cuts))


async def _stream_and_compare(answer: str, cuts: list[int]) -> None:
    writer, sent = await _written(answer, cuts)
    streamed = [e.citation for e in sent if isinstance(e, CitationFound)]
    texts = {n: _BOOK.get(n).hit.chunk.text for n in (1, 2)}
    assert streamed == citation_spans(writer.text, texts.get)
    assert streamed == writer.spans


@settings(max_examples=60, deadline=None)
@given(answer=_TEXTS, cuts=st.lists(st.integers(0, 200), max_size=8))
def test_a_span_is_sent_after_the_same_delta_as_when_every_delta_was_split_again(
    answer: str, cuts: list[int]
) -> None:
    """The writer splits its unsettled text again only once it holds a sentence break; the
    events, citations between deltas included, are those of splitting it after every delta."""
    lazy = asyncio.run(_written(answer, cuts))[1]
    with mock.patch("service.agent.answer.has_break", return_value=True):
        eager = asyncio.run(_written(answer, cuts))[1]
    assert lazy == eager


_BOOK = SourceBook()
_BOOK.add(
    [
        ScoredChunk(chunk("one", "ROS 2 uses DDS. Nodes publish topics."), 0.9),
        ScoredChunk(chunk("two", "Topics carry **messages** between nodes!"), 0.8),
    ]
)


async def _written(answer: str, cuts: list[int]) -> tuple[AnswerWriter, list[AgentEvent]]:
    """``answer`` written in the pieces ``cuts`` make of it, then ended: the writer and
    every event it sent."""
    sent: list[AgentEvent] = []

    async def emit(event: AgentEvent) -> None:
        sent.append(event)

    writer = AnswerWriter(_BOOK, emit, 0.0)
    bounds = sorted({0, len(answer), *(c for c in cuts if c <= len(answer))})
    for a, b in itertools.pairwise(bounds):
        await writer.write(answer[a:b])
    await writer.end()
    return writer, sent


def test_a_verbatim_quote_spans_exactly_its_text_markup_aside() -> None:
    passage = "Intro.\nROS 2 uses **DDS**,   the Data\nDistribution Service. More."
    (start, end), support = locate("ROS 2 uses DDS, the Data Distribution Service.", passage)
    assert passage[start:end] == "ROS 2 uses **DDS**,   the Data\nDistribution Service"
    assert support == 1.0
    (start, end), support = locate("Nodes use DDS for discovery.", passage)
    assert passage[start:end] == "ROS 2 uses **DDS**,   the Data\nDistribution Service."
    assert 0 < support < 1


def test_a_citation_after_the_full_stop_belongs_to_the_sentence_before() -> None:
    answer = "ROS 2 uses DDS. [1] Nodes publish topics [2]."
    spans = citation_spans(answer, {1: "ROS 2 uses DDS.", 2: "Nodes publish topics."}.get)
    assert [(answer[c.start : c.end], c.source) for c in spans] == [
        ("ROS 2 uses DDS. [1]", 1),
        ("Nodes publish topics [2].", 2),
    ]
    assert [c.support for c in spans] == [1.0, 1.0]


async def test_the_scripted_models_spans_lie_inside_answer_and_passages() -> None:
    text = "WABOT-1 was built at Waseda University in 1973 [1]. It had 🤖 eyes [1][3]. Yes."
    model = FakeChatModel(
        Scripted(calls=[search_call("first humanoid")]),
        Scripted(text=text),
        tool_calling="streamed",
    )
    agent, _ = agent_with(model, "agentic")
    events = await collect(agent.run(request(QUESTION)))
    result = completed(events).result
    assert result.status is ResponseStatus.SUCCESS
    check_citations(result)
    assert (result.citations[0].source, result.citations[0].support) == (1, 1.0)
    quoted = result.citations[0]
    assert WABOT.text[quoted.quote_start : quoted.quote_end].startswith("WABOT-1 was built")
    streamed = [e.citation for e in events if isinstance(e, CitationFound)]
    assert tuple(streamed) == result.citations
    assert len(result.citations) == 3  # [1], then [1] and [3] of the second sentence


async def test_extractive_quotes_span_exactly_the_passage_text(embedder: Embedder) -> None:
    events = await extractive_answer(embedder, request(EXTRACTIVE_QUESTION))
    result = completed(events).result
    assert result.citations
    texts = {s.citation: s.hit.chunk.text for s in result.sources if s.citation}
    for c in result.citations:
        claim = _CITATION.sub("", result.answer[c.start : c.end]).strip().rstrip(".;")
        quote = texts[c.source][c.quote_start : c.quote_end]
        assert _normalized(quote) == _normalized(claim), (claim, quote)
        assert c.support == 1.0


@pytest.mark.parametrize("sentences", [10])
def test_the_lexical_check_is_cheap_enough_to_run_on_every_answer(sentences: int) -> None:
    """Correctness at the benchmark's size (the timing is in tests/bench/bench_citations.py)."""
    from tests.bench.bench_citations import workload

    answer, passages = workload(sentences)
    found = citation_spans(answer, passages.get)
    assert len(found) >= sentences
