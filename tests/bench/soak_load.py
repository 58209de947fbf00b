"""The load of the soak benchmark: streams that complete or are cancelled, and clients that die.

Also two small process entry points (``python -m tests.bench.soak_load ...``):

- ``client TARGET STREAMS``: opens AskStream streams, prints ``streaming`` once one has an
  answer delta, and reads on until the benchmark SIGKILLs it, so the server sees a client
  vanish mid-stream without any cancellation sent.
- ``serve STATS_PATH``: ``ragagent serve`` with one extra task that writes the number of
  asyncio tasks of the server's loop to STATS_PATH every half second. The server exposes no
  task count of its own; an event loop policy set before its entry point runs measures it
  without changing it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from ragagent.v1 import agent_pb2, agent_pb2_grpc

QUESTIONS = (
    "What does a URDF file describe?",
    "How do ROS 2 nodes exchange messages?",
    "What does Gazebo simulate?",
    "How does Whisper help a robot follow commands?",
    "Which middleware is underneath ROS 2?",
)
# How each stream of a worker ends: read to the end, cancelled before its first message, or
# cancelled after a few messages. Weights, not probabilities.
BEHAVIOURS = {"complete": 6, "cancel_before_first": 2, "cancel_mid_stream": 2}
STREAM_TIMEOUT_S = 120.0  # far above any answer: reaching it means the server stalled
NOT_BY_CLIENT = "CANCELLED not by the client"


@dataclass
class Tally:
    """What the streams saw, by how each was meant to end."""

    outcomes: Counter[tuple[str, str]] = field(default_factory=Counter)  # (behaviour, code)
    answers: Counter[str] = field(default_factory=Counter)  # final status of completed ones
    first_token_s: list[float] = field(default_factory=list)
    # The details of unexpected outcomes, so that a MISS says what the client was told.
    unexpected_details: Counter[str] = field(default_factory=Counter)
    deltas: int = 0

    def expected(self, behaviour: str, code: str) -> bool:
        if behaviour == "complete":
            return code == "OK"
        # A cancelled stream may also have finished first: a short answer beats the cancel.
        # CANCELLED counts only when this client cancelled it (NOT_BY_CLIENT otherwise).
        return code in ("CANCELLED", "OK")

    def to_json(self) -> dict[str, Any]:
        return {
            "outcomes": [[b, c, n] for (b, c), n in self.outcomes.items()],
            "answers": dict(self.answers),
            "first_token_s": self.first_token_s,
            "unexpected_details": dict(self.unexpected_details),
            "deltas": self.deltas,
        }

    def add(self, other: dict[str, Any]) -> None:
        """Adds what another process's tally (``to_json``) counted."""
        for behaviour, code, n in other["outcomes"]:
            self.outcomes[(behaviour, code)] += n
        self.answers.update(other["answers"])
        self.first_token_s.extend(other["first_token_s"])
        self.unexpected_details.update(other["unexpected_details"])
        self.deltas += other["deltas"]

    @property
    def unexpected(self) -> Counter[tuple[str, str]]:
        return Counter({k: n for k, n in self.outcomes.items() if not self.expected(*k)})

    def first_token(self) -> str:
        if not self.first_token_s:
            return "no answer delta seen"
        ordered = sorted(self.first_token_s)
        p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
        return (
            f"p50 {statistics.median(ordered) * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms "
            f"({len(ordered)} streams)"
        )


async def one_stream(
    stub: agent_pb2_grpc.AgentServiceStub, behaviour: str, rng: random.Random, tally: Tally
) -> None:
    started = time.perf_counter()
    call = stub.AskStream(
        agent_pb2.QuestionRequest(query=rng.choice(QUESTIONS)), timeout=STREAM_TIMEOUT_S
    )
    # After the k-th message: half within the first few (run started, tool call, sources,
    # the first deltas), half among the deltas of a long model answer.
    cancel_after = (
        rng.choice((rng.randint(1, 6), rng.randint(7, 60)))
        if behaviour == "cancel_mid_stream"
        else None
    )
    seen, ours = 0, False  # messages read; whether this client cancelled the call
    if behaviour == "cancel_before_first":
        first = asyncio.ensure_future(call.read())
        await asyncio.wait({first}, timeout=rng.uniform(0.0, 0.05))
        ours = call.cancel()  # usually before the first message; False if the call had ended
        with contextlib.suppress(asyncio.CancelledError, grpc.RpcError):
            await first
    else:
        first_delta = True
        with contextlib.suppress(asyncio.CancelledError, grpc.RpcError):
            async for event in call:
                seen += 1
                if event.HasField("answer_delta"):
                    tally.deltas += 1
                    if first_delta:
                        tally.first_token_s.append(time.perf_counter() - started)
                        first_delta = False
                if event.HasField("completed"):
                    tally.answers[agent_pb2.ResponseStatus.Name(event.completed.status)] += 1
                if cancel_after is not None and seen >= cancel_after:
                    ours = call.cancel()
                    break
    code = (await call.code()).name
    # A CANCELLED this client did not ask for came from the server or the transport: never
    # counted as one of the cancellations the load makes.
    outcome = NOT_BY_CLIENT if code == "CANCELLED" and not ours else code
    tally.outcomes[(behaviour, outcome)] += 1
    if not tally.expected(behaviour, outcome):
        after = 10 * int((time.perf_counter() - started) / 10)
        detail = (await call.details() or "")[:120]
        tally.unexpected_details[
            f"{outcome}: {detail!r} after {after}-{after + 10} s, {seen} messages read"
        ] += 1


async def worker(
    channel: grpc.aio.Channel, running: Callable[[], bool], seed: int, tally: Tally
) -> None:
    """Streams one after another while ``running()``, each with a drawn behaviour."""
    rng = random.Random(seed)
    stub = agent_pb2_grpc.AgentServiceStub(channel)
    names, weights = zip(*BEHAVIOURS.items(), strict=True)
    while running():
        await one_stream(stub, rng.choices(names, weights)[0], rng, tally)


async def kill_clients(
    target: str, running: Callable[[], bool], every_s: float, streams: int
) -> Counter[str]:
    """Starts a client process every ``every_s`` s and SIGKILLs it once it is mid-stream."""
    result: Counter[str] = Counter()
    while running():
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.bench.soak_load",
            "client",
            target,
            str(streams),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
        )
        assert process.stdout is not None
        try:
            line = await asyncio.wait_for(process.stdout.readline(), 30)
            result["killed mid-stream" if line.strip() == b"streaming" else "never streamed"] += 1
        except TimeoutError:
            result["never streamed"] += 1
        process.kill()
        await process.wait()
        await asyncio.sleep(every_s)
    return result


# --- process entry points --------------------------------------------------------------


async def _client(target: str, streams: int) -> None:
    announced = asyncio.Event()

    async def read(stub: agent_pb2_grpc.AgentServiceStub, query: str) -> None:
        async for event in stub.AskStream(agent_pb2.QuestionRequest(query=query), timeout=60):
            if event.HasField("answer_delta") and not announced.is_set():
                announced.set()
                sys.stdout.write("streaming\n")
                sys.stdout.flush()

    async with grpc.aio.insecure_channel(target) as channel:
        stub = agent_pb2_grpc.AgentServiceStub(channel)
        await asyncio.gather(*(read(stub, QUESTIONS[i % len(QUESTIONS)]) for i in range(streams)))
    await asyncio.sleep(3600)  # streams done before the kill: wait for it all the same


async def _count_tasks(stats_path: Path) -> None:
    scratch = stats_path.with_suffix(".tmp")
    while True:
        # Minus this task itself.
        scratch.write_text(f"{len(asyncio.all_tasks()) - 1}\n")
        scratch.replace(stats_path)
        await asyncio.sleep(0.5)


class _CountingPolicy(asyncio.DefaultEventLoopPolicy):
    """Every event loop made under it starts with a task that counts the loop's tasks: the
    hook sits under whatever runs the server's loop (asyncio.run, a Runner)."""

    def __init__(self, stats_path: Path) -> None:
        super().__init__()
        self._stats_path = stats_path

    def new_event_loop(self) -> asyncio.AbstractEventLoop:
        loop = super().new_event_loop()
        loop.call_soon(lambda: loop.create_task(_count_tasks(self._stats_path)))
        return loop


def _serve(stats_path: Path) -> int:
    from service.cli import main

    asyncio.set_event_loop_policy(_CountingPolicy(stats_path))
    return main(["serve"])


if __name__ == "__main__":
    if sys.argv[1] == "client":
        asyncio.run(_client(sys.argv[2], int(sys.argv[3])))
    elif sys.argv[1] == "serve":
        sys.exit(_serve(Path(sys.argv[2])))
    else:
        sys.exit(f"usage: {os.path.basename(__file__)} client TARGET STREAMS | serve STATS_PATH")
