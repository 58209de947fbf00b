"""A session belongs to the caller that created it; to anyone else it does not exist."""

from __future__ import annotations

import pytest
from google.rpc import error_details_pb2

from service.errors import SessionNotFound
from service.sessions import SessionStore
from tests.sessions.support import result, rows_of


async def alices_session(store: SessionStore) -> str:
    handle = await store.begin_turn(
        session_id=None, owner="alice", question="my secret", request_id="r"
    )
    assert await store.complete_turn(handle.turn_id, result("secret answer"))
    return handle.session_id


@pytest.mark.parametrize("intruder", ["bob", ""])
async def test_another_caller_cannot_read_continue_or_delete_it(
    store: SessionStore, intruder: str
) -> None:
    session_id = await alices_session(store)
    with pytest.raises(SessionNotFound):
        await store.get_session(session_id, intruder)
    with pytest.raises(SessionNotFound):
        await store.begin_turn(
            session_id=session_id, owner=intruder, question="tell me", request_id="r"
        )
    with pytest.raises(SessionNotFound):
        await store.delete_session(session_id, intruder)
    assert await store.list_sessions(intruder) == ([], "")
    # Alice's session is untouched, and no turn of the intruder's was added.
    session = await store.get_session(session_id, "alice")
    assert session.turn_count == 1
    assert (await rows_of(store, session_id))["turns"] == 1


async def test_someone_elses_session_looks_exactly_like_an_unknown_one(
    store: SessionStore,
) -> None:
    session_id = await alices_session(store)
    unknown = "00000000-0000-4000-8000-000000000000"
    errors = []
    for sid in (session_id, unknown):
        with pytest.raises(SessionNotFound) as caught:
            await store.get_session(sid, "bob")
        errors.append(caught.value)
    for error, sid in zip(errors, (session_id, unknown), strict=True):
        info = error_details_pb2.ResourceInfo()
        assert any(d.Unpack(info) for d in error.details())
        assert info.resource_type == "session"
        assert info.resource_name == sid
        assert error.message == errors[1].message.replace(unknown, sid)


async def test_anonymous_callers_have_sessions_of_their_own(store: SessionStore) -> None:
    handle = await store.begin_turn(session_id=None, owner="", question="q", request_id="r")
    assert (await store.get_session(handle.session_id, "")).owner == ""
    with pytest.raises(SessionNotFound):
        await store.get_session(handle.session_id, "alice")
