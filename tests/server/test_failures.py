"""What callers see when a dependency is down, and how start-up refuses bad state."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status
from qdrant_client import AsyncQdrantClient
from ragagent.v1 import agent_pb2, agent_pb2_grpc

from service.config import Settings
from service.errors import StoreMismatch
from service.retrieval.qdrant_store import QdrantStore
from service.runtime import Runtime
from service.server import AgentServer
from tests.helpers import local_embedder


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_store_down_gives_unavailable_with_error_info(tmp_path: Path) -> None:
    settings = Settings(address="127.0.0.1:0", data_dir=tmp_path)
    embedder = local_embedder()
    # A Qdrant server that is not there: what a crashed or unreachable store looks like.
    client = AsyncQdrantClient(
        url=f"http://127.0.0.1:{_closed_port()}", timeout=2, check_compatibility=False
    )
    store = QdrantStore(client, embedder, collection="docs", timeout=2)
    server = AgentServer(settings, Runtime(settings, embedder, store))
    port = await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await agent_pb2_grpc.AgentServiceStub(channel).Retrieve(
                    agent_pb2.RetrieveRequest(query="robots"), timeout=10
                )
    finally:
        await server.stop(0)
        await store.close()
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
    status = rpc_status.from_call(caught.value)  # type: ignore[arg-type]
    assert status is not None
    info = error_details_pb2.ErrorInfo()
    assert any(d.Unpack(info) for d in status.details)
    assert info.reason == "STORE_UNAVAILABLE"
    retry = error_details_pb2.RetryInfo()
    assert any(d.Unpack(retry) for d in status.details)


async def test_start_up_refuses_a_collection_built_for_another_embedder(tmp_path: Path) -> None:
    settings = Settings(address="127.0.0.1:0", data_dir=tmp_path)
    # The embedded store's folder, written for a 12-dimensional embedder.
    settings.edge_path.mkdir(parents=True)
    (settings.edge_path / "ragagent.json").write_text('{"dimension": 12}')
    with pytest.raises(StoreMismatch, match="vector size 12"):
        await Runtime.open(settings, embedder=local_embedder())


@pytest.mark.slow
def test_a_second_process_on_the_embedded_store_fails_with_a_clear_message(
    tmp_path: Path,
) -> None:
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, pathlib; from service.retrieval.edge_shard import EdgeCalls;"
            "c = EdgeCalls.open_blocking(pathlib.Path(sys.argv[1]), dimension=384,"
            " model_name='m', executor=None, timeout=1); print('open', flush=True);"
            " sys.stdin.read()",
            str(tmp_path / "edge" / "ragagent"),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "open"
        second = subprocess.run(
            [sys.executable, "-m", "service.cli", "serve", "--address", "127.0.0.1:0"],
            env={**_env(), "RAGAGENT_DATA_DIR": str(tmp_path)},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        holder.communicate("", timeout=10)
    assert second.returncode == 1
    assert "Traceback" not in second.stderr
    assert "open in another process" in second.stderr


def _env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith("RAGAGENT_")}


@pytest.mark.parametrize(
    ("variable", "value", "named"),
    [
        ("RAGAGENT_GRACE_PERIOD", "soon", "RAGAGENT_GRACE_PERIOD"),
        ("RAGAGENT_ADDRESS", "no-port", "RAGAGENT_ADDRESS"),
        ("RAGAGENT_AGENT_STRATEGY", "guess", "RAGAGENT_AGENT_STRATEGY"),
        ("RAGAGENT_CONFIDENCE_THRESHOLD", "1.5", "RAGAGENT_CONFIDENCE_THRESHOLD"),
    ],
)
def test_an_invalid_setting_fails_start_up_with_one_line_naming_it(
    variable: str, value: str, named: str, tmp_path: Path
) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "service.cli", "serve"],
        env={**_env(), variable: value, "RAGAGENT_DATA_DIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert named in lines[0]
