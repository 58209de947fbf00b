"""SessionService over a real grpc.aio server: the caller (x-user-id) sees and deletes only
their own sessions, converted faithfully to ragagent.v1 messages."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, timedelta

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status
from ragagent.v1 import session_pb2, session_pb2_grpc, types_pb2

from service.api.sessions import SessionServicer
from service.errors import InvalidArgument, SessionNotFound
from service.sessions import SessionStore
from tests.sessions.support import START, FakeClock, result

ALICE = (("x-user-id", "alice"),)
BOB = (("x-user-id", "bob"),)


class FakeContext:
    """The one thing the servicer asks of its context: the caller's metadata."""

    def __init__(self, metadata: Sequence[tuple[str, str]] = ()) -> None:
        self._metadata = tuple(metadata)

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return self._metadata


@asynccontextmanager
async def serving(
    store: SessionStore, interceptors: Sequence[grpc.aio.ServerInterceptor] = ()
) -> AsyncIterator[session_pb2_grpc.SessionServiceAsyncStub]:
    from service.server import interceptor_chain

    # The caller is who the chain's authentication layer says (here: no authentication set
    # up, so the x-user-id header), never a header the servicer reads itself.
    server = grpc.aio.server(interceptors=interceptors or [interceptor_chain()])
    session_pb2_grpc.add_SessionServiceServicer_to_server(SessionServicer(store), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield session_pb2_grpc.SessionServiceStub(channel)  # type: ignore[misc]
    finally:
        await server.stop(0)


async def conversation(store: SessionStore, owner: str = "anon:alice", turns: int = 2) -> str:
    # x-user-id callers of a server without authentication own "anon:<name>" sessions.
    session_id: str | None = None
    for i in range(turns):
        handle = await store.begin_turn(
            session_id=session_id, owner=owner, question=f"q{i}", request_id=f"req-{i}"
        )
        session_id = handle.session_id
        assert await store.complete_turn(handle.turn_id, result(f"a{i}"))
    assert session_id is not None
    return session_id


async def test_get_session_returns_every_turn_with_its_record(
    store: SessionStore, clock: FakeClock
) -> None:
    session_id = await conversation(store)
    running = await store.begin_turn(
        session_id=session_id, owner="anon:alice", question="q2", request_id="req-2"
    )
    async with serving(store) as stub:
        response = await stub.GetSession(
            session_pb2.GetSessionRequest(session_id=session_id), metadata=ALICE
        )
    session = response.session
    assert session.session_id == session_id
    assert session.status == session_pb2.SESSION_STATUS_ACTIVE
    assert session.turn_count == 3
    assert session.created_at.ToDatetime(UTC) == START
    assert session.last_accessed_at.ToDatetime(UTC) == clock.now
    assert session.expires_at.ToDatetime(UTC) == clock.now + timedelta(seconds=1800)
    first, _, last = session.turns
    assert (first.question, first.answer, first.request_id) == ("q0", "a0", "req-0")
    assert first.status == session_pb2.RUN_STATUS_COMPLETED
    assert first.HasField("completed_at")
    assert first.confidence == pytest.approx(0.8)
    [source] = first.sources
    assert (source.document_id, source.citation, source.title) == (
        "module-01/page-01.md",
        1,
        "Walking",
    )
    assert source.content == "Humanoid robots walk on two legs."
    [call] = first.tool_calls
    assert call.name == "qdrant_retrieval"
    assert call.status == types_pb2.TOOL_CALL_STATUS_COMPLETED
    assert call.arguments["query"] == "how do robots walk"
    assert call.result["hits"] == 1
    assert call.duration.ToMilliseconds() == 250
    assert (first.usage.prompt_tokens, first.usage.total_tokens) == (120, 150)
    assert first.timings.total.ToMilliseconds() == 1500
    assert last.turn_id == running.turn_id
    assert last.status == session_pb2.RUN_STATUS_ACTIVE
    assert not last.HasField("completed_at")
    assert not last.HasField("timings")


async def test_list_sessions_pages_the_callers_sessions_newest_first(
    store: SessionStore, clock: FakeClock
) -> None:
    mine = []
    for _ in range(23):
        mine.append(await conversation(store, turns=1))
        clock.advance(1)
    await conversation(store, owner="anon:bob")
    async with serving(store) as stub:
        first = await stub.ListSessions(session_pb2.ListSessionsRequest(), metadata=ALICE)
        second = await stub.ListSessions(
            session_pb2.ListSessionsRequest(page_token=first.next_page_token), metadata=ALICE
        )
        small = await stub.ListSessions(
            session_pb2.ListSessionsRequest(page_size=2), metadata=ALICE
        )
    assert len(first.sessions) == 20  # page_size 0: the default
    assert first.next_page_token
    assert second.next_page_token == ""
    listed = [s.session_id for s in (*first.sessions, *second.sessions)]
    assert listed == mine[::-1]
    assert all(not s.turns and s.turn_count == 1 for s in first.sessions)
    assert [s.session_id for s in small.sessions] == mine[:-3:-1]


async def test_delete_session_removes_it_for_good(store: SessionStore) -> None:
    session_id = await conversation(store)
    async with serving(store) as stub:
        await stub.DeleteSession(
            session_pb2.DeleteSessionRequest(session_id=session_id), metadata=ALICE
        )
        listed = await stub.ListSessions(session_pb2.ListSessionsRequest(), metadata=ALICE)
    assert listed.sessions == []
    with pytest.raises(SessionNotFound):
        await store.get_session(session_id, "alice")


async def test_the_servicer_raises_not_found_for_another_callers_session(
    store: SessionStore,
) -> None:
    session_id = await conversation(store)
    servicer = SessionServicer(store)
    for context in (FakeContext(BOB), FakeContext()):  # another user, anonymous
        with pytest.raises(SessionNotFound):
            await servicer.GetSession(
                session_pb2.GetSessionRequest(session_id=session_id),
                context,  # type: ignore[arg-type]
            )
        with pytest.raises(SessionNotFound):
            await servicer.DeleteSession(
                session_pb2.DeleteSessionRequest(session_id=session_id),
                context,  # type: ignore[arg-type]
            )
        listed = await servicer.ListSessions(
            session_pb2.ListSessionsRequest(),
            context,  # type: ignore[arg-type]
        )
        assert listed.sessions == []
    assert (await store.get_session(session_id, "anon:alice")).turn_count == 2


async def test_the_servicer_raises_invalid_argument_for_a_bad_page_token(
    store: SessionStore,
) -> None:
    with pytest.raises(InvalidArgument) as caught:
        await SessionServicer(store).ListSessions(
            session_pb2.ListSessionsRequest(page_token="garbage"),
            FakeContext(ALICE),  # type: ignore[arg-type]
        )
    assert [v.field for v in caught.value.violations] == ["page_token"]


async def test_with_the_server_interceptor_callers_see_rich_statuses(
    store: SessionStore,
) -> None:
    from service.server import interceptor_chain

    session_id = await conversation(store)
    async with serving(store, [interceptor_chain()]) as stub:
        with pytest.raises(grpc.aio.AioRpcError) as not_found:
            await stub.GetSession(
                session_pb2.GetSessionRequest(session_id=session_id), metadata=BOB
            )
        with pytest.raises(grpc.aio.AioRpcError) as bad_token:
            await stub.ListSessions(
                session_pb2.ListSessionsRequest(page_token="garbage"), metadata=ALICE
            )
    assert not_found.value.code() == grpc.StatusCode.NOT_FOUND
    status = rpc_status.from_call(not_found.value)  # type: ignore[arg-type]
    assert status is not None
    info = error_details_pb2.ResourceInfo()
    assert any(d.Unpack(info) for d in status.details)
    assert (info.resource_type, info.resource_name) == ("session", session_id)

    assert bad_token.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    status = rpc_status.from_call(bad_token.value)  # type: ignore[arg-type]
    assert status is not None
    bad_request = error_details_pb2.BadRequest()
    assert any(d.Unpack(bad_request) for d in status.details)
    assert [v.field for v in bad_request.field_violations] == ["page_token"]
