"""Clients that go away, against the server as a process: it must survive every one of them.

A cancelled AskStream once killed the server process (a use-after-free in grpc's aio server
when the access log read the peer of a call that had already ended). In-process tests could not
see it: the crash takes the test runner with it, or never happens on a warm loop. Here the
server runs as ``ragagent serve`` in its own process against a model server in another, and
hundreds of streams are cancelled at every phase of a run: before ``run_started``, during the
tool call, mid-answer, and by a client process killed with SIGKILL.
"""

from __future__ import annotations

import asyncio
import random
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator

import grpc
import pytest
from ragagent.v1 import agent_pb2, agent_pb2_grpc

from tests.helpers import local_embedder
from tests.processes import REPO, ServerProcess, ingest_folder, model_process, server_process

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

QUESTION = "What happens to calls in flight when the server receives SIGTERM?"
PER_PHASE = 80  # 4 phases: 320 cancelled streams in all
CONCURRENCY = 20


@pytest.fixture(scope="module")
def agentic_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    local_embedder()  # skips where the model is not provisioned
    data_dir = tmp_path_factory.mktemp("data")
    # One page that answers QUESTION: what the storm needs is sources, not a big index (the
    # whole of docs/ took 80 s of this module's time to embed on a loaded 2-core machine).
    corpus = tmp_path_factory.mktemp("corpus")
    shutil.copy(REPO / "docs" / "operations.md", corpus)
    ingest_folder(data_dir, corpus)
    with (
        model_process(deltas=60, interval=0.01) as model,
        server_process(
            data_dir,
            llm_base_url=model.base_url,
            llm_api_key="test",
            llm_model="fake-model",
            agent_strategy="agentic",
            heartbeat_interval="0.5",
        ) as server,
    ):
        yield server


def _event(message: agent_pb2.AskStreamResponse) -> str:
    return message.WhichOneof("event") or ""


async def _cancel_when(
    stub: agent_pb2_grpc.AgentServiceStub, stop_at: str | None, after: int = 1
) -> str:
    """Starts a stream and cancels it at the ``after``-th event named ``stop_at`` (None: at
    once, before the server can send anything). Returns the last event seen."""
    call = stub.AskStream(agent_pb2.QuestionRequest(query=QUESTION), timeout=60)
    if stop_at is None:
        await asyncio.sleep(random.uniform(0, 0.003))
        call.cancel()
        return ""
    seen = 0
    last = ""
    async for message in call:
        last = _event(message)
        if last == stop_at:
            seen += 1
            if seen >= after:
                call.cancel()
                return last
    return last


async def _storm(target: str, stop_at: str | None) -> list[str]:
    async with grpc.aio.insecure_channel(target) as channel:
        stub = agent_pb2_grpc.AgentServiceStub(channel)
        limit = asyncio.Semaphore(CONCURRENCY)

        async def one(i: int) -> str:
            async with limit:
                try:
                    # Mid-answer cancellations spread over the first 20 deltas.
                    after = 1 + i % 20 if stop_at == "answer_delta" else 1
                    return await _cancel_when(stub, stop_at, after=after)
                except asyncio.CancelledError:
                    return "cancelled"

        return await asyncio.gather(*(one(i) for i in range(PER_PHASE)))


async def _answers(target: str) -> agent_pb2.AgentResponse:
    async with grpc.aio.insecure_channel(target) as channel:
        stub = agent_pb2_grpc.AgentServiceStub(channel)
        final = None
        async for message in stub.AskStream(agent_pb2.QuestionRequest(query=QUESTION), timeout=60):
            if _event(message) == "completed":
                final = message.completed
        assert final is not None
        return final


def _assert_alive_and_answering(server: ServerProcess) -> None:
    assert server.alive(), server.describe_death()
    server.wait_ready(timeout=10)
    final = asyncio.run(_answers(server.target))
    assert final.status == agent_pb2.RESPONSE_STATUS_SUCCESS, final
    assert final.answer


@pytest.mark.parametrize(
    "stop_at", [None, "run_started", "tool_call_started", "sources_found", "answer_delta"]
)
def test_streams_cancelled_at_every_phase_leave_the_server_running(
    agentic_server: ServerProcess, stop_at: str | None
) -> None:
    seen = asyncio.run(_storm(agentic_server.target, stop_at))
    if stop_at is not None:
        # The cancellation really happened at that phase, not after the stream ended.
        assert seen.count(stop_at) >= PER_PHASE * 0.9, seen
    _assert_alive_and_answering(agentic_server)
    assert "Segmentation fault" not in agentic_server.log()


_KILLED_CLIENT = textwrap.dedent(
    """
    import asyncio, os, signal, sys
    import grpc
    from ragagent.v1 import agent_pb2, agent_pb2_grpc

    async def main(target, streams):
        channel = grpc.aio.insecure_channel(target)
        stub = agent_pb2_grpc.AgentServiceStub(channel)
        started = asyncio.Event()
        count = 0

        async def one():
            nonlocal count
            async for message in stub.AskStream(agent_pb2.QuestionRequest(query="robots")):
                if message.WhichOneof("event") == "answer_delta":
                    count += 1
                    if count >= streams:
                        started.set()
                    await asyncio.sleep(3600)

        tasks = [asyncio.create_task(one()) for _ in range(streams)]
        await asyncio.wait_for(started.wait(), 60)
        os.kill(os.getpid(), signal.SIGKILL)

    asyncio.run(main(sys.argv[1], int(sys.argv[2])))
    """
)


def test_client_processes_killed_mid_answer_leave_the_server_running(
    agentic_server: ServerProcess,
) -> None:
    streams = 20
    for _ in range(PER_PHASE // streams):
        result = subprocess.run(
            [sys.executable, "-c", _KILLED_CLIENT, agentic_server.target, str(streams)],
            cwd=REPO,
            capture_output=True,
            timeout=120,
            check=False,
        )
        assert result.returncode == -9, result.stderr.decode()[-2000:]
    _assert_alive_and_answering(agentic_server)
