"""A model turn that may call tools, asked the way the endpoint can answer it.

Learned once per model (``Capabilities.tool_calling``) unless the settings say:

- ``streamed``: the turn streams, tool calls and all (OpenAI, vLLM, Ollama).
- ``non_streamed``: llama-cpp-python answers a streamed request with tools and
  ``tool_choice: "auto"`` with HTTP 200 and an empty body, yet the same request without
  streaming returns a proper tool call. There a non-streamed turn decides; when it answers
  instead of calling a tool, its text is the answer (sent at once, not asked for again:
  on a CPU server a second generation would double the wait), and turns without tools
  (the last round) still stream.
- ``none``: the endpoint rejects tools (HTTP 4xx, or 5xx about the request): the run falls
  back to retrieve_first.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from service.agent.model_errors import EmptyStream
from service.agent.run import Run
from service.agent.tools import RETRIEVAL_TOOL
from service.agent.turns import ModelTurns, Turn
from service.errors import ModelContextExceeded, ModelRequestRejected
from service.observability.logging import get_logger

log = get_logger("ragagent.agent")


async def tool_turn(
    run: Run,
    turns: ModelTurns,
    messages: Sequence[dict[str, Any]],
    *,
    temperature: float,
    max_tokens: int,
) -> Turn | None:
    """The turn, or None when the endpoint turned out to have no tool calling."""
    capabilities = turns.model.capabilities
    tools = [RETRIEVAL_TOOL]
    learning = capabilities.tool_calling is None
    if capabilities.tool_calling in (None, "streamed"):
        try:
            turn = await turns.stream(
                messages,
                temperature=temperature,
                tools=tools,
                tool_choice="auto",
                max_tokens=max_tokens,
            )
        except EmptyStream:
            if not learning:
                raise
            _learned(capabilities, "non_streamed", "a streamed turn with tools came back empty")
        except ModelContextExceeded:
            raise
        except ModelRequestRejected as exc:
            if not (learning and _about_tools(exc)):
                raise
            _learned(capabilities, "none", exc.message)
            return None
        else:
            if learning:
                _learned(capabilities, "streamed", "a streamed turn with tools worked")
            return turn
    try:
        turn = await turns.decide(
            messages, temperature=temperature, tools=tools, max_tokens=max_tokens
        )
    except ModelContextExceeded:
        raise
    except ModelRequestRejected as exc:
        if not (learning and _about_tools(exc)):
            raise
        _learned(capabilities, "none", exc.message)
        return None
    if not turn.tool_calls:
        await run.write(turn.text)
    return turn


def _about_tools(error: ModelRequestRejected) -> bool:
    """A rejection that names tools ("does not support tools", vLLM's "auto tool choice
    requires --enable-auto-tool-choice"); any other is not about what the endpoint can do."""
    return "tool" in error.message.lower()


def _learned(capabilities: Any, mode: str, why: str) -> None:
    capabilities.tool_calling = mode
    log.info("model tool calling learned", tool_calling=mode, why=why[:300])
