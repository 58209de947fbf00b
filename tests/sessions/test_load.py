"""Hundreds of concurrent turns on a busy event loop: none fails, every one is recorded.

The embedded SQLite default used to lose a few percent of them to "database is locked":
its writers held the write lock across trips through an event loop kept busy by the runs
themselves, and starved one another until the busy timeout. The runs here burn CPU on the
loop the way the extractive strategy's ranking does.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime

import grpc
import pytest
from ragagent.v1 import agent_pb2, agent_pb2_grpc
from sqlalchemy import func, select

from service.agent import AgentEvent, AgentRequest, AnswerDelta, Completed, RunStarted
from service.api.agent import AgentServicer
from service.sessions import RunStatus, SessionStore
from service.sessions import schema as tables
from tests.sessions.support import result

pytestmark = pytest.mark.slow

TURNS = 500
STREAMS = 250
CPU_PER_RUN_S = 0.008


def burn(seconds: float) -> None:
    """Holds the event loop, as CPU-bound work in a handler does."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


async def table_counts(store: SessionStore) -> dict[str, int]:
    counts = {}
    async with store.engine.connect() as connection:
        for table in (tables.turns, tables.messages, tables.tool_calls, tables.responses):
            query = select(func.count()).select_from(table)
            counts[table.name] = (await connection.execute(query)).scalar_one()
        completed = select(func.count()).where(tables.turns.c.status == RunStatus.COMPLETED)
        counts["completed"] = (await connection.execute(completed)).scalar_one()
        busy = select(func.count()).where(tables.sessions.c.active_turn_id.is_not(None))
        counts["busy sessions"] = (await connection.execute(busy)).scalar_one()
    return counts


async def test_500_concurrent_turns_twice_over_are_all_recorded(store: SessionStore) -> None:
    async def turn(i: int, session_id: str | None) -> tuple[str, int]:
        handle = await store.begin_turn(
            session_id=session_id, owner="alice", question=f"q{i}", request_id=f"r{i}"
        )
        await asyncio.sleep(random.uniform(0, 0.02))
        burn(CPU_PER_RUN_S)
        assert await store.complete_turn(handle.turn_id, result(f"a{i}"))
        return handle.session_id, len(handle.history)

    first = await asyncio.gather(*(turn(i, None) for i in range(TURNS)), return_exceptions=True)
    assert [o for o in first if isinstance(o, BaseException)] == []
    # The same sessions again: each claim now checks the session and reads its history.
    second = await asyncio.gather(
        *(turn(i, sid) for i, (sid, _) in enumerate(first)),  # type: ignore[misc]
        return_exceptions=True,
    )
    assert [o for o in second if isinstance(o, BaseException)] == []
    assert {history for _, history in second} == {1}  # type: ignore[misc]
    assert await table_counts(store) == {
        "turns": 2 * TURNS,
        "messages": 4 * TURNS,
        "tool_calls": 2 * TURNS,
        "responses": 2 * TURNS,
        "completed": 2 * TURNS,
        "busy sessions": 0,
    }


class BusyAgent:
    """A fast model's run: a few deltas, some CPU on the loop, the answer."""

    strategy = "agentic"  # the servicer labels its run metrics with it

    async def run(self, request: AgentRequest) -> AsyncIterator[AgentEvent]:
        yield RunStarted(request.request_id, request.session_id, datetime.now(UTC))
        await asyncio.sleep(random.uniform(0, 0.02))
        burn(CPU_PER_RUN_S)
        for word in ("Robots ", "walk ", "[1]."):
            await asyncio.sleep(0.001)
            yield AnswerDelta(word)
        yield Completed(result("Robots walk [1].", session_id=request.session_id))


@asynccontextmanager
async def serving(store: SessionStore) -> AsyncIterator[list[grpc.aio.Channel]]:
    server = grpc.aio.server()
    servicer = AgentServicer(
        None,  # type: ignore[arg-type]  # Retrieve is not called
        None,  # type: ignore[arg-type]
        default_threshold=0.0,
        agent=BusyAgent(),  # type: ignore[arg-type]
        turns=store,
    )
    agent_pb2_grpc.add_AgentServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    channels = [grpc.aio.insecure_channel(f"127.0.0.1:{port}") for _ in range(4)]
    try:
        yield channels
    finally:
        for channel in channels:
            await channel.close()
        await server.stop(0)


async def test_250_concurrent_ask_streams_all_answer_and_are_recorded(
    store: SessionStore,
) -> None:
    async with serving(store) as channels:

        async def ask(i: int) -> list[str]:
            stub = agent_pb2_grpc.AgentServiceStub(channels[i % len(channels)])
            request = agent_pb2.QuestionRequest(query=f"question {i}")
            call = stub.AskStream(request, timeout=60)
            return [message.WhichOneof("event") async for message in call]

        outcomes = await asyncio.gather(*(ask(i) for i in range(STREAMS)), return_exceptions=True)
    assert [o for o in outcomes if isinstance(o, BaseException)] == []
    assert {tuple(events) for events in outcomes} == {  # type: ignore[arg-type]
        ("run_started", "answer_delta", "answer_delta", "answer_delta", "completed")
    }
    counts = await table_counts(store)
    assert (counts["turns"], counts["completed"], counts["busy sessions"]) == (STREAMS, STREAMS, 0)
