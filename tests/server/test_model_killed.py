"""The model server dies mid-answer (SIGKILL), with ``ragagent serve`` as a process of its own.

Nothing is simulated in-process here: the kernel closes the dead model's socket, the server's
HTTP client sees the body end mid-way, and the caller must get the partial answer marked as
ERROR and then UNAVAILABLE / MODEL_STREAM_INTERRUPTED, while the server keeps serving.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import textwrap
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_status import rpc_status
from ragagent.v1 import agent_pb2, agent_pb2_grpc, corpus_pb2, corpus_pb2_grpc

from tests.contract.streams import answer_text, check_stream
from tests.helpers import local_embedder
from tests.processes import REPO, SMALL_CORPUS, ServerProcess, start_server

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

QUESTION = "What does a URDF file describe?"
DOCUMENT = corpus_pb2.Document(path="m1/urdf.md", content=SMALL_CORPUS["m1/urdf.md"])
# The scripted fake as a process: one long, slow answer; prints its port, serves until killed.
MODEL_SCRIPT = textwrap.dedent(
    """
    import asyncio
    from tests.fakes.openai_server import ChatReply, FakeOpenAI

    async def main():
        async with FakeOpenAI() as fake:
            fake.script_chat(
                ChatReply(deltas=[f"word{i} " for i in range(600)], delta_interval=0.05)
            )
            print(fake.port, flush=True)
            await asyncio.Event().wait()

    asyncio.run(main())
    """
)


@asynccontextmanager
async def _process(*args: str, **kwargs: object) -> AsyncIterator[asyncio.subprocess.Process]:
    """A child process, killed at the end if it still runs."""
    process = await asyncio.create_subprocess_exec(*args, cwd=REPO, **kwargs)  # type: ignore[arg-type]
    try:
        yield process
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


@asynccontextmanager
async def _model() -> AsyncIterator[tuple[asyncio.subprocess.Process, str]]:
    """The fake model as a process, and its base URL."""
    async with _process(
        sys.executable, "-c", MODEL_SCRIPT, stdout=asyncio.subprocess.PIPE
    ) as model:
        assert model.stdout is not None
        port = int(await asyncio.wait_for(model.stdout.readline(), 30))
        yield model, f"http://127.0.0.1:{port}/v1"


@asynccontextmanager
async def _server(
    data_dir: Path, llm_base_url: str
) -> AsyncIterator[tuple[ServerProcess, grpc.aio.Channel]]:
    """``ragagent serve`` as a process of its own, serving, with a channel."""
    server = await asyncio.to_thread(
        start_server, data_dir, llm_base_url=llm_base_url, agent_strategy="retrieve_first"
    )
    try:
        async with grpc.aio.insecure_channel(server.target) as channel:
            yield server, channel
    finally:
        await asyncio.to_thread(server.stop)


async def _read_until_killed(
    call: grpc.aio.UnaryStreamCall,  # type: ignore[type-arg]
    model: asyncio.subprocess.Process,
) -> tuple[list[agent_pb2.AskStreamResponse], grpc.aio.AioRpcError]:
    """Reads the stream, killing the model once three words of the answer have arrived."""
    events: list[agent_pb2.AskStreamResponse] = []
    with pytest.raises(grpc.aio.AioRpcError) as caught:  # noqa: PT012 (events before it)
        async for event in call:
            events.append(event)
            if model.returncode is None and answer_text(events).count("word") >= 3:
                model.send_signal(signal.SIGKILL)
                await model.wait()
    return events, caught.value


async def test_a_model_killed_mid_answer_is_interrupted_and_the_server_lives_on(
    tmp_path: Path,
) -> None:
    local_embedder()  # skips where the model is not provisioned
    async with _model() as (model, base_url), _server(tmp_path, base_url) as (server, channel):
        await corpus_pb2_grpc.CorpusServiceStub(channel).IngestDocuments(
            iter([corpus_pb2.IngestDocumentsRequest(document=DOCUMENT)]), timeout=60
        )
        call = agent_pb2_grpc.AgentServiceStub(channel).AskStream(
            agent_pb2.QuestionRequest(query=QUESTION), timeout=60
        )
        events, error = await _read_until_killed(call, model)
        health = health_pb2_grpc.HealthStub(channel)
        reply = await health.Check(health_pb2.HealthCheckRequest(), timeout=10)
        alive = server.alive()
    server_log = server.log()

    assert model.returncode == -signal.SIGKILL
    assert error.code() == grpc.StatusCode.UNAVAILABLE, server_log
    status = rpc_status.from_call(error)  # type: ignore[arg-type]
    assert status is not None
    info = error_details_pb2.ErrorInfo()
    assert any(d.Unpack(info) for d in status.details)
    assert info.reason == "MODEL_STREAM_INTERRUPTED"
    check_stream(events)
    final = events[-1].completed
    assert final.status == agent_pb2.RESPONSE_STATUS_ERROR
    assert final.answer == answer_text(events)
    assert final.answer.startswith("word0 word1 word2 ")
    assert "word599" not in final.answer
    assert alive, server_log
    assert reply.status == health_pb2.HealthCheckResponse.SERVING
