"""Proto promises that depend on the server as a process (docs/contract-promises.md).

SIGTERM during a stream: the run is stopped before the grace period ends, and the caller
gets the final message (status CANCELLED, the answer so far) before UNAVAILABLE
(SHUTTING_DOWN); the turn is recorded CANCELLED. The caller's metadata appears in the
server's DEBUG log with the run's request id.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status
from ragagent.v1 import agent_pb2, agent_pb2_grpc

from service.sessions.engine import SQLITE_FILE
from tests.helpers import local_embedder
from tests.processes import clean_env, ingest_documents, model_process, server_process

pytestmark = pytest.mark.timeout(300)

QUESTION = "What does a URDF file describe?"


@pytest.mark.parametrize("strategy", ["retrieve_first", "agents_sdk"])
@pytest.mark.slow
async def test_sigterm_during_a_stream_sends_cancelled_before_the_status(
    tmp_path: Path, strategy: str
) -> None:
    local_embedder()  # skips where the model is not provisioned
    with (
        model_process(deltas=400, interval=0.05) as model,  # a 20 s answer
        server_process(
            tmp_path,
            llm_base_url=model.base_url,
            agent_strategy=strategy,
            grace_period="2",
        ) as server,
    ):
        ingest_documents(server.target)
        events: list[agent_pb2.AskStreamResponse] = []
        async with grpc.aio.insecure_channel(server.target) as channel:
            call = agent_pb2_grpc.AgentServiceStub(channel).AskStream(
                agent_pb2.QuestionRequest(query=QUESTION), timeout=60
            )

            async def read() -> None:
                async for event in call:
                    events.append(event)
                    if event.HasField("answer_delta") and server.alive():
                        server.process.send_signal(signal.SIGTERM)

            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await read()
        code = await asyncio.to_thread(server.process.wait, 30)

    assert code == 0, server.log_tail()
    error = caught.value
    assert error.code() == grpc.StatusCode.UNAVAILABLE, error
    status = rpc_status.from_call(error)  # type: ignore[arg-type]
    assert status is not None
    info = error_details_pb2.ErrorInfo()
    assert any(d.Unpack(info) for d in status.details)
    assert info.reason == "SHUTTING_DOWN"
    final = events[-1]
    assert final.HasField("completed"), "the final message comes before the status"
    assert final.completed.status == agent_pb2.RESPONSE_STATUS_CANCELLED
    assert final.completed.finish_reason == "cancelled"
    streamed = "".join(e.answer_delta.text for e in events if e.HasField("answer_delta"))
    assert streamed
    assert final.completed.answer == streamed
    assert "as the source says" not in streamed, "stopped before the answer was complete"
    with sqlite3.connect(tmp_path / SQLITE_FILE) as db:
        stored = db.execute("SELECT id, status, error FROM turns").fetchall()
    assert stored == [(final.completed.turn_id, "cancelled", stored[0][2])]
    assert stored[0][2].startswith("SHUTTING_DOWN: ")


@pytest.mark.slow
async def test_metadata_keys_are_logged_with_the_run_at_debug(tmp_path: Path) -> None:
    local_embedder()  # skips where the model is not provisioned
    labels = {"client": "billing-ui", "build": "2026.11.3"}
    with server_process(tmp_path, log_level="DEBUG", log_format="json") as server:
        ingest_documents(server.target)
        async with grpc.aio.insecure_channel(server.target) as channel:
            response = await agent_pb2_grpc.AgentServiceStub(channel).Ask(
                agent_pb2.QuestionRequest(query=QUESTION, metadata=labels), timeout=60
            )
    lines = [json.loads(line) for line in server.log().splitlines() if line.startswith("{")]
    logged = [line for line in lines if line.get("event") == "run metadata"]
    assert len(logged) == 1, server.log_tail()
    assert logged[0]["level"] == "debug"
    assert logged[0]["request_id"] == response.request_id
    # Keys only: the values may carry what the database seals (issue 26).
    assert logged[0]["metadata"] == {"keys": sorted(labels)}


async def test_metadata_is_not_logged_at_info(tmp_path: Path) -> None:
    local_embedder()  # skips where the model is not provisioned
    with server_process(tmp_path, log_format="json") as server:
        ingest_documents(server.target)
        async with grpc.aio.insecure_channel(server.target) as channel:
            await agent_pb2_grpc.AgentServiceStub(channel).Ask(
                agent_pb2.QuestionRequest(query=QUESTION, metadata={"client": "secretive"}),
                timeout=60,
            )
    assert "secretive" not in server.log()


def test_an_unusable_system_prompt_file_stops_serve_with_one_line(tmp_path: Path) -> None:
    """RAGAGENT_SYSTEM_PROMPT_FILE missing: `ragagent serve` exits 2 with one line naming
    the setting and the file, before any model is loaded."""
    missing = tmp_path / "no-such-prompt.txt"
    env = clean_env(data_dir=str(tmp_path / "data"), system_prompt_file=str(missing))
    result = subprocess.run(
        [sys.executable, "-m", "service.cli", "serve"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "RAGAGENT_SYSTEM_PROMPT_FILE" in lines[0]
    assert str(missing) in lines[0]
