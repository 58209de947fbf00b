"""Listing the caller's sessions page by page, newest first; deleting one removes all of it."""

from __future__ import annotations

import base64

import pytest

from service.errors import InvalidArgument, SessionNotFound
from service.sessions import SessionStatus, SessionStore
from tests.sessions.support import FakeClock, result, rows_of


async def session_at(store: SessionStore, owner: str = "alice", *, complete: bool = True) -> str:
    handle = await store.begin_turn(session_id=None, owner=owner, question="q", request_id="r")
    if complete:
        assert await store.complete_turn(handle.turn_id, result())
    return handle.session_id


async def all_pages(store: SessionStore, owner: str, size: int) -> list[list[str]]:
    pages, token = [], ""
    while True:
        page, token = await store.list_sessions(owner, page_size=size, page_token=token)
        pages.append([s.session_id for s in page])
        if not token:
            return pages


async def test_three_pages_newest_first_nothing_twice_nothing_missing(
    store: SessionStore, clock: FakeClock
) -> None:
    created = []
    for i in range(7):
        created.append(await session_at(store))
        await session_at(store, owner="bob")  # interleaved, never listed for alice
        clock.advance(1 + i)
    pages = await all_pages(store, "alice", 3)
    assert [len(p) for p in pages] == [3, 3, 1]
    assert [sid for page in pages for sid in page] == created[::-1]


async def test_sessions_created_at_the_same_instant_are_still_paged_exactly(
    store: SessionStore,
) -> None:
    created = {await session_at(store) for _ in range(7)}  # the fake clock stands still
    pages = await all_pages(store, "alice", 3)
    listed = [sid for page in pages for sid in page]
    assert [len(p) for p in pages] == [3, 3, 1]
    assert sorted(listed) == sorted(created)
    assert listed == sorted(created, reverse=True)  # ties broken by id


async def test_paging_is_stable_while_sessions_come_and_go(
    store: SessionStore, clock: FakeClock
) -> None:
    created = []
    for _ in range(6):
        created.append(await session_at(store))
        clock.advance(1)
    first, token = await store.list_sessions("alice", page_size=3)
    await session_at(store)  # newer than everything: belongs before page one
    await store.delete_session(created[0], "alice")  # the oldest, not reached yet
    second, token = await store.list_sessions("alice", page_size=3, page_token=token)
    assert [s.session_id for s in first] == created[:2:-1]
    assert [s.session_id for s in second] == created[2:0:-1]
    assert token == ""


async def test_a_listed_session_has_no_turns_but_counts_them(
    store: SessionStore, clock: FakeClock
) -> None:
    session_id = await session_at(store, complete=False)
    [listed], token = await store.list_sessions("alice", page_size=20)
    assert token == ""
    assert listed.session_id == session_id
    assert listed.status is SessionStatus.NEW
    assert listed.turn_count == 1
    assert listed.turns == []
    assert listed.created_at == clock.now


@pytest.mark.parametrize(
    "token",
    [
        "not a token",
        "bm90IGpzb24",  # base64 of "not json"
        base64.urlsafe_b64encode(b'["yesterday", "x"]').decode(),
        base64.urlsafe_b64encode(b'{"a": 1}').decode(),
        base64.urlsafe_b64encode(b'["2030-01-01T00:00:00", 5]').decode(),
    ],
)
async def test_a_token_we_did_not_issue_is_an_invalid_argument(
    store: SessionStore, token: str
) -> None:
    with pytest.raises(InvalidArgument) as caught:
        await store.list_sessions("alice", page_size=3, page_token=token)
    [violation] = caught.value.violations
    assert violation.field == "page_token"


async def test_delete_removes_the_session_and_everything_recorded_of_it(
    store: SessionStore,
) -> None:
    session_id = await session_at(store)
    handle = await store.begin_turn(
        session_id=session_id, owner="alice", question="q2", request_id="r"
    )
    assert await store.complete_turn(handle.turn_id, result(tool_calls=3))
    kept = await session_at(store)
    assert await rows_of(store, session_id) == {
        "sessions": 1,
        "turns": 2,
        "messages": 4,
        "tool_calls": 4,
        "responses": 2,
    }

    await store.delete_session(session_id, "alice")

    assert set((await rows_of(store, session_id)).values()) == {0}
    with pytest.raises(SessionNotFound):
        await store.get_session(session_id, "alice")
    with pytest.raises(SessionNotFound):
        await store.delete_session(session_id, "alice")
    with pytest.raises(SessionNotFound):
        await store.begin_turn(session_id=session_id, owner="alice", question="q", request_id="r")
    assert (await rows_of(store, kept))["messages"] == 2


async def test_deleting_a_session_mid_answer_drops_the_late_answer(store: SessionStore) -> None:
    handle = await store.begin_turn(session_id=None, owner="alice", question="q", request_id="r")
    await store.delete_session(handle.session_id, "alice")
    assert not await store.complete_turn(handle.turn_id, result())
    assert set((await rows_of(store, handle.session_id)).values()) == {0}
