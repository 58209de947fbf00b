"""The RPC metrics layer: go-grpc-prometheus' counters and histogram for every call.

It sits just inside the access log, so that a call refused by authentication or a rate limit
is still counted with its status code. ``grpc_service``/``grpc_method`` come from the method
path the server registered (never from what the caller sent: unknown methods never reach a
layer), so their values form a small fixed set.
"""

from __future__ import annotations

import time

import grpc
from google.protobuf.message import Message

from service.api.interceptors.call import Call
from service.observability.metrics import Metrics


def _names(method: str) -> tuple[str, str]:
    service, _, name = method.lstrip("/").rpartition("/")
    return service, name


class RpcMetrics:
    """Counts every call's start, messages, status and duration."""

    def __init__(self, metrics: Metrics) -> None:
        self._m = metrics

    def start(self, call: Call) -> None:
        service, name = _names(call.method)
        self._m.started.labels(call.shape, service, name).inc()
        if call.streaming:
            self._m.active_streams.inc()

    def message(self, call: Call, message: Message, index: int | None) -> None:
        service, name = _names(call.method)
        self._m.received.labels(call.shape, service, name).inc()

    def end(self, call: Call, code: grpc.StatusCode) -> None:
        service, name = _names(call.method)
        labels = (call.shape, service, name)
        self._m.handled.labels(*labels, code.name).inc()
        self._m.handling.labels(*labels).observe(time.perf_counter() - call.started)
        if call.sent:
            self._m.sent.labels(*labels).inc(call.sent)
        if call.streaming:
            self._m.active_streams.dec()
