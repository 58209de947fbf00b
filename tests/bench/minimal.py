"""What the overhead benchmark's two baselines share: the floor (floor_server.py) and the peer
(peer_server.py) are small gRPC servers, each in a process of its own, that answer AskStream
with the same retrieval as ragagent (its embedder, store and searcher, from the same
RAGAGENT_* settings over a copy of the same data dir) and a model over the same fake.

They answer the proto's AskStream only, with the events a client needs (run_started,
sources_found, answer_delta, completed); everything else is UNIMPLEMENTED. Each prints
``ready`` on stdout once it listens on the port given to it, and stops on SIGTERM.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import uuid
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack

import grpc
import openai
from ragagent.v1 import agent_pb2, agent_pb2_grpc, types_pb2

from service.config import Settings
from service.domain import ScoredChunk
from service.executor import BlockingExecutor
from service.retrieval.base import Retriever
from service.runtime import build_embedder, build_reranker, build_retriever, open_store

INSTRUCTIONS = (
    "Answer the question from the numbered passages, citing them like [1]. "
    "Use the qdrant_retrieval tool to search the documents."
)


class Search:
    """ragagent's retrieval as the settings configure it, with its defaults."""

    def __init__(self, retriever: Retriever, settings: Settings) -> None:
        self._retriever = retriever
        self.threshold = settings.confidence_threshold

    async def __call__(self, query: str, limit: int) -> list[ScoredChunk]:
        return await self._retriever.search(query, limit=limit, threshold=self.threshold)


def passages(hits: list[ScoredChunk]) -> str:
    """The passages as the model reads them, numbered for citations."""
    if not hits:
        return "No passage is relevant enough to this query."
    return "\n\n".join(f"[{n}] {h.chunk.text}" for n, h in enumerate(hits, 1))


def sources(hits: list[ScoredChunk]) -> list[types_pb2.SourceInfo]:
    return [
        types_pb2.SourceInfo(
            chunk_id=h.chunk.chunk_id,
            document_id=h.chunk.document_id,
            url=h.chunk.url,
            content=h.chunk.text,
            score=h.score,
            position=h.chunk.position,
        )
        for h in hits
    ]


class Events:
    """Numbers a stream's events from 1."""

    def __init__(self) -> None:
        self._sequence = 0
        self.request_id = uuid.uuid4().hex

    def next(self, **event: object) -> agent_pb2.AskStreamResponse:
        self._sequence += 1
        return agent_pb2.AskStreamResponse(sequence=self._sequence, **event)  # type: ignore[arg-type]

    def started(self) -> agent_pb2.AskStreamResponse:
        return self.next(run_started=agent_pb2.RunStarted(request_id=self.request_id))

    def found(self, call_id: str, hits: list[ScoredChunk]) -> agent_pb2.AskStreamResponse:
        return self.next(
            sources_found=agent_pb2.SourcesFound(tool_call_id=call_id, sources=sources(hits))
        )

    def delta(self, text: str) -> agent_pb2.AskStreamResponse:
        return self.next(answer_delta=agent_pb2.AnswerDelta(text=text))

    def completed(self, answer: str, hits: list[ScoredChunk]) -> agent_pb2.AskStreamResponse:
        status = agent_pb2.ResponseStatus.Value(
            "RESPONSE_STATUS_SUCCESS" if answer else "RESPONSE_STATUS_NO_ANSWER"
        )
        response = agent_pb2.AgentResponse(
            request_id=self.request_id, answer=answer, sources=sources(hits), status=status
        )
        return self.next(completed=response)


def model_client(settings: Settings) -> openai.AsyncOpenAI:
    key = settings.llm_api_key
    return openai.AsyncOpenAI(
        base_url=settings.llm_base_url,
        api_key=key.get_secret_value() if key else "not-needed",
        max_retries=0,
    )


Build = Callable[
    [Search, openai.AsyncOpenAI, Settings], Awaitable[agent_pb2_grpc.AgentServiceServicer]
]


async def serve(port: int, build: Build) -> None:
    """Opens the retrieval and the model client, serves ``build``'s servicer until SIGTERM."""
    settings = Settings()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with AsyncExitStack() as stack:
        executor = BlockingExecutor(settings.blocking_threads)
        stack.push_async_callback(executor.shutdown)
        embedder = await build_embedder(settings, stack, executor)
        store = await open_store(settings, embedder, executor, stack)
        client = model_client(settings)
        stack.push_async_callback(client.close)
        retriever = build_retriever(settings, store, build_reranker(settings, stack))
        servicer = await build(Search(retriever, settings), client, settings)
        server = grpc.aio.server()
        agent_pb2_grpc.add_AgentServiceServicer_to_server(servicer, server)
        server.add_insecure_port(f"127.0.0.1:{port}")
        await server.start()
        sys.stdout.write("ready\n")
        sys.stdout.flush()
        await stop.wait()
        await server.stop(1)
