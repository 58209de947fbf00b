"""Conversations across server restarts and across replicas sharing PostgreSQL."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import grpc
import pytest
from ragagent.v1 import agent_pb2, agent_pb2_grpc

from service.config import Settings
from service.configs import session_store_config
from service.runtime import Runtime
from service.server import AgentServer
from service.sessions import open_session_store
from tests.fakes.openai_script import ChatReply
from tests.fakes.openai_server import FakeOpenAI
from tests.helpers import add_documents, make_chunk, running_server

POSTGRES_DSN = os.environ.get("TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")
DOCS = [
    make_chunk("m1/urdf.md", "URDF is an XML format. It lists the links and joints of a robot."),
    make_chunk(
        "m2/sensors.md", "A humanoid carries cameras, an IMU and force sensors in its feet."
    ),
]


async def _ask(
    channel: grpc.aio.Channel, query: str, session_id: str = ""
) -> agent_pb2.AgentResponse:
    stub = agent_pb2_grpc.AgentServiceStub(channel)
    return await stub.Ask(agent_pb2.QuestionRequest(query=query, session_id=session_id), timeout=30)


async def test_a_restarted_server_continues_the_conversation(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.script_chat(
        ChatReply.text("URDF lists links and joints [1]."), ChatReply.text("Yes [1].")
    )
    options = {"llm_base_url": fake_llm.base_url, "agent_strategy": "retrieve_first"}
    async with running_server(tmp_path, **options) as first_life:
        await add_documents(first_life.runtime, DOCS)
        first = await _ask(first_life.channel, "What does URDF list?")
    async with running_server(tmp_path, **options) as second_life:
        second = await _ask(second_life.channel, "Does it include joints?", first.session_id)
    assert second.session_id == first.session_id
    sent = json.dumps(fake_llm.chat_requests[1].body["messages"])
    assert "What does URDF list?" in sent
    assert "URDF lists links and joints" in sent


@pytest.mark.postgres
async def test_replicas_sharing_postgres_share_sessions(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    asyncpg = pytest.importorskip("asyncpg")
    try:
        admin = await asyncpg.connect(POSTGRES_DSN.rsplit("/", 1)[0] + "/postgres", timeout=3)
    except (OSError, TimeoutError, asyncpg.PostgresError) as error:
        pytest.skip(f"PostgreSQL is not reachable at {POSTGRES_DSN} ({error!r})")
    database = f"rag_e2e_{uuid.uuid4().hex[:10]}"
    await admin.execute(f'CREATE DATABASE "{database}"')
    url = POSTGRES_DSN.replace("postgresql://", "postgresql+asyncpg://", 1).rsplit("/", 1)[0]
    fake_llm.script_chat(
        ChatReply.text("Cameras and an IMU [1]."), ChatReply.text("In its feet [1].")
    )
    try:
        async with running_server(
            tmp_path,
            llm_base_url=fake_llm.base_url,
            agent_strategy="retrieve_first",
            database_url=f"{url}/{database}",
        ) as replica_a:
            await add_documents(replica_a.runtime, DOCS)
            # A second replica: its own server and session store on the same database (the
            # embedded vector store is single-process, so it reuses replica A's).
            settings = Settings(
                address="127.0.0.1:0", data_dir=tmp_path / "b", database_url=f"{url}/{database}"
            )
            sessions = await open_session_store(session_store_config(settings))
            runtime_b = Runtime(
                settings,
                replica_a.runtime.embedder,
                replica_a.runtime.store,
                agent=replica_a.runtime.agent,
                sessions=sessions,
            )
            server_b = AgentServer(settings, runtime_b)
            port = await server_b.start()
            try:
                first = await _ask(replica_a.channel, "Which sensors does a humanoid carry?")
                async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel_b:
                    second = await _ask(channel_b, "Where are the force sensors?", first.session_id)
            finally:
                await server_b.stop(0)
                await sessions.close()
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
        await admin.close()
    assert second.session_id == first.session_id
    sent = json.dumps(fake_llm.chat_requests[1].body["messages"])
    assert "Which sensors does a humanoid carry?" in sent
