"""A deadline ends a run with TIMEOUT and the answer so far, wherever it falls: in the probe
of the endpoint's tool calling, in a tool turn (streamed or not), before the answer's first
token, or in the middle of the answer; for both strategies in which the model calls tools."""

from __future__ import annotations

import pytest

from service.agent import AnswerDelta
from service.domain import Deadline, ResponseStatus
from service.errors import ModelUnavailable
from tests.agent.conftest import AgentFactory
from tests.agent.support import FakeRetriever, chunk, collect, completed, request
from tests.fakes.openai_server import ChatReply, FakeOpenAI, ToolCallScript

QUESTION = "What is a URDF link?"
LINK = chunk("urdf-link", "A link is a rigid body with inertia.")
DEADLINE_S = 0.8
LATE_S = 3.0  # a reply this late is past the deadline
SEARCH = ToolCallScript("qdrant_retrieval", '{"query": "URDF link", "top_k": 3}')


def _tool_turn(**faults: object) -> ChatReply:
    return ChatReply.calls(SEARCH, **faults)  # type: ignore[arg-type]


def _answer(**faults: object) -> ChatReply:
    return ChatReply.text("A link is a rigid body [1].", pieces=6, **faults)  # type: ignore[arg-type]


# (how the endpoint takes tool calls, the replies in order, whether some answer text came)
PHASES = {
    "probe": ("auto", [ChatReply.text("ok", delay=LATE_S)], False),
    "tool turn": ("streamed", [_tool_turn(delay=LATE_S)], False),
    "tool turn, not streamed": ("non_streamed", [_tool_turn(delay=LATE_S)], False),
    "answer's first token": ("streamed", [_tool_turn(), _answer(delay=LATE_S)], False),
    "answer's first token after a turn not streamed": (
        "non_streamed",
        [_tool_turn(), _answer(delay=LATE_S)],
        False,
    ),
    "mid-answer": ("streamed", [_tool_turn(), _answer(stall_after=3, stall_for=LATE_S)], True),
}


@pytest.mark.parametrize("strategy", ["agentic", "agents_sdk"])
@pytest.mark.parametrize("phase", list(PHASES))
async def test_a_deadline_in_any_phase_ends_in_timeout_with_the_answer_so_far(
    fake_openai: FakeOpenAI, build_agent: AgentFactory, strategy: str, phase: str
) -> None:
    tool_calling, replies, some_text = PHASES[phase]
    fake_openai.script_chat(*replies)
    retriever = FakeRetriever()
    retriever.add(QUESTION, (LINK, 0.8))
    retriever.add("URDF link", (LINK, 0.8))
    agent = build_agent(retriever, strategy=strategy, llm_tool_calling=tool_calling)
    events = await collect(agent.run(request(QUESTION, deadline=Deadline.after(DEADLINE_S))))
    final = completed(events)
    assert final.result.status is ResponseStatus.TIMEOUT, (final.result, final.error)
    assert final.result.finish_reason == "timeout"
    text = "".join(e.text for e in events if isinstance(e, AnswerDelta))
    assert final.result.answer == text
    assert bool(text) is some_text


@pytest.mark.parametrize("tool_calling", ["streamed", "non_streamed"])
async def test_a_connection_the_endpoint_closed_is_retried_at_once_within_a_short_deadline(
    fake_openai: FakeOpenAI, build_agent: AgentFactory, tool_calling: str
) -> None:
    """A pooled connection the server closed breaks before any answer; the request goes again
    on a new one without the backoff, which a deadline shorter than it has no room for."""
    fake_openai.script_chat(_tool_turn(hang_up=True), _tool_turn(), _answer())
    retriever = FakeRetriever()
    retriever.add(QUESTION, (LINK, 0.8))
    retriever.add("URDF link", (LINK, 0.8))
    agent = build_agent(
        retriever, strategy="agents_sdk", llm_tool_calling=tool_calling, llm_max_retries=2
    )
    events = await collect(agent.run(request(QUESTION, deadline=Deadline.after(0.45))))
    final = completed(events)
    assert final.result.status is ResponseStatus.SUCCESS, (final.result, final.error)
    assert final.result.answer == "A link is a rigid body [1]."
    assert len(fake_openai.chat_requests) == 3


async def test_a_second_hang_up_waits_for_the_backoff_and_reports_the_endpoint(
    fake_openai: FakeOpenAI, build_agent: AgentFactory
) -> None:
    """Only the first retry is at once: an endpoint that keeps hanging up is unavailable."""
    fake_openai.script_chat(_tool_turn(hang_up=True), _tool_turn(hang_up=True), _tool_turn())
    retriever = FakeRetriever()
    retriever.add(QUESTION, (LINK, 0.8))
    agent = build_agent(
        retriever, strategy="agents_sdk", llm_tool_calling="non_streamed", llm_max_retries=2
    )
    events = await collect(agent.run(request(QUESTION, deadline=Deadline.after(0.45))))
    final = completed(events)
    assert final.result.status is ResponseStatus.ERROR
    assert isinstance(final.error, ModelUnavailable), final.error
    assert len(fake_openai.chat_requests) == 2
