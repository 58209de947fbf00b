"""Citation spans over the real server: streamed as `citation` events equal to the final
list, every span inside its text, and kept with the session's turn (GetSession)."""

from __future__ import annotations

from pathlib import Path

import pytest
from ragagent.v1 import agent_pb2, agent_pb2_grpc, session_pb2, session_pb2_grpc

from service.agent.spans import _normalized
from tests.contract.streams import check_stream
from tests.fakes.openai_script import ChatReply
from tests.fakes.openai_server import FakeOpenAI
from tests.helpers import BOOKLET, running_server

USER = (("x-user-id", "alice"),)
QUESTION = "What does a URDF file describe?"


def _check_spans(final: agent_pb2.AgentResponse) -> None:
    contents = {s.citation: s.content for s in final.sources if s.citation}
    assert final.citations, "a cited answer has citation spans"
    for c in final.citations:
        assert 0 <= c.start < c.end <= len(final.answer)
        assert c.source in contents
        assert 0 <= c.quote_start <= c.quote_end <= len(contents[c.source])
        assert 0.0 <= c.support <= 1.0


@pytest.mark.parametrize("strategy", ["extractive", "retrieve_first"])
async def test_citations_stream_and_are_kept_with_the_turn(
    tmp_path: Path, fake_llm: FakeOpenAI, strategy: str
) -> None:
    fake_llm.script_chat(ChatReply.text("A URDF file describes a robot's links [1].", pieces=6))
    model = {"llm_base_url": fake_llm.base_url} if strategy != "extractive" else {}
    async with running_server(tmp_path, agent_strategy=strategy, documents=BOOKLET, **model) as srv:
        call = agent_pb2_grpc.AgentServiceStub(srv.channel).AskStream(
            agent_pb2.QuestionRequest(query=QUESTION), timeout=30, metadata=USER
        )
        events = [event async for event in call]
        final = events[-1].completed
        record = await session_pb2_grpc.SessionServiceStub(srv.channel).GetSession(
            session_pb2.GetSessionRequest(session_id=final.session_id), metadata=USER, timeout=5
        )
    check_stream(events)  # the citation events, in order, are completed.citations
    _check_spans(final)
    streamed = [e for e in events if e.WhichOneof("event") == "citation"]
    assert len(streamed) == len(final.citations)
    [turn] = record.session.turns
    assert list(turn.citations) == list(final.citations)
    if strategy == "extractive":  # quotes: the span is exactly the quoted passage text
        contents = {s.citation: s.content for s in final.sources if s.citation}
        for c in final.citations:
            claim = final.answer[c.start : c.end]
            quote = contents[c.source][c.quote_start : c.quote_end]
            assert _normalized(quote) in _normalized(claim)
            assert c.support == pytest.approx(1.0)
