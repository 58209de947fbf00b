"""The extractive strategy: quoted sentences chosen with the real local embedding model."""

from __future__ import annotations

import re

import numpy as np
import pytest

from service.agent import AgentEvent, AgentRequest, SourcesFound, ToolCallStarted
from service.agent.extractive import _candidates, choose
from service.agent.quote_context import (
    ANSWER_CHARS,
    Candidate,
    with_continuations,
    within_length,
)
from service.config import default_model_dir
from service.domain import AnswerMode, ResponseStatus, ScoredChunk, Source, ToolCallStatus
from service.retrieval.base import Embedder
from service.text.sentences import Piece, lexical_overlap, split_pieces, split_sentences
from tests.agent.support import (
    SERVER_CALL_ID,
    FakeRetriever,
    answer_text,
    check_events,
    chunk,
    collect,
    completed,
    kinds,
    make_agent,
    request,
    shown,
)

MODEL_DIR = default_model_dir()
_LOADED: list[Embedder] = []

QUESTION = "What does a URDF link describe?"
LINK_DOC = chunk(
    "links",
    """# Links

A link in URDF describes one rigid body of the robot with its inertial, visual and
collision properties.

```xml
<link name="base_link">
  <inertial><mass value="1.0"/></inertial>
</link>
```

## Visual and collision

The visual element defines how the link looks in simulation and visualisation tools [3].
The collision element defines the simpler geometry that the physics engine uses for contacts.
See **below**.
""",
)
JOINT_DOC = chunk(
    "joints",
    "A joint connects a parent link to a child link and defines how the child moves. "
    "Revolute joints rotate around an axis within limits, while prismatic joints slide.\n\n"
    "- A fixed joint rigidly attaches one link to another link without any motion.\n",
)
COPY_DOC = chunk(
    "copy",
    "A link in URDF describes one rigid body of the robot with its inertial, visual and "
    "collision properties.",
)
LAUNCH_DOC = chunk(
    "launch", "ROS 2 launch files start several nodes at once and are written in Python."
)


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    if not _LOADED:
        try:
            from service.retrieval.embedders import FastEmbedEmbedder
        except ImportError as exc:
            pytest.skip(f"the fastembed embedder cannot be imported: {exc}")
        if not (MODEL_DIR / "model.onnx").is_file():
            pytest.skip(f"embedding model not provisioned in {MODEL_DIR}: run `make setup`")
        _LOADED.append(
            FastEmbedEmbedder(
                MODEL_DIR, model_name="sentence-transformers/all-MiniLM-L6-v2", threads=2
            )
        )
    return _LOADED[0]


def store() -> FakeRetriever:
    retriever = FakeRetriever()
    retriever.add(QUESTION, (LINK_DOC, 0.8), (JOINT_DOC, 0.6), (COPY_DOC, 0.55), (LAUNCH_DOC, 0.35))
    return retriever


async def answer(embedder: Embedder, query: AgentRequest, sentences: int = 3) -> list[AgentEvent]:
    agent, _ = make_agent(
        None, store(), strategy="extractive", embedder=embedder, extractive_sentences=sentences
    )
    events = await collect(agent.run(query))
    check_events(events)
    return events


async def test_quotes_the_most_relevant_sentences_with_citations(embedder: Embedder) -> None:
    events = await answer(embedder, request(QUESTION))

    shape = kinds(events)
    assert shape[:4] == ["RunStarted", "ToolCallStarted", "SourcesFound", "ToolCallCompleted"]
    assert set(shape[4:-1]) == {"AnswerDelta"}
    started, found = shown(events)[1], shown(events)[2]
    assert isinstance(started, ToolCallStarted)
    assert SERVER_CALL_ID.match(started.call.id)
    assert started.call.arguments == {"query": QUESTION, "top_k": 5}
    assert isinstance(found, SourcesFound)
    assert found.tool_call_id == started.call.id
    result = completed(events).result
    [search] = result.tool_calls
    assert (search.id, search.status) == (started.call.id, ToolCallStatus.COMPLETED)
    assert search.result is not None
    assert search.result["hits"] == 4
    assert result.status is ResponseStatus.SUCCESS
    assert (result.finish_reason, result.strategy) == ("extractive", "extractive")
    assert result.answer_mode is AnswerMode.EXTRACTIVE
    assert result.model == embedder.model_name
    assert result.usage.total_tokens == 0
    assert result.answer == answer_text(events)
    assert result.answer.startswith(
        "A link in URDF describes one rigid body of the robot with its inertial, visual and "
        "collision properties."
    )
    quoted = re.findall(r"[^.]+\.", re.sub(r"\s*\[\d+\]", "", result.answer))
    assert 1 <= len(quoted) <= 3
    assert result.answer.count("A link in URDF describes") == 1, "no near-duplicates"
    for forbidden in ("<link", "# Links", "```", "See below", "[3]", "**"):
        assert forbidden not in result.answer
    cited = sorted(set(map(int, re.findall(r"\[(\d+)\]", result.answer))))
    assert cited == [s.citation for s in result.sources if s.citation]
    assert result.sources[0].hit.chunk == LINK_DOC
    assert result.sources[0].citation == 1
    assert result.confidence > 0


async def test_is_deterministic(embedder: Embedder) -> None:
    first = completed(await answer(embedder, request(QUESTION))).result
    second = completed(await answer(embedder, request(QUESTION))).result
    assert first.answer == second.answer


async def test_paragraphs_follow_the_sources_in_order(embedder: Embedder) -> None:
    events = await answer(embedder, request(QUESTION), sentences=5)

    result = completed(events).result
    paragraphs = result.answer.split("\n\n")
    numbers = [int(re.findall(r"\[(\d+)\]$", p)[0]) for p in paragraphs]
    assert numbers == sorted(numbers)
    assert len(numbers) == len(set(numbers)), "one paragraph per source, citing it at its end"


async def test_nothing_found_is_no_answer(embedder: Embedder) -> None:
    events = await answer(embedder, request("How do I bake bread?"))
    result = completed(events).result
    assert result.status is ResponseStatus.NO_ANSWER
    assert kinds(events) == [
        "RunStarted",
        "ToolCallStarted",
        "ToolCallCompleted",
        "AnswerDelta",
        "Completed",
    ]
    assert [c.result for c in result.tool_calls] == [{"hits": 0, "sources": []}]


def test_splits_prose_and_skips_code_headings_and_tables() -> None:
    text = (
        "# Title\n\nFirst sentence here. Second one [4] with a [link](http://x).\n"
        "| a | b |\n|---|---|\n\n```python\nprint('x. Y.')\n```\n"
        "- Item one is a bullet\n1. Numbered item\n<div>html</div>\n"
    )
    assert split_sentences(text) == [
        "First sentence here.",
        "Second one with a link.",
        "Item one is a bullet",
        "Numbered item",
    ]


def test_choice_prefers_relevance_but_skips_near_duplicates() -> None:
    query = np.array([1.0, 0.0, 0.0])
    vectors = np.array(
        [
            [0.9, 0.436, 0.0],
            [0.9, 0.436, 0.0],  # the same sentence again
            [0.8, 0.0, 0.6],
            [0.1, 0.995, 0.0],  # barely relevant
        ]
    )
    assert choose(query, vectors, 3) == [0, 2]


def test_table_rows_become_header_value_pairs() -> None:
    piped = "| Part | Voltage |\n|---|---|\n| Battery | 12 V |\n| Servo | 6 V |\n"
    plain = "Part | Voltage\nBattery | 12 V\nServo | 6 V\n\nThe end of the table is here."
    for text in (piped, plain):
        pieces = split_pieces(text)
        assert [(p.text, p.kind) for p in pieces[:2]] == [
            ("Part: Battery, Voltage: 12 V", "row"),
            ("Part: Servo, Voltage: 6 V", "row"),
        ]


def test_pieces_know_their_kind_and_what_separates_them() -> None:
    text = (
        "The kit has these parts:\n\n- a battery\n- two motors\n\n## Next\n\n"
        "A new section starts. It goes on.\n```\ncode\n```\nAfter the code."
    )
    pieces = split_pieces(text)
    assert [(p.text, p.kind, p.detached) for p in pieces] == [
        ("The kit has these parts:", "sentence", False),
        ("a battery", "item", False),
        ("two motors", "item", False),
        ("A new section starts.", "sentence", True),
        ("It goes on.", "sentence", False),
        ("After the code.", "sentence", True),
    ]


def test_lexical_overlap_weighs_rare_query_words_more() -> None:
    texts = [
        "The gripper of the robot closes slowly.",
        "The robot walks on the floor.",
        "The robot uses a lidar sensor.",
        "The robot arm has six joints.",
    ]
    overlap = lexical_overlap("Which sensor does the robot use?", texts)
    assert overlap[2] == max(overlap) == pytest.approx(1.0)  # sensor and robot, both found
    assert 0 < overlap[0] == overlap[1] < 0.5, "robot is everywhere, so it counts for little"
    assert lexical_overlap("How do I bake bread?", texts) == [0.0] * 4


def test_lexical_bonus_can_outrank_a_closer_embedding() -> None:
    query = np.array([1.0, 0.0])
    vectors = np.array([[0.9, 0.436], [0.8, 0.6]])
    assert choose(query, vectors, 1) == [0]
    assert choose(query, vectors, 1, bonus=np.array([0.0, 1.0])) == [1]


def _source(text: str, citation: int = 1) -> Source:
    return Source(ScoredChunk(chunk(f"doc{citation}", text), 0.8), citation)


def _pieces(*sources: Source) -> dict[str, list[Piece]]:
    return {s.hit.chunk.chunk_id: split_pieces(s.hit.chunk.text) for s in sources}


def test_short_items_with_facts_are_candidates_and_dangling_lead_ins_are_not() -> None:
    source = _source(
        "A paragraph that is long enough to be quoted on its own here.\n\n"
        "- Runs at 50 Hz\n- Model X2\n- the end\n\nThe parts of the kit are listed below:"
    )
    texts = [c.text for c in _candidates([source], _pieces(source), strict=True)]
    assert texts == [
        "A paragraph that is long enough to be quoted on its own here.",
        "Runs at 50 Hz",
        "Model X2",
    ]


def test_a_labelled_value_is_a_candidate_without_a_full_stop() -> None:
    source = _source(
        "**Location**: `/usr/share/worlds/` (on Linux)\n\n**Total time**: ~2 seconds\n\n"
        "**Status**\n\nA short line without a stop\n\nhttps://example.com: a link"
    )
    texts = [c.text for c in _candidates([source], _pieces(source), strict=True)]
    assert texts == ["Location: /usr/share/worlds/ (on Linux)", "Total time: ~2 seconds"]


def test_a_labelled_value_brings_the_rest_of_its_short_record() -> None:
    source = _source(
        "**Purpose**: Captures colour and depth\n\n**Example**: Intel RealSense, Kinect\n\n"
        "**Cost**: $100-$500\n\nA camera is mounted on the head of the robot.\n\n"
        "**Rate**: 30 Hz"
    )
    pieces = _pieces(source)
    own = pieces[source.hit.chunk.chunk_id]
    record = [
        "Purpose: Captures colour and depth",
        "Example: Intel RealSense, Kinect",
        "Cost: $100-$500",
    ]
    chosen = [Candidate(source, 1, own[1])]
    assert [c.text for c in with_continuations(chosen, pieces)] == record
    alone = [Candidate(source, 4, own[4])]
    assert [c.text for c in with_continuations(alone, pieces)] == ["Rate: 30 Hz"], (
        "a paragraph between ends the record"
    )


def test_an_answer_stops_growing_past_its_length() -> None:
    long = "word " * 30
    sources = [_source(f"Sentence number {n} is here, {long.strip()}.", n) for n in range(1, 9)]
    pieces = _pieces(*sources)
    chosen = [Candidate(s, 0, pieces[s.hit.chunk.chunk_id][0]) for s in sources]
    picked = within_length(chosen, pieces)
    total = sum(len(c.text) for c in picked)
    assert ANSWER_CHARS < total <= ANSWER_CHARS + len(chosen[0].text)
    assert [c.source.citation for c in picked] == list(range(1, len(picked) + 1))
    assert len(within_length(chosen[:1], pieces)) == 1


def test_a_lead_in_brings_the_items_it_introduces() -> None:
    long = "and a long description of what it is for, how it is fitted and when it wears out"
    source = _source(
        "Other text comes first in this paragraph.\n\nThe kit has these parts:\n\n"
        f"- a battery {long}\n- two motors {long}\n- a frame {long}\n- a manual {long}\n\n"
        "Unrelated text follows."
    )
    pieces = _pieces(source)
    own = pieces[source.hit.chunk.chunk_id]
    lead_in = Candidate(source, 1, own[1])
    first = Candidate(source, 0, own[0])
    assert [c.text for c in with_continuations([lead_in, first], pieces)] == [
        "Other text comes first in this paragraph.",
        "The kit has these parts:",
        f"a battery {long}",
        f"two motors {long}",
        f"a frame {long}",
    ], "a long list: its first LEAD_IN_ITEMS items"
    sentence = _source("It works like this: The motor turns. Then it stops.", 2)
    pieces = _pieces(sentence)
    assert [
        c.text
        for c in with_continuations(
            [Candidate(sentence, 0, pieces[sentence.hit.chunk.chunk_id][0])], pieces
        )
    ] == [
        "It works like this: The motor turns.",
    ]


def test_a_short_list_is_quoted_whole_from_any_of_its_items_or_its_lead_in() -> None:
    source = _source(
        "Contributions follow a few steps, listed here for reference.\n\n"
        "To contribute:\n\n1. Fork repository\n2. Create feature branch\n3. Add tests\n"
        "4. Submit PR with a description\n\nReviews take about a week in most cases.\n\n"
        "- an unrelated item after the paragraph"
    )
    pieces = _pieces(source)
    own = pieces[source.hit.chunk.chunk_id]
    steps = [
        "Fork repository",
        "Create feature branch",
        "Add tests",
        "Submit PR with a description",
    ]
    whole = ["To contribute:", *steps]
    item = own.index(next(p for p in own if p.text.startswith("Submit")))
    lead_in = own.index(next(p for p in own if p.text == "To contribute:"))
    for position in (item, lead_in):
        chosen = [Candidate(source, position, own[position])]
        assert [c.text for c in with_continuations(chosen, pieces)] == whole
    unrelated = len(own) - 1
    chosen = [Candidate(source, unrelated, own[unrelated])]
    assert [c.text for c in with_continuations(chosen, pieces)] == [
        "an unrelated item after the paragraph"
    ], "a list ends where a paragraph comes between"


def test_a_lists_lead_in_that_leans_back_comes_with_its_antecedent_or_not_at_all() -> None:
    items = "- a battery pack\n- two servo motors\n- a wooden frame\n"
    alone = _source(f"That's why the kit has:\n\n{items}")
    after = _source(f"Robots need power and motion.\nThat's why the kit has:\n\n{items}", 2)
    for source, expected in (
        (alone, []),
        (after, ["Robots need power and motion.", "That's why the kit has:"]),
    ):
        pieces = _pieces(source)
        own = pieces[source.hit.chunk.chunk_id]
        chosen = [Candidate(source, len(own) - 1, own[-1])]
        assert [c.text for c in with_continuations(chosen, pieces)] == [
            *expected,
            "a battery pack",
            "two servo motors",
            "a wooden frame",
        ]


def test_an_item_of_a_long_list_is_quoted_alone() -> None:
    items = [
        f"item {n} with a sentence long enough to fill most of a line of text" for n in "abcde"
    ]
    source = _source("\n".join(f"- {text}" for text in items))
    pieces = _pieces(source)
    own = pieces[source.hit.chunk.chunk_id]
    chosen = [Candidate(source, 2, own[2])]
    assert [c.text for c in with_continuations(chosen, pieces)] == [items[2]]


async def test_items_of_a_list_are_quoted_as_a_list(embedder: Embedder) -> None:
    parts = chunk(
        "parts",
        "The starter kit contains the following parts:\n\n- one battery pack\n"
        "- two servo motors\n- a wooden frame\n",
    )
    retriever = FakeRetriever()
    retriever.add("Which parts does the starter kit contain?", (parts, 0.8))
    agent, _ = make_agent(
        None, retriever, strategy="extractive", embedder=embedder, extractive_sentences=1
    )
    events = await collect(agent.run(request("Which parts does the starter kit contain?")))
    check_events(events)
    assert completed(events).result.answer == (
        "The starter kit contains the following parts: one battery pack; two servo motors; "
        "a wooden frame [1]"
    )
