"""An answer stream's chunks are JSON from the wire: a shape that is not a Chat Completions
chunk ends the turn as an interrupted answer naming what came, never an AttributeError
(INTERNAL), and shapes real servers send (nulls, extra fields, no choices) are read as
they mean."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.agent.assembly import Assembly
from service.agent.model_errors import MalformedChunk
from service.errors import ModelStreamInterrupted
from tests.agent.conftest import AgentFactory
from tests.agent.support import FakeRetriever, chunk, collect, completed, failed, request
from tests.fakes.openai_server import ChatReply, FakeOpenAI

QUESTION = "What is a URDF link?"
LINK = chunk("urdf-link", "A link is a rigid body with inertia.")

FOREIGN = {
    "an array": "[1, 2]",
    "a string": '"hello"',
    "choices as text": '{"choices": "x"}',
    "a choice as a number": '{"choices": [7]}',
    "a delta as text": '{"choices": [{"delta": "hi"}]}',
    "content as a number": '{"choices": [{"delta": {"content": 5}}]}',
    "tool calls as an object": '{"choices": [{"delta": {"tool_calls": {"a": 1}}}]}',
    "a tool call as text": '{"choices": [{"delta": {"tool_calls": ["f"]}}]}',
    "arguments as a number": (
        '{"choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"arguments": 3}}]}}]}'
    ),
    "a function as a list": '{"choices": [{"delta": {"tool_calls": [{"function": []}]}}]}',
    "usage without counts": '{"choices": [], "usage": {"prompt_tokens": "many"}}',
    "a negative count": '{"choices": [], "usage": {"prompt_tokens": -1, "completion_tokens": 2}}',
    "a finish reason as a number": '{"choices": [{"finish_reason": 1}]}',
}


@pytest.fixture
def retriever() -> FakeRetriever:
    found = FakeRetriever()
    found.add(QUESTION, (LINK, 0.8))
    return found


@pytest.mark.parametrize("data", FOREIGN.values(), ids=FOREIGN.keys())
async def test_a_foreign_chunk_is_an_interrupted_answer(
    fake_openai: FakeOpenAI, retriever: FakeRetriever, build_agentic: AgentFactory, data: str
) -> None:
    fake_openai.script_chat(ChatReply(deltas=["A", "b"], foreign_after=2, foreign_data=data))
    agent = build_agentic(retriever)

    events = await collect(agent.run(request(QUESTION)))

    error = failed(events, ModelStreamInterrupted)
    assert isinstance(error, MalformedChunk)
    assert "model endpoint sent" in error.message
    # The text before the foreign chunk is the partial answer, not lost.
    assert completed(events).result.answer == "A"


async def test_nulls_and_unknown_fields_are_what_real_servers_send(
    fake_openai: FakeOpenAI, retriever: FakeRetriever, build_agentic: AgentFactory
) -> None:
    odd = {
        "id": None,
        "choices": [
            {
                "index": 0,
                "delta": {"content": None, "tool_calls": None, "reasoning_content": "hmm"},
                "finish_reason": None,
                "logprobs": None,
            }
        ],
        "usage": None,
        "system_fingerprint": "b1",
        "timings": {"predicted_ms": 1.5},
    }
    fake_openai.script_chat(
        ChatReply(deltas=["Links ", "[1]."], foreign_after=1, foreign_data=json.dumps(odd))
    )
    agent = build_agentic(retriever)

    events = await collect(agent.run(request(QUESTION)))

    assert completed(events).error is None
    assert completed(events).result.answer == "Links [1]."


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=12), inner),
    max_leaves=12,
)
KEYS = st.sampled_from(
    ["choices", "delta", "content", "tool_calls", "index", "id", "function", "name",
     "arguments", "finish_reason", "usage", "prompt_tokens", "completion_tokens", "model"]
)  # fmt: skip
SHAPED = st.recursive(
    st.none() | st.integers(-2, 3) | st.text(max_size=3) | st.booleans(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=4),
    max_leaves=16,
)


@settings(max_examples=400, deadline=None)
@given(st.lists(JSON | SHAPED, min_size=1, max_size=4))
def test_any_json_is_text_or_a_malformed_chunk(chunks: list[Any]) -> None:
    turn = Assembly()
    for value in chunks:
        try:
            texts = turn.add(value)
        except MalformedChunk:
            return
        assert all(isinstance(t, str) and t for t in texts)
    assert isinstance(turn.finish_reason, str)
    assert all(isinstance(c.name, str) for c in turn.calls.values())
