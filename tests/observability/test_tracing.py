"""The span tree of one agentic run under the caller's trace, and what it must not hold."""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from ragagent.v1 import agent_pb2, agent_pb2_grpc

from service.observability.logging import configure_logging
from tests.fakes.openai_server import FakeOpenAI
from tests.helpers import add_documents
from tests.observability.support import ANSWER, BOOKLET, QUESTION, agentic_script, observed_server

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{CALLER_SPAN}-01"


@pytest.fixture
async def fake_llm() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI() as fake:
        yield fake


def _hex(value: int, width: int) -> str:
    return format(value, f"0{width}x")


def _children(spans: list[ReadableSpan], parent: ReadableSpan) -> list[ReadableSpan]:
    assert parent.context is not None
    found = [
        s for s in spans if s.parent is not None and s.parent.span_id == parent.context.span_id
    ]
    return sorted(found, key=lambda s: s.start_time or 0)


async def test_an_agentic_run_is_one_trace_continuing_the_callers(
    tmp_path: Path, fake_llm: FakeOpenAI, capsys: pytest.CaptureFixture[str]
) -> None:
    configure_logging("DEBUG", "json")
    fake_llm.script_chat(*agentic_script())
    exporter = InMemorySpanExporter()
    async with observed_server(
        tmp_path, exporter, llm_base_url=fake_llm.base_url, llm_tool_calling="streamed"
    ) as srv:
        await add_documents(srv.runtime, BOOKLET)
        exporter.clear()  # add_documents' embedding is not part of the call
        call = agent_pb2_grpc.AgentServiceStub(srv.channel).AskStream(
            agent_pb2.QuestionRequest(query=QUESTION), metadata=(("traceparent", TRACEPARENT),)
        )
        events = [e async for e in call]
        trailing = dict(await call.trailing_metadata())
    assert events[-1].completed.answer == ANSWER
    spans = list(exporter.get_finished_spans())
    assert {_hex(s.context.trace_id, 32) for s in spans if s.context} == {TRACE_ID}
    assert trailing["x-trace-id"] == TRACE_ID

    (rpc,) = [s for s in spans if s.kind is SpanKind.SERVER]
    assert rpc.name == "ragagent.v1.AgentService/AskStream"
    assert rpc.parent is not None
    assert _hex(rpc.parent.span_id, 16) == CALLER_SPAN
    assert rpc.attributes is not None
    assert rpc.attributes["rpc.grpc.status_code"] == 0

    children = _children(spans, rpc)
    # The strategy's own search first (a tool call the service makes), then model -> tool
    # -> model, between the session turn's begin and complete. A tool span starts just
    # before the search it runs (it is timed from the call's record).
    assert [s.name.split(" ")[0] for s in children] == [
        "session_store",
        "execute_tool",
        "vector_search",
        "chat",
        "execute_tool",
        "vector_search",
        "chat",
        "session_store",
    ]
    for tool_span, search_span in ((children[1], children[2]), (children[4], children[5])):
        assert tool_span.start_time is not None
        assert search_span.start_time is not None
        assert tool_span.end_time is not None
        assert search_span.end_time is not None
        assert tool_span.start_time <= search_span.start_time
        assert search_span.end_time <= tool_span.end_time + 5_000_000
    for search in (s for s in spans if s.name == "vector_search"):
        (embedding,) = _children(spans, search)
        assert embedding.name.startswith("embeddings ")
        # GenAI conventions: the provider on embeddings spans (the local ONNX model here).
        assert (embedding.attributes or {})["gen_ai.provider.name"] == "fastembed"
    chats = [s for s in spans if s.name.startswith("chat ")]
    assert len(chats) == 2
    first, second = (dict(c.attributes or {}) for c in chats)
    assert first["gen_ai.request.model"] == srv.settings.llm_model
    # GenAI conventions: the endpoint the chat call dialled.
    endpoint = urllib.parse.urlsplit(fake_llm.base_url)
    for chat_attributes in (first, second):
        assert chat_attributes["gen_ai.provider.name"] == "openai"
        assert chat_attributes["server.address"] == endpoint.hostname
        assert chat_attributes["server.port"] == endpoint.port
    assert first["gen_ai.response.finish_reasons"] == ("tool_calls",)
    assert second["gen_ai.response.finish_reasons"] == ("stop",)
    assert int(second["gen_ai.usage.output_tokens"]) > 0  # type: ignore[call-overload]
    tool = next(
        s
        for s in spans
        if s.name.startswith("execute_tool")
        and s.attributes
        and s.attributes["ragagent.tool.origin"] == "model"
    )
    assert chats[0].end_time is not None
    assert tool.start_time is not None
    assert chats[0].end_time <= tool.start_time + 5_000_000  # a clock tick of slack
    assert tool.end_time is not None
    assert chats[1].start_time is not None
    assert tool.end_time <= chats[1].start_time + 5_000_000

    # The model's HTTP requests joined the trace, each under its own chat span.
    for request, chat in zip(fake_llm.chat_requests, chats, strict=True):
        assert chat.context is not None
        assert request.headers["traceparent"].split("-")[1:3] == [
            TRACE_ID,
            _hex(chat.context.span_id, 16),
        ]

    # Neither the question nor the answer is in any span, nor in any log line (even at DEBUG).
    for span in spans:
        text = json.dumps(
            {
                "name": span.name,
                "attributes": dict(span.attributes or {}),
                "events": [dict(e.attributes or {}) for e in span.events],
            },
            default=str,
        )
        assert QUESTION not in text
        assert "URDF links" not in text
        assert ANSWER[:20] not in text
    lines = [
        json.loads(line) for line in capsys.readouterr().err.splitlines() if line.startswith("{")
    ]
    assert lines, "the server logged nothing"
    for line in lines:
        assert QUESTION not in json.dumps(line)
        assert ANSWER[:20] not in json.dumps(line)
    model_lines = [line for line in lines if line["event"] == "model call"]
    assert [line["finish_reason"] for line in model_lines] == ["tool_calls", "stop"]
    assert all(line["retries"] == 0 and line["trace_id"] == TRACE_ID for line in model_lines)
    assert any(line["event"] == "tool call" for line in lines)
    in_call = [line for line in lines if line.get("request_id")]
    assert in_call
    assert all(line.get("trace_id") == TRACE_ID for line in in_call)
