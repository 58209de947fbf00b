"""Every RPC, every role, no credential, a wrong key, a malformed one and a revoked one,
against the real server with an API key file: who gets UNAUTHENTICATED, who gets
PERMISSION_DENIED, and who gets through (OK or a domain error such as NOT_FOUND)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import grpc
from ragagent.v1 import agent_pb2, agent_pb2_grpc, session_pb2, session_pb2_grpc

from service.api.interceptors.authz import REQUIRED
from service.security.apikeys import revoke_key
from tests.helpers import running_server
from tests.security.support import EVERY_RPC, bearer, new_key, outcome

ROLES = ("ask", "corpus:read", "corpus:write", "admin")
# What a role lets through besides itself.
IMPLIED = {"corpus:write": {"corpus:read"}, "admin": set(ROLES)}
REFUSED = ("UNAUTHENTICATED", "PERMISSION_DENIED")


def test_the_matrix_covers_every_rpc_of_the_contract() -> None:
    assert {method.rsplit("/", 1)[1] for method in REQUIRED} <= set(EVERY_RPC)


async def test_every_rpc_with_every_credential(tmp_path: Path) -> None:
    keys = tmp_path / "keys.jsonl"
    by_role = {role: new_key(keys, f"user-{role}", role)[1] for role in ROLES}
    revoked_id, revoked = new_key(keys, "gone", "admin")
    revoke_key(keys, revoked_id)
    unknown = "rak_000000000000_" + "A" * 43
    wrong_secret = by_role["admin"][:-4] + "AAAA"
    anonymous = {
        "none": ((), "UNAUTHENTICATED/UNAUTHENTICATED"),
        "unknown key": (bearer(unknown), "UNAUTHENTICATED/CREDENTIALS_INVALID"),
        "wrong secret": (bearer(wrong_secret), "UNAUTHENTICATED/CREDENTIALS_INVALID"),
        "revoked key": (bearer(revoked), "UNAUTHENTICATED/CREDENTIALS_INVALID"),
        "not bearer": ((("authorization", f"Basic {by_role['admin']}"),), None),
        "x-user-id only": ((("x-user-id", "user-admin"),), "UNAUTHENTICATED/UNAUTHENTICATED"),
    }
    wrong: list[str] = []
    async with running_server(tmp_path / "data", api_keys_file=keys) as srv:
        for name, (needed, rpc) in EVERY_RPC.items():
            for who, (md, expected) in anonymous.items():
                got = await outcome(rpc, srv.channel, md)
                want = "OK" if needed is None else expected
                ok = got.startswith("UNAUTHENTICATED/") if want is None else got == want
                if not ok:
                    wrong.append(f"{name} with {who}: {got}, expected {want}")
            for role, key in by_role.items():
                got = await outcome(rpc, srv.channel, bearer(key))
                allowed = needed is None or needed == role or needed in IMPLIED.get(role, ())
                if allowed and got.startswith(REFUSED):
                    wrong.append(f"{name} as {role}: {got}, expected to get through")
                if not allowed and got != "PERMISSION_DENIED/PERMISSION_DENIED":
                    wrong.append(f"{name} as {role}: {got}, expected PERMISSION_DENIED")
    assert wrong == []


async def _until(predicate: object, within_s: float = 5.0) -> float:
    """Seconds until the awaitable factory ``predicate`` returns True."""
    started = time.monotonic()
    while time.monotonic() - started < within_s:
        if await predicate():  # type: ignore[operator]
            return time.monotonic() - started
        await asyncio.sleep(0.1)
    raise AssertionError(f"not within {within_s}s")


async def test_keys_are_added_and_revoked_without_a_restart(tmp_path: Path) -> None:
    keys = tmp_path / "keys.jsonl"
    new_key(keys, "first", "corpus:read")
    _, rpc = EVERY_RPC["GetCorpusStats"]
    async with running_server(tmp_path / "data", api_keys_file=keys) as srv:
        key_id, key = new_key(keys, "later", "corpus:read")

        async def accepted() -> bool:
            return await outcome(rpc, srv.channel, bearer(key)) == "OK"

        added_after = await _until(accepted)
        revoke_key(keys, key_id)

        async def refused() -> bool:
            got = await outcome(rpc, srv.channel, bearer(key))
            return got == "UNAUTHENTICATED/CREDENTIALS_INVALID"

        revoked_after = await _until(refused)
    # The file is checked every second, off the event loop.
    assert added_after < 3.0
    assert revoked_after < 3.0


async def test_a_principal_never_sees_another_principals_session(tmp_path: Path) -> None:
    keys = tmp_path / "keys.jsonl"
    _, alice = new_key(keys, "alice", "ask")
    _, bob = new_key(keys, "bob", "ask")
    async with running_server(tmp_path / "data", api_keys_file=keys) as srv:
        agent = agent_pb2_grpc.AgentServiceStub(srv.channel)
        sessions = session_pb2_grpc.SessionServiceStub(srv.channel)
        first = await agent.Ask(
            agent_pb2.QuestionRequest(query="What is ragagent?"), metadata=bearer(alice)
        )
        session_id = first.session_id
        # Bob, even claiming to be alice in the old header, finds nothing.
        as_bob = (*bearer(bob), ("x-user-id", "alice"))
        outcomes = []
        for call in (
            lambda: sessions.GetSession(
                session_pb2.GetSessionRequest(session_id=session_id), metadata=as_bob
            ),
            lambda: sessions.DeleteSession(
                session_pb2.DeleteSessionRequest(session_id=session_id), metadata=as_bob
            ),
            lambda: agent.Ask(
                agent_pb2.QuestionRequest(query="And then?", session_id=session_id),
                metadata=as_bob,
            ),
        ):
            try:
                await call()
                outcomes.append("OK")
            except grpc.aio.AioRpcError as error:
                outcomes.append(error.code().name)
        listed = await sessions.ListSessions(session_pb2.ListSessionsRequest(), metadata=as_bob)
        # Alice goes on through the streaming handler: the principal reaches it too.
        events = [
            event
            async for event in agent.AskStream(
                agent_pb2.QuestionRequest(query="And then?", session_id=session_id),
                metadata=bearer(alice),
            )
        ]
        mine = await sessions.GetSession(
            session_pb2.GetSessionRequest(session_id=session_id), metadata=bearer(alice)
        )
    assert outcomes == ["NOT_FOUND", "NOT_FOUND", "NOT_FOUND"]
    assert list(listed.sessions) == []
    assert events[-1].completed.session_id == session_id
    assert mine.session.turn_count == 2


async def test_without_authentication_x_user_id_still_names_the_caller_whole(
    tmp_path: Path,
) -> None:
    """The laptop default: no keys, callers named by x-user-id; two ids that share their
    first 256 characters are two callers (they were one when ids were cut)."""
    long_a, long_b = "a" * 300 + "1", "a" * 300 + "2"
    async with running_server(tmp_path / "data") as srv:
        agent = agent_pb2_grpc.AgentServiceStub(srv.channel)
        sessions = session_pb2_grpc.SessionServiceStub(srv.channel)
        first = await agent.Ask(
            agent_pb2.QuestionRequest(query="What is ragagent?"),
            metadata=(("x-user-id", long_a),),
        )
        listed_a = await sessions.ListSessions(
            session_pb2.ListSessionsRequest(), metadata=(("x-user-id", long_a),)
        )
        listed_b = await sessions.ListSessions(
            session_pb2.ListSessionsRequest(), metadata=(("x-user-id", long_b),)
        )
    assert [s.session_id for s in listed_a.sessions] == [first.session_id]
    assert list(listed_b.sessions) == []


async def test_behind_a_mesh_the_trusted_header_names_the_principal(tmp_path: Path) -> None:
    header = "x-forwarded-principal"
    async with running_server(
        tmp_path / "data",
        trusted_principal_header=header,
        principal_roles={"*": ["ask"], "ops": ["admin"]},
    ) as srv:
        agent = agent_pb2_grpc.AgentServiceStub(srv.channel)
        sessions = session_pb2_grpc.SessionServiceStub(srv.channel)
        asked = await agent.Ask(
            agent_pb2.QuestionRequest(query="What is ragagent?"), metadata=((header, "carol"),)
        )
        # x-user-id means nothing once authentication is configured.
        spoofed = await sessions.ListSessions(
            session_pb2.ListSessionsRequest(), metadata=((header, "dave"), ("x-user-id", "carol"))
        )
        _, stats = EVERY_RPC["GetCorpusStats"]
        results = {
            "no header": await outcome(stats, srv.channel, (("x-user-id", "ops"),)),
            "carol": await outcome(stats, srv.channel, ((header, "carol"),)),
            "ops": await outcome(stats, srv.channel, ((header, "ops"),)),
        }
    assert asked.session_id
    assert list(spoofed.sessions) == []
    assert results == {
        "no header": "UNAUTHENTICATED/UNAUTHENTICATED",
        "carol": "PERMISSION_DENIED/PERMISSION_DENIED",
        "ops": "OK",
    }


def test_listening_beyond_loopback_without_authentication_is_warned_about() -> None:
    from structlog.testing import capture_logs

    from service.config import Settings
    from service.wiring.listeners import warn_if_exposed

    cases = {
        "0.0.0.0:50051": {},
        "127.0.0.1:50051": {},
        "[::1]:50051": {},
        "10.1.2.3:50051": {"api_keys_file": Path("/k")},
        "10.1.2.4:50051": {"trusted_principal_header": "x-principal"},
    }
    warned = {}
    for address, extra in cases.items():
        with capture_logs() as logs:
            warn_if_exposed(Settings(address=address, **extra))  # type: ignore[arg-type]
        warned[address] = [e["event"] for e in logs if e["log_level"] == "warning"]
    assert warned["0.0.0.0:50051"]
    assert "beyond loopback" in warned["0.0.0.0:50051"][0]
    assert warned["127.0.0.1:50051"] == warned["[::1]:50051"] == []
    assert warned["10.1.2.3:50051"] == []
    assert len(warned["10.1.2.4:50051"]) == 1
    assert "sidecar" in warned["10.1.2.4:50051"][0]


async def test_health_and_reflection_can_be_closed_too(tmp_path: Path) -> None:
    keys = tmp_path / "keys.jsonl"
    _, key = new_key(keys, "probe", "corpus:read")
    _, health = EVERY_RPC["Health"]
    async with running_server(
        tmp_path / "data", api_keys_file=keys, auth_protect_open_methods=True
    ) as srv:
        anonymous = await outcome(health, srv.channel, ())
        with_key = await outcome(health, srv.channel, bearer(key))
    assert anonymous == "UNAUTHENTICATED/UNAUTHENTICATED"
    assert with_key == "OK"  # any authenticated principal, whatever its roles


async def test_an_admin_reads_and_deletes_any_session_by_id(tmp_path: Path) -> None:
    keys = tmp_path / "keys.jsonl"
    _, alice = new_key(keys, "alice", "ask")
    _, ops = new_key(keys, "ops", "admin")
    async with running_server(tmp_path / "data", api_keys_file=keys) as srv:
        agent = agent_pb2_grpc.AgentServiceStub(srv.channel)
        sessions = session_pb2_grpc.SessionServiceStub(srv.channel)
        asked = await agent.Ask(
            agent_pb2.QuestionRequest(query="What is ragagent?"), metadata=bearer(alice)
        )
        by_id = session_pb2.GetSessionRequest(session_id=asked.session_id)
        read = await sessions.GetSession(by_id, metadata=bearer(ops))
        listed = await sessions.ListSessions(
            session_pb2.ListSessionsRequest(), metadata=bearer(ops)
        )
        await sessions.DeleteSession(
            session_pb2.DeleteSessionRequest(session_id=asked.session_id), metadata=bearer(ops)
        )
        gone = await outcome(
            lambda c, md: session_pb2_grpc.SessionServiceStub(c).GetSession(by_id, metadata=md),
            srv.channel,
            bearer(alice),
        )
    assert read.session.turn_count == 1
    assert list(listed.sessions) == []  # a listing is the caller's own, admin or not
    assert gone == "NOT_FOUND/SESSION_NOT_FOUND"
