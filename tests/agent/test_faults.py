"""Failures of the model endpoint surface as the service's errors, never as hangs or crashes."""

from __future__ import annotations

import time

import pytest

from service.agent import Heartbeat
from service.domain import Deadline
from service.errors import (
    DeadlineExceeded,
    ModelAuthFailed,
    ModelRateLimited,
    ModelRequestRejected,
    ModelStalled,
    ModelUnavailable,
    RagAgentError,
)
from tests.agent.conftest import AgentFactory
from tests.agent.support import (
    FakeRetriever,
    chunk,
    collect,
    completed,
    failed,
    kinds,
    request,
)
from tests.fakes.openai_server import ChatReply, ErrorReply, FakeOpenAI

QUESTION = "What is a URDF link?"
LINK = chunk("urdf-link", "A link is a rigid body with inertia.")


@pytest.fixture
def retriever() -> FakeRetriever:
    found = FakeRetriever()
    found.add(QUESTION, (LINK, 0.8))
    return found


async def fails_with(
    agent_factory: AgentFactory,
    retriever: FakeRetriever,
    error: type[RagAgentError],
    **settings: object,
) -> RagAgentError:
    agent = agent_factory(retriever, **settings)
    found = failed(await collect(agent.run(request(QUESTION))), error)
    assert isinstance(found, RagAgentError)
    return found


async def test_rate_limit_is_reported_with_its_retry_delay(
    fake_openai: FakeOpenAI, retriever: FakeRetriever, build_agentic: AgentFactory
) -> None:
    fake_openai.script_chat(ErrorReply(429, "Rate limit reached", retry_after=7))

    error = await fails_with(build_agentic, retriever, ModelRateLimited)

    assert error.retry_after_s == 7  # type: ignore[attr-defined]
    assert "rate limit" in error.message


async def test_server_errors_are_retried_then_reported_unavailable(
    fake_openai: FakeOpenAI, retriever: FakeRetriever, build_agentic: AgentFactory
) -> None:
    fake_openai.script_chat(*[ErrorReply(500, retry_after=0.01)] * 3)

    await fails_with(build_agentic, retriever, ModelUnavailable, llm_max_retries=2)

    assert len(fake_openai.chat_requests) == 3, "one call and the client's two retries"


async def test_a_retry_that_succeeds_is_invisible(
    fake_openai: FakeOpenAI, retriever: FakeRetriever, build_agentic: AgentFactory
) -> None:
    fake_openai.script_chat(ErrorReply(503, retry_after=0.01), ChatReply.text("Fine."))
    agent = build_agentic(retriever, llm_max_retries=2)

    events = await collect(agent.run(request(QUESTION)))

    assert completed(events).result.answer == "Fine."


@pytest.mark.parametrize("status", [401, 403])
async def test_rejected_credentials_name_the_setting(
    fake_openai: FakeOpenAI, retriever: FakeRetriever, build_agentic: AgentFactory, status: int
) -> None:
    fake_openai.script_chat(ErrorReply(status, "Incorrect API key provided"))

    error = await fails_with(build_agentic, retriever, ModelAuthFailed)

    assert "RAGAGENT_LLM_API_KEY" in error.message
    assert str(status) in error.message


async def test_a_stalled_stream_is_abandoned(
    fake_openai: FakeOpenAI, retriever: FakeRetriever, build_agentic: AgentFactory
) -> None:
    fake_openai.script_chat(ChatReply(deltas=["A", "link", "is"], stall_after=2, stall_for=5.0))

    began = time.monotonic()
    error = await fails_with(
        build_agentic, retriever, ModelStalled, llm_stream_idle_timeout=0.3, heartbeat_interval=0.1
    )

    assert time.monotonic() - began < 2.0
    assert "RAGAGENT_LLM_STREAM_IDLE_TIMEOUT" in error.message
    assert (await fake_openai.wait_client_closed()).client_closed


async def test_stalling_is_not_mistaken_for_running_out_of_time(
    fake_openai: FakeOpenAI, retriever: FakeRetriever, build_agentic: AgentFactory
) -> None:
    fake_openai.script_chat(ChatReply(deltas=["A"], stall_after=1, stall_for=5.0))
    agent = build_agentic(retriever, llm_stream_idle_timeout=0.3, llm_first_token_timeout=0.3)

    events = await collect(agent.run(request(QUESTION, deadline=Deadline.after(10.0))))

    assert isinstance(failed(events, DeadlineExceeded), ModelStalled)


async def test_a_malformed_stream_is_an_unavailable_model(
    fake_openai: FakeOpenAI, retriever: FakeRetriever, build_agentic: AgentFactory
) -> None:
    # A dropped connection is not this: it is an interrupted answer (test_interrupted.py).
    fake_openai.script_chat(ChatReply(deltas=["A", "b"], malformed_after=2))

    error = await fails_with(build_agentic, retriever, ModelUnavailable)

    assert "model endpoint" in error.message


async def test_an_unknown_model_is_a_rejected_request(
    fake_openai: FakeOpenAI, retriever: FakeRetriever, build_agentic: AgentFactory
) -> None:
    fake_openai.script_chat(ErrorReply(404, "The model `nope` does not exist"))

    error = await fails_with(build_agentic, retriever, ModelRequestRejected)

    assert "does not exist" in error.message


async def test_heartbeats_while_the_model_has_not_started(
    fake_openai: FakeOpenAI, retriever: FakeRetriever, build_agentic: AgentFactory
) -> None:
    fake_openai.script_chat(ChatReply.text("Late but fine.", delay=0.55))
    agent = build_agentic(retriever, heartbeat_interval=0.1)

    events = await collect(agent.run(request(QUESTION)))

    beats = [e for e in events if isinstance(e, Heartbeat)]
    assert len(beats) >= 3
    assert {b.phase for b in beats} == {"model"}
    assert [b.elapsed_s for b in beats] == sorted(b.elapsed_s for b in beats)
    first_text = kinds(events, heartbeats=True).index("AnswerDelta")
    assert kinds(events, heartbeats=True)[first_text - 1] == "Heartbeat"
    assert completed(events).result.answer == "Late but fine."


async def test_heartbeats_while_a_search_is_slow(
    fake_openai: FakeOpenAI, retriever: FakeRetriever, build_agentic: AgentFactory
) -> None:
    retriever.delays[QUESTION] = 0.45
    fake_openai.script_chat(ChatReply.text("Fine."))
    agent = build_agentic(retriever, heartbeat_interval=0.1)

    events = await collect(agent.run(request(QUESTION)))

    phases = [e.phase for e in events if isinstance(e, Heartbeat)]
    assert phases.count("tool") >= 3


async def test_no_heartbeats_when_nothing_is_slow(
    fake_openai: FakeOpenAI, retriever: FakeRetriever, build_agentic: AgentFactory
) -> None:
    fake_openai.script_chat(ChatReply.text("Quick."))
    agent = build_agentic(retriever, heartbeat_interval=1.0)

    events = await collect(agent.run(request(QUESTION)))

    assert not any(isinstance(e, Heartbeat) for e in events)
