"""What the chunks (or the one response) of a model turn add up to."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from openai.types.chat import ChatCompletion, ChatCompletionChunk

from service.agent.model_errors import stream_ended_early
from service.domain import Usage


@dataclass(frozen=True, slots=True)
class TextDelta:
    text: str


@dataclass(frozen=True, slots=True)
class ToolCallRequest:
    """A complete tool call of the model; ``arguments`` is the raw text it wrote."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class TurnEnd:
    finish_reason: str
    tool_calls: list[ToolCallRequest]
    usage: Usage
    model: str


@dataclass
class _PartialCall:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


@dataclass
class Assembly:
    """The chunks of one streamed turn so far."""

    calls: dict[int, _PartialCall] = field(default_factory=dict)
    finish_reason: str = ""
    usage: Usage | None = None
    model: str = ""
    chunks: int = 0
    # The model has begun to answer (text, a tool call or a finish reason; not a role-only
    # chunk): from here on the idle timeout applies instead of the first-token one.
    started: bool = False
    texts: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "".join(self.texts)

    def add(self, chunk: ChatCompletionChunk) -> list[str]:
        """Takes in one chunk; returns its text, in order."""
        self.chunks += 1
        self.model = self.model or chunk.model
        if chunk.usage is not None:
            self.usage = Usage(chunk.usage.prompt_tokens, chunk.usage.completion_tokens)
        texts = []
        for choice in chunk.choices:
            self.finish_reason = choice.finish_reason or self.finish_reason
            delta = choice.delta
            if delta is None:
                continue
            for fragment in delta.tool_calls or []:
                _merge_fragment(self.calls, fragment)
            if delta.content:
                texts.append(delta.content)
        self.started = self.started or bool(texts or self.calls or self.finish_reason)
        self.texts.extend(texts)
        return texts

    def end(self, configured_model: str, estimate: Callable[[], Usage]) -> TurnEnd:
        """The turn's end; raises ModelStreamInterrupted if the model never said it ended.

        ``estimate`` stands in for usage the endpoint did not report (llama.cpp ignores
        ``stream_options.include_usage``): unknown is not zero.
        """
        if not self.finish_reason:
            raise stream_ended_early(self.chunks)
        requests = [
            ToolCallRequest(c.id or f"call_{uuid.uuid4().hex[:24]}", c.name, "".join(c.arguments))
            for _, c in sorted(self.calls.items())
        ]
        usage = self.usage if self.usage is not None else estimate()
        return TurnEnd(self.finish_reason, requests, usage, self.model or configured_model)


def from_completion(
    response: ChatCompletion, configured_model: str, estimate: Callable[[str], Usage]
) -> tuple[str, TurnEnd]:
    """The text and end of a non-streamed turn."""
    if not response.choices:
        raise stream_ended_early(0)
    choice = response.choices[0]
    message = choice.message
    calls: list[ToolCallRequest] = []
    for call in message.tool_calls or []:
        function = getattr(call, "function", None)  # custom (non-function) tools: none here
        if function is not None:
            ident = call.id or f"call_{uuid.uuid4().hex[:24]}"
            calls.append(ToolCallRequest(ident, function.name, function.arguments or ""))
    text = message.content or ""
    if response.usage is not None:
        usage = Usage(response.usage.prompt_tokens, response.usage.completion_tokens)
    else:
        usage = estimate(text)
    reason = choice.finish_reason or ("tool_calls" if calls else "stop")
    return text, TurnEnd(reason, calls, usage, response.model or configured_model)


def _merge_fragment(calls: dict[int, _PartialCall], fragment: Any) -> None:
    # Servers send id and name first and the arguments in pieces; a few omit the index,
    # in which case a fragment with an id starts a new call and one without continues it.
    index = fragment.index
    if not isinstance(index, int):
        index = len(calls) if fragment.id or not calls else max(calls)
    call = calls.setdefault(index, _PartialCall())
    if fragment.id and not call.id:
        call.id = fragment.id
    function = fragment.function
    if function is not None:
        if function.name and not call.name:
            call.name = function.name
        if function.arguments:
            call.arguments.append(function.arguments)
