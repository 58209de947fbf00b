"""Deadline-aware strategy (issue 27): with RAGAGENT_AGENT_STRATEGY auto, a call whose deadline
is shorter than the endpoint's measured first token plus a minimal answer runs the fastest
strategy that fits and says why; an explicit strategy never changes."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from ragagent.v1 import agent_pb2, agent_pb2_grpc

from service.agent.latency import MIN_ANSWER_TOKENS, EndpointLatency, fitting
from tests.contract.streams import answer_text, check_stream
from tests.fakes.openai_script import ChatReply
from tests.fakes.openai_server import FakeOpenAI
from tests.helpers import BOOKLET, Running, running_server

QUESTION = "What does a URDF file describe?"
SLOW_FIRST_TOKEN_S = 3.0


async def _ask(srv: Running, deadline_s: float) -> list[agent_pb2.AskStreamResponse]:
    call = agent_pb2_grpc.AgentServiceStub(srv.channel).AskStream(
        agent_pb2.QuestionRequest(query=QUESTION), timeout=deadline_s
    )
    return [event async for event in call]


def _slow_answer() -> ChatReply:
    return ChatReply.text("URDF describes links and joints [1].", delay=SLOW_FIRST_TOKEN_S)


@pytest.mark.slow
async def test_a_short_deadline_gets_an_extractive_answer_and_a_long_one_agentic(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.script_chat(_slow_answer(), _slow_answer())
    async with running_server(
        tmp_path, llm_base_url=fake_llm.base_url, agent_strategy="auto", documents=BOOKLET
    ) as srv:
        learned = (await _ask(srv, deadline_s=30))[-1].completed  # times the endpoint
        short = await _ask(srv, deadline_s=1)
        long = await _ask(srv, deadline_s=10)
    assert learned.strategy == "agentic"
    assert learned.downgraded_reason == ""
    check_stream(short)
    fast = short[-1].completed
    assert fast.status == agent_pb2.RESPONSE_STATUS_SUCCESS
    assert fast.strategy == "extractive"
    assert fast.answer_mode == agent_pb2.ANSWER_MODE_EXTRACTIVE
    assert "agentic needs about" in fast.downgraded_reason
    assert "answered with extractive" in fast.downgraded_reason
    assert answer_text(short) == fast.answer
    assert "[1]" in fast.answer
    slow = long[-1].completed
    assert slow.status == agent_pb2.RESPONSE_STATUS_SUCCESS
    assert slow.strategy == "agentic"
    assert slow.downgraded_reason == ""
    assert slow.answer == "URDF describes links and joints [1]."
    assert len(fake_llm.chat_requests) == 2, "the short call asked no model"


async def test_an_explicit_strategy_never_changes(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    fake_llm.script_chat(_slow_answer(), _slow_answer())
    async with running_server(
        tmp_path, llm_base_url=fake_llm.base_url, agent_strategy="agentic", documents=BOOKLET
    ) as srv:
        await _ask(srv, deadline_s=30)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await _ask(srv, deadline_s=1)
    assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert len(fake_llm.chat_requests) == 2, "the short call still asked the model"


def test_nothing_is_downgraded_before_the_endpoint_is_timed_or_without_a_deadline() -> None:
    latency = EndpointLatency()
    assert fitting("agentic", 0.5, latency, "m", extractive=True) is None
    latency.observe("m", 3.0)
    assert fitting("agentic", None, latency, "m", extractive=True) is None
    assert fitting("agentic", 0.5, latency, "other", extractive=True) is None


def test_the_fastest_strategy_that_fits_is_chosen() -> None:
    latency = EndpointLatency()
    latency.observe("m", 1.0, tokens=MIN_ANSWER_TOKENS + 1, rest_s=MIN_ANSWER_TOKENS * 0.01)
    turn = 1.0 + MIN_ANSWER_TOKENS * 0.01
    assert fitting("agentic", 2 * turn + 0.01, latency, "m", extractive=True) is None
    middle = fitting("agentic", 1.5 * turn, latency, "m", extractive=True)
    assert middle is not None
    assert middle.strategy == "retrieve_first"
    short = fitting("agents_sdk", 0.5 * turn, latency, "m", extractive=True)
    assert short is not None
    assert short.strategy == "extractive"
    assert fitting("retrieve_first", 0.5 * turn, latency, "m", extractive=False) is None


def test_the_estimate_is_the_median_of_recent_calls() -> None:
    latency = EndpointLatency(window=3)
    for seconds in (9.0, 1.0, 1.2, 0.8):  # the first has left the window
        latency.observe("m", seconds)
    assert latency.first_token_s("m") == 1.0
