"""One turn at a time per session: a second request on a busy session is refused with
ABORTED (SessionBusy), never interleaved, whichever replica it reaches. A turn abandoned by
a crashed replica stops blocking the session after the stale limit."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from service.errors import SessionBusy
from service.sessions import RunStatus, SessionStore
from tests.sessions.support import FakeClock, OpenStore, result


async def new_session(store: SessionStore) -> str:
    handle = await store.begin_turn(session_id=None, owner="alice", question="q0", request_id="r0")
    assert await store.complete_turn(handle.turn_id, result())
    return handle.session_id


async def begin(store: SessionStore, session_id: str, question: str) -> str:
    handle = await store.begin_turn(
        session_id=session_id, owner="alice", question=question, request_id=question
    )
    return handle.turn_id


async def test_two_requests_at_once_one_wins_the_other_is_busy(store: SessionStore) -> None:
    session_id = await new_session(store)
    outcomes = await asyncio.gather(
        begin(store, session_id, "a"), begin(store, session_id, "b"), return_exceptions=True
    )
    winners = [o for o in outcomes if isinstance(o, str)]
    losers = [o for o in outcomes if isinstance(o, BaseException)]
    assert len(winners) == 1
    assert len(losers) == 1
    assert isinstance(losers[0], SessionBusy)
    assert losers[0].code == grpc.StatusCode.ABORTED

    session = await store.get_session(session_id, "alice")
    assert [t.status for t in session.turns] == [RunStatus.COMPLETED, RunStatus.ACTIVE]
    assert session.turn_count == 2


async def test_many_requests_across_replicas_only_one_runs(open_store: OpenStore) -> None:
    # Two stores on one database stand for two server replicas.
    replicas = [await open_store(), await open_store()]
    session_id = await new_session(replicas[0])
    attempts = [begin(replicas[i % 2], session_id, f"q{i}") for i in range(8)]
    outcomes = await asyncio.gather(*attempts, return_exceptions=True)
    winners = [o for o in outcomes if isinstance(o, str)]
    assert len(winners) == 1
    assert all(isinstance(o, SessionBusy) for o in outcomes if not isinstance(o, str))

    # Once the winner's answer is in, the session takes the next question, with the
    # winner's turn in its history.
    assert await replicas[1].complete_turn(winners[0], result("the winner"))
    handle = await replicas[0].begin_turn(
        session_id=session_id, owner="alice", question="next", request_id="n"
    )
    assert [t.answer for t in handle.history] == ["Robots walk [1].", "the winner"]


async def test_a_busy_session_frees_when_the_turn_ends(store: SessionStore) -> None:
    session_id = await new_session(store)
    turn_id = await begin(store, session_id, "a")
    with pytest.raises(SessionBusy):
        await begin(store, session_id, "b")
    assert await store.abort_turn(turn_id, "cancelled")
    await begin(store, session_id, "c")


async def test_different_sessions_run_in_parallel(store: SessionStore) -> None:
    first, second = await new_session(store), await new_session(store)
    await asyncio.gather(begin(store, first, "a"), begin(store, second, "b"))


async def test_a_stale_turn_is_abandoned_by_the_next_request(
    open_store: OpenStore, clock: FakeClock
) -> None:
    crashed = await open_store(stale_turn_s=300)
    survivor = await open_store(stale_turn_s=300)
    session_id = await new_session(survivor)
    stuck = await begin(crashed, session_id, "lost")

    clock.advance(299)
    with pytest.raises(SessionBusy):
        await begin(survivor, session_id, "too early")

    clock.advance(2)
    taken = await begin(survivor, session_id, "after the limit")
    turns = (await survivor.get_session(session_id, "alice")).turns
    assert [(t.question, t.status) for t in turns] == [
        ("q0", RunStatus.COMPLETED),
        ("lost", RunStatus.ERROR),
        ("after the limit", RunStatus.ACTIVE),
    ]
    assert turns[1].error.startswith("abandoned")
    assert turns[2].turn_id == taken

    # The crashed replica's late answer no longer lands in the conversation.
    assert not await crashed.complete_turn(stuck, result("late"))
    assert (await survivor.get_session(session_id, "alice")).turns[1].answer == ""


async def test_the_purger_abandons_stale_turns_nobody_returns_to(
    open_store: OpenStore, clock: FakeClock
) -> None:
    store = await open_store(stale_turn_s=300)
    session_id = await new_session(store)
    await begin(store, session_id, "lost")
    clock.advance(301)
    assert await store.purge_expired() == 0  # not expired: the TTL is longer
    turns = (await store.get_session(session_id, "alice")).turns
    assert turns[-1].status is RunStatus.ERROR
