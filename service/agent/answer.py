"""The answer as the caller sees it: filtered model text, streamed as deltas."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from service.agent.citations import CitationFilter
from service.agent.declines import declined_message
from service.agent.events import AgentEvent, AnswerDelta, CitationFound
from service.agent.prompts import NO_ANSWER_MESSAGE
from service.agent.sources import SourceBook
from service.agent.spans import sentence_spans, settled, spans_of_sentence
from service.domain import CitationSpan


class AnswerWriter:
    """Takes model text, drops citations of sources that do not exist, emits the rest."""

    def __init__(
        self, book: SourceBook, emit: Callable[[AgentEvent], Awaitable[None]], started: float
    ) -> None:
        self.citations = CitationFilter(book)
        self._book = book
        self._emit = emit
        # The citation spans sent so far, and where the first sentence not yet settled starts.
        self.spans: list[CitationSpan] = []
        self._unsettled = 0
        self._started = started
        self._text = ""
        self.first_text_s: float | None = None

    @property
    def text(self) -> str:
        return self._text

    async def write(self, model_text: str) -> None:
        await self._say(self.citations.feed(model_text))

    async def end(self) -> None:
        await self._say(self.citations.finish())
        await self._cite(final=True)

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
        self._text += text
        await self._emit(AnswerDelta(text))
        await self._cite(final=False)

    async def _cite(self, *, final: bool) -> None:
        """Sends the citation spans of the sentences that have become complete."""
        answer = self.text
        tail = answer[self._unsettled :]
        spans = sentence_spans(tail)
        count = len(spans) if final else settled(tail)
        for start, end in spans[:count]:
            span = (self._unsettled + start, self._unsettled + end)
            for found in spans_of_sentence(answer, span, self._passage):
                self.spans.append(found)
                await self._emit(CitationFound(found))
        if count:
            self._unsettled += spans[count - 1][1]

    def _passage(self, number: int) -> str | None:
        return self._book.get(number).hit.chunk.text if number in self._book else None
