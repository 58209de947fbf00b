"""Answer deltas that queue while the caller's stream is busy are sent as one.

The model's chunks reach the consumer through the run's relay. When the model writes
faster than the stream sends (a burst from the socket, a loaded server), the deltas queued
behind the one being taken go out with it, as one message: each message costs the same
CPU whatever its length. What may never change: the text, the first delta's timing, and
the order of citations and tool events relative to the text.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Sequence
from typing import Any

from service.agent import AnswerDelta, CitationFound
from service.agent.model import TextDelta, TurnEnd
from service.domain import Deadline, ResponseStatus
from tests.agent.support import check_events, collect, completed, request
from tests.agent.test_model_capabilities import QUESTION, agent_with
from tests.fakes.chat_model import FakeChatModel, Scripted

ANSWER = (
    "WABOT-1 was built at Waseda University in 1973 [1]. It walked on two legs [1]. "
    "Its builders went on to build more robots."
)


class PacedModel(FakeChatModel):
    """Writes each word of its answer after ``pause`` s, or, with ``gate``, its first word
    and then nothing more until the gate opens."""

    def __init__(
        self, *turns: Scripted, pause: float = 0.0, gate: asyncio.Event | None = None
    ) -> None:
        super().__init__(*turns)
        self.pause = pause
        self.gate = gate
        self.written = 0

    async def stream(
        self, messages: Sequence[dict[str, Any]], **options: Any
    ) -> AsyncGenerator[TextDelta | TurnEnd, None]:
        async for event in super().stream(messages, **options):
            if isinstance(event, TextDelta) and self.written:
                if self.gate is not None:
                    await self.gate.wait()
                await asyncio.sleep(self.pause)
            self.written += isinstance(event, TextDelta)
            yield event


async def test_deltas_written_at_once_go_as_fewer_messages_with_the_same_text() -> None:
    model = FakeChatModel(Scripted(text=ANSWER))  # every word at once, as from a burst
    agent, _ = agent_with(model, strategy="retrieve_first")
    events = await collect(agent.run(request(QUESTION)))
    check_events(events)  # citations after the text they cite, the deltas add up to it
    result = completed(events).result
    assert result.status is ResponseStatus.SUCCESS
    deltas = [e.text for e in events if isinstance(e, AnswerDelta)]
    assert "".join(deltas) == ANSWER == result.answer
    assert len(deltas) < len(ANSWER.split(" ")) // 4, deltas
    citations = [e for e in events if isinstance(e, CitationFound)]
    assert len(citations) == 2, "each citation is still sent after its sentence"


async def test_a_citation_is_never_merged_across() -> None:
    model = FakeChatModel(Scripted(text=ANSWER))
    agent, _ = agent_with(model, strategy="retrieve_first")
    events = await collect(agent.run(request(QUESTION)))
    kinds = [type(e).__name__ for e in events if isinstance(e, AnswerDelta | CitationFound)]
    # The first sentence's citation comes once the second has begun (it settles then):
    # text, its citation, text, the next citation, the rest.
    assert kinds[:2] == ["AnswerDelta", "CitationFound"], kinds
    assert kinds.count("AnswerDelta") >= 2, "text after a citation is a delta of its own"


async def test_a_model_slower_than_the_stream_has_every_chunk_sent_on_its_own() -> None:
    model = PacedModel(Scripted(text=ANSWER), pause=0.005)
    agent, _ = agent_with(model, strategy="retrieve_first")
    events = await collect(agent.run(request(QUESTION)))
    check_events(events)
    deltas = [e.text for e in events if isinstance(e, AnswerDelta)]
    assert len(deltas) == len(ANSWER.split(" ")), "nothing queued, so nothing merged"
    assert "".join(deltas) == ANSWER


async def test_the_first_delta_is_not_held_back_for_company() -> None:
    gate = asyncio.Event()
    model = PacedModel(Scripted(text=ANSWER), gate=gate)
    agent, _ = agent_with(model, strategy="retrieve_first")
    run = agent.run(request(QUESTION))
    try:
        # The model has written one word and waits: that word arrives by itself.
        first = await asyncio.wait_for(_first_delta(run), 5)
        assert first.text == "WABOT-1"
        assert model.written == 1
        gate.set()
        rest = [e async for e in run]
    finally:
        await run.aclose()
    assert completed(rest).result.answer == ANSWER


async def _first_delta(events: AsyncGenerator[Any, None]) -> AnswerDelta:
    async for event in events:
        if isinstance(event, AnswerDelta):
            return event
    raise AssertionError("no answer delta")


async def test_the_fake_model_streams_its_text_back_exactly() -> None:
    # The deltas these tests count come from it: a word equal to the first keeps its space.
    text = "the robot and the arm"
    model = FakeChatModel(Scripted(text=text))
    stream = model.stream([], temperature=0.0, deadline=Deadline())
    words = [e.text async for e in stream if isinstance(e, TextDelta)]
    assert words == ["the", " robot", " and", " the", " arm"]
    assert "".join(words) == text
