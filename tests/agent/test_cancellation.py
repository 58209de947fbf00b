"""Stopping a run: cancellation and early closing release everything; deadlines end in TIMEOUT."""

from __future__ import annotations

import asyncio
import time

import pytest

from service.agent import Agent, AgentEvent, AnswerDelta, ToolCallCompleted
from service.domain import Deadline, ResponseStatus, ToolCallStatus
from service.errors import DeadlineExceeded, ShuttingDown
from tests.agent.conftest import AgentFactory
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
from tests.fakes.openai_server import ChatReply, FakeOpenAI, ToolCallScript

QUESTION = "What is a URDF link?"
LINK = chunk("urdf-link", "A link is a rigid body with inertia.")
SLOW_ANSWER = ChatReply(deltas=["word "] * 40, delta_interval=0.05)


@pytest.fixture
def retriever() -> FakeRetriever:
    found = FakeRetriever()
    found.add(QUESTION, (LINK, 0.8))
    found.add("links", (LINK, 0.8))
    return found


def search_then(reply: ChatReply) -> list[ChatReply]:
    return [ChatReply.calls(ToolCallScript("qdrant_retrieval", '{"query": "links"}')), reply]


def tasks_besides(fake: FakeOpenAI) -> set[asyncio.Task[object]]:
    return {t for t in asyncio.all_tasks() if t not in fake.handler_tasks}


async def test_cancelling_mid_answer_closes_the_model_stream(
    fake_openai: FakeOpenAI, retriever: FakeRetriever, build_agentic: AgentFactory
) -> None:
    fake_openai.script_chat(*search_then(SLOW_ANSWER))
    agent = build_agentic(retriever, heartbeat_interval=0.02)
    baseline = tasks_besides(fake_openai)
    answering = asyncio.Event()

    async def consume() -> None:
        async for event in agent.run(request(QUESTION)):
            if isinstance(event, AnswerDelta):
                answering.set()

    consumer = asyncio.create_task(consume())
    await asyncio.wait_for(answering.wait(), 5)
    consumer.cancel()
    with pytest.raises(asyncio.CancelledError):
        await consumer

    assert tasks_besides(fake_openai) == baseline, "the run left no task behind"
    closed = await fake_openai.wait_client_closed()
    assert closed is fake_openai.chat_requests[1]
    assert not closed.completed


async def test_closing_the_event_stream_early_closes_the_model_stream(
    fake_openai: FakeOpenAI, retriever: FakeRetriever, build_agentic: AgentFactory
) -> None:
    fake_openai.script_chat(*search_then(SLOW_ANSWER))
    agent = build_agentic(retriever)
    baseline = tasks_besides(fake_openai)

    events = agent.run(request(QUESTION))
    async for event in events:
        if isinstance(event, AnswerDelta):
            break
    await events.aclose()  # type: ignore[attr-defined]

    assert tasks_besides(fake_openai) == baseline
    assert (await fake_openai.wait_client_closed()).client_closed


async def test_cancelling_during_a_search_leaves_nothing_running(
    fake_openai: FakeOpenAI, retriever: FakeRetriever, build_agentic: AgentFactory
) -> None:
    retriever.delays["links"] = 5.0
    retriever.add("joints", (LINK, 0.8))
    retriever.delays["joints"] = 5.0
    fake_openai.script_chat(
        ChatReply.calls(
            ToolCallScript("qdrant_retrieval", '{"query": "links"}'),
            ToolCallScript("qdrant_retrieval", '{"query": "joints"}'),
        )
    )
    agent = build_agentic(retriever)
    baseline = tasks_besides(fake_openai)

    consumer = asyncio.create_task(collect(agent.run(request(QUESTION))))
    async with asyncio.timeout(5):
        while retriever.running < 2:  # noqa: ASYNC110 (the fake retriever has no event to wait on)
            await asyncio.sleep(0.01)
    consumer.cancel()
    with pytest.raises(asyncio.CancelledError):
        await consumer

    assert retriever.running == 0
    assert tasks_besides(fake_openai) == baseline


async def test_deadline_during_a_tool_call_ends_in_timeout(
    fake_openai: FakeOpenAI, retriever: FakeRetriever, build_agentic: AgentFactory
) -> None:
    retriever.delays["links"] = 5.0
    fake_openai.script_chat(*search_then(ChatReply.text("never sent")))
    agent = build_agentic(retriever)

    began = time.monotonic()
    events = await collect(agent.run(request(QUESTION, deadline=Deadline.after(0.5))))

    assert time.monotonic() - began < 1.5
    check_events(events)
    assert kinds(events) == [
        "RunStarted",
        *["ToolCallStarted", "SourcesFound", "ToolCallCompleted"],  # the first search
        *["ToolCallStarted", "ToolCallCompleted"],
        "Completed",
    ]
    ended = shown(events)[5]
    assert isinstance(ended, ToolCallCompleted)
    assert ended.call.status is ToolCallStatus.TIMEOUT
    assert "deadline" in ended.call.error
    result = completed(events).result
    assert result.status is ResponseStatus.TIMEOUT
    assert result.finish_reason == "timeout"
    assert result.answer == ""
    assert [c.status for c in result.tool_calls] == [
        ToolCallStatus.COMPLETED,
        ToolCallStatus.TIMEOUT,
    ]
    assert len(fake_openai.chat_requests) == 1


@pytest.mark.parametrize("strategy", ["agentic", "agents_sdk", "retrieve_first"])
async def test_deadline_during_the_strategys_own_search_ends_in_timeout(
    fake_openai: FakeOpenAI, retriever: FakeRetriever, build_agent: AgentFactory, strategy: str
) -> None:
    retriever.delays[QUESTION] = 5.0
    agent = build_agent(retriever, strategy=strategy)

    began = time.monotonic()
    events = await collect(agent.run(request(QUESTION, deadline=Deadline.after(0.3))))

    assert time.monotonic() - began < 1.5
    check_events(events)
    assert kinds(events) == ["RunStarted", "ToolCallStarted", "ToolCallCompleted", "Completed"]
    result = completed(events).result
    assert result.status is ResponseStatus.TIMEOUT
    [search] = result.tool_calls
    assert SERVER_CALL_ID.match(search.id)
    assert search.status is ToolCallStatus.TIMEOUT
    assert fake_openai.chat_requests == []


async def test_deadline_mid_answer_keeps_the_answer_so_far(
    fake_openai: FakeOpenAI, retriever: FakeRetriever, build_agentic: AgentFactory
) -> None:
    fake_openai.script_chat(ChatReply(deltas=["Links [1] "] * 40, delta_interval=0.05))
    agent = build_agentic(retriever)

    events = await collect(agent.run(request(QUESTION, deadline=Deadline.after(0.6))))

    check_events(events)
    result = completed(events).result
    assert result.status is ResponseStatus.TIMEOUT
    assert result.answer
    assert result.answer == answer_text(events)
    assert (await fake_openai.wait_client_closed()).client_closed


async def test_deadline_before_the_model_answers(
    fake_openai: FakeOpenAI, retriever: FakeRetriever, build_agentic: AgentFactory
) -> None:
    fake_openai.script_chat(ChatReply.text("too late", delay=5.0))
    agent = build_agentic(retriever, heartbeat_interval=0.1)

    events = await collect(agent.run(request(QUESTION, deadline=Deadline.after(0.4))))

    result = completed(events).result
    assert (result.status, result.answer, result.finish_reason) == (
        ResponseStatus.TIMEOUT,
        "",
        "timeout",
    )
    assert "Heartbeat" in kinds(events, heartbeats=True)


async def test_a_deadline_already_gone_times_out_at_once(
    fake_openai: FakeOpenAI, retriever: FakeRetriever, build_agentic: AgentFactory
) -> None:
    agent = build_agentic(retriever)

    events = await collect(agent.run(request(QUESTION, deadline=Deadline.after(0.0))))

    check_events(events)
    result = completed(events).result
    assert result.status is ResponseStatus.TIMEOUT
    assert [c.status for c in result.tool_calls] == [ToolCallStatus.TIMEOUT]
    assert retriever.calls == []
    assert fake_openai.chat_requests == []


async def test_a_store_timing_out_on_its_own_is_an_error_not_a_timeout(
    fake_openai: FakeOpenAI, build_agentic: AgentFactory
) -> None:
    class ImpatientStore(FakeRetriever):
        async def search(self, query: str, **kwargs: object) -> list:  # type: ignore[type-arg]
            raise DeadlineExceeded("qdrant took longer than RAGAGENT_QDRANT_TIMEOUT")

    agent: Agent = build_agentic(ImpatientStore())

    events = await collect(agent.run(request(QUESTION, deadline=Deadline.after(30))))
    assert "QDRANT_TIMEOUT" in str(failed(events, DeadlineExceeded))


async def test_a_run_the_server_stops_ends_cancelled_with_its_answer_so_far(
    fake_openai: FakeOpenAI, retriever: FakeRetriever, build_agent: AgentFactory
) -> None:
    """Agent.stop_runs (server shutdown): the run ends with Completed, status CANCELLED,
    the text so far and ShuttingDown (reported after it); nothing is left running."""
    fake_openai.script_chat(ChatReply.text("word " * 50, pieces=50, delta_interval=0.1))
    agent = build_agent(retriever, agent_strategy="retrieve_first")
    events: list[AgentEvent] = []
    stopped = 0
    async for event in agent.run(request(QUESTION)):
        events.append(event)
        if isinstance(event, AnswerDelta) and not stopped:
            stopped = agent.stop_runs()

    assert stopped == 1

    check_events(events)
    final = completed(events)
    assert final.result.status is ResponseStatus.CANCELLED
    assert final.result.finish_reason == "cancelled"
    assert isinstance(final.error, ShuttingDown)
    assert final.result.answer == answer_text(events)
    assert 0 < len(final.result.answer) < len("word " * 50)
    assert agent.stop_runs() == 0
    assert (await fake_openai.wait_client_closed(within=5)).client_closed
