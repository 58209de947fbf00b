"""The client side of the overhead benchmark: one question asked of a server, many at once,
the model called directly, and the fake model's answer shape set between phases."""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import time
from dataclasses import dataclass

import grpc
import httpx
import openai
from ragagent.v1 import agent_pb2, agent_pb2_grpc

from tests.fakes.model_process import SHAPE_PATH

# Questions the textbook answers (and the small corpus of tests/processes.py too), asked in
# turn so that every side gets the same ones.
QUESTIONS = (
    "How do ROS 2 nodes exchange messages?",
    "What does a URDF file describe?",
    "What does Gazebo simulate?",
    "How does Whisper help a robot follow commands?",
    "Which middleware is underneath ROS 2?",
    "What do joints connect in a robot description?",
)
STREAM_TIMEOUT_S = 120.0
STREAMS_PER_CHANNEL = 50  # one HTTP/2 connection per 50 streams, as a client pool might


@dataclass
class Answer:
    """What the client saw of one AskStream call; times in seconds from the call."""

    first_delta: float | None
    end: float
    deltas: int
    answered: bool  # status OK and a completed event with a non-empty answer
    code: str  # the call's status code, or the completed event's status when not answered
    retrieval: float | None = None  # what the server reports its retrieval took, if it does


async def ask(stub: agent_pb2_grpc.AgentServiceStub, query: str) -> Answer:
    started = time.perf_counter()
    first: float | None = None
    deltas, answered, retrieval, status = 0, False, None, ""
    call = stub.AskStream(agent_pb2.QuestionRequest(query=query), timeout=STREAM_TIMEOUT_S)
    with contextlib.suppress(grpc.RpcError):
        async for event in call:
            if event.HasField("answer_delta"):
                deltas += 1
                if first is None:
                    first = time.perf_counter() - started
            elif event.HasField("completed"):
                answered = bool(event.completed.answer)
                status = agent_pb2.ResponseStatus.Name(event.completed.status)
                if event.completed.timings.HasField("retrieval"):
                    took = event.completed.timings.retrieval.ToTimedelta()
                    retrieval = took.total_seconds()
    code = (await call.code()).name
    if code == "OK" and not answered:
        code = status or "OK without a completed event"
    ended = time.perf_counter() - started
    return Answer(first, ended, deltas, answered and code == "OK", code, retrieval)


async def ask_in_turn(target: str, count: int, offset: int = 0) -> list[Answer]:
    """``count`` questions one after another on one channel."""
    async with grpc.aio.insecure_channel(target) as channel:
        stub = agent_pb2_grpc.AgentServiceStub(channel)
        return [await ask(stub, QUESTIONS[(offset + i) % len(QUESTIONS)]) for i in range(count)]


async def ask_at_once(target: str, streams: int) -> list[Answer]:
    """``streams`` questions at the same time, over one channel per 50 streams."""
    channels = [
        grpc.aio.insecure_channel(target) for _ in range(max(1, streams // STREAMS_PER_CHANNEL))
    ]
    try:
        stubs = [agent_pb2_grpc.AgentServiceStub(c) for c in channels]
        return await asyncio.gather(
            *(ask(stubs[i % len(stubs)], QUESTIONS[i % len(QUESTIONS)]) for i in range(streams))
        )
    finally:
        for channel in channels:
            await channel.close()


async def direct_first_token(client: openai.AsyncOpenAI, model: str, query: str) -> float:
    """Seconds to the first text chunk of a streamed completion asked of the model directly
    (the stream read to its end, as the servers do)."""
    started = time.perf_counter()
    first: float | None = None
    stream = await client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": query}], stream=True
    )
    async with stream:
        async for chunk in stream:
            if first is None and chunk.choices and chunk.choices[0].delta.content:
                first = time.perf_counter() - started
    if first is None:
        raise RuntimeError("the model answered no text")
    return first


async def set_shape(base_url: str, deltas: int, interval: float) -> None:
    """The fake model's answers from now on: ``deltas`` chunks, ``interval`` s apart."""
    url = base_url.removesuffix("/v1") + SHAPE_PATH
    async with httpx.AsyncClient() as client:
        reply = await client.post(url, json={"deltas": deltas, "interval": interval})
        reply.raise_for_status()


def p(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def median(values: list[float]) -> float:
    return statistics.median(values)
