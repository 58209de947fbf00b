"""Retrieve latency over gRPC against the same search called in-process.

Baseline: the runtime's search pipeline called directly (embedding the query, the engine's
search, piece scoring, reranking). The ratio shows what the server adds: interceptor,
validation, protobuf conversion and the channel.

BENCH_DATA_DIR names a data dir to keep the book's index in between runs (ingesting the
book takes a minute or more on 2 busy cores; an unchanged book re-ingests in seconds);
without it the index is built in a temporary folder.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path

import grpc
from ragagent.v1 import agent_pb2, agent_pb2_grpc

from service.config import Settings
from service.ingest.loader import load_documents
from service.ingest.pipeline import Ingestor
from service.observability.logging import configure_logging
from service.retrieval.pipeline import SearchPipeline
from service.runtime import Runtime
from service.server import AgentServer
from tests.bench.common import corpus, report, summary, timed

QUERIES = (
    "How do ROS 2 nodes exchange messages?",
    "What does a URDF file describe?",
    "Which GPU do I need for Isaac Sim?",
    "How does Whisper turn speech into commands?",
)
REPEAT = 100


async def main() -> None:
    root, name = corpus()
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(os.environ.get("BENCH_DATA_DIR") or tmp)
        settings = Settings(address="127.0.0.1:0", data_dir=data_dir, log_level="WARNING")
        runtime = await Runtime.open(settings)
        server = AgentServer(settings, runtime)
        try:
            await Ingestor(runtime.embedder, runtime.store).ingest(load_documents(root))
            port = await server.start()
            rotation = iter(range(10**9))

            # What Retrieve runs, called in-process: the search pipeline the runtime built
            # (pieces scored, the reranker the settings name).
            search = runtime.retriever

            async def direct() -> None:
                query = QUERIES[next(rotation) % len(QUERIES)]
                await search.search(query, limit=5, threshold=0.35)

            # What the quality steps cost (piece scoring and reranking, 2026-11-23): the same
            # searches on the cosine alone, interleaved with the default ones.
            plain = SearchPipeline(runtime.store, runtime.embedder)
            plain_s: list[float] = []
            steps_s: list[float] = []
            for index in range(REPEAT + 1):
                query = QUERIES[index % len(QUERIES)]
                for retriever, samples in ((plain, plain_s), (search, steps_s)):
                    started = time.perf_counter()
                    await retriever.search(query, limit=5, threshold=0.35)
                    samples.append(time.perf_counter() - started)

            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                stub = agent_pb2_grpc.AgentServiceStub(channel)

                async def over_grpc() -> None:
                    query = QUERIES[next(rotation) % len(QUERIES)]
                    await stub.Retrieve(agent_pb2.RetrieveRequest(query=query), timeout=10)

                baseline = await timed(direct, REPEAT)
                measured = await timed(over_grpc, REPEAT)
        finally:
            await server.stop(0)
            await runtime.close()
    print(f"corpus: {name}; {REPEAT} queries each")
    report(
        "search with pieces scored and reranked (in-process, embedding included)",
        summary(steps_s[1:]),
        f"the cosine alone: {summary(plain_s[1:])}",
        statistics.median(steps_s[1:]) / statistics.median(plain_s[1:]),
        "what the quality steps cost",
    )
    ratio = sorted(measured)[REPEAT // 2] / sorted(baseline)[REPEAT // 2]
    report(
        "Retrieve over gRPC",
        summary(measured),
        f"the same search in-process: {summary(baseline)}",
        ratio,
        "target <= 1.5 at p50: the server layer is thin",
    )


if __name__ == "__main__":
    configure_logging("WARNING", "console")
    asyncio.run(main())
