"""Calls that arrive while the server's event loop is busy wait for it; grpc does not cancel
them behind the service's back.

grpc.aio takes up one new call per turn of the event loop. Under load (the soak: 500
streams on 2 cores) a turn can take long, and calls queue in grpc's C core, which cancels any
call still queued after ``grpc.server_max_unrequested_time_in_server`` (30 s by default): the
client gets a bare CANCELLED after exactly 30 s without a message, and the service never sees
the call (no access log line, no metric). RAGAGENT_CALL_QUEUE_TIMEOUT sets that bound, by
default far above any client deadline, so that a queued call is answered or ends by its own
deadline. The server runs as a process whose loop a test stalls on demand
(tests/fakes/stalled_loop_server.py), the way a busy loop stalls it.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections import Counter
from pathlib import Path

import grpc
import pytest
from ragagent.v1 import agent_pb2, agent_pb2_grpc

from service.config import Settings
from service.wiring.listeners import channel_options
from tests.processes import ServerProcess, ingest_documents, start_server

STALLED = ("-m", "tests.fakes.stalled_loop_server")
CALLS = 3  # the first is taken up by the call grpc.aio has asked for already; the rest queue


def test_the_queue_bound_becomes_a_grpc_option() -> None:
    assert dict(channel_options(Settings()))["grpc.server_max_unrequested_time_in_server"] > 30
    options = dict(channel_options(Settings(call_queue_timeout=7)))
    assert options["grpc.server_max_unrequested_time_in_server"] == 7


async def _ask_while_stalled(server: ServerProcess) -> list[tuple[str, str, bool]]:
    """CALLS AskStream streams opened while the server's loop is stalled: (code, details,
    whether the final event came) of each."""

    async def ask(stub: agent_pb2_grpc.AgentServiceStub) -> tuple[str, str, bool]:
        call = stub.AskStream(agent_pb2.QuestionRequest(query="What is URDF?"), timeout=120)
        completed = False
        try:
            async for event in call:
                completed |= event.HasField("completed")
        except grpc.RpcError:
            pass  # the status says what happened
        return (await call.code()).name, await call.details() or "", completed

    async with grpc.aio.insecure_channel(server.target) as channel:
        await asyncio.wait_for(channel.channel_ready(), 10)
        os.kill(server.pid, signal.SIGUSR1)
        deadline = time.monotonic() + 10
        while "loop stalled" not in server.log():
            assert time.monotonic() < deadline, server.log_tail()
            await asyncio.sleep(0.05)
        stub = agent_pb2_grpc.AgentServiceStub(channel)
        return await asyncio.gather(*(ask(stub) for _ in range(CALLS)))


def _logged_asks(server: ServerProcess) -> Counter[str]:
    codes: Counter[str] = Counter()
    for line in server.log().splitlines():
        if line.startswith("{"):
            entry = json.loads(line)
            if entry.get("event") == "rpc" and entry.get("method", "").endswith("/AskStream"):
                codes[entry["code"]] += 1
    return codes


async def _stalled_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stall_s: float, **settings: str
) -> ServerProcess:
    monkeypatch.setenv("STALL_LOOP_SECONDS", str(stall_s))
    server = await asyncio.to_thread(
        start_server,
        tmp_path,
        command=STALLED,
        agent_strategy="extractive",
        log_format="json",
        log_level="INFO",
        **settings,
    )
    try:
        await asyncio.to_thread(ingest_documents, server.target)
    except BaseException:
        server.stop()
        raise
    return server


@pytest.mark.slow
@pytest.mark.timeout(180)
async def test_calls_queued_longer_than_grpcs_30_s_are_answered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # With grpc's default, the queued calls ended CANCELLED ("CANCELLED") at 30 s, unseen.
    server = await _stalled_server(tmp_path, monkeypatch, stall_s=33)
    try:
        outcomes = await _ask_while_stalled(server)
    finally:
        assert server.stop() == 0, server.log_tail()
    assert outcomes == [("OK", "", True)] * CALLS
    assert _logged_asks(server) == {"OK": CALLS}


@pytest.mark.slow
async def test_past_the_queue_bound_grpc_cancels_calls_the_service_never_sees(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What the bound does, at a small scale: what grpc's 30 s did in the soak.
    server = await _stalled_server(tmp_path, monkeypatch, stall_s=3, call_queue_timeout="1")
    try:
        outcomes = await _ask_while_stalled(server)
    finally:
        assert server.stop() == 0, server.log_tail()
    cancelled = [o for o in outcomes if o[0] == "CANCELLED"]
    answered = [o for o in outcomes if o[0] == "OK"]
    assert cancelled, outcomes
    assert len(cancelled) + len(answered) == CALLS, outcomes
    assert all(not completed for _, _, completed in cancelled)
    assert _logged_asks(server) == {"OK": len(answered)}
