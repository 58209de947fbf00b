"""The server as a process: SIGTERM drains and exits 0; a bug is INTERNAL with the request id."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from ragagent.v1 import agent_pb2, agent_pb2_grpc

from service.config import Settings
from service.runtime import Runtime
from service.server import AgentServer
from tests.helpers import local_embedder
from tests.processes import clean_env, free_port


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
async def test_a_signal_drains_the_server_and_exits_zero(
    tmp_path: Path, sig: signal.Signals
) -> None:
    local_embedder()  # skips where the model is not provisioned
    port = free_port()
    env = clean_env(data_dir=str(tmp_path), address=f"127.0.0.1:{port}")
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "service.cli",
        "serve",
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            health = health_pb2_grpc.HealthStub(channel)
            reply = await health.Check(
                health_pb2.HealthCheckRequest(), timeout=60, wait_for_ready=True
            )
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
        process.send_signal(sig)
        code = await asyncio.wait_for(process.wait(), 30)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.stderr is not None
    log = (await process.stderr.read()).decode()
    assert code == 0, log
    # The start-up heap frozen once built (service.wiring.heap): collections skip it.
    lines = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    frozen = [line["objects"] for line in lines if line.get("event") == "heap frozen"]
    assert len(frozen) == 1, log
    assert frozen[0] > 10_000
    assert "shutting down" in log
    assert "stopped" in log


class BrokenRetriever:
    async def search(self, *args: object, **kwargs: object) -> list[object]:
        raise RuntimeError("a bug")


async def test_a_bug_is_internal_with_the_request_id_and_no_internals(tmp_path: Path) -> None:
    settings = Settings(address="127.0.0.1:0", data_dir=tmp_path)
    runtime = await Runtime.open(settings, embedder=local_embedder())
    runtime.retriever = BrokenRetriever()  # type: ignore[assignment]
    server = AgentServer(settings, runtime)
    port = await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await agent_pb2_grpc.AgentServiceStub(channel).Retrieve(
                    agent_pb2.RetrieveRequest(query="robots"),
                    metadata=(("x-request-id", "req-42"),),
                    timeout=10,
                )
    finally:
        await server.stop(0)
        await runtime.close()
    assert caught.value.code() == grpc.StatusCode.INTERNAL
    assert "req-42" in (caught.value.details() or "")
    assert "a bug" not in (caught.value.details() or "")
