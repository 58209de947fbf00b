"""The retrieve_first strategy: one search, one model call without tools."""

from __future__ import annotations

import random
from itertools import groupby

import pytest

from service.agent import (
    NO_ANSWER_MESSAGE,
    AnswerDelta,
    SourcesFound,
    ToolCallCompleted,
    ToolCallStarted,
)
from service.domain import AnswerMode, ConversationTurn, ResponseStatus, ToolCallStatus
from service.errors import StoreUnavailable
from tests.agent.conftest import AgentFactory
from tests.agent.marks import plain
from tests.agent.support import (
    SERVER_CALL_ID,
    FakeRetriever,
    answer_text,
    check_events,
    chunk,
    collect,
    completed,
    failed,
    kinds,
    request,
    shown,
)
from tests.fakes.openai_server import ChatReply, FakeOpenAI

QUESTION = "How many joints does the humanoid have?"
JOINTS = chunk("joints", "The humanoid has 28 joints.", title="Humanoid", url="https://x/j")
SENSORS = chunk("sensors", "It carries two cameras and an IMU.", title="Humanoid")


async def test_searches_once_then_answers_from_the_numbered_sources(
    fake_openai: FakeOpenAI, retriever: FakeRetriever, build_agent: AgentFactory
) -> None:
    retriever.add(QUESTION, (JOINTS, 0.9), (SENSORS, 0.4))
    fake_openai.script_chat(ChatReply.text("It has 28 joints [1].", pieces=4))
    agent = build_agent(retriever, strategy="retrieve_first")

    events = await collect(agent.run(request(QUESTION)))

    check_events(events)
    # Chunks that queue behind the stream go as one delta (test_merged_deltas): how many
    # queue depends on how the socket delivered them, so the deltas are counted as one run.
    assert [kind for kind, _ in groupby(kinds(events))] == [
        "RunStarted",
        "ToolCallStarted",
        "SourcesFound",
        "ToolCallCompleted",
        "AnswerDelta",
        "Completed",
    ]
    started, found, ended = shown(events)[1:4]
    # The strategy's own search is a tool call too, with an id of the server's.
    assert isinstance(started, ToolCallStarted)
    assert SERVER_CALL_ID.match(started.call.id)
    assert started.call.name == "qdrant_retrieval"
    assert started.call.arguments == {"query": QUESTION, "top_k": 5}
    assert started.call.status is ToolCallStatus.EXECUTING
    assert isinstance(found, SourcesFound)
    assert found.tool_call_id == started.call.id
    assert [s.citation for s in found.sources] == [1, 2]
    assert isinstance(ended, ToolCallCompleted)
    assert ended.call.id == started.call.id
    assert ended.call.status is ToolCallStatus.COMPLETED
    assert ended.call.result is not None
    assert ended.call.result["hits"] == 2
    assert [s["citation"] for s in ended.call.result["sources"]] == [1, 2]

    [sent] = fake_openai.chat_requests
    assert "tools" not in sent.body
    system, user = sent.messages[0]["content"], sent.messages[-1]["content"]
    assert "The humanoid has 28 joints." not in system, "passages are data, not instructions"
    assert "[1] Humanoid (https://x/j)\nThe humanoid has 28 joints." in user
    assert "[2] Humanoid\nIt carries two cameras" in user
    assert plain(user).endswith(f"</passages>\n\nQuestion: {QUESTION}")

    result = completed(events).result
    assert result.answer == "It has 28 joints [1]." == answer_text(events)
    assert [(s.hit.chunk, s.citation) for s in result.sources] == [(JOINTS, 1), (SENSORS, 0)]
    assert result.confidence == pytest.approx(0.9)
    assert result.tool_calls == [ended.call]
    assert (result.strategy, result.answer_mode) == ("retrieve_first", AnswerMode.GENERATIVE)
    assert result.usage.total_tokens == 18


async def test_a_follow_up_is_searched_with_the_previous_question(
    fake_openai: FakeOpenAI, retriever: FakeRetriever, build_agent: AgentFactory
) -> None:
    history = [ConversationTurn(QUESTION, "It has 28 joints [1].")]
    retriever.add(f"{QUESTION}\nWhat about its sensors?", (SENSORS, 0.7))
    fake_openai.script_chat(ChatReply.text("Two cameras and an IMU [1]."))
    agent = build_agent(retriever, strategy="retrieve_first")

    events = await collect(agent.run(request("What about its sensors?", history=history)))

    check_events(events)
    result = completed(events).result
    assert result.answer == "Two cameras and an IMU [1]."
    [search] = result.tool_calls
    assert search.arguments == {"query": f"{QUESTION}\nWhat about its sensors?", "top_k": 5}
    messages = fake_openai.chat_requests[0].messages
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    assert messages[-1]["content"].endswith("\n\nQuestion: What about its sensors?")


async def test_nothing_found_is_no_answer_without_a_model_call(
    fake_openai: FakeOpenAI, retriever: FakeRetriever, build_agent: AgentFactory
) -> None:
    agent = build_agent(retriever, strategy="retrieve_first")

    events = await collect(agent.run(request(QUESTION)))

    assert fake_openai.chat_requests == []
    check_events(events)
    assert kinds(events) == [
        "RunStarted",
        "ToolCallStarted",
        "ToolCallCompleted",
        "AnswerDelta",
        "Completed",
    ]
    result = completed(events).result
    assert (result.status, result.answer, result.finish_reason) == (
        ResponseStatus.NO_ANSWER,
        NO_ANSWER_MESSAGE,
        "no_answer",
    )
    [search] = result.tool_calls
    assert (search.status, search.result) == (
        ToolCallStatus.COMPLETED,
        {"hits": 0, "sources": []},
    )


async def test_a_failing_search_is_an_errored_tool_call(
    fake_openai: FakeOpenAI, build_agent: AgentFactory
) -> None:
    class BrokenStore(FakeRetriever):
        async def search(self, query: str, **kwargs: object) -> list:  # type: ignore[type-arg]
            raise StoreUnavailable("qdrant is down")

    agent = build_agent(BrokenStore(), strategy="retrieve_first")
    events = await collect(agent.run(request(QUESTION)))

    failed(events, StoreUnavailable)
    assert kinds(events) == ["RunStarted", "ToolCallStarted", "ToolCallCompleted", "Completed"]
    events = shown(events)
    ended = events[2]
    assert isinstance(ended, ToolCallCompleted)
    assert (ended.call.status, ended.call.error) == (ToolCallStatus.ERROR, "qdrant is down")
    assert fake_openai.chat_requests == []


@pytest.mark.parametrize("seed", range(12))
async def test_an_invented_citation_never_reaches_the_caller(
    fake_openai: FakeOpenAI, retriever: FakeRetriever, build_agent: AgentFactory, seed: int
) -> None:
    text = "It has 28 joints [1][9] and cameras [2, 9]. Source: [9]."
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(1, len(text)), rng.randint(2, 25)))
    deltas = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
    retriever.add(QUESTION, (JOINTS, 0.9), (SENSORS, 0.6))
    fake_openai.script_chat(ChatReply(deltas=deltas))
    agent = build_agent(retriever, strategy="retrieve_first")

    events = await collect(agent.run(request(QUESTION)))

    check_events(events)
    result = completed(events).result
    assert result.answer == "It has 28 joints [1] and cameras [2]. Source:."
    assert answer_text(events) == result.answer
    texts = [e.text for e in events if isinstance(e, AnswerDelta)]
    assert all(texts), "no empty delta"
    assert not any("9" in t for t in texts)
    assert [s.citation for s in result.sources] == [1, 2]
