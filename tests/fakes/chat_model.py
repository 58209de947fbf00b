"""An in-memory ChatModel for the agent's unit tests: no HTTP, scripted turns, every call
recorded. The HTTP-level fake (openai_server.py) stays for what HTTP is the point of:
transport faults, SSE parsing, retries.
"""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass, field
from typing import Any

from service.agent.capabilities import Capabilities, ToolCalling, count_messages, estimate_tokens
from service.agent.model import Completion, TextDelta, ToolCallRequest, TurnEnd
from service.agent.model_errors import EmptyStream
from service.domain import Deadline, Usage
from service.errors import RagAgentError


@dataclass
class Scripted:
    """One turn: text and/or tool calls; ``error`` raised instead; ``empty`` = HTTP 200 and
    no chunk (streamed only: llama-cpp-python's answer to streamed tool calls)."""

    text: str = ""
    calls: list[ToolCallRequest] = field(default_factory=list)
    error: RagAgentError | None = None
    empty_when_streamed: bool = False
    usage: Usage | None = None


@dataclass
class Call:
    kind: str  # "stream" or "complete"
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    tool_choice: str | None
    max_tokens: int | None


class FakeChatModel:
    """Answers from a queue of scripted turns; records every call."""

    def __init__(
        self,
        *turns: Scripted,
        window: int = 8192,
        max_tokens: int = 256,
        tool_calling: ToolCalling | None = None,
    ) -> None:
        self.script: deque[Scripted] = deque(turns)
        self.calls: list[Call] = []
        self._capabilities = Capabilities(tool_calling, window)
        self._max_tokens = max_tokens

    @property
    def name(self) -> str:
        return "fake-chat"

    @property
    def max_tokens(self) -> int:
        return self._max_tokens

    @property
    def capabilities(self) -> Capabilities:
        return self._capabilities

    def count_tokens(self, text: str) -> int:
        return estimate_tokens(text)

    def count_messages(self, messages: Sequence[dict[str, Any]]) -> int:
        return count_messages(estimate_tokens, messages)

    async def context_tokens(self) -> int:
        assert self._capabilities.context_tokens is not None
        return self._capabilities.context_tokens

    def configured(self, *, model: str | None = None, max_tokens: int | None = None) -> Any:
        """The same script and call log; only the answer's token limit can change here."""
        if max_tokens is not None:
            self._max_tokens = max_tokens
        return self

    def _next(self, kind: str, messages: Sequence[dict[str, Any]], **options: Any) -> Scripted:
        self.calls.append(
            Call(
                kind,
                [dict(m) for m in messages],
                list(options.get("tools") or ()),
                options.get("tool_choice"),
                options.get("max_tokens"),
            )
        )
        if not self.script:
            raise AssertionError("FakeChatModel: no scripted turn left")
        turn = self.script.popleft()
        if turn.error is not None:
            raise turn.error
        return turn

    def _end(self, turn: Scripted) -> TurnEnd:
        reason = "tool_calls" if turn.calls else "stop"
        usage = turn.usage or Usage(0, estimate_tokens(turn.text), estimated=True)
        return TurnEnd(reason, list(turn.calls), usage, "fake-chat")

    async def stream(
        self,
        messages: Sequence[dict[str, Any]],
        *,
        temperature: float,
        deadline: Deadline,
        tools: Sequence[dict[str, Any]] = (),
        tool_choice: str | None = None,
        max_tokens: int | None = None,
    ) -> AsyncGenerator[TextDelta | TurnEnd, None]:
        turn = self._next(
            "stream", messages, tools=tools, tool_choice=tool_choice, max_tokens=max_tokens
        )
        if turn.empty_when_streamed:
            raise EmptyStream("empty stream")
        # Word by word; every word but the first keeps the space before it (a word equal to
        # the first one is no exception: the deltas add up to the text).
        for index, word in enumerate(turn.text.split(" ")):
            yield TextDelta(word if index == 0 else " " + word)
        yield self._end(turn)

    async def complete(
        self,
        messages: Sequence[dict[str, Any]],
        *,
        temperature: float,
        deadline: Deadline,
        tools: Sequence[dict[str, Any]] = (),
        tool_choice: str | None = None,
        max_tokens: int | None = None,
    ) -> Completion:
        turn = self._next(
            "complete", messages, tools=tools, tool_choice=tool_choice, max_tokens=max_tokens
        )
        return Completion(turn.text, self._end(turn))
