"""A turn begins with a question and ends, atomically, with its answer; the completed turns
of a session are the history given to the model."""

from __future__ import annotations

from typing import Any

import pytest

from service.domain import ConversationTurn, ResponseStatus
from service.sessions import MAX_MESSAGE_CHARS, RunStatus, SessionStatus, SessionStore
from tests.sessions.support import START, FakeClock, OpenStore, result, roles_of, rows_of


async def ask(store: SessionStore, question: str, session_id: str | None = None, **kw: Any) -> str:
    """One complete turn; returns the session id."""
    handle = await store.begin_turn(
        session_id=session_id, owner="alice", question=question, request_id=f"req-{question}"
    )
    assert await store.complete_turn(handle.turn_id, result(f"answer to {question}", **kw))
    return handle.session_id


async def test_first_turn_creates_a_session_with_no_history(store: SessionStore) -> None:
    handle = await store.begin_turn(
        session_id=None, owner="alice", question="How do robots walk?", request_id="r1"
    )
    assert handle.new_session
    assert handle.history == []
    session = await store.get_session(handle.session_id, "alice")
    assert session.status is SessionStatus.NEW
    assert session.turn_count == 1
    [turn] = session.turns
    assert (turn.turn_id, turn.request_id) == (handle.turn_id, "r1")
    assert turn.question == "How do robots walk?"
    assert turn.status is RunStatus.ACTIVE
    assert turn.completed_at is None
    assert turn.answer == ""


async def test_an_empty_session_id_starts_a_new_session(store: SessionStore) -> None:
    handle = await store.begin_turn(session_id="", owner="alice", question="q", request_id="r")
    assert handle.new_session
    assert (await store.get_session(handle.session_id, "alice")).turn_count == 1


async def test_completed_turn_records_answer_sources_tool_calls_usage_and_timings(
    store: SessionStore, clock: FakeClock
) -> None:
    handle = await store.begin_turn(
        session_id=None, owner="alice", question="How do robots walk?", request_id="r1"
    )
    clock.advance(2)
    assert await store.complete_turn(handle.turn_id, result("Robots walk [1].", tool_calls=2))

    session = await store.get_session(handle.session_id, "alice")
    assert session.status is SessionStatus.ACTIVE
    [turn] = session.turns
    assert turn.status is RunStatus.COMPLETED
    assert turn.answer == "Robots walk [1]."
    assert turn.created_at == START
    assert turn.completed_at == clock.now
    [source] = turn.sources
    assert source.citation == 1
    assert source.hit.score == pytest.approx(0.82)
    assert source.hit.chunk.document_id == "module-01/page-01.md"
    assert source.hit.chunk.text == "Humanoid robots walk on two legs."
    assert [c.id for c in turn.tool_calls] == ["call-0", "call-1"]
    call = turn.tool_calls[0]
    assert call.name == "qdrant_retrieval"
    assert call.arguments == {"query": "how do robots walk", "limit": 5}
    assert call.result == {"hits": 1, "chunk_ids": ["c-1"]}
    assert call.started_at == START
    assert call.duration_s == pytest.approx(0.25)
    assert turn.confidence == pytest.approx(0.8)
    assert (turn.usage.prompt_tokens, turn.usage.completion_tokens) == (120, 30)
    assert turn.timings is not None
    assert turn.timings.total_s == pytest.approx(1.5)
    assert turn.timings.time_to_first_token_s == pytest.approx(0.4)
    assert await roles_of(store, handle.turn_id) == ["user", "assistant"]


async def test_next_turn_gets_the_earlier_turns_oldest_first(store: SessionStore) -> None:
    session_id = await ask(store, "one")
    await ask(store, "two", session_id)
    handle = await store.begin_turn(
        session_id=session_id, owner="alice", question="three", request_id="r3"
    )
    assert not handle.new_session
    assert handle.history == [
        ConversationTurn("one", "answer to one"),
        ConversationTurn("two", "answer to two"),
    ]
    assert (await store.get_session(session_id, "alice")).turn_count == 3


async def test_history_drops_the_oldest_turns_to_fit_the_token_budget(
    store: SessionStore,
) -> None:
    session_id = await ask(store, "q1")
    for question in ("q2", "q3", "q4"):
        await ask(store, question, session_id)

    def words(text: str) -> int:
        return len(text.split())

    # Each turn costs 1 + 3 words; 9 fit two turns, not three.
    assert await store.history(session_id, token_budget=9, count_tokens=words) == [
        ConversationTurn("q3", "answer to q3"),
        ConversationTurn("q4", "answer to q4"),
    ]
    assert await store.history(session_id, token_budget=3, count_tokens=words) == []
    assert len(await store.history(session_id, token_budget=10_000)) == 4


async def test_history_of_begin_turn_uses_the_stores_budget(open_store: OpenStore) -> None:
    store = await open_store(history_tokens=7, count_tokens=lambda text: len(text.split()))
    session_id = await ask(store, "q1")
    await ask(store, "q2", session_id)
    handle = await store.begin_turn(
        session_id=session_id, owner="alice", question="q3", request_id="r"
    )
    assert handle.history == [ConversationTurn("q2", "answer to q2")]


async def test_long_history_is_read_back_to_front_without_gaps(store: SessionStore) -> None:
    session_id = await ask(store, "q0")
    for i in range(1, 40):  # more than one read batch
        await ask(store, f"q{i}", session_id)
    history = await store.history(session_id, token_budget=10_000)
    assert [t.question for t in history] == [f"q{i}" for i in range(40)]
    recent = await store.history(session_id, token_budget=5 * 6, count_tokens=lambda _: 3)
    assert [t.question for t in recent] == [f"q{i}" for i in range(35, 40)]


async def test_a_no_answer_reply_is_a_completed_turn(store: SessionStore) -> None:
    session_id = await ask(store, "what is love", status=ResponseStatus.NO_ANSWER)
    [turn] = (await store.get_session(session_id, "alice")).turns
    assert turn.status is RunStatus.COMPLETED
    assert len(await store.history(session_id, token_budget=1000)) == 1


@pytest.mark.parametrize(
    ("outcome", "expected"),
    [
        (ResponseStatus.ERROR, RunStatus.ERROR),
        (ResponseStatus.TIMEOUT, RunStatus.TIMEOUT),
        (ResponseStatus.CANCELLED, RunStatus.CANCELLED),
    ],
)
async def test_a_failed_run_is_recorded_but_not_part_of_the_history(
    store: SessionStore, outcome: ResponseStatus, expected: RunStatus
) -> None:
    handle = await store.begin_turn(session_id=None, owner="alice", question="q", request_id="r")
    assert await store.complete_turn(handle.turn_id, result("partial", status=outcome))
    session = await store.get_session(handle.session_id, "alice")
    [turn] = session.turns
    assert turn.status is expected
    assert turn.error == outcome.value
    assert session.status is SessionStatus.NEW  # no turn has completed yet
    assert await store.history(handle.session_id, token_budget=1000) == []


@pytest.mark.parametrize("status", ["error", "cancelled", "timeout"])
async def test_abort_ends_the_turn_without_messages_and_frees_the_session(
    store: SessionStore, status: str
) -> None:
    handle = await store.begin_turn(session_id=None, owner="alice", question="q", request_id="r")
    assert await store.abort_turn(handle.turn_id, status, "model endpoint failed")
    [turn] = (await store.get_session(handle.session_id, "alice")).turns
    assert turn.status == status
    assert turn.error == "model endpoint failed"
    assert turn.completed_at is not None
    assert turn.timings is None
    assert await roles_of(store, handle.turn_id) == []
    assert (await rows_of(store, handle.session_id))["responses"] == 0
    # The session takes the next question.
    await store.begin_turn(
        session_id=handle.session_id, owner="alice", question="q2", request_id="r2"
    )


async def test_a_turn_ends_once(store: SessionStore) -> None:
    handle = await store.begin_turn(session_id=None, owner="alice", question="q", request_id="r")
    assert await store.abort_turn(handle.turn_id, "cancelled")
    assert not await store.complete_turn(handle.turn_id, result())
    assert not await store.abort_turn(handle.turn_id, "error")
    assert not await store.complete_turn("no-such-turn", result())
    [turn] = (await store.get_session(handle.session_id, "alice")).turns
    assert turn.status is RunStatus.CANCELLED
    assert await roles_of(store, handle.turn_id) == []


async def test_messages_longer_than_the_limit_are_cut_with_a_marker(store: SessionStore) -> None:
    long_question = "why " * 4000
    handle = await store.begin_turn(
        session_id=None, owner="alice", question=long_question, request_id="r"
    )
    assert await store.complete_turn(handle.turn_id, result("x" * 25_000))
    [turn] = (await store.get_session(handle.session_id, "alice")).turns
    assert len(turn.question) <= MAX_MESSAGE_CHARS
    assert len(turn.answer) == MAX_MESSAGE_CHARS
    assert turn.answer.startswith("x" * 9000)
    assert turn.answer.endswith("characters]")
    assert "truncated" in turn.question
