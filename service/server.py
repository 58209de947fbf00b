"""Serving: a ``Runtime`` (``service.runtime``) over grpc.aio, shut down cleanly.

The composition root's second half: ``service.runtime`` builds and closes the long-lived
dependencies; this module builds the interceptor chain and the servicers. ``AgentServer``
registers the servicers, the standard health service and server reflection. ``serve`` runs
until SIGTERM/SIGINT: health turns NOT_SERVING at once, new calls are refused, in-flight
calls get ``grace_period`` seconds, then the process exits 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Callable
from typing import TYPE_CHECKING

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1._async import HealthServicer
from grpc_reflection.v1alpha import reflection
from ragagent.v1 import (
    agent_pb2,
    agent_pb2_grpc,
    corpus_pb2,
    corpus_pb2_grpc,
    session_pb2,
    session_pb2_grpc,
)

from service.api.agent import AgentServicer
from service.api.corpus import CorpusServicer
from service.api.health_port import HealthPort
from service.api.interceptors import AccessLog, Chain, Layer, RequestIds, Validation
from service.api.interceptors.authn import Authenticate, Authentication
from service.api.interceptors.authz import Authorize
from service.api.interceptors.limits import AuthFailureThrottle, Limit, RateLimits
from service.api.readable import DocumentsReadable
from service.api.runs import BackgroundRuns
from service.api.sessions import SessionServicer
from service.config import Settings
from service.errors import ConfigurationError
from service.fleet.limits import SharedLimits
from service.observability.logging import get_logger
from service.runtime import Runtime
from service.wiring.heap import settle_heap
from service.wiring.listeners import channel_options, check_web, http_listener, warn_if_exposed
from service.wiring.observability import Observability
from service.wiring.security import Security, describe

if TYPE_CHECKING:
    pass

log = get_logger("ragagent.server")

AGENT_SERVICE = agent_pb2.DESCRIPTOR.services_by_name["AgentService"].full_name
CORPUS_SERVICE = corpus_pb2.DESCRIPTOR.services_by_name["CorpusService"].full_name
SESSION_SERVICE = session_pb2.DESCRIPTOR.services_by_name["SessionService"].full_name
HEALTH_SERVICE = health_pb2.DESCRIPTOR.services_by_name["Health"].full_name
# What a stopped run needs to send its final message and record its turn at shutdown.
_FINAL_MESSAGE_S = 1.0


class AgentServer:
    """The grpc.aio server with every servicer, health and reflection."""

    def __init__(self, settings: Settings, runtime: Runtime) -> None:
        self._settings = settings
        self._runtime = runtime
        self.health = HealthServicer()
        self.security = Security.from_settings(settings)
        self.observability = observe = runtime.observability
        redis_url = settings.limits_redis_url
        # Limits for the whole fleet when replicas share a store (service.fleet.limits).
        self._shared_limits = (
            SharedLimits(
                redis_url.get_secret_value(),
                prefix=settings.limits_redis_prefix,
                timeout=settings.limits_redis_timeout,
            )
            if redis_url is not None
            else None
        )
        layers = interceptor_layers(
            self.security,
            observe,
            self._shared_limits,
            auth_failures_per_minute=settings.auth_failures_per_minute,
        )
        self._server = grpc.aio.server(
            interceptors=[Chain(layers)],
            options=channel_options(settings),
        )
        self.runs = (
            BackgroundRuns(
                runtime.sessions.runs,
                poll_interval_s=settings.run_poll_interval,
                max_per_principal=settings.run_max_per_caller,
            )
            if runtime.sessions is not None
            else None
        )
        agent = AgentServicer(
            runtime.retriever,
            runtime.embedder,
            default_threshold=settings.confidence_threshold,
            agent=runtime.agent,
            turns=observe.turns(runtime.sessions) if runtime.sessions else None,
            listeners=observe.run_listeners(),
            allowed_models=settings.allowed_models,
            unlabelled_public=settings.access_unlabelled == "public",
            runs=self.runs,
        )
        agent_pb2_grpc.add_AgentServiceServicer_to_server(agent, self._server)
        corpus = CorpusServicer(
            runtime.ingestor,
            runtime.store,
            unlabelled_public=settings.access_unlabelled == "public",
            idle_timeout=settings.ingest_idle_timeout,
        )
        corpus_pb2_grpc.add_CorpusServiceServicer_to_server(corpus, self._server)
        self._services = [AGENT_SERVICE, CORPUS_SERVICE]
        sessions = (
            SessionServicer(
                runtime.sessions,
                readable=DocumentsReadable(
                    runtime.store, unlabelled_public=settings.access_unlabelled == "public"
                ),
            )
            if runtime.sessions is not None
            else None
        )
        if sessions is not None:
            session_pb2_grpc.add_SessionServiceServicer_to_server(sessions, self._server)
            self._services.append(SESSION_SERVICE)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self._server)
        reflection.enable_server_reflection(
            [*self._services, HEALTH_SERVICE, reflection.SERVICE_NAME], self._server
        )
        # The HTTP listener (Connect, gRPC-Web): the same servicer objects and layers.
        self.http = http_listener(
            settings, layers, self.security, agent, corpus, sessions, self.health
        )
        self.http_port = 0
        self.http_web = settings.http_web
        self.port = 0
        address = settings.health_address
        self.health_port = HealthPort(address, self.health) if address else None

    async def start(self) -> int:
        """Binds and starts; returns the bound port (useful with port 0)."""
        check_web(self._settings)
        tls = self.security.tls
        try:
            if tls is not None:
                self.port = self._server.add_secure_port(self._settings.address, tls.credentials())
            else:
                self.port = self._server.add_insecure_port(self._settings.address)
        except RuntimeError as exc:
            raise ConfigurationError(
                f"cannot listen on {self._settings.address} (--address or RAGAGENT_ADDRESS): "
                f"{exc}; is another server using that port?"
            ) from None
        await self.security.start()
        self.observability.start()
        await self._server.start()
        try:
            health_port = await self.health_port.start() if self.health_port else None
        except ConfigurationError:
            await self._server.stop(0)
            raise
        if self.http is not None:
            try:
                self.http_port = await self.http.start()
            except ConfigurationError:
                await self._server.stop(0)
                if self.health_port is not None:
                    await self.health_port.stop()
                raise
        for name in ("", *self._services):
            await self.health.set(name, health_pb2.HealthCheckResponse.SERVING)
        log.info(
            "serving",
            address=self._settings.address,
            port=self.port,
            health_port=health_port,
            tls="mutual" if tls and tls.requires_client_certificate else bool(tls),
            authentication=describe(self.security),
        )
        if self.http is not None:
            log.info(
                "serving http",
                address=self.http.address,
                port=self.http_port,
                protocols="connect, grpc-web",
                tls="mutual" if tls and tls.requires_client_certificate else bool(tls),
                web=self.http_web,
            )
        warn_if_exposed(self._settings)
        if self.http is not None:  # the same callers, the same warning
            warn_if_exposed(self._settings.model_copy(update={"address": self.http.address}))
        return self.port

    async def reload_certificates(self) -> bool:
        """Re-reads the TLS certificate and key (SIGHUP); open calls are not touched."""
        return await self.security.reload_certificates()

    async def stop(self, grace: float | None = None) -> None:
        """Health NOT_SERVING at once, refuse new calls, give in-flight ones ``grace`` s."""
        await self.health.enter_graceful_shutdown()
        grace = self._settings.grace_period if grace is None else grace
        log.info("shutting down", grace_period_s=grace)
        stopping = asyncio.create_task(self._stop_listeners(grace), name="server-stop")
        # Background runs have no call to drain: they get the same grace as the calls.
        runs_idle = asyncio.create_task(
            self.runs.wait_idle() if self.runs is not None else asyncio.sleep(0),
            name="background-runs-idle",
        )
        agent = self._runtime.agent
        if agent is not None:
            # Runs still going when the grace period is nearly over are stopped first, so
            # that each sends its final message (CANCELLED, the answer so far) and records
            # its turn before grpc cancels its call.
            left = min(_FINAL_MESSAGE_S, grace / 2)
            _, pending = await asyncio.wait({stopping, runs_idle}, timeout=grace - left)
            if pending and (stopped := agent.stop_runs()):
                log.info("stopped runs still in progress", runs=stopped)
        await stopping
        runs_idle.cancel()
        if self.runs is not None:
            await self.runs.close(_FINAL_MESSAGE_S)
        if self.health_port is not None:
            await self.health_port.stop()
        if self._shared_limits is not None:
            await self._shared_limits.close()
        await self.security.stop()
        await self.observability.stop()

    async def _stop_listeners(self, grace: float) -> None:
        """Both listeners stop accepting at once and drain side by side."""
        if self.http is None:
            await self._server.stop(grace)
            return
        await asyncio.gather(self._server.stop(grace), self.http.stop(grace))

    async def wait_for_termination(self) -> None:
        await self._server.wait_for_termination()


def interceptor_chain(
    security: Security | None = None,
    observability: Observability | None = None,
    shared_limits: SharedLimits | None = None,
    auth_failures_per_minute: int = 0,
) -> Chain:
    """The gRPC server's one interceptor over :func:`interceptor_layers`."""
    return Chain(
        interceptor_layers(
            security,
            observability,
            shared_limits,
            auth_failures_per_minute=auth_failures_per_minute,
        )
    )


def interceptor_layers(
    security: Security | None = None,
    observability: Observability | None = None,
    shared_limits: SharedLimits | None = None,
    auth_failures_per_minute: int = 0,
) -> list[Layer]:
    """Every call's steps, outermost first: request ids bind before anything logs, the
    trace continues the caller's (so every later line carries its id), the access log sees
    every outcome (and the principal), metrics count every call (refused ones too),
    authentication names the caller, authorization checks its roles, rate limits count per
    principal (across replicas with ``shared_limits``), validation runs just before the
    servicer. Without ``security``, no
    authentication (every caller trusted); without ``observability``, no metrics or spans."""
    authentication = security.authentication if security else Authentication()
    limits = security.limits if security else RateLimits()
    tracing, metrics = observability.rpc_layers() if observability else (None, None)
    return [
        RequestIds(),
        *([tracing] if tracing else []),
        AccessLog(),
        *([metrics] if metrics else []),
        # Before authentication: a peer past its failures is refused unchecked.
        AuthFailureThrottle(auth_failures_per_minute),
        Authenticate(authentication),
        Authorize(),
        Limit(limits, shared=shared_limits),
        Validation(),
    ]


async def serve(settings: Settings, *, on_ready: Callable[[int], None] | None = None) -> None:
    """Runs the server until SIGTERM or SIGINT, then drains and returns."""
    runtime = await Runtime.open(settings)
    server = AgentServer(settings, runtime)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    reloads: set[asyncio.Task[bool]] = set()

    def reload() -> None:  # a task, so that the reading happens off the signal handler
        task = asyncio.ensure_future(server.reload_certificates())
        reloads.add(task)
        task.add_done_callback(reloads.discard)

    loop.add_signal_handler(signal.SIGHUP, reload)
    try:
        port = await server.start()
        # Before ready: the collection walks the heap once, here (service.wiring.heap).
        log.info("heap frozen", objects=settle_heap())
        if on_ready is not None:
            on_ready(port)
        await stop.wait()
        await server.stop()
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            with contextlib.suppress(Exception):
                loop.remove_signal_handler(sig)
        await runtime.close()
    log.info("stopped")
