"""The answer as the caller sees it: filtered model text, streamed as deltas."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from service.agent.citations import CitationFilter
from service.agent.declines import declined_message
from service.agent.events import AgentEvent, AnswerDelta
from service.agent.prompts import NO_ANSWER_MESSAGE
from service.agent.sources import SourceBook


class AnswerWriter:
    """Takes model text, drops citations of sources that do not exist, emits the rest."""

    def __init__(
        self, book: SourceBook, emit: Callable[[AgentEvent], Awaitable[None]], started: float
    ) -> None:
        self.citations = CitationFilter(book)
        self._emit = emit
        self._started = started
        self._parts: list[str] = []
        self.first_text_s: float | None = None

    @property
    def text(self) -> str:
        return "".join(self._parts)

    async def write(self, model_text: str) -> None:
        await self._say(self.citations.feed(model_text))

    async def end(self) -> None:
        await self._say(self.citations.finish())

    async def no_answer(self) -> None:
        await self.end()
        await self._say(NO_ANSWER_MESSAGE)

    async def declined(self, reason: str) -> None:
        """The model's own "not in the documents", after whatever text already streamed."""
        await self.end()
        await self._say(("\n\n" if self.text else "") + declined_message(reason))

    async def _say(self, text: str) -> None:
        if not text:
            return
        if self.first_text_s is None:
            self.first_text_s = time.perf_counter() - self._started
        self._parts.append(text)
        await self._emit(AnswerDelta(text))
