"""The RPC metrics layer: go-grpc-prometheus' counters and histogram for every call.

It sits just inside the access log, so that a call refused by authentication or a rate limit
is still counted with its status code. ``grpc_service``/``grpc_method`` come from the method
path the server registered (never from what the caller sent: unknown methods never reach a
layer), so their values form a small fixed set.
"""

from __future__ import annotations

import time
from typing import Any

import grpc
from google.protobuf.message import Message

from service.api.interceptors.call import Call
from service.observability.metrics import Metrics


def _names(method: str) -> tuple[str, str]:
    service, _, name = method.lstrip("/").rpartition("/")
    return service, name


class _Series:
    """One method's labelled children, looked up once (``labels()`` costs a lock and a
    dict lookup per call otherwise)."""

    def __init__(self, m: Metrics, shape: str, method: str) -> None:
        labels = (shape, *_names(method))
        self.started = m.started.labels(*labels)
        self.received = m.received.labels(*labels)
        self.sent = m.sent.labels(*labels)
        self.handling = m.handling.labels(*labels)
        self._handled = m.handled
        self._labels = labels
        self._by_code: dict[grpc.StatusCode, Any] = {}

    def handled(self, code: grpc.StatusCode) -> Any:
        child = self._by_code.get(code)
        if child is None:
            child = self._by_code[code] = self._handled.labels(*self._labels, code.name)
        return child


class RpcMetrics:
    """Counts every call's start, messages, status and duration."""

    def __init__(self, metrics: Metrics) -> None:
        self._m = metrics
        self._series: dict[tuple[str, str], _Series] = {}

    def _of(self, call: Call) -> _Series:
        key = (call.shape, call.method)
        series = self._series.get(key)
        if series is None:
            series = self._series[key] = _Series(self._m, call.shape, call.method)
        return series

    def start(self, call: Call) -> None:
        self._of(call).started.inc()
        if call.streaming:
            self._m.active_streams.inc()

    def message(self, call: Call, message: Message, index: int | None) -> None:
        self._of(call).received.inc()

    def end(self, call: Call, code: grpc.StatusCode) -> None:
        series = self._of(call)
        series.handled(code).inc()
        series.handling.observe(time.perf_counter() - call.started)
        if call.sent:
            series.sent.inc(call.sent)
        if call.streaming:
            self._m.active_streams.dec()
