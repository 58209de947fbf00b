"""Background runs over a real grpc.aio server: a run that outlives its call, resumed from a
sequence number, cancelled, refused to anyone but its owner, and found lost when its replica
stopped renewing it. (Across processes and replicas: tests/fleet/test_background_runs.py.)"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path

import grpc
import pytest
from connectrpc.code import Code
from connectrpc.errors import ConnectError
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status
from ragagent.v1 import agent_connect, agent_pb2, agent_pb2_grpc, session_pb2, session_pb2_grpc
from sqlalchemy import update

from service.sessions import schema
from service.sessions.records import utc_now
from tests.fakes.openai_script import ChatReply
from tests.fakes.openai_server import FakeOpenAI
from tests.helpers import make_chunk, running_server

ALICE = (("x-user-id", "alice"),)
BOB = (("x-user-id", "bob"),)
DOCS = [
    make_chunk("m1/urdf.md", "URDF is an XML format. It lists the links and joints of a robot."),
]
ANSWER = "URDF is an XML format that lists the links and joints of a robot [1]."


def _options(fake_llm: FakeOpenAI) -> dict[str, object]:
    return {"llm_base_url": fake_llm.base_url, "agent_strategy": "retrieve_first"}


def _slow(text: str = ANSWER) -> ChatReply:
    # Eight pieces a quarter second apart: time for the caller to leave mid-answer.
    return ChatReply.text(text, pieces=8, delta_interval=0.25)


def _reason(error: grpc.aio.AioRpcError) -> str:
    status = rpc_status.from_call(error)  # type: ignore[arg-type]
    assert isinstance(status, status_pb2.Status)
    for detail in status.details:
        info = error_details_pb2.ErrorInfo()
        if detail.Unpack(info):
            return info.reason
    return ""


async def _start(
    stub: agent_pb2_grpc.AgentServiceStub, leave_after: int
) -> list[agent_pb2.AskStreamResponse]:
    """Starts a background run and leaves (cancels its call) after ``leave_after`` messages."""
    call = stub.AskStream(
        agent_pb2.QuestionRequest(query="What does URDF list?", background=True),
        metadata=ALICE,
        timeout=60,
    )
    seen: list[agent_pb2.AskStreamResponse] = []
    async for message in call:
        seen.append(message)
        if len(seen) == leave_after:
            call.cancel()
            break
    return seen


async def _resume(
    stub: agent_pb2_grpc.AgentServiceStub,
    run_id: str,
    after: int,
    metadata: tuple[tuple[str, str], ...] = ALICE,
) -> list[agent_pb2.AskStreamResponse]:
    call = stub.ResumeStream(
        agent_pb2.ResumeStreamRequest(run_id=run_id, after_sequence=after),
        metadata=metadata,
        timeout=60,
    )
    return [message async for message in call]


async def test_a_run_goes_on_after_its_caller_leaves_and_resumes_after_a_sequence(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.script_chat(_slow())
    async with running_server(tmp_path, documents=DOCS, **_options(fake_llm)) as server:
        stub = agent_pb2_grpc.AgentServiceStub(server.channel)
        seen = await _start(stub, leave_after=3)
        run_id = seen[0].run_started.run_id
        assert run_id.startswith("run_")
        assert len(run_id) >= 32
        rest = await _resume(stub, run_id, after=len(seen))
        assert [m.sequence for m in seen + rest] == list(range(1, len(seen) + len(rest) + 1))
        final = rest[-1].completed
        assert final.status == agent_pb2.RESPONSE_STATUS_SUCCESS
        deltas = "".join(m.answer_delta.text for m in seen + rest if m.HasField("answer_delta"))
        assert deltas == final.answer == ANSWER
        # The whole run again, from the start, once it has ended (read from the database).
        again = await _resume(stub, run_id, after=0)
        assert again == seen + rest
        # The turn was recorded as the run ended, though nobody was connected.
        sessions = session_pb2_grpc.SessionServiceStub(server.channel)
        session = await sessions.GetSession(
            session_pb2.GetSessionRequest(session_id=final.session_id), metadata=ALICE
        )
        assert session.session.turns[-1].answer == ANSWER


async def test_another_principal_cannot_resume_or_cancel_a_run(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.script_chat(_slow())
    async with running_server(tmp_path, documents=DOCS, **_options(fake_llm)) as server:
        stub = agent_pb2_grpc.AgentServiceStub(server.channel)
        run_id = (await _start(stub, leave_after=1))[0].run_started.run_id
        for call in (
            _resume(stub, run_id, 0, BOB),
            stub.CancelRun(agent_pb2.CancelRunRequest(run_id=run_id), metadata=BOB),
            _resume(stub, "run_" + "x" * 32, 0),
        ):
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await call
            assert refused.value.code() is grpc.StatusCode.NOT_FOUND
            assert _reason(refused.value) == "RUN_NOT_FOUND"
        # Bob's attempts did not touch it: Alice's run still ends as it should.
        rest = await _resume(stub, run_id, after=1)
        assert rest[-1].completed.status == agent_pb2.RESPONSE_STATUS_SUCCESS


async def test_cancel_run_ends_it_cancelled_with_what_it_had_and_records_the_turn(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.script_chat(ChatReply.text(ANSWER, pieces=20, delta_interval=0.5))
    async with running_server(tmp_path, documents=DOCS, **_options(fake_llm)) as server:
        stub = agent_pb2_grpc.AgentServiceStub(server.channel)
        seen = await _start(stub, leave_after=1)
        run_id = seen[0].run_started.run_id
        await asyncio.sleep(0)  # the run goes on without its caller
        response = await stub.CancelRun(agent_pb2.CancelRunRequest(run_id=run_id), metadata=ALICE)
        assert response.status == agent_pb2.RESPONSE_STATUS_CANCELLED
        call = stub.ResumeStream(
            agent_pb2.ResumeStreamRequest(run_id=run_id), metadata=ALICE, timeout=30
        )
        replayed: list[agent_pb2.AskStreamResponse] = []

        async def read_all() -> None:
            async for message in call:
                replayed.append(message)

        with pytest.raises(grpc.aio.AioRpcError) as ended:
            await read_all()
        assert ended.value.code() is grpc.StatusCode.CANCELLED
        assert _reason(ended.value) == "RUN_CANCELLED"
        final = replayed[-1].completed
        assert final.status == agent_pb2.RESPONSE_STATUS_CANCELLED
        assert [m.sequence for m in replayed] == list(range(1, len(replayed) + 1))
        sessions = session_pb2_grpc.SessionServiceStub(server.channel)
        session = await sessions.GetSession(
            session_pb2.GetSessionRequest(session_id=final.session_id), metadata=ALICE
        )
        assert session.session.turns[-1].status == session_pb2.RUN_STATUS_CANCELLED
        # Cancelling an ended run leaves it as it ended.
        again = await stub.CancelRun(agent_pb2.CancelRunRequest(run_id=run_id), metadata=ALICE)
        assert again.status == agent_pb2.RESPONSE_STATUS_CANCELLED


async def test_ask_in_the_background_names_its_run_in_the_response(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.script_chat(ChatReply.text(ANSWER))
    async with running_server(tmp_path, documents=DOCS, **_options(fake_llm)) as server:
        stub = agent_pb2_grpc.AgentServiceStub(server.channel)
        response = await stub.Ask(
            agent_pb2.QuestionRequest(query="What does URDF list?", background=True),
            metadata=ALICE,
            timeout=30,
        )
        assert response.answer == ANSWER
        assert response.run_id.startswith("run_")
        replayed = await _resume(stub, response.run_id, after=0)
        assert replayed[-1].completed == response


async def test_a_run_its_replica_stopped_renewing_is_recorded_lost_and_a_resume_says_so(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    async with running_server(tmp_path, **_options(fake_llm), turn_lease=3.0) as server:
        sessions = server.runtime.sessions
        assert sessions is not None
        # What a replica that died leaves behind: a running run, last renewed a lease ago.
        await sessions.runs.create("run_lost_by_a_dead_replica", owner="anon:alice", session_id="s")
        renewed = utc_now() - sessions.runs.lease - timedelta(seconds=1)
        async with sessions.engine.begin() as connection:
            await connection.execute(update(schema.runs).values(renewed_at=renewed))
        stub = agent_pb2_grpc.AgentServiceStub(server.channel)
        with pytest.raises(grpc.aio.AioRpcError) as lost:
            await _resume(stub, "run_lost_by_a_dead_replica", after=0)
        assert lost.value.code() is grpc.StatusCode.ABORTED
        assert _reason(lost.value) == "RUN_LOST"
        assert "stopped before the answer was complete" in (lost.value.details() or "")
        stored = await sessions.runs.get("run_lost_by_a_dead_replica", "anon:alice")
        assert stored.status == "error"


async def test_background_runs_need_a_server_that_records_content(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    async with running_server(tmp_path, **_options(fake_llm), record_content=False) as server:
        stub = agent_pb2_grpc.AgentServiceStub(server.channel)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await _start(stub, leave_after=1)
        assert refused.value.code() is grpc.StatusCode.FAILED_PRECONDITION
        assert "RAGAGENT_RECORD_CONTENT" in (refused.value.details() or "")


async def test_a_server_shutting_down_ends_its_background_runs_as_their_calls(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.script_chat(ChatReply.text(ANSWER, pieces=40, delta_interval=0.5))
    async with running_server(tmp_path, documents=DOCS, **_options(fake_llm)) as server:
        stub = agent_pb2_grpc.AgentServiceStub(server.channel)
        run_id = (await _start(stub, leave_after=2))[0].run_started.run_id
        sessions = server.runtime.sessions
        assert sessions is not None
        await server.server.stop(grace=1.0)
        stored = await sessions.runs.get(run_id, "anon:alice")
    assert stored.status == "cancelled"
    assert stored.end_code == "UNAVAILABLE:SHUTTING_DOWN"


async def test_background_runs_over_connect_resume_and_cancel_as_over_grpc(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.script_chat(_slow(), ChatReply.text(ANSWER, pieces=20, delta_interval=0.5))
    async with running_server(
        tmp_path, documents=DOCS, http_address="127.0.0.1:0", **_options(fake_llm)
    ) as server:
        url = f"http://127.0.0.1:{server.server.http_port}"
        headers = {"x-user-id": "alice"}
        async with agent_connect.AgentServiceClient(url) as agent:
            question = agent_pb2.QuestionRequest(query="What does URDF list?", background=True)
            seen = []
            async for message in agent.ask_stream(question, headers=headers):
                seen.append(message)
                if len(seen) == 2:
                    break  # the connection is closed: the run goes on
            run_id = seen[0].run_started.run_id
            resume = agent_pb2.ResumeStreamRequest(run_id=run_id, after_sequence=2)
            rest = [m async for m in agent.resume_stream(resume, headers=headers)]
            assert [m.sequence for m in seen + rest] == list(range(1, len(seen) + len(rest) + 1))
            assert rest[-1].completed.status == agent_pb2.RESPONSE_STATUS_SUCCESS
            # A second run, cancelled over Connect.
            async for message in agent.ask_stream(question, headers=headers):
                second = message.run_started.run_id
                break
            cancelled = await agent.cancel_run(
                agent_pb2.CancelRunRequest(run_id=second), headers=headers
            )
            assert cancelled.status == agent_pb2.RESPONSE_STATUS_CANCELLED
            with pytest.raises(ConnectError) as refused:
                await agent.cancel_run(
                    agent_pb2.CancelRunRequest(run_id=second), headers={"x-user-id": "bob"}
                )
            assert refused.value.code is Code.NOT_FOUND


async def test_a_caller_gets_as_many_background_runs_as_the_operator_allows(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.script_chat(_slow(), ChatReply.text(ANSWER))
    async with running_server(
        tmp_path, documents=DOCS, **_options(fake_llm), run_max_per_caller=1
    ) as server:
        stub = agent_pb2_grpc.AgentServiceStub(server.channel)
        first = (await _start(stub, leave_after=1))[0].run_started.run_id
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await _start(stub, leave_after=1)
        assert refused.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
        # Another caller is not held back by Alice's run.
        bob = await stub.Ask(
            agent_pb2.QuestionRequest(query="What does URDF list?", background=True),
            metadata=BOB,
            timeout=30,
        )
        assert bob.status == agent_pb2.RESPONSE_STATUS_SUCCESS
        assert (await _resume(stub, first, 1))[-1].completed.status == (
            agent_pb2.RESPONSE_STATUS_SUCCESS
        )


async def test_the_resuming_client_of_docs_clients_md_works_as_written(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    """The Python example of docs/clients.md ("Background runs") runs as written (on a
    connection that holds; the resumption it does is the one tested above)."""
    text = (Path(__file__).parents[2] / "docs" / "clients.md").read_text()
    section = text.split("### Background runs", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    namespace: dict[str, object] = {"grpc": grpc, "agent_pb2": agent_pb2}
    namespace["agent_pb2_grpc"] = agent_pb2_grpc
    exec(compile(code, "docs/clients.md", "exec"), namespace)
    answer = namespace["answer"]
    fake_llm.script_chat(ChatReply.text(ANSWER))
    async with running_server(tmp_path, documents=DOCS, **_options(fake_llm)) as server:

        def ask() -> agent_pb2.AgentResponse:
            with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
                return answer(agent_pb2_grpc.AgentServiceStub(channel), "What does URDF list?")  # type: ignore[operator, no-any-return]

        response = await asyncio.to_thread(ask)
    assert response.answer == ANSWER
    assert response.run_id.startswith("run_")
