"""An in-process server whose metrics and spans a test can read."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import grpc
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client.parser import text_string_to_metric_families

from service.config import Settings
from service.observability.tracing import Tracing
from service.runtime import Runtime
from service.server import AgentServer
from service.wiring.observability import Observability
from tests.fakes.openai_script import ChatReply, ToolCallScript
from tests.helpers import Running, local_embedder, make_chunk

QUESTION = "What does a URDF file describe about the links of a robot?"
BOOKLET = [
    make_chunk(
        "m1/urdf.md",
        "URDF is an XML format that describes a robot. It lists the links of the robot. "
        "Joints connect the links and say how they move.",
        title="URDF",
        module="m1",
    ),
    make_chunk(
        "m1/ros2.md",
        "ROS 2 nodes exchange messages over topics. The middleware underneath is DDS.",
        title="ROS 2",
        module="m1",
    ),
]
ANSWER = "A URDF file lists the links and joints of a robot [1]."


def agentic_script() -> tuple[ChatReply, ChatReply]:
    """Two model turns around one tool call (with RAGAGENT_LLM_TOOL_CALLING=streamed, so that
    no probe turn comes first)."""
    return (
        ChatReply.calls(
            ToolCallScript("qdrant_retrieval", json.dumps({"query": "URDF links", "top_k": 3}))
        ),
        ChatReply.text(ANSWER, pieces=4),
    )


@asynccontextmanager
async def observed_server(
    data_dir: Path, exporter: InMemorySpanExporter | None = None, **overrides: object
) -> AsyncIterator[Running]:
    settings = Settings(
        address="127.0.0.1:0",
        data_dir=data_dir,
        metrics_address="127.0.0.1:0",
        **overrides,  # type: ignore[arg-type]
    )
    tracing = Tracing.exporting_to(exporter) if exporter is not None else Tracing()
    observability = Observability.from_settings(settings, tracing=tracing)
    runtime = await Runtime.open(settings, embedder=local_embedder(), observability=observability)
    server = AgentServer(settings, runtime)
    try:
        port = await server.start()
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield Running(settings, runtime, server, port, channel)
    finally:
        await server.stop(0)
        await runtime.close()


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of GET /metrics: (name, sorted labels) -> value."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain")
        text = response.read().decode()
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], metric: str, **labels: str
) -> float:
    return samples.get((metric, tuple(sorted(labels.items()))), 0.0)
