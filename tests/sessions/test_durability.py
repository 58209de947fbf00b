"""What survives a restart, a crash or a cancellation: the conversation so far, and every
unfinished turn marked as failed, never half a turn."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from sqlalchemy import select

from service.domain import ConversationTurn
from service.sessions import RunStatus, SessionStore
from service.sessions import schema as tables
from service.sessions.engine import create_engine, writer
from tests.sessions.support import Database, FakeClock, OpenStore, result, roles_of, rows_of


async def test_a_restart_keeps_the_conversation(open_store: OpenStore) -> None:
    store = await open_store()
    first = await store.begin_turn(session_id=None, owner="alice", question="q1", request_id="r")
    assert await store.complete_turn(first.turn_id, result("a1"))
    before = await store.get_session(first.session_id, "alice")
    await store.close()

    reopened = await open_store()
    assert await reopened.get_session(first.session_id, "alice") == before
    handle = await reopened.begin_turn(
        session_id=first.session_id, owner="alice", question="q2", request_id="r"
    )
    assert handle.history == [ConversationTurn("q1", "a1")]


async def test_shutting_down_mid_answer_marks_the_turn_failed(open_store: OpenStore) -> None:
    store = await open_store()
    done = await store.begin_turn(session_id=None, owner="alice", question="q1", request_id="r")
    assert await store.complete_turn(done.turn_id, result("a1"))
    running = await store.begin_turn(
        session_id=done.session_id, owner="alice", question="q2", request_id="r"
    )
    await store.close()

    reopened = await open_store()
    turns = (await reopened.get_session(done.session_id, "alice")).turns
    assert [t.status for t in turns] == [RunStatus.COMPLETED, RunStatus.ERROR]
    assert "shut down" in turns[1].error
    assert await roles_of(reopened, running.turn_id) == []
    assert (await rows_of(reopened, done.session_id))["responses"] == 1
    # The session is free for the next question, whose history skips the failed turn.
    handle = await reopened.begin_turn(
        session_id=done.session_id, owner="alice", question="q3", request_id="r"
    )
    assert handle.history == [ConversationTurn("q1", "a1")]


async def test_a_crash_mid_answer_leaves_a_failed_turn_not_half_of_one(
    database: Database, open_store: OpenStore, clock: FakeClock
) -> None:
    # A process that dies without closing the store: nothing gets to mark its turn.
    crashed = SessionStore(
        create_engine(database.url, connect_args=database.connect_args),
        ttl_s=1800,
        stale_turn_s=600,
        clock=clock,
    )
    await crashed.start()
    handle = await crashed.begin_turn(session_id=None, owner="alice", question="q", request_id="r")
    await crashed.engine.dispose()

    reopened = await open_store(stale_turn_s=600)
    [turn] = (await reopened.get_session(handle.session_id, "alice")).turns
    if database.backend == "sqlite":
        # One process owns a SQLite file: what was running when it opens is dead.
        assert turn.status is RunStatus.ERROR
        assert "restarted" in turn.error
    else:
        # Other replicas may still be answering: only the stale limit settles it.
        assert turn.status is RunStatus.ACTIVE
        clock.advance(601)
        await reopened.begin_turn(
            session_id=handle.session_id, owner="alice", question="q2", request_id="r"
        )
        turn = (await reopened.get_session(handle.session_id, "alice")).turns[0]
        assert turn.status is RunStatus.ERROR
    assert await roles_of(reopened, handle.turn_id) == []


async def test_a_cancelled_caller_still_gets_its_turn_recorded(open_store: OpenStore) -> None:
    store = await open_store()
    handle = await store.begin_turn(session_id=None, owner="alice", question="q", request_id="r")
    recording = asyncio.create_task(store.complete_turn(handle.turn_id, result("a")))
    await asyncio.sleep(0)  # the write has started
    recording.cancel()
    with pytest.raises(asyncio.CancelledError):  # the caller's cancellation reaches it
        await recording
    await store.close()  # waits for the write that outlived its caller

    reopened = await open_store()
    [turn] = (await reopened.get_session(handle.session_id, "alice")).turns
    assert turn.status is RunStatus.COMPLETED
    assert await roles_of(reopened, handle.turn_id) == ["user", "assistant"]


@asynccontextmanager
async def locked(database: Database, session_id: str) -> AsyncIterator[None]:
    """Holds the session's row (PostgreSQL) or the database's write lock (SQLite) from
    another connection: a write to the session waits, started but not finished."""
    engine = create_engine(database.url, connect_args=database.connect_args)
    try:
        async with writer(engine).begin() as connection:
            query = select(tables.sessions).where(tables.sessions.c.id == session_id)
            await connection.execute(query.with_for_update())
            yield
    finally:
        await engine.dispose()


async def completed_session(store: SessionStore) -> str:
    handle = await store.begin_turn(session_id=None, owner="alice", question="q0", request_id="r")
    assert await store.complete_turn(handle.turn_id, result("a0"))
    return handle.session_id


async def test_a_cancelled_begin_never_leaves_its_turn_running(
    database: Database, open_store: OpenStore
) -> None:
    store = await open_store()
    started_in, queued_in = await completed_session(store), await completed_session(store)

    def begin(session_id: str) -> asyncio.Task[Any]:
        return asyncio.create_task(
            store.begin_turn(session_id=session_id, owner="alice", question="q1", request_id="r")
        )

    async with locked(database, started_in):
        started = begin(started_in)
        await asyncio.sleep(0.3)  # the writer has taken it and waits for the lock
        queued = begin(queued_in)
        await asyncio.sleep(0)  # submitted, not started
        started.cancel()
        queued.cancel()
        for task in (started, queued):
            with pytest.raises(asyncio.CancelledError):  # the callers see their cancellation
                await task
    await store.close()  # waits for the writes the callers left behind

    reopened = await open_store()
    # The started begin went in, and was then ended for the caller that had gone ...
    turns = (await reopened.get_session(started_in, "alice")).turns
    assert [(t.status, t.error) for t in turns[1:]] == [
        (RunStatus.CANCELLED, "the caller went away before the answer began")
    ]
    # ... the queued one was dropped before it began.
    assert len((await reopened.get_session(queued_in, "alice")).turns) == 1
    for session_id in (started_in, queued_in):  # neither session is left busy
        await reopened.begin_turn(
            session_id=session_id, owner="alice", question="q", request_id="r"
        )


async def test_cancelled_callers_never_cut_their_turns_short(open_store: OpenStore) -> None:
    store = await open_store()
    handles = [
        await store.begin_turn(session_id=None, owner="alice", question=f"q{i}", request_id="r")
        for i in range(50)
    ]
    recording = [
        asyncio.create_task(store.complete_turn(h.turn_id, result(f"a{i}")))
        for i, h in enumerate(handles)
    ]
    for i, task in enumerate(recording):
        await asyncio.sleep(0.001 * (i % 3))  # cancelled while queued, running or done
        task.cancel()
    await asyncio.gather(*recording, return_exceptions=True)
    await store.close()

    reopened = await open_store()
    for i, handle in enumerate(handles):
        [turn] = (await reopened.get_session(handle.session_id, "alice")).turns
        assert (turn.status, turn.answer) == (RunStatus.COMPLETED, f"a{i}")
