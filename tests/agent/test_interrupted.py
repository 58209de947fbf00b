"""A model answer that broke off is an error with the partial text, never a success.

The faults are real HTTP ones of the scripted server: a body that ends cleanly before the
finish reason, an HTTP 200 with an empty body (llama.cpp, prompt over its window), a TCP reset
and a truncated chunk mid-body; and a model that finishes without writing anything.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import google.rpc.error_details_pb2 as error_details_pb2  # noqa: PLR0402 (as in service.errors)
import grpc
import httpx
import openai
import pytest

from service.agent.events import Completed
from service.agent.model import OpenAIChatModel, TextDelta
from service.domain import Deadline, ResponseStatus
from service.errors import ModelEmptyAnswer, ModelStreamInterrupted, to_rpc_status
from tests.agent.conftest import AgentFactory
from tests.agent.support import FakeRetriever, check_events, chunk, collect, completed, request
from tests.fakes.openai_server import ChatReply, FakeOpenAI, ToolCallScript

QUESTION = "What is a URDF link?"
LINK = chunk("urdf-link", "A link is a rigid body with inertia.")
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def retriever() -> FakeRetriever:
    found = FakeRetriever()
    found.add(QUESTION, (LINK, 0.8))
    found.add("joints", (chunk("urdf-joint", "A joint connects two links."), 0.7))
    return found


def failed(events: list[Any]) -> Completed:
    """The final event of a run whose answer broke off, checked against the stream order."""
    check_events(events, text_before_tools=True)
    final = completed(events)
    assert final.error is not None, "a broken-off answer must carry its error"
    assert final.result.status is ResponseStatus.ERROR
    assert final.result.finish_reason == "error"
    return final


# Events written before each fault: the role chunk, then one per text delta.
CUT = [
    pytest.param(ChatReply(deltas=["A link ", "is a ", "rigid body."], end_after=3), id="closed"),
    pytest.param(ChatReply(deltas=["A link ", "is a ", "rigid body."], reset_after=3), id="reset"),
    pytest.param(ChatReply(deltas=["A link ", "is a ", "rigid body."], drop_after=3), id="dropped"),
]


@pytest.mark.parametrize("strategy", ["retrieve_first", "agentic", "agents_sdk"])
@pytest.mark.parametrize("reply", CUT)
async def test_a_cut_stream_ends_in_error_with_the_partial_answer(
    fake_openai: FakeOpenAI,
    retriever: FakeRetriever,
    build_agent: AgentFactory,
    reply: ChatReply,
    strategy: str,
) -> None:
    fake_openai.script_chat(reply)
    agent = build_agent(retriever, strategy=strategy)

    final = failed(await collect(agent.run(request(QUESTION))))

    assert isinstance(final.error, ModelStreamInterrupted)
    assert final.result.answer == "A link is a "
    status = to_rpc_status(final.error, request_id="req-1")
    assert status.code == grpc.StatusCode.UNAVAILABLE.value[0]
    info, retry = error_details_pb2.ErrorInfo(), error_details_pb2.RetryInfo()
    assert any(d.Unpack(info) for d in status.details)
    assert info.reason == "MODEL_STREAM_INTERRUPTED"
    assert any(d.Unpack(retry) for d in status.details), "UNAVAILABLE comes with RetryInfo"


async def test_an_empty_body_is_an_interrupted_stream_naming_the_likely_cause(
    fake_openai: FakeOpenAI, retriever: FakeRetriever, build_agent: AgentFactory
) -> None:
    fake_openai.script_chat(ChatReply.empty_body())
    agent = build_agent(retriever, strategy="retrieve_first")

    final = failed(await collect(agent.run(request(QUESTION))))

    assert isinstance(final.error, ModelStreamInterrupted)
    assert final.result.answer == ""
    assert "empty stream" in final.error.message
    assert "context window" in final.error.message


async def test_an_interrupted_stream_is_never_retried(
    fake_openai: FakeOpenAI, retriever: FakeRetriever, build_agent: AgentFactory
) -> None:
    fake_openai.script_chat(ChatReply(deltas=["A link"], end_after=2), ChatReply.text("Again."))
    agent = build_agent(retriever, strategy="retrieve_first", llm_max_retries=2)

    final = failed(await collect(agent.run(request(QUESTION))))

    assert final.result.answer == "A link"
    assert len(fake_openai.chat_requests) == 1
    assert fake_openai.unused_replies == 1


async def test_a_cut_after_tool_rounds_keeps_the_calls_and_the_text(
    fake_openai: FakeOpenAI, retriever: FakeRetriever, build_agentic: AgentFactory
) -> None:
    fake_openai.script_chat(
        ChatReply.calls(ToolCallScript("qdrant_retrieval", json.dumps({"query": "joints"}))),
        ChatReply(deltas=["Links are ", "joined by", " joints [2]."], drop_after=3),
    )
    agent = build_agentic(retriever)

    final = failed(await collect(agent.run(request(QUESTION))))

    assert final.result.answer == "Links are joined by"
    assert [c.arguments.get("query") for c in final.result.tool_calls] == [QUESTION, "joints"]


async def test_losing_only_the_usage_after_the_finish_reason_is_a_success(
    fake_openai: FakeOpenAI, retriever: FakeRetriever, build_agent: AgentFactory
) -> None:
    # Events: role, two deltas, the finish reason (3), then the usage chunk, never sent.
    fake_openai.script_chat(ChatReply(deltas=["A rigid ", "body."], drop_after=4))
    agent = build_agent(retriever, strategy="retrieve_first")

    final = completed(await collect(agent.run(request(QUESTION))))

    assert final.error is None
    assert final.result.status is ResponseStatus.SUCCESS
    assert final.result.answer == "A rigid body."


@pytest.mark.parametrize("strategy", ["retrieve_first", "agentic", "agents_sdk"])
async def test_finishing_without_a_word_is_an_empty_answer_error(
    fake_openai: FakeOpenAI, retriever: FakeRetriever, build_agent: AgentFactory, strategy: str
) -> None:
    fake_openai.script_chat(ChatReply(deltas=[]))
    agent = build_agent(retriever, strategy=strategy)

    final = failed(await collect(agent.run(request(QUESTION))))

    assert isinstance(final.error, ModelEmptyAnswer)
    assert final.error.code is grpc.StatusCode.UNAVAILABLE
    assert final.error.reason == "MODEL_EMPTY_ANSWER"
    assert "'stop'" in final.error.message
    assert final.result.answer == ""


async def test_white_space_alone_is_no_answer_either(
    fake_openai: FakeOpenAI, retriever: FakeRetriever, build_agent: AgentFactory
) -> None:
    fake_openai.script_chat(ChatReply(deltas=["\n", "  "]))
    agent = build_agent(retriever, strategy="retrieve_first")

    final = failed(await collect(agent.run(request(QUESTION))))

    assert isinstance(final.error, ModelEmptyAnswer)


async def test_a_token_limit_spent_before_any_text_names_the_setting(
    fake_openai: FakeOpenAI, retriever: FakeRetriever, build_agent: AgentFactory
) -> None:
    fake_openai.script_chat(ChatReply(deltas=[], finish_reason="length"))
    agent = build_agent(retriever, strategy="retrieve_first")

    final = failed(await collect(agent.run(request(QUESTION))))

    assert isinstance(final.error, ModelEmptyAnswer)
    assert "RAGAGENT_LLM_MAX_TOKENS" in final.error.message


async def test_tool_calls_without_text_are_not_an_empty_answer(
    fake_openai: FakeOpenAI, retriever: FakeRetriever, build_agentic: AgentFactory
) -> None:
    fake_openai.script_chat(
        ChatReply.calls(ToolCallScript("qdrant_retrieval", json.dumps({"query": "joints"}))),
        ChatReply.text("Joints join links [2]."),
    )
    agent = build_agentic(retriever)

    final = completed(await collect(agent.run(request(QUESTION))))

    assert final.error is None
    assert final.result.status is ResponseStatus.SUCCESS
    assert final.result.answer == "Joints join links [2]."


class _BrokenBody:
    """An SDK stream that lets httpx's own error escape mid-body, as other SDK versions do."""

    def __init__(self) -> None:
        self.sent = False

    async def __aenter__(self) -> _BrokenBody:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    def __aiter__(self) -> AsyncIterator[Any]:
        return self

    async def __anext__(self) -> Any:
        if self.sent:
            raise httpx.RemoteProtocolError("peer closed connection (incomplete chunked read)")
        self.sent = True
        # Streamed chunks are read as the decoded JSON, not the SDK's typed models.
        return {
            "id": "chatcmpl-x",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": "m",
            "choices": [
                {"index": 0, "delta": {"content": "A link"}, "finish_reason": None},
            ],
        }


class _Client:
    max_retries = 0
    api_key = "k"

    async def post(self, path: str, **_: object) -> _BrokenBody:
        assert path == "/chat/completions"
        return _BrokenBody()

    def with_options(self, **_: object) -> _Client:
        return self


async def test_a_raw_httpx_error_mid_body_is_an_interrupted_stream() -> None:
    model = OpenAIChatModel(
        cast(openai.AsyncOpenAI, _Client()), model="m", max_tokens=10, timeout=5, idle_timeout=5
    )
    seen: list[object] = []

    async def read() -> None:
        async for event in model.stream([], temperature=0.0, deadline=Deadline.after(5)):
            seen.append(event)

    with pytest.raises(ModelStreamInterrupted) as caught:
        await read()

    assert seen == [TextDelta("A link")]
    assert "RemoteProtocolError" in caught.value.message


def test_the_new_reasons_are_documented() -> None:
    readme = (ROOT / "README.md").read_text()
    table = readme[readme.index("| status | reasons |") :].split("\n\n")[0]
    errors_doc = (ROOT / "docs" / "errors.md").read_text()
    for reason in ("MODEL_STREAM_INTERRUPTED", "MODEL_EMPTY_ANSWER"):
        unavailable_row = next(row for row in table.splitlines() if "`UNAVAILABLE`" in row)
        assert f"`{reason}`" in unavailable_row, f"README's error table lacks {reason}"
        assert f"`{reason}`" in errors_doc, f"docs/errors.md lacks {reason}"
