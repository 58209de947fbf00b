"""GET /metrics after real calls: the counters and histograms move as the calls went."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from ragagent.v1 import agent_pb2, agent_pb2_grpc

from service.config import Settings
from service.observability.metrics import MAX_TOOL_NAMES, Metrics
from tests.fakes.openai_server import FakeOpenAI
from tests.helpers import add_documents
from tests.observability.support import (
    BOOKLET,
    QUESTION,
    agentic_script,
    observed_server,
    scrape,
    value,
)

AGENT = "ragagent.v1.AgentService"


@pytest.fixture
async def fake_llm() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI() as fake:
        yield fake


async def test_an_agentic_run_moves_every_counter_it_touches(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.script_chat(*agentic_script())
    async with observed_server(
        tmp_path, llm_base_url=fake_llm.base_url, llm_tool_calling="streamed"
    ) as srv:
        await add_documents(srv.runtime, BOOKLET)
        port = srv.server.observability.metrics_port
        before = await asyncio.to_thread(scrape, port)
        stub = agent_pb2_grpc.AgentServiceStub(srv.channel)
        events = [e async for e in stub.AskStream(agent_pb2.QuestionRequest(query=QUESTION))]
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.Ask(agent_pb2.QuestionRequest(query=""))  # fails validation
        after = await asyncio.to_thread(scrape, port)

    assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    rpc = {"grpc_service": AGENT, "grpc_method": "AskStream", "grpc_type": "server_stream"}
    assert value(before, "grpc_server_started_total", **rpc) == 0
    assert value(after, "grpc_server_started_total", **rpc) == 1
    assert value(after, "grpc_server_handled_total", grpc_code="OK", **rpc) == 1
    assert value(after, "grpc_server_msg_sent_total", **rpc) == len(events)
    assert value(after, "grpc_server_handling_seconds_count", **rpc) == 1
    assert value(after, "grpc_server_handling_seconds_bucket", le="+Inf", **rpc) == 1
    assert value(after, "grpc_server_handling_seconds_bucket", le="0.005", **rpc) == 0
    unary = {"grpc_service": AGENT, "grpc_method": "Ask", "grpc_type": "unary"}
    assert value(after, "grpc_server_handled_total", grpc_code="INVALID_ARGUMENT", **unary) == 1
    assert value(after, "grpc_server_msg_received_total", **unary) == 1
    assert value(after, "ragagent_active_streams") == 0

    assert value(after, "ragagent_model_request_seconds_count", outcome="ok") == 2
    final = events[-1].completed
    assert value(after, "ragagent_model_tokens_total", kind="prompt") == final.usage.prompt_tokens
    assert (
        value(after, "ragagent_model_tokens_total", kind="completion")
        == final.usage.completion_tokens
    )
    assert value(after, "ragagent_time_to_first_token_seconds_count") == 1
    assert value(after, "ragagent_answers_total", status="success", strategy="agentic") == 1
    assert value(
        after, "ragagent_tool_calls_total", name="qdrant_retrieval", status="completed"
    ) == len(final.tool_calls)
    searches = value(after, "ragagent_retrieval_seconds_count")
    assert searches == len(final.tool_calls)
    # add_documents embedded the booklet; each search embedded its query once.
    assert (
        value(after, "ragagent_embedding_seconds_count")
        - value(before, "ragagent_embedding_seconds_count")
        == searches
    )
    assert value(after, "ragagent_session_store_seconds_count", op="begin") == 1
    assert value(after, "ragagent_session_store_seconds_count", op="complete") == 1
    # Low cardinality: nothing the caller wrote is a label value.
    assert not any(QUESTION in str(key) for key in after)


def test_tool_names_beyond_the_cap_are_counted_as_other() -> None:
    metrics = Metrics()
    names = [metrics.tool_name(f"tool{i}") for i in range(MAX_TOOL_NAMES + 3)]
    assert names[:MAX_TOOL_NAMES] == [f"tool{i}" for i in range(MAX_TOOL_NAMES)]
    assert names[MAX_TOOL_NAMES:] == ["other"] * 3
    assert metrics.tool_name("tool0") == "tool0"


def test_the_exposition_has_process_metrics_and_no_created_series() -> None:
    metrics = Metrics()
    metrics.handled.labels("unary", AGENT, "Ask", "OK").inc()
    metrics.first_token.observe(1.0)
    lines = metrics.exposition().decode().splitlines()
    names = {line.split("{")[0].split(" ")[0] for line in lines if not line.startswith("#")}
    # The process and platform collectors of prometheus-client's default registry.
    assert {"process_resident_memory_bytes", "process_cpu_seconds_total"} <= names
    assert {"process_start_time_seconds", "process_open_fds", "python_info"} <= names
    assert not [name for name in names if name.endswith("_created")]


def test_latency_buckets_cover_the_first_token_timeout() -> None:
    timeout = Settings.model_fields["llm_first_token_timeout"].default
    for histogram in (Metrics().first_token, Metrics().model_request, Metrics().handling):
        # The last finite bound: a slow model's first token must not land in +Inf only.
        bounds = [b for b in histogram._upper_bounds if b != float("inf")]
        assert bounds[-1] >= max(300.0, timeout)
