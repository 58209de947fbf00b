"""Connect against gRPC: the same AskStream, the same server process, the same scripted model.

``ragagent serve`` runs as a process with RAGAGENT_HTTP_ADDRESS, against the endless fake
model (a process too) with the retrieve_first strategy; this process asks the same question
over gRPC (grpc.aio) and over Connect (connectrpc's generated client, binary), one run of
each in turn, so that the machine's load falls on both alike. Per run: the time to the first
answer delta, and the answer's pieces per second from the first delta to the last.

Targets (issue 28): first delta over Connect <= gRPC's + 2 ms at p50; pieces/s >= 0.9x gRPC's.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import grpc
from ragagent.v1 import agent_connect, agent_pb2, agent_pb2_grpc

from tests.processes import free_port, ingest_documents, model_process, start_server

QUESTION = agent_pb2.QuestionRequest(query="What does URDF describe?")
RUNS_QUICK = 25
DELTAS = 40
INTERVAL_S = 0.002


async def _measure(
    stream: Callable[[], AsyncIterator[agent_pb2.AskStreamResponse]],
) -> tuple[float, float]:
    """(seconds to the first answer delta, answer pieces per second)."""
    started = time.perf_counter()
    first = last = 0.0
    pieces = 0
    async for event in stream():
        if event.HasField("answer_delta"):
            last = time.perf_counter()
            first = first or last
            pieces += 1
        if event.HasField("completed"):
            assert event.completed.status == agent_pb2.RESPONSE_STATUS_SUCCESS, event.completed
    assert pieces > 1, "the answer came in one piece: nothing to measure"
    return first - started, (pieces - 1) / max(last - first, 1e-9)


async def main(runs: int = RUNS_QUICK) -> None:
    with (
        tempfile.TemporaryDirectory() as folder,
        model_process(deltas=DELTAS, interval=INTERVAL_S) as model,
    ):
        http_port = free_port()
        server = start_server(
            Path(folder),
            http_address=f"127.0.0.1:{http_port}",
            agent_strategy="retrieve_first",
            llm_base_url=model.base_url,
            llm_api_key="bench",
            llm_model="fake-model",
            log_level="WARNING",
        )
        try:
            ingest_documents(server.target)
            async with (
                grpc.aio.insecure_channel(server.target) as channel,
                agent_connect.AgentServiceClient(f"http://127.0.0.1:{http_port}") as connect,
            ):
                stub = agent_pb2_grpc.AgentServiceStub(channel)
                sides: dict[str, Callable[[], AsyncIterator[agent_pb2.AskStreamResponse]]] = {
                    "grpc": lambda: stub.AskStream(QUESTION, timeout=60),
                    "connect": lambda: connect.ask_stream(QUESTION, timeout_ms=60_000),
                }
                first: dict[str, list[float]] = {name: [] for name in sides}
                rate: dict[str, list[float]] = {name: [] for name in sides}
                for index in range(runs + 1):  # the first round warms both up
                    order = list(sides) if index % 2 else list(reversed(sides))
                    for name in order:
                        took, per_second = await _measure(sides[name])
                        if index:
                            first[name].append(took)
                            rate[name].append(per_second)
        finally:
            server.stop()
    grpc_first, connect_first = (statistics.median(first[n]) * 1000 for n in ("grpc", "connect"))
    grpc_rate, connect_rate = (statistics.median(rate[n]) for n in ("grpc", "connect"))
    print(f"AskStream over Connect vs gRPC ({runs} runs each, interleaved, scripted model)")
    print(
        f"  first answer delta p50: connect {connect_first:.2f} ms, grpc {grpc_first:.2f} ms, "
        f"difference {connect_first - grpc_first:+.2f} ms (target <= +2 ms): "
        f"{'PASS' if connect_first - grpc_first <= 2 else 'MISS'}"
    )
    print(
        f"  answer pieces/s p50: connect {connect_rate:.0f}, grpc {grpc_rate:.0f}, "
        f"ratio {connect_rate / grpc_rate:.2f} (target >= 0.90): "
        f"{'PASS' if connect_rate >= 0.9 * grpc_rate else 'MISS'}"
    )
