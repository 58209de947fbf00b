"""The model's own "not in the documents", and a tool call written as text (issue 27).

A generative strategy's model declines with the no_answer tool (where tools are offered) or
a "NO_ANSWER:" reply (where they are not): the run ends NO_ANSWER with the model's reason,
stated in the answer too. A turn whose text is the endpoint's own tool-call syntax
(llama-cpp-python's ``functions.qdrant_retrieval:``, quotes HTML-escaped) is a tool call,
never a SUCCESS answer. All against the in-memory FakeChatModel.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from generated.ragagent.v1 import agent_pb2
from service.agent import AnswerDelta
from service.agent.config import StrategyName
from service.agent.declines import (
    NO_ANSWER_TOOL_NAME,
    Opening,
    calls_of_text,
    classify,
    declined_message,
)
from service.agent.model import ToolCallRequest
from service.api.convert import result_to_proto
from service.domain import ResponseStatus, RunResult
from service.errors import ModelEmptyAnswer
from tests.agent.conftest import AGENTIC_STRATEGIES
from tests.agent.support import answer_text, check_events, collect, completed, failed, request
from tests.agent.test_model_capabilities import QUESTION, agent_with, search_call
from tests.fakes.chat_model import FakeChatModel, Scripted

REASON = "The passages name WABOT-1 but not its battery life."
# What llama-cpp-python's chatml-function-calling returned as a message (issue 27).
TOOL_AS_TEXT = "functions.qdrant_retrieval:\n{ &#34;query&#34; : &#34;first humanoid&#34; }"


def decline_call(reason: str = REASON) -> ToolCallRequest:
    return ToolCallRequest("call_n1", NO_ANSWER_TOOL_NAME, f'{{"reason": "{reason}"}}')


async def run_events(model: FakeChatModel, strategy: StrategyName, **overrides: object) -> list:  # type: ignore[type-arg]
    agent, _ = agent_with(model, strategy, **overrides)
    events = await collect(agent.run(request(QUESTION)))
    check_events(events, text_before_tools=True)
    return events


def assert_declined(events: list, reason: str = REASON) -> RunResult:  # type: ignore[type-arg]
    result = completed(events).result
    assert result.status is ResponseStatus.NO_ANSWER
    assert result.finish_reason == "no_answer"
    assert result.no_answer_reason == reason
    assert result.answer == declined_message(reason)  # kept with the session's turn
    assert result.answer == answer_text(events)
    assert result.sources == []
    assert result.grounding is None
    proto = result_to_proto(result)
    assert proto.status == agent_pb2.RESPONSE_STATUS_NO_ANSWER
    assert proto.no_answer_reason == reason
    return result


@pytest.mark.parametrize("strategy", AGENTIC_STRATEGIES)
async def test_a_model_that_calls_no_answer_ends_no_answer_with_its_reason(
    strategy: StrategyName,
) -> None:
    model = FakeChatModel(Scripted(calls=[decline_call()]), tool_calling="streamed")
    events = await run_events(model, strategy)
    assert_declined(events)
    [call] = model.calls
    assert {t["function"]["name"] for t in call.tools} == {"qdrant_retrieval", "no_answer"}
    assert "no_answer tool" in call.messages[0]["content"]


@pytest.mark.parametrize("strategy", AGENTIC_STRATEGIES)
async def test_a_decline_after_a_search_and_on_a_non_streaming_endpoint(
    strategy: StrategyName,
) -> None:
    model = FakeChatModel(
        Scripted(calls=[search_call("first humanoid")]),
        Scripted(calls=[decline_call()]),
        tool_calling="non_streamed",
    )
    events = await run_events(model, strategy)
    result = assert_declined(events)
    assert [c.kind for c in model.calls] == ["complete", "complete"]
    assert [c.origin for c in result.tool_calls] == ["service", "model"]
    # The decline is no tool call of the run: only searches are.
    assert all(c.name == "qdrant_retrieval" for c in result.tool_calls)


async def test_retrieve_first_declines_with_a_no_answer_reply_that_never_streams() -> None:
    model = FakeChatModel(Scripted(text=f"NO_ANSWER: {REASON}"))
    events = await run_events(model, "retrieve_first")
    assert_declined(events)
    assert not any("NO_ANSWER" in e.text for e in events if isinstance(e, AnswerDelta))
    [call] = model.calls
    assert call.tools == []
    assert "NO_ANSWER:" in call.messages[0]["content"]


async def test_the_last_round_may_decline_in_words() -> None:
    model = FakeChatModel(
        Scripted(calls=[search_call("first humanoid")]),
        Scripted(text="NO_ANSWER: " + REASON),
        tool_calling="streamed",
    )
    events = await run_events(model, "agentic", max_tool_rounds=1)
    assert_declined(events)
    assert model.calls[-1].tool_choice == "none"


@pytest.mark.parametrize("strategy", AGENTIC_STRATEGIES)
async def test_a_tool_call_written_as_text_is_a_tool_call(strategy: StrategyName) -> None:
    model = FakeChatModel(
        Scripted(text=TOOL_AS_TEXT),
        Scripted(text="It was WABOT-1 [1]."),
        tool_calling="non_streamed",
    )
    agent, retriever = agent_with(model, strategy)
    events = await collect(agent.run(request(QUESTION)))
    check_events(events, text_before_tools=True)
    result = completed(events).result
    assert result.status is ResponseStatus.SUCCESS
    assert result.answer == "It was WABOT-1 [1]."
    assert "functions." not in answer_text(events)
    assert retriever.calls[-1].query == "first humanoid"  # parsed, unescaped, searched
    assert [c.origin for c in result.tool_calls] == ["service", "model"]
    # The model reads its call back as a structured call with the search's result.
    replay = model.calls[1].messages
    assert replay[-2]["tool_calls"][0]["function"]["name"] == "qdrant_retrieval"
    assert replay[-1]["role"] == "tool"


@pytest.mark.parametrize("strategy", AGENTIC_STRATEGIES)
async def test_a_tool_call_as_text_on_the_last_round_is_never_the_answer(
    strategy: StrategyName,
) -> None:
    # Streamed turns (an endpoint that streams); the last round, cut short by its limit.
    model = FakeChatModel(
        Scripted(calls=[search_call("first humanoid")]),
        Scripted(text='functions.qdrant_retrieval:\n{ "query" : "wab'),
        Scripted(text="It was WABOT-1 [1]."),
        tool_calling="streamed",
    )
    agent, _ = agent_with(model, strategy, max_tool_rounds=1)
    events = await collect(agent.run(request(QUESTION)))
    check_events(events, text_before_tools=True)
    result = completed(events).result
    assert result.status is ResponseStatus.SUCCESS
    assert result.answer == "It was WABOT-1 [1]."
    assert "functions." not in answer_text(events)
    # The answer came from one more turn offering no tool, over the passages found.
    assert model.calls[-1].tools == []
    assert "WABOT-1 was built" in model.calls[-1].messages[-1]["content"]


async def test_retrieve_first_never_passes_a_tool_call_as_text_off_as_an_answer() -> None:
    model = FakeChatModel(Scripted(text=TOOL_AS_TEXT))
    agent, _ = agent_with(model, "retrieve_first")
    events = await collect(agent.run(request(QUESTION)))
    assert completed(events).result.status is ResponseStatus.ERROR
    error = failed(events, ModelEmptyAnswer)
    assert isinstance(error, ModelEmptyAnswer)
    assert "as text" in error.message


@pytest.mark.parametrize("strategy", AGENTIC_STRATEGIES)
async def test_an_answer_that_only_mentions_the_marker_streams_as_usual(
    strategy: StrategyName,
) -> None:
    text = "No: WABOT-1 [1] came first; functions. of it are listed."
    model = FakeChatModel(Scripted(text=text), tool_calling="streamed")
    events = await run_events(model, strategy)
    result = completed(events).result
    assert result.status is ResponseStatus.SUCCESS
    assert result.answer == text


def test_tool_calls_as_text_parse_with_escaped_quotes_and_truncation() -> None:
    [call] = calls_of_text(TOOL_AS_TEXT)
    assert (call.name, call.arguments) == ("qdrant_retrieval", '{ "query" : "first humanoid" }')
    [cut] = calls_of_text('functions.qdrant_retrieval:\n{ "query" : "ROS 2 top')
    assert cut.arguments == '{"query": "ROS 2 top"}'
    two = calls_of_text('functions.a:\n{"query": "x"}\nfunctions.b:\n{"query": "y"}')
    assert [c.name for c in two] == ["a", "b"]
    assert classify("  functions.q") == "tool_text"
    assert classify("NO_ANSWER: x") == "no_answer"
    assert classify("NO_") is None
    assert classify("Not in the documents") == "text"


@given(st.text(max_size=60), st.lists(st.integers(0, 60), max_size=6))
def test_an_answer_is_released_whole_whatever_the_split(text: str, cuts: list[int]) -> None:
    opening = Opening()
    bounds = sorted({0, len(text), *(c for c in cuts if c <= len(text))})
    out = "".join(opening.feed(text[a:b]) for a, b in itertools.pairwise(bounds))
    out += opening.finish()
    if opening.kind == "text":
        assert out == text
    else:
        assert out == ""
        assert opening.held == text
