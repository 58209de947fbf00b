"""Model turns of one run: streamed into the answer, or asked whole to decide on tools."""

from __future__ import annotations

import time
from collections.abc import Sequence
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

from service.agent.answer import AnswerWriter
from service.agent.declines import (
    NO_ANSWER_TOOL_NAME,
    Opening,
    calls_of_text,
    classify,
    reason_of_call,
    reason_of_text,
)
from service.agent.latency import EndpointLatency
from service.agent.model import ChatModel, TextDelta, ToolCallRequest, TurnEnd
from service.domain import Deadline, Usage


@dataclass(slots=True)
class Turn:
    """One model turn: everything it wrote (unfiltered), its tool calls, how it ended.

    ``declined``: the model said that the passages do not answer the question (the
    no_answer tool or a ``NO_ANSWER:`` reply), with this reason; None when it did not.
    ``answered``: its text is an answer (it was, or may be, written into the answer); False
    for a decline and for a tool call written as text (see :mod:`declines`), whose calls
    are in ``tool_calls``.
    """

    text: str
    tool_calls: list[ToolCallRequest]
    finish_reason: str
    model: str
    declined: str | None = None
    answered: bool = True


class ModelTurns:
    """Asks the model, adds up usage, and writes streamed text into the answer."""

    def __init__(
        self,
        model: ChatModel,
        answer: AnswerWriter,
        deadline: Deadline,
        latency: EndpointLatency | None = None,
    ) -> None:
        """``latency``: where each turn's timing is kept (the agent's, across runs)."""
        self.model = model
        self._latency = latency
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
        opening = Opening()  # a decline or a tool call as text is never written
        wrote = False
        began = time.perf_counter()
        first: float | None = None
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
                if first is None:
                    first = time.perf_counter()
                if isinstance(event, TextDelta):
                    text.append(event.text)
                    wrote = await self._write(opening.feed(event.text), wrote)
                    continue
                await self._write(opening.finish(), wrote)
                if self._latency is not None:
                    self._latency.observe(
                        self.model.name,
                        (first or began) - began,
                        event.usage.completion_tokens,
                        time.perf_counter() - (first or began),
                    )
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
        began = time.perf_counter()
        completion = await self.model.complete(
            messages,
            temperature=temperature,
            deadline=self._deadline,
            tools=tools,
            tool_choice="auto",
            max_tokens=max_tokens,
        )
        if self._latency is not None:  # its first text comes with its end
            self._latency.observe(self.model.name, time.perf_counter() - began)
        return self._ended(completion.text, completion.end)

    async def _write(self, text: str, wrote: bool) -> bool:
        """Writes a turn's answer text; True once the turn wrote any."""
        if not text:
            return wrote
        if not wrote and self._answer.text:
            await self._answer.write("\n\n")  # a later turn starts a new paragraph
        await self._answer.write(text)
        return True

    def _ended(self, text: str, end: TurnEnd) -> Turn:
        self.usage += end.usage
        self.model_name = end.model
        return read_turn(text, end)


def read_turn(text: str, end: TurnEnd) -> Turn:
    """The turn as the run takes it: a no_answer call or reply is a decline (unless the
    model also searched: then it searches), a tool call written as text is a tool call."""
    kind = classify(text)
    calls = list(end.tool_calls)
    declines = [c for c in calls if c.name == NO_ANSWER_TOOL_NAME]
    calls = [c for c in calls if c.name != NO_ANSWER_TOOL_NAME]
    if not calls and kind == "tool_text":
        calls = calls_of_text(text)
        declines += [c for c in calls if c.name == NO_ANSWER_TOOL_NAME]
        calls = [c for c in calls if c.name != NO_ANSWER_TOOL_NAME]
    declined: str | None = None
    if not calls:
        if declines:
            declined = reason_of_call(declines[0].arguments)
        elif kind == "no_answer":
            declined = reason_of_text(text)
    answered = kind in ("text", None)
    return Turn(text, calls, end.finish_reason, end.model, declined, answered)
