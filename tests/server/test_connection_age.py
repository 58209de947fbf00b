"""RAGAGENT_MAX_CONNECTION_AGE: old connections are sent away, and their clients carry on."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from ragagent.v1 import agent_pb2, agent_pb2_grpc

from service.config import Settings
from service.observability.logging import configure_logging
from service.wiring.listeners import channel_options
from tests.helpers import running_server


def test_the_age_and_its_grace_become_grpc_options_only_when_set() -> None:
    options = dict(channel_options(Settings(max_connection_age=90, max_connection_age_grace=5)))
    assert options["grpc.max_connection_age_ms"] == 90_000
    assert options["grpc.max_connection_age_grace_ms"] == 5_000
    assert "grpc.max_connection_age_ms" not in dict(channel_options(Settings()))


async def test_a_client_past_the_age_reconnects_and_its_calls_go_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    configure_logging("INFO", "json")
    async with running_server(
        tmp_path, agent_strategy="extractive", max_connection_age=0.5, max_connection_age_grace=1
    ) as srv:
        stub = agent_pb2_grpc.AgentServiceStub(srv.channel)
        for _ in range(4):  # spans several connection lifetimes
            await stub.Retrieve(agent_pb2.RetrieveRequest(query="links"), timeout=5)
            await asyncio.sleep(0.6)
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines() if line[:1] == "{"]
    peers = {line["peer"] for line in lines if line.get("event") == "rpc"}
    # Each new connection comes from a new client port: the old one was sent away.
    assert len(peers) >= 2, peers
