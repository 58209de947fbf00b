"""The tracing layer: one SERVER span per RPC, continuing the caller's W3C trace.

The caller's ``traceparent`` (and ``tracestate``) come from the metadata read when the call
started, never from the context. The span is made current for the rest of the call's task,
so the spans the handler opens (embedding, search, model turns, session writes) and every log
line (see :func:`~service.observability.logging.add_trace_ids`) carry its trace id. The trace
id also goes back in the trailing metadata (``x-trace-id``), so a caller that sent no trace
can still find its run.

The span is not detached at the end: the call's task ends with the call, and detaching from
a generator that grpc may close in another context would fail.
"""

from __future__ import annotations

import grpc
from google.protobuf.message import Message
from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from service.api.interceptors.call import Call
from service.observability.tracing import TRACE_ID_HEADER, Tracing, trace_id_of

_PROPAGATED = ("traceparent", "tracestate")
# Calls that would flood a trace store with probes.
_UNTRACED = ("/grpc.health.v1.", "/grpc.reflection.")
# gRPC codes that are the server's failure, per OpenTelemetry's rules for RPC servers.
_SERVER_ERRORS = frozenset(
    {
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.UNIMPLEMENTED,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DATA_LOSS,
    }
)


class RpcTracing:
    def __init__(self, tracing: Tracing) -> None:
        self._tracer = tracing.tracer
        self._spans: dict[int, trace.Span] = {}

    def start(self, call: Call) -> None:
        if call.method.startswith(_UNTRACED):
            return
        carrier = {key: value for key, value in call.metadata if key in _PROPAGATED}
        parent = propagate.extract(carrier)
        service, _, method = call.method.lstrip("/").rpartition("/")
        span = self._tracer.start_span(
            call.method.lstrip("/"),
            context=parent,
            kind=SpanKind.SERVER,
            attributes={
                "rpc.system": "grpc",
                "rpc.service": service,
                "rpc.method": method,
                "ragagent.request_id": call.request_id,
            },
        )
        self._spans[id(call)] = span
        otel_context.attach(trace.set_span_in_context(span, parent))
        trace_id = trace_id_of(span)
        if trace_id:
            call.trailing.append((TRACE_ID_HEADER, trace_id))

    def message(self, call: Call, message: Message, index: int | None) -> None:
        return None

    def end(self, call: Call, code: grpc.StatusCode) -> None:
        span = self._spans.pop(id(call), None)
        if span is None:
            return
        span.set_attribute("rpc.grpc.status_code", code.value[0])
        if code in _SERVER_ERRORS:
            span.set_status(Status(StatusCode.ERROR, code.name))
        span.end()
