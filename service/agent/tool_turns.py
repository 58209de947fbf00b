"""A model turn that may call tools, asked the way the endpoint can answer it.

What the endpoint can do is learned once per model, by a tiny probe on the first agentic run
(a one-line prompt, a few tokens: a fraction of a second even on a CPU server), unless
``RAGAGENT_LLM_TOOL_CALLING`` says:

- ``streamed``: the turn streams, tool calls and all (OpenAI, vLLM, Ollama, llama-server).
- ``non_streamed``: llama-cpp-python answers a streamed request with tools and
  ``tool_choice: "auto"`` with HTTP 200 and no chunk at all (only keep-alive comments, until
  it has generated the whole turn), yet the same request without streaming returns a proper
  tool call. There a non-streamed turn decides; when it answers instead of calling a tool,
  its text is the answer (sent at once, not asked for again: on a CPU server a second
  generation would double the wait). Turns without tools (the last round) still stream.
- ``none``: the endpoint rejects tools (HTTP 4xx, or a 5xx about the request, naming tools):
  the run falls back to retrieve_first and says so.

Learning from a real question instead would cost a whole generation on such a server before
the empty body shows, and would put the question's time into a probe.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import aclosing
from typing import Any

from service.agent.capabilities import ToolCalling
from service.agent.declines import NO_ANSWER_TOOL
from service.agent.model import ChatModel
from service.agent.model_errors import EmptyStream
from service.agent.run import Run
from service.agent.tools import RETRIEVAL_TOOL
from service.agent.turns import ModelTurns, Turn
from service.domain import Deadline
from service.errors import ModelContextExceeded, ModelRequestRejected
from service.observability.logging import get_logger

log = get_logger("ragagent.agent")

# What a tool-calling turn offers: the search, and the model's way to say that the documents
# do not answer the question (see :mod:`declines`).
AGENT_TOOLS: list[dict[str, Any]] = [RETRIEVAL_TOOL, NO_ANSWER_TOOL]

PROBE_MESSAGES = [{"role": "user", "content": "Reply with the word OK."}]
_PROBE_TOKENS = 8


async def tool_calling(model: ChatModel, deadline: Deadline) -> ToolCalling:
    """How ``model`` takes tool calls: known, or learned now with a tiny probe."""
    known = model.capabilities.tool_calling
    if known is not None:
        return known
    mode: ToolCalling
    try:
        stream = model.stream(
            PROBE_MESSAGES,
            temperature=0.0,
            deadline=deadline,
            tools=[RETRIEVAL_TOOL],
            tool_choice="auto",
            max_tokens=_PROBE_TOKENS,
        )
        async with aclosing(stream) as events:
            async for _ in events:
                pass
        mode, why = "streamed", "a streamed probe with tools answered"
    except EmptyStream:
        mode, why = "non_streamed", "a streamed probe with tools came back empty"
    except ModelContextExceeded:
        raise
    except ModelRequestRejected as exc:
        if not _about_tools(exc):
            raise
        mode, why = "none", exc.message
    model.capabilities.tool_calling = mode
    log.info("model tool calling learned", tool_calling=mode, why=why[:300])
    return mode


async def tool_turn(
    run: Run,
    turns: ModelTurns,
    messages: Sequence[dict[str, Any]],
    *,
    temperature: float,
    max_tokens: int,
) -> Turn | None:
    """The turn, or None when the endpoint has no tool calling."""
    mode = await tool_calling(turns.model, run.deadline)
    tools = AGENT_TOOLS
    if mode == "none":
        return None
    if mode == "streamed":
        return await turns.stream(
            messages,
            temperature=temperature,
            tools=tools,
            tool_choice="auto",
            max_tokens=max_tokens,
        )
    turn = await turns.decide(messages, temperature=temperature, tools=tools, max_tokens=max_tokens)
    if not turn.tool_calls and turn.declined is None and turn.answered:
        await run.write(turn.text)
    return turn


def _about_tools(error: ModelRequestRejected) -> bool:
    """A rejection that names tools ("does not support tools", vLLM's "auto tool choice
    requires --enable-auto-tool-choice"); any other is not about what the endpoint can do."""
    return "tool" in error.message.lower()
