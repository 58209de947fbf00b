"""The floor: a bare grpc.aio AskStream doing the least work that answers the same question.

- ``retrieve_first``: the search for the question, then one streamed completion over the
  passages, each model chunk relayed as an answer delta;
- ``agentic``: one streamed completion offering the retrieval tool, the search the model
  asks for, then the streamed completion with the tool's result, relayed.

The model's stream is read as decoded JSON through the SDK's own request path, the way
ragagent reads it (``service/agent/model_calls.py``): the SDK's typed chunks cost about 3x
the CPU of the rest of a relay, and a careful minimal server would not pay for them either.

No validation, interceptors, sessions, budgets, citations nor logging: what is left is what
any server answering this way must pay, so ragagent's figures over it are its overhead.

Run: ``python -m tests.bench.floor_server PORT {retrieve_first,agentic}`` with the same
RAGAGENT_* settings (data dir, model URL and name) as the ragagent server it is compared with.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from typing import Any

import grpc
import openai
from ragagent.v1 import agent_pb2, agent_pb2_grpc

from service.agent.tools import DEFAULT_TOP_K, RETRIEVAL_TOOL
from service.config import Settings
from service.domain import ScoredChunk
from tests.bench.minimal import INSTRUCTIONS, Events, Search, passages, serve


class Floor(agent_pb2_grpc.AgentServiceServicer):
    def __init__(
        self, search: Search, client: openai.AsyncOpenAI, settings: Settings, mode: str
    ) -> None:
        self._search = search
        self._client = client
        self._model = settings.llm_model
        self._agentic = mode == "agentic"

    async def AskStream(
        self, request: agent_pb2.QuestionRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[agent_pb2.AskStreamResponse]:
        events = Events()
        yield events.started()
        limit = request.max_results if request.HasField("max_results") else DEFAULT_TOP_K
        messages: list[Any] = [{"role": "system", "content": INSTRUCTIONS}]
        hits: list[ScoredChunk] = []
        if self._agentic:
            messages.append({"role": "user", "content": request.query})
            call = await self._tool_turn(messages)
            if call is not None:
                call_id, arguments = call
                query = arguments.get("query", request.query)
                hits = await self._search(query, int(arguments.get("top_k", limit)))
                yield events.found(call_id, hits)
                messages.append(
                    {
                        "role": "assistant",
                        "tool_calls": [
                            {
                                "id": call_id,
                                "type": "function",
                                "function": {
                                    "name": RETRIEVAL_TOOL["function"]["name"],
                                    "arguments": json.dumps(arguments),
                                },
                            }
                        ],
                    }
                )
                messages.append(
                    {"role": "tool", "tool_call_id": call_id, "content": passages(hits)}
                )
        else:
            hits = await self._search(request.query, limit)
            yield events.found("floor", hits)
            if not hits:
                yield events.completed("", hits)
                return
            messages.append(
                {"role": "user", "content": f"{passages(hits)}\n\nQuestion: {request.query}"}
            )
        answer: list[str] = []
        async with await self._stream({"messages": messages}) as stream:
            async for chunk in stream:
                if (text := _delta(chunk).get("content")) and isinstance(text, str):
                    answer.append(text)
                    yield events.delta(text)
        yield events.completed("".join(answer), hits)

    async def _tool_turn(self, messages: list[Any]) -> tuple[str, dict[str, Any]] | None:
        """The model's first tool call of a streamed turn offering the tool, if it made one."""
        call_id, name, arguments = "", "", []
        async with await self._stream({"messages": messages, "tools": [RETRIEVAL_TOOL]}) as stream:
            async for chunk in stream:
                for call in _delta(chunk).get("tool_calls") or ():
                    if call.get("index", 0) != 0:
                        continue
                    call_id = call.get("id") or call_id
                    function = call.get("function") or {}
                    name += function.get("name") or ""
                    arguments.append(function.get("arguments") or "")
        if not name:
            return None
        return call_id, json.loads("".join(arguments) or "{}")

    async def _stream(self, body: dict[str, Any]) -> openai.AsyncStream[Any]:
        """A streamed completion whose chunks are the decoded JSON, not the SDK's models."""
        stream: openai.AsyncStream[Any] = await self._client.post(
            "/chat/completions",
            body={"model": self._model, "stream": True, **body},
            cast_to=object,
            stream=True,
            stream_cls=openai.AsyncStream[Any],
        )
        return stream


def _delta(chunk: Any) -> dict[str, Any]:
    """The first choice's delta of a decoded chunk, or {} (a usage-only chunk has none)."""
    choices = chunk.get("choices") if isinstance(chunk, dict) else None
    delta = choices[0].get("delta") if choices else None
    return delta if isinstance(delta, dict) else {}


def main() -> None:
    port, mode = int(sys.argv[1]), sys.argv[2]

    async def build(search: Search, client: openai.AsyncOpenAI, settings: Settings) -> Floor:
        return Floor(search, client, settings, mode)

    asyncio.run(serve(port, build))


if __name__ == "__main__":
    main()
