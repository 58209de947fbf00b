"""A new session's turn is written beside the run, not in front of it (issue 15): the first
token does not wait for the begin, the final message waits for the turn to be stored, and a
begin that fails or a call cancelled meanwhile still ends up reported and recorded: a begin
that fails turns the final message into status ERROR, followed by the failure (issue 13)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any, Literal

import grpc
import pytest
from ragagent.v1 import agent_pb2, agent_pb2_grpc

from service.agent import AgentEvent, AgentRequest, AnswerDelta, Completed, RunStarted
from service.api.agent import AgentServicer
from service.domain import RunResult
from service.errors import DatabaseUnavailable
from service.sessions import SessionStore
from service.sessions.turns import TurnHandleLike
from tests.sessions.support import result, rows_of


class Answering:
    """A run that answers at once."""

    strategy = "agentic"

    async def run(self, request: AgentRequest) -> AsyncIterator[AgentEvent]:
        yield RunStarted(request.request_id, request.session_id, datetime.now(UTC))
        for word in ("Robots ", "walk ", "[1]."):
            yield AnswerDelta(word)
        yield Completed(result("Robots walk [1].", session_id=request.session_id))


class GatedTurns:
    """The store, with each turn's begin held until ``gate`` opens (or failing then)."""

    def __init__(self, store: SessionStore, fail: Exception | None = None) -> None:
        self.store = store
        self.gate = asyncio.Event()
        self.fail = fail
        self.log: list[str] = []

    async def begin_turn(self, **options: Any) -> TurnHandleLike:
        await self.gate.wait()
        if self.fail is not None:
            raise self.fail
        handle = await self.store.begin_turn(**options)
        self.log.append("begun")
        return handle

    async def complete_turn(self, turn_id: str, result: RunResult, error: str = "") -> bool:
        done = await self.store.complete_turn(turn_id, result, error)
        self.log.append(f"completed {result.status.value}")
        return done

    async def abort_turn(
        self, turn_id: str, status: Literal["error", "cancelled", "timeout"], error: str = ""
    ) -> bool:
        done = await self.store.abort_turn(turn_id, status, error)
        self.log.append(f"aborted {status}")
        return done


@asynccontextmanager
async def serving(turns: GatedTurns) -> AsyncIterator[agent_pb2_grpc.AgentServiceStub]:
    from service.server import interceptor_chain

    # The chain maps the servicer's errors to their gRPC status, as in the server.
    server = grpc.aio.server(interceptors=[interceptor_chain()])
    servicer = AgentServicer(
        None,  # type: ignore[arg-type]  # Retrieve is not called
        None,  # type: ignore[arg-type]
        default_threshold=0.0,
        agent=Answering(),  # type: ignore[arg-type]
        turns=turns,
    )
    agent_pb2_grpc.add_AgentServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield agent_pb2_grpc.AgentServiceStub(channel)
    finally:
        await server.stop(0)


async def read_all(call: Any) -> list[str]:
    """The kinds of the messages left on a call read with ``read()``."""
    kinds = []
    while (message := await call.read()) is not grpc.aio.EOF:
        kinds.append(message.WhichOneof("event"))
    return kinds


async def read_into(call: Any, seen: list[agent_pb2.AskStreamResponse]) -> None:
    while (message := await call.read()) is not grpc.aio.EOF:
        seen.append(message)


async def statuses(store: SessionStore, session_id: str) -> list[str]:
    record = await store.get_session(session_id, None)
    return [turn.status.value for turn in record.turns]


async def test_the_answer_streams_before_the_turns_begin_is_written(store: SessionStore) -> None:
    turns = GatedTurns(store)
    async with serving(turns) as stub:
        call = stub.AskStream(agent_pb2.QuestionRequest(query="How do robots walk?"), timeout=30)
        started = await asyncio.wait_for(call.read(), 5)
        delta = await asyncio.wait_for(call.read(), 5)
        assert delta.answer_delta.text == "Robots "
        assert turns.log == []  # nothing written yet, and the answer is streaming
        turns.gate.set()
        rest = await read_all(call)
    assert rest[-1] == "completed"
    assert turns.log == ["begun", "completed success"]  # stored before the final message
    session_id = started.run_started.session_id
    assert await statuses(store, session_id) == ["completed"]
    assert (await rows_of(store, session_id))["responses"] == 1


async def test_a_begin_that_fails_ends_with_a_final_error_message_then_its_status(
    store: SessionStore,
) -> None:
    """The answer was not kept: never an OK, and no turn id; the caller keeps the text."""
    turns = GatedTurns(store, fail=DatabaseUnavailable("the session database is unavailable"))
    async with serving(turns) as stub:
        call = stub.AskStream(agent_pb2.QuestionRequest(query="How do robots walk?"), timeout=30)
        seen = [await asyncio.wait_for(call.read(), 5) for _ in range(2)]
        turns.gate.set()
        with pytest.raises(grpc.aio.AioRpcError) as failed:
            await read_into(call, seen)
    assert failed.value.code() == grpc.StatusCode.UNAVAILABLE
    final = seen[-1].completed
    assert seen[-1].WhichOneof("event") == "completed"
    assert final.status == agent_pb2.RESPONSE_STATUS_ERROR
    assert final.answer == "Robots walk [1]."
    assert final.turn_id == ""
    assert turns.log == []


async def test_a_call_cancelled_before_the_begin_is_written_records_the_turn_cancelled(
    store: SessionStore,
) -> None:
    turns = GatedTurns(store)
    async with serving(turns) as stub:
        call = stub.AskStream(agent_pb2.QuestionRequest(query="How do robots walk?"), timeout=30)
        started = await asyncio.wait_for(call.read(), 5)
        await asyncio.wait_for(call.read(), 5)
        call.cancel()
        await asyncio.sleep(0.2)  # the server sees the cancellation while the begin waits
        turns.gate.set()
        for _ in range(100):
            if turns.log[-1:] == ["completed cancelled"]:
                break
            await asyncio.sleep(0.05)
    session_id = started.run_started.session_id
    assert turns.log == ["begun", "completed cancelled"]  # with what had streamed
    assert await statuses(store, session_id) == ["cancelled"]
