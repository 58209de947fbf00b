"""Model turns of one run: streamed into the answer, or asked whole to decide on tools."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

from service.agent.answer import AnswerWriter
from service.agent.model import ChatModel, TextDelta, ToolCallRequest, TurnEnd
from service.domain import Deadline, Usage


@dataclass(slots=True)
class Turn:
    """One model turn: everything it wrote (unfiltered), its tool calls, how it ended."""

    text: str
    tool_calls: list[ToolCallRequest]
    finish_reason: str
    model: str


class ModelTurns:
    """Asks the model, adds up usage, and writes streamed text into the answer."""

    def __init__(self, model: ChatModel, answer: AnswerWriter, deadline: Deadline) -> None:
        self.model = model
        self._answer = answer
        self._deadline = deadline
        self.usage = Usage()
        self.model_name = model.name  # until the endpoint names itself

    async def stream(
        self,
        messages: Sequence[dict[str, Any]],
        *,
        temperature: float,
        tools: Sequence[dict[str, Any]] = (),
        tool_choice: str | None = None,
        max_tokens: int | None = None,
    ) -> Turn:
        """Streams one turn into the answer as it comes.

        Text the model writes before asking for tools in the same turn is part of the
        answer too: it has streamed before the turn's end says that tools come next.
        """
        text: list[str] = []
        stream = self.model.stream(
            messages,
            temperature=temperature,
            deadline=self._deadline,
            tools=tools,
            tool_choice=tool_choice,
            max_tokens=max_tokens,
        )
        async with aclosing(stream) as events:
            async for event in events:
                if isinstance(event, TextDelta):
                    if not text and self._answer.text:
                        await self._answer.write("\n\n")  # a later turn starts a new paragraph
                    await self._answer.write(event.text)
                    text.append(event.text)
                    continue
                return self._ended("".join(text), event)
        raise AssertionError("a model turn ends with TurnEnd")  # the ChatModel contract

    async def decide(
        self,
        messages: Sequence[dict[str, Any]],
        *,
        temperature: float,
        tools: Sequence[dict[str, Any]],
        max_tokens: int | None = None,
    ) -> Turn:
        """A non-streamed turn offering tools, for servers that cannot stream tool calls.
        Its text is not written: the caller decides what becomes of it."""
        completion = await self.model.complete(
            messages,
            temperature=temperature,
            deadline=self._deadline,
            tools=tools,
            tool_choice="auto",
            max_tokens=max_tokens,
        )
        return self._ended(completion.text, completion.end)

    def _ended(self, text: str, end: TurnEnd) -> Turn:
        self.usage += end.usage
        self.model_name = end.model
        return Turn(text, end.tool_calls, end.finish_reason, end.model)
