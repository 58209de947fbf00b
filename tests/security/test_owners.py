"""Session owners are namespaced by how the caller authenticated (issue 26, item 4): a JWT
with ``sub=alice`` and the API key of ``alice`` are two owners, unless an operator maps one
to the other; bare owners of older sessions are migrated by an explicit function."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from ragagent.v1 import agent_pb2, agent_pb2_grpc, session_pb2, session_pb2_grpc
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from service.owners import owner_id
from service.security.principal import Principal
from service.sessions import schema
from tests.helpers import BOOKLET, running_server
from tests.security.support import Issuer, bearer, new_key

ISSUER = "https://issuer.test"
QUESTION = "What does a URDF file describe?"


async def _ask(channel: grpc.aio.Channel, credential: str) -> str:
    reply = await agent_pb2_grpc.AgentServiceStub(channel).Ask(
        agent_pb2.QuestionRequest(query=QUESTION), metadata=bearer(credential), timeout=60
    )
    return reply.session_id


async def _read(channel: grpc.aio.Channel, credential: str, session_id: str) -> str:
    """OK, or the status code's name."""
    try:
        await session_pb2_grpc.SessionServiceStub(channel).GetSession(
            session_pb2.GetSessionRequest(session_id=session_id),
            metadata=bearer(credential),
            timeout=30,
        )
    except grpc.aio.AioRpcError as error:
        return error.code().name
    return "OK"


@pytest.mark.parametrize("aliased", [False, True], ids=["apart", "aliased"])
async def test_a_jwt_subject_and_a_key_holder_of_one_name_are_two_owners(
    tmp_path: Path, aliased: bool
) -> None:
    keys, jwks = tmp_path / "keys.json", tmp_path / "jwks.json"
    _, key = new_key(keys, "alice", "ask")
    token = Issuer(jwks).token(sub="alice", roles=["ask"])
    aliases = {f"jwt:{ISSUER}|alice": "key:alice"} if aliased else {}
    async with running_server(
        tmp_path / "data",
        documents=BOOKLET,
        api_keys_file=keys,
        jwt_jwks_file=jwks,
        jwt_issuer=ISSUER,
        jwt_audience="ragagent",
        auth_principal_aliases=aliases,
    ) as srv:
        by_key = await _ask(srv.channel, key)
        by_token = await _ask(srv.channel, token)
        got = {
            "key reads its own": await _read(srv.channel, key, by_key),
            "token reads the key's": await _read(srv.channel, token, by_key),
            "key reads the token's": await _read(srv.channel, key, by_token),
            "token reads its own": await _read(srv.channel, token, by_token),
        }
        assert srv.runtime.sessions is not None
        owners = await _owners(srv.runtime.sessions.engine)
    if aliased:
        assert got == dict.fromkeys(got, "OK")
        assert owners == ["key:alice"]
    else:
        assert got == {
            "key reads its own": "OK",
            "token reads the key's": "NOT_FOUND",
            "key reads the token's": "NOT_FOUND",
            "token reads its own": "OK",
        }
        assert owners == ["jwt:https://issuer.test|alice", "key:alice"]


def test_owner_ids_by_method() -> None:
    assert Principal("alice", frozenset(), "api-key").owner == "key:alice"
    assert Principal("alice", frozenset(), "jwt", scope=ISSUER).owner == f"jwt:{ISSUER}|alice"
    assert Principal("spiffe://a/b", frozenset(), "certificate").owner == "cert:spiffe://a/b"
    assert Principal("bob", frozenset(), "trusted-header").owner == "header:bob"
    assert Principal("bob", frozenset(), "none").owner == "anon:bob"
    assert Principal("", frozenset(), "none").owner == ""
    assert Principal("bob", frozenset(), "none", alias="key:bob").owner == "key:bob"
    assert owner_id("api-key", "x" * 500).startswith("key:sha256:")


async def _owners(engine: AsyncEngine) -> list[str]:
    async with engine.connect() as connection:
        rows = await connection.execute(select(schema.sessions.c.owner).distinct())
        return sorted(owner for (owner,) in rows.all())
