"""What the chunks (or the one response) of a model turn add up to.

Streamed chunks arrive as the JSON objects the endpoint wrote, not as the SDK's typed
models: building a ``ChatCompletionChunk`` per chunk costs more CPU than the rest of an
answer's relay (about three times the relay's own CPU for a 150-chunk answer; see
``make bench BENCH=overhead``). JSON from the wire is checked here as it is read: a chunk
whose shape is not a Chat Completions chunk is the endpoint's fault and ends the turn with
:class:`~service.agent.model_errors.MalformedChunk`, never an AttributeError.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TypeGuard

from openai.types.chat import ChatCompletion

from service.agent.model_errors import MalformedChunk, stream_ended_early
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

    def add(self, chunk: object) -> list[str]:
        """Takes in one chunk (the decoded JSON); returns its text, in order."""
        if not _is_object(chunk):
            raise MalformedChunk.of("a chunk that is not an object", chunk)
        self.chunks += 1
        model = chunk.get("model")
        if not self.model and isinstance(model, str):
            self.model = model
        usage = chunk.get("usage")
        if usage is not None:
            self.usage = _usage(usage)
        choices = chunk.get("choices")
        if choices is None:
            choices = ()
        elif not isinstance(choices, list):
            raise MalformedChunk.of("choices that are not a list", choices)
        texts = [text for choice in choices if (text := self._take(choice))]
        self.started = self.started or bool(texts or self.calls or self.finish_reason)
        self.texts.extend(texts)
        return texts

    def _take(self, choice: object) -> str:
        """One choice of a chunk: its finish reason and tool call fragments kept, its text
        returned."""
        if not _is_object(choice):
            raise MalformedChunk.of("a choice that is not an object", choice)
        reason = choice.get("finish_reason")
        if reason:
            self.finish_reason = _text(reason, "finish_reason")
        delta = choice.get("delta")
        if delta is None:
            return ""
        if not _is_object(delta):
            raise MalformedChunk.of("a delta that is not an object", delta)
        fragments = delta.get("tool_calls")
        if fragments:
            if not isinstance(fragments, list):
                raise MalformedChunk.of("tool_calls that are not a list", fragments)
            for fragment in fragments:
                _merge_fragment(self.calls, fragment)
        content = delta.get("content")
        return _text(content, "content") if content else ""

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


def _merge_fragment(calls: dict[int, _PartialCall], fragment: object) -> None:
    # Servers send id and name first and the arguments in pieces; a few omit the index,
    # in which case a fragment with an id starts a new call and one without continues it.
    if not isinstance(fragment, Mapping):
        raise MalformedChunk.of("a tool call fragment that is not an object", fragment)
    ident = fragment.get("id")
    index = fragment.get("index")
    if not isinstance(index, int) or isinstance(index, bool):
        index = len(calls) if ident or not calls else max(calls)
    call = calls.setdefault(index, _PartialCall())
    if ident and not call.id:
        call.id = _text(ident, "tool call id")
    function = fragment.get("function")
    if function is None:
        return
    if not isinstance(function, Mapping):
        raise MalformedChunk.of("a tool call function that is not an object", function)
    name = function.get("name")
    if name and not call.name:
        call.name = _text(name, "tool call name")
    arguments = function.get("arguments")
    if arguments:
        call.arguments.append(_text(arguments, "tool call arguments"))


def _is_object(value: object) -> TypeGuard[Mapping[str, object]]:
    """A JSON object: decoded JSON holds plain dicts, checked first because an isinstance
    check against the Mapping ABC costs several times as much, three times per chunk."""
    return type(value) is dict or isinstance(value, Mapping)


def _text(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise MalformedChunk.of(f"a {what} that is not a string", value)
    return value


def _usage(usage: object) -> Usage:
    if isinstance(usage, Mapping):
        prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
        if _count(prompt) and _count(completion):
            return Usage(prompt, completion)
    raise MalformedChunk.of("a usage without token counts", usage)


def _count(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
