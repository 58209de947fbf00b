"""A model answer that broke off, through the real gRPC server: the final message with status
ERROR and the partial answer, then UNAVAILABLE with the reason, and a turn recorded as ERROR.

The model is the scripted HTTP fake, so the faults are real ones on the socket: a body that
ends before the finish reason, an empty HTTP 200, a reset and a truncated chunk.
"""

from __future__ import annotations

import json
from contextlib import AbstractAsyncContextManager
from pathlib import Path

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status
from ragagent.v1 import agent_pb2, agent_pb2_grpc

from service.sessions.records import RunStatus
from tests import helpers
from tests.contract.streams import answer_text, check_stream
from tests.fakes.openai_script import ChatReply, ToolCallScript
from tests.fakes.openai_server import FakeOpenAI
from tests.helpers import Running, running_server

QUESTION = "What does a URDF file describe?"
FOLLOW_UP = "How do joints connect the links of a robot?"
BOOKLET = helpers.BOOKLET[:1]  # the URDF page alone
PIECES = ["A URDF file ", "describes ", "the links ", "of a robot [1]."]


async def _ask_stream(
    srv: Running, **fields: object
) -> tuple[list[agent_pb2.AskStreamResponse], grpc.aio.AioRpcError]:
    """The events of a stream that must end with an error status, and that error."""
    call = agent_pb2_grpc.AgentServiceStub(srv.channel).AskStream(
        agent_pb2.QuestionRequest(**fields),  # type: ignore[arg-type]
        timeout=30,
    )
    events: list[agent_pb2.AskStreamResponse] = []
    with pytest.raises(grpc.aio.AioRpcError) as caught:  # noqa: PT012 (events before it)
        async for event in call:
            events.append(event)
    return events, caught.value


def _reason(error: grpc.aio.AioRpcError) -> str:
    status = rpc_status.from_call(error)  # type: ignore[arg-type]
    assert status is not None
    info = error_details_pb2.ErrorInfo()
    assert any(d.Unpack(info) for d in status.details), "no ErrorInfo detail"
    retry = error_details_pb2.RetryInfo()
    assert any(d.Unpack(retry) for d in status.details), "UNAVAILABLE without RetryInfo"
    return info.reason


async def _turn_status(srv: Running, session_id: str) -> tuple[RunStatus, str]:
    assert srv.runtime.sessions is not None
    record = await srv.runtime.sessions.get_session(session_id, "")
    (turn,) = record.turns
    return turn.status, turn.answer


def _retrieve_first(tmp_path: Path, fake_llm: FakeOpenAI) -> AbstractAsyncContextManager[Running]:
    """The server over BOOKLET, answering with the fake model and the retrieve-first strategy."""
    return running_server(
        tmp_path, llm_base_url=fake_llm.base_url, agent_strategy="retrieve_first", documents=BOOKLET
    )


async def _interrupted_turn(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> tuple[list[agent_pb2.AskStreamResponse], grpc.aio.AioRpcError, RunStatus, str]:
    """QUESTION over AskStream, a stream that must end with an error status: its events, the
    error, and the turn's status and answer as the session store recorded them."""
    async with _retrieve_first(tmp_path, fake_llm) as srv:
        events, error = await _ask_stream(srv, query=QUESTION)
        status, stored = await _turn_status(srv, events[-1].completed.session_id)
    return events, error, status, stored


@pytest.mark.parametrize(
    ("reply", "partial"),
    [
        # Events: the role chunk, then one per piece; a fault at 3 comes after two pieces.
        pytest.param(ChatReply(deltas=PIECES, end_after=3), "A URDF file describes ", id="closed"),
        pytest.param(ChatReply(deltas=PIECES, reset_after=3), "A URDF file describes ", id="reset"),
        pytest.param(
            ChatReply(deltas=PIECES, drop_after=3), "A URDF file describes ", id="dropped"
        ),
        pytest.param(ChatReply.empty_body(), "", id="empty body"),
    ],
)
async def test_an_interrupted_answer_ends_with_error_after_its_partial_text(
    tmp_path: Path, fake_llm: FakeOpenAI, reply: ChatReply, partial: str
) -> None:
    fake_llm.script_chat(reply)
    events, error, status, stored = await _interrupted_turn(tmp_path, fake_llm)
    final = events[-1].completed

    assert error.code() == grpc.StatusCode.UNAVAILABLE
    assert _reason(error) == "MODEL_STREAM_INTERRUPTED"
    check_stream(events)
    assert final.status == agent_pb2.RESPONSE_STATUS_ERROR
    assert final.finish_reason == "error"
    assert final.answer == partial == answer_text(events)
    assert status is RunStatus.ERROR
    assert stored == partial


async def test_ask_reports_the_interruption_too(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    fake_llm.script_chat(ChatReply(deltas=PIECES, end_after=2))
    async with _retrieve_first(tmp_path, fake_llm) as srv:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await agent_pb2_grpc.AgentServiceStub(srv.channel).Ask(
                agent_pb2.QuestionRequest(query=QUESTION), timeout=30
            )
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
    assert _reason(caught.value) == "MODEL_STREAM_INTERRUPTED"


async def test_the_next_turn_does_not_replay_the_partial_answer(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.script_chat(
        ChatReply(deltas=["Links and ", "joints, ", "and also"], end_after=3),
        ChatReply.text("Joints connect the links [1]."),
    )
    async with _retrieve_first(tmp_path, fake_llm) as srv:
        events, _ = await _ask_stream(srv, query=QUESTION)
        session_id = events[-1].completed.session_id
        call = agent_pb2_grpc.AgentServiceStub(srv.channel).AskStream(
            agent_pb2.QuestionRequest(query=FOLLOW_UP, session_id=session_id),
            timeout=30,
        )
        second = [event async for event in call]
    assert events[-1].completed.answer == "Links and joints, "
    assert second[-1].completed.status == agent_pb2.RESPONSE_STATUS_SUCCESS
    sent = json.dumps(fake_llm.chat_requests[1].body["messages"])
    assert "Links and joints" not in sent


async def test_an_interruption_after_a_tool_round_keeps_the_calls(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.script_chat(
        ChatReply.calls(ToolCallScript("qdrant_retrieval", json.dumps({"query": "URDF links"}))),
        ChatReply(deltas=PIECES, drop_after=2),
    )
    async with running_server(tmp_path, llm_base_url=fake_llm.base_url, documents=BOOKLET) as srv:
        events, error = await _ask_stream(srv, query=QUESTION)
    assert _reason(error) == "MODEL_STREAM_INTERRUPTED"
    check_stream(events)
    final = events[-1].completed
    assert final.status == agent_pb2.RESPONSE_STATUS_ERROR
    assert final.answer == "A URDF file "
    assert [c.arguments["query"] for c in final.tool_calls] == [QUESTION, "URDF links"]


async def test_a_model_that_says_nothing_is_an_empty_answer_error(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.script_chat(ChatReply(deltas=[]))
    events, error, status, stored = await _interrupted_turn(tmp_path, fake_llm)
    final = events[-1].completed
    assert error.code() == grpc.StatusCode.UNAVAILABLE
    assert _reason(error) == "MODEL_EMPTY_ANSWER"
    assert "'stop'" in (error.details() or "")
    check_stream(events)
    assert final.status == agent_pb2.RESPONSE_STATUS_ERROR
    assert final.answer == ""
    assert status is RunStatus.ERROR
    assert stored == ""
