"""The run's chat model as the Agents SDK sees it: an ``agents.Model`` over :class:`ChatModel`.

The SDK's own Chat Completions model would build requests, stream and time them itself.
This adapter instead asks the ChatModel the composition root built, so that the SDK
strategy talks to the same endpoint exactly as the agentic one does: the same client, the
first-token and idle timeouts, retries before the answer began, the learned tool-calling
mode (a non-streamed deciding turn for llama-cpp-python), context-window fitting, usage
estimates and the observability wrapper. The SDK decides the turns and runs the tool.

A turn's text goes into the run's answer as it arrives (the citation filter, the answer
deltas and the time to first token stay the run's); the SDK gets the whole turn at its end,
as the one ``response.completed`` event its run loop needs. The last turn the SDK's turn
limit allows offers the tool with ``tool_choice: "none"``, so the limit ends with an answer
rather than MaxTurnsExceeded; a model that asks for tools anyway has its calls dropped and
the run ends with finish reason ``max_tool_rounds``.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from agents import Model, ModelResponse, ModelSettings, ModelTracing, Tool
from agents.items import TResponseInputItem, TResponseOutputItem, TResponseStreamEvent
from agents.models.chatcmpl_converter import Converter
from agents.models.fake_id import FAKE_RESPONSES_ID
from agents.usage import Usage as SdkUsage
from openai.types.responses import (
    Response,
    ResponseCompletedEvent,
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

from service.agent.budget import answer_room, tools_tokens
from service.agent.prompts import assistant_tool_calls
from service.agent.run import Run, Turn
from service.agent.tool_turns import AGENT_TOOLS, tool_turn
from service.agent.tools import TOOL_NAME, ParsedCall, parse_call
from service.agent.turns import ModelTurns
from service.domain import ToolCallRecord

_TOOLS = AGENT_TOOLS


@dataclass(slots=True)
class ToolBudget:
    """The latest turn's calls: what their results may take of the window, between them,
    and the calls themselves."""

    allowance: int = 0
    calls: int = 1
    # The turn's calls, recorded PENDING by call id with their arguments as read, for the
    # tool to start. A call of a tool the agent does not have reaches the one tool too (the
    # SDK would end the whole run on an unknown name) and ends as an ERROR the model reads.
    asked: dict[str, tuple[ToolCallRecord, ParsedCall]] = field(default_factory=dict)

    def share(self) -> int:
        return max(0, self.allowance) // max(1, self.calls)


class RunModel(Model):
    """One run's model turns, as the SDK asks for them (one object per run)."""

    def __init__(
        self, run: Run, turns: ModelTurns, *, window: int, max_turns: int, max_tokens: int
    ) -> None:
        self._run = run
        self._turns = turns
        self._window = window
        self._max_turns = max_turns
        self._max_tokens = max_tokens
        self._tool_tokens = tools_tokens(turns.model.count_tokens, _TOOLS)
        self.budget = ToolBudget()
        self.turns_taken = 0
        self.finish_reason = ""
        self.model_name = ""
        # The model's reason when it said that the passages do not answer the question
        # (the no_answer tool or reply): the SDK sees a final turn, the run ends NO_ANSWER.
        self.declined: str | None = None

    async def get_response(  # noqa: PLR0917 (the SDK's signature)
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: Any,
        handoffs: list[Any],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None = None,
        conversation_id: str | None = None,
        prompt: Any = None,
    ) -> ModelResponse:
        output, usage = await self._turn(system_instructions, input, model_settings, tools)
        return ModelResponse(output=output, usage=usage, response_id=None)

    async def stream_response(  # noqa: PLR0917 (the SDK's signature; an async generator)
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: Any,
        handoffs: list[Any],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None = None,
        conversation_id: str | None = None,
        prompt: Any = None,
    ) -> AsyncIterator[TResponseStreamEvent]:
        output, _ = await self._turn(system_instructions, input, model_settings, tools)
        response = Response(
            id=FAKE_RESPONSES_ID,
            created_at=time.time(),
            model=self.model_name or self._turns.model.name,
            object="response",
            output=output,
            tool_choice="auto",
            tools=[],
            parallel_tool_calls=True,
            # The run counts usage itself (ModelTurns); the SDK's count is not reported.
            usage=None,
        )
        yield ResponseCompletedEvent(
            response=response, type="response.completed", sequence_number=0
        )

    async def _turn(
        self,
        system_instructions: str | None,
        items: str | list[TResponseInputItem],
        settings: ModelSettings,
        tools: Sequence[Tool],
    ) -> tuple[list[TResponseOutputItem], SdkUsage]:
        messages = chat_messages(system_instructions, items)
        temperature = settings.temperature if settings.temperature is not None else 0.0
        offered = any(tool.name == TOOL_NAME for tool in tools)
        prompt = self._turns.model.count_messages(messages)
        prompt += self._tool_tokens if offered else 0
        room = answer_room(self._window, self._max_tokens, prompt)
        before = self._turns.usage
        self.turns_taken += 1
        last = self.turns_taken >= self._max_turns
        turn: Turn | None
        if not offered or last:
            # The last turn the limit allows may not search again: the answer comes now.
            turn = await self._turns.stream(
                messages,
                temperature=temperature,
                tools=_TOOLS if offered else (),
                tool_choice="none" if offered else None,
                max_tokens=room,
            )
            if turn.tool_calls:
                self.finish_reason = "max_tool_rounds"  # its text so far is the answer
                turn.tool_calls = []
        else:
            turn = await tool_turn(
                self._run, self._turns, messages, temperature=temperature, max_tokens=room
            )
            if turn is None:  # the strategy learned the mode before it started the SDK
                raise AssertionError("the endpoint has no tool calling")
        if turn.declined is not None:
            self.declined = turn.declined
        if not turn.tool_calls and self.finish_reason != "max_tool_rounds":
            self.finish_reason = turn.finish_reason
        self.model_name = turn.model
        if turn.tool_calls:
            self._plan_results(messages, turn)
            # Every call of the turn is pending before the SDK starts the first.
            for call in turn.tool_calls:
                parsed = parse_call(call.name, call.arguments)
                record = await self._run.ask_call(call.id, call.name, parsed.recorded)
                self.budget.asked[call.id] = (record, parsed)
        used = self._turns.usage
        usage = SdkUsage(
            requests=1,
            input_tokens=used.prompt_tokens - before.prompt_tokens,
            output_tokens=used.completion_tokens - before.completion_tokens,
            total_tokens=used.total_tokens - before.total_tokens,
        )
        return self._output(turn), usage

    def _plan_results(self, messages: list[dict[str, Any]], turn: Turn) -> None:
        """What the turn's results may take: the window less the prompt so far (with the
        turn's calls) and the answer, shared between the calls."""
        calls = [(c.id, c.name, c.arguments) for c in turn.tool_calls]
        so_far = self._turns.model.count_messages(
            [*messages, assistant_tool_calls(turn.text, calls)]
        )
        self.budget.allowance = self._window - so_far - self._tool_tokens - self._max_tokens
        self.budget.calls = len(calls)

    def _output(self, turn: Turn) -> list[TResponseOutputItem]:
        output: list[TResponseOutputItem] = []
        if turn.text or not turn.tool_calls:
            text = ResponseOutputText(text=turn.text, type="output_text", annotations=[])
            output.append(
                ResponseOutputMessage(
                    id=FAKE_RESPONSES_ID,
                    content=[text],
                    role="assistant",
                    status="completed",
                    type="message",
                )
            )
        for call in turn.tool_calls:
            output.append(
                ResponseFunctionToolCall(
                    id=FAKE_RESPONSES_ID,
                    call_id=call.id,
                    name=TOOL_NAME,  # see ToolBudget.asked
                    arguments=call.arguments,
                    type="function_call",
                    status="completed",
                )
            )
        return output


def chat_messages(
    system_instructions: str | None, items: str | list[TResponseInputItem]
) -> list[dict[str, Any]]:
    """The SDK's input items as Chat Completions messages, the way the agentic strategy
    writes them (an assistant turn that only called tools has content "", not null: some
    local servers reject null)."""
    messages: list[dict[str, Any]] = []
    if system_instructions:
        messages.append({"role": "system", "content": system_instructions})
    for message in Converter.items_to_messages(items):
        converted = dict(message)
        if converted.get("role") == "assistant" and converted.get("content") is None:
            converted["content"] = ""
        messages.append(converted)
    return messages
