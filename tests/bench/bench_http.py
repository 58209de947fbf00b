"""Connect against gRPC: the same AskStream, the same server process, the same scripted model.

``ragagent serve`` runs as a process with RAGAGENT_HTTP_ADDRESS, against the endless fake
model (a process too) with the retrieve_first strategy; this process asks the same question
over gRPC (grpc.aio) and over Connect (connectrpc's generated client, binary), one run of
each in turn, so that the machine's load falls on both alike. Per run: the time to the first
answer delta, and the answer's pieces per second from the first delta to the last.

Then concurrency: 2N gRPC streams at once, then N gRPC beside N Connect streams (N = 40 in
quick mode, 200 with --full): the same load, so the ratio is what Connect adds. Every stream
must complete, and the mixed run's first-delta p99 stays within 1.2x of the gRPC-only run's
(three rounds of each, interleaved; the median round's ratio is judged).

Targets (issue 28): first delta over Connect <= gRPC's + 2 ms at p50; pieces/s >= 0.9x gRPC's.
"""

from __future__ import annotations

import asyncio
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
CONCURRENT_ROUNDS = 3


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


async def _first_delta(stream: AsyncIterator[agent_pb2.AskStreamResponse]) -> float:
    started = time.perf_counter()
    first = 0.0
    async for event in stream:
        if event.HasField("answer_delta") and not first:
            first = time.perf_counter() - started
        if event.HasField("completed"):
            assert event.completed.status == agent_pb2.RESPONSE_STATUS_SUCCESS, event.completed
    assert first, "no answer delta"
    return first


def _p99(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


async def main(runs: int = RUNS_QUICK, *, full: bool = False) -> None:
    streams = 200 if full else 40
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
                # Rounds interleaved (alone, mixed, alone, ...) so that the machine's load
                # falls on both alike; the ratio judged is the median round's.
                alone: list[list[float]] = []
                mixed: list[list[float]] = []
                for _ in range(CONCURRENT_ROUNDS):
                    alone.append(
                        await asyncio.gather(
                            *(_first_delta(sides["grpc"]()) for _ in range(2 * streams))
                        )
                    )
                    mixed.append(
                        await asyncio.gather(
                            *(_first_delta(sides[n]()) for _ in range(streams) for n in sides)
                        )
                    )
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
    ratios = [_p99(m) / _p99(a) for a, m in zip(alone, mixed, strict=True)]
    ratio = statistics.median(ratios)
    completed = sum(len(r) for r in (*alone, *mixed))
    print(
        f"  {2 * streams} gRPC streams at once, then {streams} gRPC + {streams} Connect, "
        f"{CONCURRENT_ROUNDS} rounds interleaved: all {completed} completed; first-delta p99 "
        + ", ".join(
            f"{_p99(a) * 1000:.0f} ms alone / {_p99(m) * 1000:.0f} ms mixed"
            for a, m in zip(alone, mixed, strict=True)
        )
        + f"; ratios {' '.join(f'{r:.2f}' for r in ratios)}, median {ratio:.2f} "
        f"(target <= 1.2): {'PASS' if ratio <= 1.2 else 'MISS'}"
    )
