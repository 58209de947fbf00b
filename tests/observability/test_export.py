"""``ragagent serve`` as a process: spans reach an OTLP/HTTP receiver, /metrics answers."""

from __future__ import annotations

import threading
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from ragagent.v1 import agent_pb2, agent_pb2_grpc

from tests.processes import free_port, server_process

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
TRACEPARENT = f"00-{TRACE_ID}-b7ad6b7169203331-01"
QUERY = "Which joints connect the links of the robot arm?"


@contextmanager
def otlp_receiver() -> Iterator[tuple[str, list[trace_service_pb2.ExportTraceServiceRequest]]]:
    """A collector's OTLP/HTTP traces endpoint on loopback; yields its base URL and what it got."""
    received: list[trace_service_pb2.ExportTraceServiceRequest] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            if self.path == "/v1/traces":
                received.append(trace_service_pb2.ExportTraceServiceRequest.FromString(body))
            reply = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, format: str, *args: Any) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", received
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.slow
def test_spans_reach_the_otlp_endpoint_and_metrics_are_served(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    metrics_port = free_port()
    with otlp_receiver() as (endpoint, received):
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
        monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
        monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
        with server_process(
            tmp_path,
            data_dir=str(tmp_path / "data"),
            agent_strategy="extractive",
            metrics_address=f"127.0.0.1:{metrics_port}",
            log_format="json",
        ) as running:
            with grpc.insecure_channel(running.target) as channel:
                _, call = agent_pb2_grpc.AgentServiceStub(channel).Retrieve.with_call(
                    agent_pb2.RetrieveRequest(query=QUERY),
                    metadata=(("traceparent", TRACEPARENT),),
                    timeout=30,
                )
            assert dict(call.trailing_metadata())["x-trace-id"] == TRACE_ID
            url = f"http://127.0.0.1:{metrics_port}/metrics"
            with urllib.request.urlopen(url, timeout=5) as response:
                scraped = response.read().decode()
        # SIGTERM: the server exports what is still queued before it exits.
        assert running.process.returncode == 0, running.log()
        log = running.log()

    assert (
        'grpc_server_handled_total{grpc_code="OK",grpc_method="Retrieve",'
        'grpc_service="ragagent.v1.AgentService",grpc_type="unary"} 1.0'
    ) in scraped
    spans = [
        (resource.resource, span)
        for request in received
        for resource in request.resource_spans
        for scope in resource.scope_spans
        for span in scope.spans
    ]
    names = {span.name for _, span in spans if span.trace_id.hex() == TRACE_ID}
    assert "ragagent.v1.AgentService/Retrieve" in names
    assert "vector_search" in names
    assert any(name.startswith("embeddings ") for name in names)
    service_names = {
        attr.value.string_value
        for resource, _ in spans
        for attr in resource.attributes
        if attr.key == "service.name"
    }
    assert service_names == {"ragagent"}
    assert all(QUERY not in str(span) for _, span in spans)
    assert QUERY not in log
    assert TRACE_ID in log  # the access line of the call
