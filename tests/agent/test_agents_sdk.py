"""What the agents_sdk strategy adds to the agentic contract (tests/agent/test_agentic.py and
test_cancellation.py run both strategies): the SDK's tracing stays in the process unless the
operator turns it on, no OpenAI key is needed, nothing reaches any host but the configured
endpoint, and a server without the extra says how to install it."""

from __future__ import annotations

import socket
import sys
from collections.abc import Iterator
from typing import Any

import agents
import pytest
from agents.tracing import Span, Trace, TracingProcessor

from service.agent import Agent, AgentConfig
from service.agent.sdk import INSTALL_HINT
from service.configs import agent_config, model_client_config
from service.domain import ResponseStatus
from service.errors import ConfigurationError
from tests.agent.conftest import AgentFactory
from tests.agent.support import (
    FakeRetriever,
    check_events,
    chunk,
    collect,
    completed,
    request,
    settings,
)
from tests.fakes.openai_server import ChatReply, FakeOpenAI, ToolCallScript

QUESTION = "What is a URDF link?"
LINK = chunk("urdf-link", "A link is a rigid body with inertia, visual and collision elements.")


class Recorder(TracingProcessor):
    """Every trace and span the SDK would export."""

    def __init__(self) -> None:
        self.traces: list[Trace] = []
        self.spans: list[Span[Any]] = []

    def on_trace_start(self, trace: Trace) -> None:
        self.traces.append(trace)

    def on_trace_end(self, trace: Trace) -> None:
        pass

    def on_span_start(self, span: Span[Any]) -> None:
        pass

    def on_span_end(self, span: Span[Any]) -> None:
        self.spans.append(span)

    def shutdown(self) -> None:
        pass

    def force_flush(self) -> None:
        pass


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    """Replaces the SDK's processors (its default one exports to OpenAI) for the test."""
    provider = agents.tracing.get_trace_provider()
    previous = list(provider._multi_processor._processors)  # type: ignore[attr-defined]
    seen = Recorder()
    agents.set_trace_processors([seen])
    yield seen
    agents.set_trace_processors(previous)
    agents.set_tracing_disabled(True)


@pytest.fixture
def retriever() -> FakeRetriever:
    found = FakeRetriever()
    found.add(QUESTION, (LINK, 0.8))
    found.add("links", (LINK, 0.8))
    return found


def script(fake: FakeOpenAI) -> None:
    fake.script_chat(
        ChatReply.calls(ToolCallScript("qdrant_retrieval", '{"query": "links"}', id="c1")),
        ChatReply.text("A link is a rigid body [1].", pieces=3),
    )


async def test_nothing_leaves_for_any_host_but_the_model_endpoint(
    fake_openai: FakeOpenAI,
    retriever: FakeRetriever,
    build_agent: AgentFactory,
    recorder: Recorder,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_AGENTS_DISABLE_TRACING"):
        monkeypatch.delenv(name, raising=False)
    reached: list[object] = []
    looked_up: list[object] = []
    connect, getaddrinfo = socket.socket.connect, socket.getaddrinfo

    def recording_connect(sock: socket.socket, address: Any) -> None:
        reached.append(address)
        connect(sock, address)

    def recording_getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        looked_up.append(host)
        return getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", recording_connect)
    monkeypatch.setattr(socket, "getaddrinfo", recording_getaddrinfo)
    script(fake_openai)
    agent = build_agent(retriever, strategy="agents_sdk", llm_base_url=fake_openai.base_url)

    events = await collect(agent.run(request(QUESTION)))
    agents.flush_traces()  # what an exporter would send now, or at exit

    check_events(events)
    result = completed(events).result
    assert (result.status, result.strategy) == (ResponseStatus.SUCCESS, "agents_sdk")
    assert result.answer == "A link is a rigid body [1]."
    endpoint = fake_openai.base_url.split("//")[1].split("/")[0]
    host, port = endpoint.rsplit(":", 1)
    assert reached, "the model was called over a socket"
    assert {(a[0], a[1]) for a in reached} == {(host, int(port))}  # type: ignore[index]
    assert set(looked_up) <= {host}
    assert recorder.traces == [], "tracing is off"
    assert recorder.spans == []


async def test_tracing_on_traces_without_prompts_or_answers(
    fake_openai: FakeOpenAI, retriever: FakeRetriever, recorder: Recorder
) -> None:
    import openai

    from service.agent import OpenAIChatModel

    config = settings(agents_sdk_tracing=True, llm_base_url=fake_openai.base_url)
    script(fake_openai)
    async with openai.AsyncOpenAI(api_key="k", base_url=fake_openai.base_url) as client:
        model = OpenAIChatModel.from_config(client, model_client_config(config))
        agent = Agent(agent_config(config), retriever=retriever, model=model, strategy="agents_sdk")
        labelled = request(QUESTION, metadata={"team": "robotics"})
        result = completed(await collect(agent.run(labelled))).result

    assert result.status is ResponseStatus.SUCCESS
    [trace] = recorder.traces
    assert trace.name == "ragagent"
    exported_trace = trace.export() or {}
    assert exported_trace["group_id"] == "sess-1"
    assert exported_trace["metadata"] == {"team": "robotics", "request_id": "req-1"}
    exported = repr([span.export() for span in recorder.spans])
    assert "function" in exported, "the tool call is traced"
    for private in (QUESTION, LINK.text, "rigid body", "links"):
        assert private not in exported


def test_without_the_extra_the_strategy_is_a_start_up_error_naming_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in list(sys.modules):
        if name == "agents" or name.startswith(("agents.", "service.agent.sdk.")):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "agents", None)  # what a missing package looks like

    with pytest.raises(ConfigurationError) as caught:
        Agent(AgentConfig(), retriever=FakeRetriever(), model=object(), strategy="agents_sdk")  # type: ignore[arg-type]

    assert INSTALL_HINT in str(caught.value)
    assert "agents_sdk" in str(caught.value)
    # The other strategies never import the SDK.
    Agent(AgentConfig(), retriever=FakeRetriever(), model=object(), strategy="agentic")  # type: ignore[arg-type]
