"""The peer: the OpenAI Agents SDK behind a minimal AskStream, over the same retrieval.

An SDK ``Agent`` with one ``function_tool`` (``qdrant_retrieval``, ragagent's search) on an
``OpenAIChatCompletionsModel`` over the same fake model, run by ``Runner.run_streamed`` with
tracing off; the servicer relays the text deltas and reports the tool's sources. This is
what a team would write with the SDK instead of ragagent, so the benchmark compares CPU per
answered question against it.

Run: ``python -m tests.bench.peer_server PORT`` with the same RAGAGENT_* settings as the
ragagent server it is compared with. Needs the ``agents-sdk`` extra.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from typing import Any

import grpc
import openai
from agents import (
    Agent,
    OpenAIChatCompletionsModel,
    RunConfig,
    RunContextWrapper,
    Runner,
    function_tool,
    set_tracing_disabled,
)
from agents.items import ToolCallOutputItem
from openai.types.responses import ResponseTextDeltaEvent
from ragagent.v1 import agent_pb2, agent_pb2_grpc

from service.agent.tools import DEFAULT_TOP_K
from service.config import Settings
from service.domain import ScoredChunk
from tests.bench.minimal import INSTRUCTIONS, Events, Search, passages, serve


def build_agent(search: Search, client: openai.AsyncOpenAI, settings: Settings) -> Agent[Any]:
    @function_tool(name_override="qdrant_retrieval")
    async def qdrant_retrieval(
        ctx: RunContextWrapper[list[list[ScoredChunk]]], query: str, top_k: int = DEFAULT_TOP_K
    ) -> str:
        """Search the indexed documents for passages relevant to a query.

        Args:
            query: What to search for, as a self-contained phrase or question.
            top_k: How many passages to return.
        """
        hits = await search(query, top_k)
        ctx.context.append(hits)
        return passages(hits)

    return Agent(
        name="ragagent-peer",
        instructions=INSTRUCTIONS,
        tools=[qdrant_retrieval],
        model=OpenAIChatCompletionsModel(model=settings.llm_model, openai_client=client),
    )


class Peer(agent_pb2_grpc.AgentServiceServicer):
    def __init__(self, agent: Agent[Any]) -> None:
        self._agent = agent
        self._config = RunConfig(tracing_disabled=True)

    async def AskStream(
        self, request: agent_pb2.QuestionRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[agent_pb2.AskStreamResponse]:
        events = Events()
        yield events.started()
        found: list[list[ScoredChunk]] = []
        result = Runner.run_streamed(
            self._agent, request.query, context=found, run_config=self._config
        )
        answer: list[str] = []
        try:
            async for event in result.stream_events():
                if event.type == "raw_response_event":
                    if isinstance(event.data, ResponseTextDeltaEvent) and event.data.delta:
                        answer.append(event.data.delta)
                        yield events.delta(event.data.delta)
                elif event.type == "run_item_stream_event" and event.name == "tool_output":
                    item = event.item
                    assert isinstance(item, ToolCallOutputItem)
                    call_id = str(getattr(item.raw_item, "call_id", None) or "")
                    if not call_id and isinstance(item.raw_item, dict):
                        call_id = str(item.raw_item.get("call_id", ""))
                    yield events.found(call_id, found[-1] if found else [])
        finally:
            if not result.is_complete:  # the client went away mid-run
                result.cancel()
        yield events.completed("".join(answer), [h for hits in found for h in hits])


def main() -> None:
    port = int(sys.argv[1])
    set_tracing_disabled(True)

    async def build(search: Search, client: openai.AsyncOpenAI, settings: Settings) -> Peer:
        return Peer(build_agent(search, client, settings))

    asyncio.run(serve(port, build))


if __name__ == "__main__":
    main()
