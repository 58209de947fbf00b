"""Ask and AskStream over the real server: strategies, streams, sessions and failures."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status
from ragagent.v1 import agent_pb2, agent_pb2_grpc, session_pb2, session_pb2_grpc, types_pb2

from tests.contract.streams import answer_text, check_stream
from tests.fakes.openai_script import ChatReply, ErrorReply, ToolCallScript
from tests.fakes.openai_server import FakeOpenAI
from tests.helpers import BOOKLET, Running, running_server


def _stub(srv: Running) -> agent_pb2_grpc.AgentServiceStub:
    return agent_pb2_grpc.AgentServiceStub(srv.channel)


async def _stream(
    srv: Running, metadata: tuple[tuple[str, str], ...] = (), **fields: object
) -> list[agent_pb2.AskStreamResponse]:
    call = _stub(srv).AskStream(
        agent_pb2.QuestionRequest(**fields),  # type: ignore[arg-type]
        timeout=30,
        metadata=metadata,
    )
    return [event async for event in call]


def _status_detail(error: grpc.aio.AioRpcError, kind: type) -> object:
    status = rpc_status.from_call(error)  # type: ignore[arg-type]
    assert status is not None
    detail = kind()
    assert any(d.Unpack(detail) for d in status.details), f"no {kind.__name__} detail"
    return detail


# --- extractive: the default with no model configured ---------------------------------


async def test_extractive_answer_streams_cited_sentences(tmp_path: Path) -> None:
    async with running_server(tmp_path, documents=BOOKLET) as srv:
        events = await _stream(srv, query="What does a URDF file describe?")
    check_stream(events)
    final = events[-1].completed
    assert final.status == agent_pb2.RESPONSE_STATUS_SUCCESS
    assert final.answer_mode == agent_pb2.ANSWER_MODE_EXTRACTIVE
    assert final.strategy == "extractive"
    assert "[1]" in final.answer
    cited = [s for s in final.sources if s.citation]
    assert cited[0].document_id == "m1/urdf.md"
    assert 0 < final.confidence <= 1
    assert events[0].run_started.session_id == final.session_id
    assert answer_text(events) == final.answer


async def test_ask_returns_what_ask_stream_ends_with(tmp_path: Path) -> None:
    async with running_server(tmp_path, documents=BOOKLET) as srv:
        streamed = (await _stream(srv, query="Which middleware does ROS 2 use?"))[-1].completed
        answered = await _stub(srv).Ask(
            agent_pb2.QuestionRequest(query="Which middleware does ROS 2 use?"), timeout=30
        )
    for field in ("answer", "status", "answer_mode", "strategy", "finish_reason", "model"):
        assert getattr(answered, field) == getattr(streamed, field), field
    assert [s.chunk_id for s in answered.sources] == [s.chunk_id for s in streamed.sources]
    assert answered.confidence == pytest.approx(streamed.confidence)


async def test_nothing_relevant_gives_no_answer(tmp_path: Path) -> None:
    async with running_server(tmp_path, documents=BOOKLET) as srv:
        events = await _stream(srv, query="How long should sourdough bread be baked?")
    check_stream(events)
    final = events[-1].completed
    assert final.status == agent_pb2.RESPONSE_STATUS_NO_ANSWER
    assert final.finish_reason == "no_answer"
    assert not [s for s in final.sources if s.citation]
    assert final.answer


# --- agentic: a real OpenAI client against the scripted model -------------------------


@pytest.mark.parametrize("strategy", ["agentic", "agents_sdk"])
async def test_agentic_run_calls_the_tool_and_streams_a_cited_answer(
    tmp_path: Path, fake_llm: FakeOpenAI, strategy: str
) -> None:
    fake_llm.script_chat(
        ChatReply.calls(
            ToolCallScript("qdrant_retrieval", json.dumps({"query": "URDF links", "top_k": 3}))
        ),
        # Paced like a model writing: deltas that queue behind a busy stream go as one.
        ChatReply.text(
            "A URDF file lists the links and joints of a robot [1].", pieces=5, delta_interval=0.05
        ),
    )
    async with running_server(
        tmp_path, llm_base_url=fake_llm.base_url, agent_strategy=strategy, documents=BOOKLET
    ) as srv:
        events = await _stream(srv, query="What does a URDF file describe?")
    check_stream(events)
    final = events[-1].completed
    assert final.status == agent_pb2.RESPONSE_STATUS_SUCCESS
    assert final.strategy == strategy
    assert final.answer_mode == agent_pb2.ANSWER_MODE_GENERATIVE
    assert final.answer == "A URDF file lists the links and joints of a robot [1]."
    assert final.usage.total_tokens > 0
    model_calls = [c for c in final.tool_calls if not c.id.startswith("srv_")]
    assert [c.name for c in model_calls] == ["qdrant_retrieval"]
    assert model_calls[0].arguments["query"] == "URDF links"
    tools = fake_llm.chat_requests[0].body["tools"]
    assert tools[0]["function"]["name"] == "qdrant_retrieval"
    deltas = [e for e in events if e.HasField("answer_delta")]
    assert len(deltas) >= 2, "the answer must stream in pieces, not at once"


async def test_model_rate_limit_maps_to_resource_exhausted(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.script_chat(*[ErrorReply(429, "Rate limit reached", retry_after=0.01)] * 4)
    async with running_server(
        tmp_path, llm_base_url=fake_llm.base_url, llm_max_retries=0, documents=BOOKLET
    ) as srv:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await _stub(srv).Ask(
                agent_pb2.QuestionRequest(query="What does a URDF file describe?"), timeout=30
            )
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    info = _status_detail(caught.value, error_details_pb2.ErrorInfo)
    assert info.reason == "MODEL_RATE_LIMITED"  # type: ignore[attr-defined]


async def test_rejected_api_key_names_the_setting(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    fake_llm.script_chat(ErrorReply(401, "Incorrect API key provided"))
    async with running_server(tmp_path, llm_base_url=fake_llm.base_url, documents=BOOKLET) as srv:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await _stream(srv, query="What does a URDF file describe?")
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "RAGAGENT_LLM_API_KEY" in (caught.value.details() or "")


@pytest.mark.parametrize("strategy", ["retrieve_first", "agents_sdk"])
async def test_cancelling_mid_answer_closes_the_model_stream_and_records_the_turn(
    tmp_path: Path, fake_llm: FakeOpenAI, strategy: str
) -> None:
    fake_llm.script_chat(
        ChatReply.text("URDF " * 40, pieces=40, delta_interval=0.1),
    )
    async with running_server(
        tmp_path, llm_base_url=fake_llm.base_url, agent_strategy=strategy, documents=BOOKLET
    ) as srv:
        baseline = len(asyncio.all_tasks())
        call = _stub(srv).AskStream(
            agent_pb2.QuestionRequest(query="What does a URDF file describe?"), timeout=30
        )
        session_id = ""
        received = ""
        async for event in call:
            if event.HasField("run_started"):
                session_id = event.run_started.session_id
            if event.HasField("answer_delta"):
                received += event.answer_delta.text
                call.cancel()
                break
        closed = await fake_llm.wait_client_closed(within=5)
        assert closed.client_closed
        for _ in range(50):
            if len(asyncio.all_tasks()) <= baseline:
                break
            await asyncio.sleep(0.05)
        assert len(asyncio.all_tasks()) <= baseline

        sessions = session_pb2_grpc.SessionServiceStub(srv.channel)
        record = None
        for _ in range(50):  # the turn is closed by the server's handler as it unwinds
            record = await sessions.GetSession(
                session_pb2.GetSessionRequest(session_id=session_id), timeout=5
            )
            if (
                record.session.turns
                and record.session.turns[0].status != session_pb2.RUN_STATUS_ACTIVE
            ):
                break
            await asyncio.sleep(0.05)
    assert record is not None
    turn = record.session.turns[0]
    assert turn.status == session_pb2.RUN_STATUS_CANCELLED
    # Nothing can reach a caller that cancelled; its turn keeps what was produced.
    assert turn.answer.startswith(received)
    assert ("URDF " * 40).startswith(turn.answer)
    assert turn.error == "CANCELLED: the caller cancelled the call"
    assert [c.status for c in turn.tool_calls] == [types_pb2.TOOL_CALL_STATUS_COMPLETED]


# --- sessions ----------------------------------------------------------------------------


@pytest.mark.parametrize("strategy", ["retrieve_first", "agents_sdk"])
async def test_a_session_continues_and_the_model_sees_the_earlier_turn(
    tmp_path: Path, fake_llm: FakeOpenAI, strategy: str
) -> None:
    fake_llm.script_chat(
        ChatReply.text("URDF describes links and joints [1]."),
        ChatReply.text("Joints connect links [1]."),
    )
    async with running_server(
        tmp_path, llm_base_url=fake_llm.base_url, agent_strategy=strategy, documents=BOOKLET
    ) as srv:
        user = (("x-user-id", "alice"),)
        first = (await _stream(srv, user, query="What does a URDF file describe?"))[-1].completed
        second = (
            await _stream(
                srv, user, query="And what do its joints do?", session_id=first.session_id
            )
        )[-1].completed
        sessions = session_pb2_grpc.SessionServiceStub(srv.channel)
        record = await sessions.GetSession(
            session_pb2.GetSessionRequest(session_id=first.session_id), metadata=user, timeout=5
        )
        with pytest.raises(grpc.aio.AioRpcError) as stranger:
            await _stream(
                srv, (("x-user-id", "mallory"),), query="Tell me more", session_id=first.session_id
            )
    assert second.session_id == first.session_id
    sent = json.dumps(fake_llm.chat_requests[1].body["messages"])
    assert "What does a URDF file describe?" in sent
    assert "URDF describes links and joints" in sent
    assert [t.question for t in record.session.turns] == [
        "What does a URDF file describe?",
        "And what do its joints do?",
    ]
    assert record.session.turns[1].answer == "Joints connect links [1]."
    assert stranger.value.code() == grpc.StatusCode.NOT_FOUND


async def test_an_unknown_session_is_not_found_with_resource_info(tmp_path: Path) -> None:
    missing = str(uuid.uuid4())
    async with running_server(tmp_path) as srv:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await _stub(srv).Ask(
                agent_pb2.QuestionRequest(query="What is URDF?", session_id=missing), timeout=10
            )
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND
    info = _status_detail(caught.value, error_details_pb2.ResourceInfo)
    assert info.resource_name == missing  # type: ignore[attr-defined]


@pytest.mark.parametrize("strategy", ["retrieve_first", "agents_sdk"])
async def test_the_deadline_reaches_the_model_call(
    tmp_path: Path, fake_llm: FakeOpenAI, strategy: str
) -> None:
    fake_llm.script_chat(ChatReply.text("Too late.", delay=5))
    async with running_server(
        tmp_path, llm_base_url=fake_llm.base_url, agent_strategy=strategy, documents=BOOKLET
    ) as srv:
        call = _stub(srv).AskStream(
            agent_pb2.QuestionRequest(query="What does a URDF file describe?"), timeout=1.5
        )
        events = []
        with pytest.raises(grpc.aio.AioRpcError) as caught:  # noqa: PT012 (events before it)
            async for event in call:
                events.append(event)
        final = [e for e in events if e.HasField("completed")]
    # The run keeps a margin of the deadline to send its final message, then the call ends.
    assert final, "the final message with status TIMEOUT must arrive before the deadline"
    assert final[0].completed.status == agent_pb2.RESPONSE_STATUS_TIMEOUT
    assert final[0].completed.finish_reason == "timeout"
    assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED


async def test_ask_past_its_deadline_is_deadline_exceeded(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.script_chat(ChatReply.text("Too late.", delay=5))
    async with running_server(
        tmp_path, llm_base_url=fake_llm.base_url, agent_strategy="retrieve_first", documents=BOOKLET
    ) as srv:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await _stub(srv).Ask(
                agent_pb2.QuestionRequest(query="What does a URDF file describe?"), timeout=1.5
            )
    assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
