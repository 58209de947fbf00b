"""An OpenAI-compatible model that never runs out of answers, run as a process of its own.

The scripted :class:`~tests.fakes.openai_server.FakeOpenAI` answers from a queue, which suits
precise fault tests in-process. Process-level tests (cancellation storms, load, soak) need a
model server that answers any number of requests the way a real one would, in its own
process, so that the ragagent server under test talks to it over real sockets:

- a request that offers tools and has no tool result yet gets a ``qdrant_retrieval`` call
  whose query is the question of the last user message (the agentic round);
- every other request gets a text answer of ``--deltas`` pieces, ``--interval`` s apart,
  citing source [1].

``POST /bench/shape`` with ``{"deltas": N, "interval": S}`` changes the answers that come
after it (answers already streaming keep theirs): a benchmark keeps one model process, and
the servers pointed at it, across scenarios that need different answers.

Run: ``python -m tests.fakes.model_process [--deltas N] [--interval S]``; it prints
``port=<port>`` on the first line of stdout once it listens, and runs until SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from typing import Any

from tests.fakes.openai_script import ChatReply, ToolCallScript
from tests.fakes.openai_server import FakeOpenAI, _Exchange

SHAPE_PATH = "/bench/shape"
QUESTION_MARK = "Question: "


def _last_user_text(body: dict[str, Any]) -> str:
    """The question of the last user message: what follows its last "Question: " (ragagent
    puts the passages of its own search first), else the whole message. A model searches
    for the question, not for the passages it was given."""
    for message in reversed(body.get("messages", [])):
        if message.get("role") == "user" and isinstance(message.get("content"), str):
            return str(message["content"]).rpartition(QUESTION_MARK)[2]
    return "robots"


def reply_for(body: dict[str, Any], *, deltas: int, interval: float) -> ChatReply:
    """What a cooperative model answers to one chat request."""
    messages = body.get("messages", [])
    wants_tool = body.get("tools") and body.get("tool_choice") != "none"
    if wants_tool and not any(m.get("role") == "tool" for m in messages):
        query = json.dumps({"query": _last_user_text(body)[:200], "top_k": 3})
        return ChatReply.calls(ToolCallScript("qdrant_retrieval", query))
    words = [f"word{i} " for i in range(deltas - 1)] + ["as the source says [1]."]
    return ChatReply(deltas=words, delta_interval=interval)


class EndlessModel(FakeOpenAI):
    """FakeOpenAI whose chat replies are made per request instead of scripted."""

    def __init__(self, *, deltas: int, interval: float) -> None:
        super().__init__()
        self._deltas = deltas
        self._interval = interval

    async def _chat_completion(self, io: _Exchange) -> bool:
        # A long-running process must not keep every request it ever saw.
        self.requests.clear()
        self.script_chat(reply_for(io.record.body, deltas=self._deltas, interval=self._interval))
        return await super()._chat_completion(io)

    async def _other_route(self, io: _Exchange) -> bool:
        if io.record.path != SHAPE_PATH or io.record.method != "POST":
            return await super()._other_route(io)
        self.requests.clear()
        body = io.record.body
        deltas, interval = body.get("deltas", self._deltas), body.get("interval", self._interval)
        if not isinstance(deltas, int) or deltas < 1 or not isinstance(interval, int | float):
            return await io.json(400, {"error": "deltas: an integer >= 1, interval: seconds"})
        self._deltas, self._interval = deltas, max(0.0, float(interval))
        return await io.json(200, {"deltas": self._deltas, "interval": self._interval})


async def _main(deltas: int, interval: float) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with EndlessModel(deltas=deltas, interval=interval) as model:
        sys.stdout.write(f"port={model.port}\n")
        sys.stdout.flush()
        await stop.wait()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.fakes.model_process")
    parser.add_argument("--deltas", type=int, default=40, help="text pieces per answer")
    parser.add_argument("--interval", type=float, default=0.02, help="seconds between pieces")
    args = parser.parse_args(argv)
    asyncio.run(_main(args.deltas, args.interval))


if __name__ == "__main__":
    main()
