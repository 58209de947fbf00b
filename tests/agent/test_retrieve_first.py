"""The retrieve_first strategy: one search, one model call without tools."""

from __future__ import annotations

import random

import pytest

from service.agent import NO_ANSWER_MESSAGE, AnswerDelta, SourcesFound
from service.domain import AnswerMode, ConversationTurn, ResponseStatus
from tests.agent.conftest import AgentFactory
from tests.agent.support import (
    FakeRetriever,
    answer_text,
    chunk,
    collect,
    completed,
    kinds,
    request,
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

    assert kinds(events) == [
        "RunStarted",
        "SourcesFound",
        *["AnswerDelta"] * 4,
        "Completed",
    ]
    found = events[1]
    assert isinstance(found, SourcesFound)
    assert found.tool_call_id == "", "a retrieval of the strategy's own, not a tool call"
    assert [s.citation for s in found.sources] == [1, 2]

    [sent] = fake_openai.chat_requests
    assert "tools" not in sent.body
    system = sent.messages[0]["content"]
    assert "[1] Humanoid (https://x/j)\nThe humanoid has 28 joints." in system
    assert "[2] Humanoid\nIt carries two cameras" in system
    assert sent.messages[-1] == {"role": "user", "content": QUESTION}

    result = completed(events).result
    assert result.answer == "It has 28 joints [1]." == answer_text(events)
    assert [(s.hit.chunk, s.citation) for s in result.sources] == [(JOINTS, 1), (SENSORS, 0)]
    assert result.confidence == pytest.approx(0.9)
    assert result.tool_calls == []
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

    assert completed(events).result.answer == "Two cameras and an IMU [1]."
    messages = fake_openai.chat_requests[0].messages
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    assert messages[-1]["content"] == "What about its sensors?"


async def test_nothing_found_is_no_answer_without_a_model_call(
    fake_openai: FakeOpenAI, retriever: FakeRetriever, build_agent: AgentFactory
) -> None:
    agent = build_agent(retriever, strategy="retrieve_first")

    events = await collect(agent.run(request(QUESTION)))

    assert fake_openai.chat_requests == []
    result = completed(events).result
    assert (result.status, result.answer, result.finish_reason) == (
        ResponseStatus.NO_ANSWER,
        NO_ANSWER_MESSAGE,
        "no_answer",
    )


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

    result = completed(events).result
    assert result.answer == "It has 28 joints [1] and cameras [2]. Source:."
    assert answer_text(events) == result.answer
    texts = [e.text for e in events if isinstance(e, AnswerDelta)]
    assert all(texts), "no empty delta"
    assert not any("9" in t for t in texts)
    assert [s.citation for s in result.sources] == [1, 2]
