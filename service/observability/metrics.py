"""Prometheus metrics: every name the service exports, and the HTTP endpoint that serves them.

The RPC metrics use the names and labels of go-grpc-prometheus, so that dashboards and alerts
written for Go and Java gRPC servers work unchanged. The service's own metrics are prefixed
``ragagent_``. Labels take values from small fixed sets (method names, status codes, outcome
words); never query text, ids or anything a caller chooses freely.

Each :class:`Metrics` owns a registry of its own (not prometheus-client's global one), so that
two servers in one process (tests) count separately.
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
    generate_latest,
)

from service.errors import ConfigurationError
from service.observability.logging import get_logger

log = get_logger("ragagent.metrics")

# Counters and histograms would each export a `_created` series (the time the series was made)
# that nothing charts and that doubles the series count; this switch is prometheus-client's,
# process-wide, and must be set before the first metric is made.
disable_created_metrics()  # type: ignore[no-untyped-call]

# go-grpc-prometheus' default buckets stop at 10 s; an agentic run can take minutes, and a
# model on a CPU may take up to RAGAGENT_LLM_FIRST_TOKEN_TIMEOUT (180 s by default) for its
# first token: the buckets go to 300 s (600 s for whole calls) so that none lands in +Inf.
RPC_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 180, 300, 600)
MODEL_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 180, 300)
FAST_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)
# Tool names come from the model, which may invent some: past this many distinct names the
# rest are counted as "other", so that a confused model cannot grow the series without bound.
MAX_TOOL_NAMES = 16


class Metrics:
    """Every metric of the service, in one registry."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        rpc = ("grpc_type", "grpc_service", "grpc_method")
        r = self.registry
        # What prometheus-client's global registry would have had: memory, CPU, open files
        # and start time of the process (process_*), the Python version (python_info) and
        # the garbage collector's counts (python_gc_*).
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        GCCollector(registry=r)
        self.started = Counter(
            "grpc_server_started_total", "RPCs started on the server.", rpc, registry=r
        )
        self.handled = Counter(
            "grpc_server_handled_total",
            "RPCs completed on the server, whatever their status.",
            (*rpc, "grpc_code"),
            registry=r,
        )
        self.handling = Histogram(
            "grpc_server_handling_seconds",
            "Time from the start of an RPC to its status.",
            rpc,
            buckets=RPC_BUCKETS,
            registry=r,
        )
        self.sent = Counter(
            "grpc_server_msg_sent_total", "Response messages sent by the server.", rpc, registry=r
        )
        self.received = Counter(
            "grpc_server_msg_received_total",
            "Request messages received by the server.",
            rpc,
            registry=r,
        )
        self.first_token = Histogram(
            "ragagent_time_to_first_token_seconds",
            "From the start of a run to the first piece of its answer.",
            buckets=MODEL_BUCKETS,
            registry=r,
        )
        self.retrieval = Histogram(
            "ragagent_retrieval_seconds",
            "One search of the store (query embedding included).",
            buckets=FAST_BUCKETS,
            registry=r,
        )
        self.embedding = Histogram(
            "ragagent_embedding_seconds",
            "One embedding call (a query, or a batch of passages while ingesting).",
            buckets=FAST_BUCKETS,
            registry=r,
        )
        self.model_request = Histogram(
            "ragagent_model_request_seconds",
            "One model turn, request to finish reason (outcome: ok, error, timeout, cancelled).",
            ("outcome",),
            buckets=MODEL_BUCKETS,
            registry=r,
        )
        self.model_tokens = Counter(
            "ragagent_model_tokens",
            "Model tokens (kind: prompt or completion).",
            ("kind",),
            registry=r,
        )
        self.tool_calls = Counter(
            "ragagent_tool_calls",
            "Tool calls by tool name and how they ended (completed, error, timeout...).",
            ("name", "status"),
            registry=r,
        )
        self.active_streams = Gauge(
            "ragagent_active_streams", "Streaming RPCs in flight.", registry=r
        )
        self.answers = Counter(
            "ragagent_answers",
            "Finished runs by status (success, no_answer, error, timeout, cancelled) and strategy.",
            ("status", "strategy"),
            registry=r,
        )
        self.reranker_fallbacks = Counter(
            "ragagent_reranker_fallbacks",
            "Searches the lexical reranker ordered because the HTTP reranker failed (reason: "
            "timeout, status, connection, malformed).",
            ("reason",),
            registry=r,
        )
        self.ingest_chunks = Counter(
            "ragagent_ingest_chunks", "Chunks written to the store by ingestion.", registry=r
        )
        self.session_store = Histogram(
            "ragagent_session_store_seconds",
            "One session store operation (op: begin, complete, abort).",
            ("op",),
            buckets=FAST_BUCKETS,
            registry=r,
        )
        self._tool_names: set[str] = set()

    def tool_name(self, name: str) -> str:
        """``name`` as a label value: the first MAX_TOOL_NAMES names seen, then "other"."""
        if name in self._tool_names:
            return name
        if len(self._tool_names) < MAX_TOOL_NAMES:
            self._tool_names.add(name)
            return name
        return "other"

    def exposition(self) -> bytes:
        return bytes(generate_latest(self.registry))


class MetricsEndpoint:
    """``GET /metrics`` on its own port, served by a thread so that a busy event loop still
    answers scrapes (a scrape then also shows that the loop is busy, not that it is down)."""

    def __init__(self, metrics: Metrics, address: str) -> None:
        self._metrics = metrics
        self._address = address
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    def start(self) -> int:
        host, _, port = self._address.rpartition(":")
        if not port.isdigit():
            raise ConfigurationError(f"RAGAGENT_METRICS_ADDRESS={self._address} is not host:port")
        handler = _handler(self._metrics)
        try:
            self._server = ThreadingHTTPServer((host.strip("[]") or "0.0.0.0", int(port)), handler)  # noqa: S104
        except OSError as exc:
            raise ConfigurationError(
                f"cannot listen on RAGAGENT_METRICS_ADDRESS={self._address}: {exc}"
            ) from None
        self._server.daemon_threads = True
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="metrics-http", daemon=True
        )
        self._thread.start()
        log.info("metrics endpoint", address=self._address, port=self.port, path="/metrics")
        return self.port

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


def _handler(metrics: Metrics) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?", 1)[0] != "/metrics":
                self.send_error(404, "only /metrics is served here")
                return
            body = metrics.exposition()
            self.send_response(200)
            self.send_header("Content-Type", CONTENT_TYPE_LATEST)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            return None  # one line per scrape would drown the log

    return Handler
