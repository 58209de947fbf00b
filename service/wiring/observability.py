"""Metrics and tracing, built once from Settings by the composition root.

:class:`Observability` makes the pieces that plug in around the service's objects: the
interceptor layers, the run listeners, and the decorators of the embedder, retriever, chat
model, chunk store and session turns. Nothing below the composition root builds any of them.
"""

from __future__ import annotations

import asyncio

import openai

from service.agent.model import ChatModel
from service.api.interceptors.metrics import RpcMetrics
from service.api.interceptors.tracing import RpcTracing
from service.config import Settings
from service.observability.instruments import (
    CountingChunkStore,
    ObservedEmbedder,
    ObservedRetriever,
    ObservedTurns,
)
from service.observability.metrics import Metrics, MetricsEndpoint
from service.observability.model_calls import ObservedChatModel, model_request_hook
from service.observability.runs import RunListener, RunLog, RunMetrics, RunTracing
from service.observability.tracing import Tracing
from service.retrieval.base import DocumentWrites, Embedder, Retriever
from service.sessions.turns import Turns


class Observability:
    """The process's metrics registry, tracer and metrics endpoint."""

    def __init__(self, metrics: Metrics, tracing: Tracing, *, metrics_address: str = "") -> None:
        self.metrics = metrics
        self.tracing = tracing
        self._endpoint = MetricsEndpoint(metrics, metrics_address) if metrics_address else None

    @classmethod
    def from_settings(cls, settings: Settings, *, tracing: Tracing | None = None) -> Observability:
        """Metrics always counted (served when RAGAGENT_METRICS_ADDRESS is set); tracing from
        the OTEL_* variables unless ``tracing`` is given (tests)."""
        if tracing is None:
            tracing = Tracing.from_environment(record_content=settings.trace_content)
        return cls(Metrics(), tracing, metrics_address=settings.metrics_address)

    @property
    def metrics_port(self) -> int:
        return self._endpoint.port if self._endpoint else 0

    def start(self) -> None:
        if self._endpoint is not None:
            self._endpoint.start()

    async def stop(self) -> None:
        """Stops the endpoint; exports the spans still queued (off the event loop: the
        exporter may wait for a slow collector)."""
        if self._endpoint is not None:
            self._endpoint.stop()
        await asyncio.to_thread(self.tracing.shutdown)

    def rpc_layers(self) -> tuple[RpcTracing, RpcMetrics]:
        return RpcTracing(self.tracing), RpcMetrics(self.metrics)

    def run_listeners(self) -> list[RunListener]:
        return [RunMetrics(self.metrics), RunTracing(self.tracing), RunLog()]

    def embedder(self, embedder: Embedder) -> Embedder:
        return ObservedEmbedder(embedder, self.metrics, self.tracing)

    def retriever(self, retriever: Retriever) -> Retriever:
        return ObservedRetriever(retriever, self.metrics, self.tracing)

    def chunk_store(self, store: DocumentWrites) -> DocumentWrites:
        return CountingChunkStore(store, self.metrics)

    def turns(self, turns: Turns) -> Turns:
        return ObservedTurns(turns, self.metrics, self.tracing)

    def model(self, model: ChatModel) -> ChatModel:
        return ObservedChatModel(model, self.metrics, self.tracing)

    @staticmethod
    def model_http_client() -> openai.DefaultAsyncHttpxClient:
        """The model client's HTTP client: openai's defaults, plus the hook that counts
        attempts and carries the trace context."""
        return openai.DefaultAsyncHttpxClient(event_hooks={"request": [model_request_hook]})
