"""Sessions expire after the TTL without use; expired ones can be read until purged but
not continued; the purger deletes them in the background."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from google.rpc import error_details_pb2

from service.errors import DatabaseUnavailable, SessionNotFound
from service.sessions import SessionPurger, SessionStatus, SessionStore, run_purger
from tests.sessions.support import START, FakeClock, OpenStore, result, rows_of

TTL = 1800.0


async def new_session(store: SessionStore, owner: str = "alice") -> str:
    handle = await store.begin_turn(session_id=None, owner=owner, question="q", request_id="r")
    assert await store.complete_turn(handle.turn_id, result())
    return handle.session_id


async def test_a_session_used_within_the_ttl_lives_on(
    store: SessionStore, clock: FakeClock
) -> None:
    session_id = await new_session(store)
    for _ in range(3):  # each use restarts the TTL
        clock.advance(TTL - 1)
        handle = await store.begin_turn(
            session_id=session_id, owner="alice", question="again", request_id="r"
        )
        assert await store.complete_turn(handle.turn_id, result())
    session = await store.get_session(session_id, "alice")
    assert session.status is SessionStatus.ACTIVE
    assert session.last_accessed == clock.now
    assert session.expires_at == clock.now + timedelta(seconds=TTL)


async def test_an_expired_session_cannot_be_continued(
    store: SessionStore, clock: FakeClock
) -> None:
    session_id = await new_session(store)
    clock.advance(TTL)
    with pytest.raises(SessionNotFound) as caught:
        await store.begin_turn(session_id=session_id, owner="alice", question="q", request_id="r")
    info = error_details_pb2.ResourceInfo()
    assert any(d.Unpack(info) for d in caught.value.details())
    assert (info.resource_type, info.resource_name) == ("session", session_id)

    # Still readable (until purged), and marked expired; time going back does not revive it.
    assert (await store.get_session(session_id, "alice")).status is SessionStatus.EXPIRED
    clock.now = START
    assert (await store.get_session(session_id, "alice")).status is SessionStatus.EXPIRED
    with pytest.raises(SessionNotFound):
        await store.begin_turn(session_id=session_id, owner="alice", question="q", request_id="r")


async def test_a_running_turn_keeps_its_session_alive(
    open_store: OpenStore, clock: FakeClock
) -> None:
    store = await open_store(ttl_s=60, stale_turn_s=600)
    handle = await store.begin_turn(session_id=None, owner="alice", question="q", request_id="r")
    clock.advance(120)  # longer than the TTL, shorter than the stale limit
    assert await store.purge_expired() == 0
    assert (await store.get_session(handle.session_id, "alice")).status is SessionStatus.NEW
    assert await store.complete_turn(handle.turn_id, result())
    clock.advance(59)
    await store.begin_turn(
        session_id=handle.session_id, owner="alice", question="q", request_id="r"
    )


async def test_purge_deletes_expired_sessions_and_everything_in_them(
    store: SessionStore, clock: FakeClock
) -> None:
    old = [await new_session(store) for _ in range(3)]
    clock.advance(TTL / 2)
    fresh = await new_session(store, owner="bob")
    clock.advance(TTL / 2)

    assert await store.purge_expired() == 3
    for session_id in old:
        assert set((await rows_of(store, session_id)).values()) == {0}
    assert (await store.get_session(fresh, "bob")).status is SessionStatus.ACTIVE
    assert await store.purge_expired() == 0


async def test_the_purger_purges_in_the_background_until_stopped(
    store: SessionStore, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    session_id = await new_session(store)
    clock.advance(TTL + 1)
    purged = asyncio.Event()
    purge = store.purge_expired

    async def purge_and_tell() -> int:
        count = await purge()
        if count:
            purged.set()
        return count

    monkeypatch.setattr(store, "purge_expired", purge_and_tell)
    purger = SessionPurger(store, interval_s=3600)
    await purger.start()
    assert purger.running
    try:
        async with asyncio.timeout(10):
            await purged.wait()  # the first purge runs at start, not after an interval
    finally:
        await purger.stop()
    assert not purger.running
    assert (await rows_of(store, session_id))["sessions"] == 0
    await purger.stop()  # a second stop is harmless


class CountingStore:
    """Stands in for the store: counts purges and can fail or hang on demand."""

    def __init__(self, *, fail: BaseException | None = None, hang: bool = False) -> None:
        self.calls = 0
        self.fail = fail
        self.hang = hang
        self.called = asyncio.Event()
        self.called_thrice = asyncio.Event()

    async def purge_expired(self) -> int:
        self.calls += 1
        self.called.set()
        if self.calls == 3:
            self.called_thrice.set()
        if self.hang:
            await asyncio.Event().wait()
        if self.fail is not None:
            raise self.fail
        return 0


async def test_the_purger_survives_a_database_outage() -> None:
    fake = CountingStore(fail=DatabaseUnavailable("down"))
    stop = asyncio.Event()
    task = asyncio.create_task(run_purger(fake, 0.001, stop))  # type: ignore[arg-type]
    async with asyncio.timeout(10):
        await fake.called_thrice.wait()
    stop.set()
    await task  # ends normally once asked


async def test_stop_cancels_a_purge_that_outlasts_the_timeout() -> None:
    fake = CountingStore(hang=True)
    purger = SessionPurger(fake, interval_s=60, stop_timeout_s=0.05)  # type: ignore[arg-type]
    await purger.start()
    await fake.called.wait()
    async with asyncio.timeout(5):
        await purger.stop()
    assert not purger.running


async def test_cancelling_stop_is_not_swallowed() -> None:
    fake = CountingStore(hang=True)
    purger = SessionPurger(fake, interval_s=60, stop_timeout_s=30)  # type: ignore[arg-type]
    await purger.start()
    await fake.called.wait()
    stopping = asyncio.create_task(purger.stop())
    await asyncio.sleep(0)  # stop() is now waiting for the loop
    stopping.cancel()
    with pytest.raises(asyncio.CancelledError):
        await stopping
    await asyncio.sleep(0)  # the loop's task runs its cancellation
    assert not [t for t in asyncio.all_tasks() if t.get_name() == "session-purger"]


async def test_the_purger_is_a_context_manager(store: SessionStore) -> None:
    async with SessionPurger(store, interval_s=60) as purger:
        assert purger.running
    assert not purger.running
