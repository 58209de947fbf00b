"""OpenTelemetry tracing: on when an OTLP endpoint is configured, through the standard variables.

``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` turns it on; the SDK
itself reads the rest (``OTEL_TRACES_SAMPLER``/``_ARG``, ``OTEL_RESOURCE_ATTRIBUTES``,
``OTEL_EXPORTER_OTLP_HEADERS``, timeouts...). Spans leave over OTLP http/protobuf from a batch
processor on a thread of its own, so exporting never blocks the event loop; a collector that
is down loses spans, never calls.

Each :class:`Tracing` has a tracer provider of its own rather than the process-global one, so
that tests can run servers with an in-memory exporter side by side. The W3C propagator is the
global default of opentelemetry-api, which is what gRPC metadata and the model's HTTP
request carry.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping
from typing import TYPE_CHECKING

from opentelemetry import propagate, trace
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
)

if TYPE_CHECKING:
    import httpx2

DEFAULT_SERVICE_NAME = "ragagent"
TRACE_ID_HEADER = "x-trace-id"
_ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")


def tracing_configured(environ: MutableMapping[str, str] | None = None) -> bool:
    env = os.environ if environ is None else environ
    return any(env.get(name, "").strip() for name in _ENDPOINT_VARIABLES)


def _resource() -> Resource:
    resource = Resource.create()  # OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: DEFAULT_SERVICE_NAME}))
    return resource


class Tracing:
    """The tracer every component uses, and whether span attributes may hold text."""

    def __init__(
        self, provider: TracerProvider | None = None, *, record_content: bool = False
    ) -> None:
        self.provider = provider
        self.record_content = record_content
        self.tracer: trace.Tracer = (
            provider.get_tracer("ragagent") if provider is not None else trace.NoOpTracer()
        )

    @property
    def enabled(self) -> bool:
        return self.provider is not None

    @classmethod
    def from_environment(cls, *, record_content: bool = False) -> Tracing:
        """Exporting over OTLP/HTTP when an endpoint variable is set, else off (no-op spans)."""
        if not tracing_configured():
            return cls(record_content=record_content)
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider = TracerProvider(resource=_resource())  # the sampler comes from OTEL_*
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        return cls(provider, record_content=record_content)

    @classmethod
    def exporting_to(cls, exporter: SpanExporter, *, record_content: bool = False) -> Tracing:
        """Every span handed to ``exporter`` as it ends (tests: an in-memory exporter)."""
        provider = TracerProvider(resource=_resource())
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        return cls(provider, record_content=record_content)

    def shutdown(self) -> None:
        """Exports what is still queued (within the SDK's export timeout), then stops."""
        if self.provider is not None:
            self.provider.shutdown()


def trace_id_of(span: trace.Span) -> str:
    """The span's trace id as 32 hex digits, empty for a span that is not recorded."""
    ctx = span.get_span_context()
    return format(ctx.trace_id, "032x") if ctx.is_valid else ""


async def inject_traceparent(request: httpx2.Request) -> None:
    """httpx request hook: the current span's ``traceparent`` on an outgoing request (the
    model's), so that a traced model server joins the caller's trace; and, on that span
    (the model call's CLIENT span), the endpoint actually dialled as ``server.address`` and
    ``server.port``, as the OpenTelemetry GenAI conventions ask of chat spans."""
    span = trace.get_current_span()
    if span.get_span_context().is_valid:
        propagate.inject(request.headers)
    if span.is_recording():
        span.set_attributes(
            server_attributes(request.url.host, request.url.port, request.url.scheme)
        )


def server_attributes(host: str, port: int | None, scheme: str) -> dict[str, str | int]:
    """``server.address`` and ``server.port`` of an endpoint (the scheme's port when the URL
    names none)."""
    return {
        "server.address": host,
        "server.port": port if port is not None else (443 if scheme == "https" else 80),
    }
