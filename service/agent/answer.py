"""The answer as the caller sees it: filtered model text, streamed as deltas."""

from __future__ import annotations

import re
import time
from collections.abc import Awaitable, Callable

from service.agent.citations import CitationFilter
from service.agent.declines import declined_message
from service.agent.events import AgentEvent, AnswerDelta, CitationFound
from service.agent.prompts import NO_ANSWER_MESSAGE
from service.agent.sources import SourceBook
from service.agent.spans import has_break, sentence_spans, settled, spans_of_sentence
from service.domain import CitationSpan

_CONTENT = re.compile(r"\S")


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
        # Whether the unsettled text holds a sentence break yet: until it does, no sentence
        # of it can settle, and it is not split again for every delta (a stream without a
        # break, a long code line or a model that never stops a sentence, would be split in
        # quadratic time: 52% of a 2,000-chunk relay's CPU).
        self._broken = False
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
        await self._cite(final=False, added=len(text))

    async def _cite(self, *, final: bool, added: int = 0) -> None:
        """Sends the citation spans of the sentences that have become complete (``added``:
        how many characters the answer just grew by)."""
        answer = self.text
        if not final and not self._broken:
            # A new break lies in the new text, or starts with the character before it.
            start = max(self._content_start(), len(answer) - added - 1)
            self._broken = has_break(answer, start)
            if not self._broken:
                return
        tail = answer[self._unsettled :]
        spans = sentence_spans(tail)
        count = len(spans) if final else settled(tail, spans)
        for start, end in spans[:count]:
            span = (self._unsettled + start, self._unsettled + end)
            for found in spans_of_sentence(answer, span, self._passage):
                self.spans.append(found)
                await self._emit(CitationFound(found))
        if count:
            self._unsettled += spans[count - 1][1]
            self._broken = has_break(answer, self._content_start())

    def _content_start(self) -> int:
        """Where the unsettled text's first sentence starts (the break before it excluded)."""
        found = _CONTENT.search(self.text, self._unsettled)
        return found.start() if found is not None else len(self.text)

    def _passage(self, number: int) -> str | None:
        return self._book.get(number).hit.chunk.text if number in self._book else None
