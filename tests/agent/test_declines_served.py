"""The model's "not in the documents" over the real server: NO_ANSWER with its reason in the
final message, and kept with the session's turn (GetSession)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ragagent.v1 import agent_pb2, agent_pb2_grpc, session_pb2, session_pb2_grpc

from tests.contract.streams import answer_text, check_stream
from tests.fakes.openai_script import ChatReply, ToolCallScript
from tests.fakes.openai_server import FakeOpenAI
from tests.helpers import BOOKLET, running_server

REASON = "The passages describe URDF files but not their maximum size."
QUESTION = "What is the largest URDF file a robot can load?"
USER = (("x-user-id", "alice"),)
DECLINE = ToolCallScript("no_answer", json.dumps({"reason": REASON}))


@pytest.mark.parametrize(
    ("strategy", "reply"),
    [
        ("agentic", ChatReply.calls(ToolCallScript("no_answer", json.dumps({"reason": REASON})))),
        (
            "agents_sdk",
            ChatReply.calls(ToolCallScript("no_answer", json.dumps({"reason": REASON}))),
        ),
        ("retrieve_first", ChatReply.text(f"NO_ANSWER: {REASON}", pieces=5)),
    ],
)
async def test_a_declining_model_ends_no_answer_and_the_turn_keeps_its_reason(
    tmp_path: Path, fake_llm: FakeOpenAI, strategy: str, reply: ChatReply
) -> None:
    fake_llm.script_chat(reply)
    async with running_server(
        tmp_path, llm_base_url=fake_llm.base_url, agent_strategy=strategy, documents=BOOKLET
    ) as srv:
        call = agent_pb2_grpc.AgentServiceStub(srv.channel).AskStream(
            agent_pb2.QuestionRequest(query=QUESTION), timeout=30, metadata=USER
        )
        events = [event async for event in call]
        final = events[-1].completed
        record = await session_pb2_grpc.SessionServiceStub(srv.channel).GetSession(
            session_pb2.GetSessionRequest(session_id=final.session_id), metadata=USER, timeout=5
        )
    check_stream(events)
    assert final.status == agent_pb2.RESPONSE_STATUS_NO_ANSWER
    assert final.finish_reason == "no_answer"
    assert final.no_answer_reason == REASON
    assert REASON in final.answer
    assert "NO_ANSWER" not in answer_text(events)
    assert answer_text(events) == final.answer
    assert not final.HasField("grounding")
    [turn] = record.session.turns
    assert turn.status == session_pb2.RUN_STATUS_COMPLETED
    assert turn.answer == final.answer
    assert REASON in turn.answer
