"""Wiring: builds every dependency from Settings, serves them over grpc.aio, shuts down cleanly.

``Runtime`` owns the long-lived resources (embedder, store, model client, session store,
background tasks) and closes them in reverse order. ``AgentServer`` registers the
servicers, the standard health service and server reflection. ``serve`` runs until
SIGTERM/SIGINT: health turns NOT_SERVING at once, new calls are refused, in-flight calls
get ``grace_period`` seconds, then the process exits 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Callable
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1._async import HealthServicer
from grpc_reflection.v1alpha import reflection
from ragagent.v1 import agent_pb2, agent_pb2_grpc

from service.api.agent import AgentServicer
from service.api.interceptor import ServerInterceptor
from service.config import Settings
from service.errors import ConfigurationError
from service.observability.logging import get_logger
from service.retrieval.base import Embedder
from service.retrieval.embedders import FastEmbedEmbedder
from service.retrieval.qdrant_store import QdrantStore, open_qdrant_client

log = get_logger("ragagent.server")

AGENT_SERVICE = agent_pb2.DESCRIPTOR.services_by_name["AgentService"].full_name


def build_embedder(settings: Settings) -> Embedder:
    """The embedder the settings name (blocking: loads the model)."""
    if settings.embedding_provider == "openai":
        raise ConfigurationError(
            "RAGAGENT_EMBEDDING_PROVIDER=openai needs the async factory build_embedder_async"
        )
    model_dir = settings.embedding_model_dir
    if model_dir is None or not model_dir.is_dir():
        raise ConfigurationError(
            f"RAGAGENT_EMBEDDING_MODEL_DIR={model_dir} does not exist: run `make setup` to "
            "provision the default model, or point it at a local ONNX model folder"
        )
    return FastEmbedEmbedder(
        model_dir,
        model_name=settings.embedding_model,
        max_tokens=settings.embedding_max_tokens,
        threads=settings.embedding_threads,
        batch_size=settings.embedding_batch_size,
    )


class Runtime:
    """Every long-lived dependency of the server, built once and closed once."""

    def __init__(self, settings: Settings, embedder: Embedder, store: QdrantStore) -> None:
        self.settings = settings
        self.embedder = embedder
        self.store = store

    @classmethod
    async def open(cls, settings: Settings, *, embedder: Embedder | None = None) -> Runtime:
        if embedder is None:
            embedder = await asyncio.to_thread(build_embedder, settings)
        client = open_qdrant_client(
            url=settings.qdrant_url,
            api_key=settings.qdrant_api_key.get_secret_value() if settings.qdrant_api_key else None,
            path=settings.qdrant_path,
            timeout=settings.qdrant_timeout,
        )
        store = QdrantStore(
            client,
            embedder,
            collection=settings.qdrant_collection,
            timeout=settings.qdrant_timeout,
            payload_indexes=settings.qdrant_url is not None,
        )
        try:
            await store.ensure_collection()
        except BaseException:
            await store.close()
            raise
        return cls(settings, embedder, store)

    async def close(self) -> None:
        await self.store.close()


class AgentServer:
    """The grpc.aio server with every servicer, health and reflection."""

    def __init__(self, settings: Settings, runtime: Runtime) -> None:
        self._settings = settings
        self._runtime = runtime
        self.health = HealthServicer()
        self._server = grpc.aio.server(
            interceptors=[ServerInterceptor()],
            options=_channel_options(settings),
        )
        agent_pb2_grpc.add_AgentServiceServicer_to_server(
            AgentServicer(  # type: ignore[abstract]  # Ask/AskStream: next commit
                runtime.store,
                runtime.embedder,
                default_threshold=settings.confidence_threshold,
            ),
            self._server,
        )
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self._server)
        self._services = [AGENT_SERVICE]
        reflection.enable_server_reflection(
            [
                *self._services,
                health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
                reflection.SERVICE_NAME,
            ],
            self._server,
        )
        self.port = 0

    async def start(self) -> int:
        """Binds and starts; returns the bound port (useful with port 0)."""
        try:
            self.port = self._server.add_insecure_port(self._settings.address)
        except RuntimeError as exc:
            raise ConfigurationError(
                f"cannot listen on RAGAGENT_ADDRESS={self._settings.address}: {exc}"
            ) from None
        await self._server.start()
        for name in ("", *self._services):
            await self.health.set(name, health_pb2.HealthCheckResponse.SERVING)
        log.info("serving", address=self._settings.address, port=self.port)
        return self.port

    async def stop(self, grace: float | None = None) -> None:
        """Health NOT_SERVING at once, refuse new calls, give in-flight ones ``grace`` s."""
        await self.health.enter_graceful_shutdown()
        grace = self._settings.grace_period if grace is None else grace
        log.info("shutting down", grace_period_s=grace)
        await self._server.stop(grace)

    async def wait_for_termination(self) -> None:
        await self._server.wait_for_termination()


def _channel_options(settings: Settings) -> list[tuple[str, Any]]:
    return [
        ("grpc.max_receive_message_length", settings.max_message_bytes),
        ("grpc.max_send_message_length", settings.max_message_bytes),
        ("grpc.keepalive_time_ms", int(settings.keepalive_time * 1000)),
        ("grpc.keepalive_timeout_ms", int(settings.keepalive_timeout * 1000)),
        ("grpc.keepalive_permit_without_calls", 1),
        # Clients that keep long streams alive with their own pings must not be cut off.
        ("grpc.http2.min_recv_ping_interval_without_data_ms", 10_000),
        ("grpc.http2.max_pings_without_data", 0),
    ]


async def serve(settings: Settings, *, on_ready: Callable[[int], None] | None = None) -> None:
    """Runs the server until SIGTERM or SIGINT, then drains and returns."""
    runtime = await Runtime.open(settings)
    server = AgentServer(settings, runtime)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        port = await server.start()
        if on_ready is not None:
            on_ready(port)
        await stop.wait()
        await server.stop()
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(Exception):
                loop.remove_signal_handler(sig)
        await runtime.close()
    log.info("stopped")
