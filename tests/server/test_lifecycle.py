"""Health, shutdown and request ids of the real server."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from ragagent.v1 import agent_pb2, agent_pb2_grpc

from service.domain import Deadline
from service.retrieval.base import Embedder
from tests.helpers import local_embedder, running_server

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


class SlowEmbedder:
    """The real embedder, but every query waits until released (a call kept in flight)."""

    def __init__(self, inner: Embedder) -> None:
        self._inner = inner
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        self.model_name = inner.model_name
        self.dimension = inner.dimension
        self.max_tokens = inner.max_tokens

    def count_tokens(self, text: str) -> int:
        return self._inner.count_tokens(text)

    async def embed_documents(
        self, texts: Sequence[str], *, deadline: Deadline | None = None
    ) -> list[list[float]]:
        return await self._inner.embed_documents(texts, deadline=deadline)

    async def embed_query(self, text: str, *, deadline: Deadline | None = None) -> list[float]:
        self.entered.set()
        await self.release.wait()
        return await self._inner.embed_query(text, deadline=deadline)


async def test_health_reports_serving_for_the_server_and_each_service(tmp_path: Path) -> None:
    async with running_server(tmp_path) as srv:
        health = health_pb2_grpc.HealthStub(srv.channel)
        for service in ("", "ragagent.v1.AgentService"):
            reply = await health.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
            assert reply.status == SERVING, service
        with pytest.raises(grpc.aio.AioRpcError) as unknown:
            await health.Check(health_pb2.HealthCheckRequest(service="nope.Service"), timeout=5)
        assert unknown.value.code() == grpc.StatusCode.NOT_FOUND


async def test_shutdown_turns_health_not_serving_and_lets_calls_in_flight_finish(
    tmp_path: Path,
) -> None:
    slow = SlowEmbedder(local_embedder())
    async with running_server(tmp_path, embedder=slow) as srv:
        health = health_pb2_grpc.HealthStub(srv.channel)
        watch = health.Watch(health_pb2.HealthCheckRequest(service="ragagent.v1.AgentService"))
        assert (await watch.read()).status == SERVING

        stub = agent_pb2_grpc.AgentServiceStub(srv.channel)
        in_flight = asyncio.ensure_future(
            stub.Retrieve(agent_pb2.RetrieveRequest(query="robots"), timeout=10)
        )
        await slow.entered.wait()
        stopping = asyncio.ensure_future(srv.server.stop(grace=5))

        assert (await asyncio.wait_for(watch.read(), 5)).status == NOT_SERVING
        # Health says NOT_SERVING a moment before the listener closes (on a loaded machine a
        # call got in between and waited on the embedder): new calls are refused from then on.
        outcomes = [await _new_call(srv.target)]
        while outcomes[-1] != "UNAVAILABLE" and len(outcomes) < 10:
            outcomes.append(await _new_call(srv.target))
        assert outcomes[-1] == "UNAVAILABLE", f"new calls during shutdown: {outcomes}"
        assert "OK" not in outcomes  # the slow embedder answers nothing before its release

        slow.release.set()
        response = await in_flight
        await stopping
    assert response.embedding_model


async def _new_call(target: str) -> str:
    """How a Retrieve on a new connection ends: its status code's name."""
    async with grpc.aio.insecure_channel(target) as fresh:
        try:
            await agent_pb2_grpc.AgentServiceStub(fresh).Retrieve(
                agent_pb2.RetrieveRequest(query="robots"), timeout=0.5
            )
        except grpc.aio.AioRpcError as error:
            return error.code().name
    return "OK"


async def test_request_id_round_trips_through_metadata(tmp_path: Path) -> None:
    async with running_server(tmp_path) as srv:
        stub = agent_pb2_grpc.AgentServiceStub(srv.channel)
        mine = str(uuid.uuid4())
        call = stub.Retrieve(
            agent_pb2.RetrieveRequest(query="robots"), metadata=(("x-request-id", mine),), timeout=5
        )
        await call
        initial = dict(await call.initial_metadata())
        trailing = dict(await call.trailing_metadata())
        assert initial["x-request-id"] == mine
        assert trailing["x-request-id"] == mine

        generated = stub.Retrieve(agent_pb2.RetrieveRequest(query="robots"), timeout=5)
        await generated
        assert uuid.UUID(dict(await generated.initial_metadata())["x-request-id"])


async def test_errors_carry_the_request_id_too(tmp_path: Path) -> None:
    async with running_server(tmp_path) as srv:
        stub = agent_pb2_grpc.AgentServiceStub(srv.channel)
        call = stub.Retrieve(
            agent_pb2.RetrieveRequest(query=""), metadata=(("x-request-id", "abc-123"),), timeout=5
        )
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await call
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert dict(caught.value.trailing_metadata() or ())["x-request-id"] == "abc-123"
