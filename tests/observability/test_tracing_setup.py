"""Tracing set-up from the standard OTEL_* variables, and what RAGAGENT_TRACE_CONTENT adds."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from service.domain import ScoredChunk
from service.observability.instruments import ObservedRetriever
from service.observability.metrics import Metrics
from service.observability.tracing import Tracing


@pytest.fixture(autouse=True)
def _no_otel(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_SERVICE_NAME",
        "OTEL_TRACES_SAMPLER",
        "OTEL_RESOURCE_ATTRIBUTES",
    ):
        monkeypatch.delenv(name, raising=False)


def test_off_without_an_endpoint() -> None:
    tracing = Tracing.from_environment()
    assert not tracing.enabled
    assert not tracing.tracer.start_span("x").is_recording()


def test_on_with_the_traces_endpoint_honouring_the_sampler_and_service_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://127.0.0.1:9/v1/traces")
    tracing = Tracing.from_environment()
    try:
        assert tracing.enabled
        assert tracing.provider is not None
        assert tracing.provider.resource.attributes["service.name"] == "ragagent"
        assert tracing.tracer.start_span("sampled").is_recording()
    finally:
        tracing.shutdown()
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "always_off")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "ragagent-canary")
    quiet = Tracing.from_environment()
    try:
        assert quiet.provider is not None
        assert quiet.provider.resource.attributes["service.name"] == "ragagent-canary"
        assert not quiet.tracer.start_span("dropped").is_recording()
    finally:
        quiet.shutdown()


class _Retriever:
    async def search(self, query: str, **_: object) -> list[ScoredChunk]:
        return []


@pytest.mark.parametrize("content", [False, True])
async def test_search_text_is_on_a_span_only_when_content_is_traced(content: bool) -> None:
    exporter = InMemorySpanExporter()
    retriever = ObservedRetriever(
        _Retriever(), Metrics(), Tracing.exporting_to(exporter, record_content=content)
    )
    await retriever.search("secret question", limit=3, threshold=0.2)
    (span,) = exporter.get_finished_spans()
    attributes = dict(span.attributes or {})
    assert attributes["ragagent.search.hits"] == 0
    assert ("secret question" in attributes.values()) is content
