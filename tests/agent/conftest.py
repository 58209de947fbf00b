"""Fixtures of the agent tests: the scripted OpenAI server, real clients, agents wired to it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import openai
import pytest

from service.agent import Agent
from tests.agent.support import FakeRetriever, make_agent
from tests.fakes.openai_server import FakeOpenAI

AgentFactory = Callable[..., Agent]


@pytest.fixture
async def fake_openai() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI() as server:
        yield server


@pytest.fixture
async def openai_client(fake_openai: FakeOpenAI) -> AsyncIterator[openai.AsyncOpenAI]:
    """The real client, without retries (tests that exercise retries build their own)."""
    client = openai.AsyncOpenAI(api_key="test-key", base_url=fake_openai.base_url, max_retries=0)
    async with client:
        yield client


@pytest.fixture
def retriever() -> FakeRetriever:
    return FakeRetriever()


@pytest.fixture
async def build_agent(fake_openai: FakeOpenAI) -> AsyncIterator[AgentFactory]:
    """build_agent(retriever, strategy=..., **settings): an Agent talking to the fake."""
    clients: list[openai.AsyncOpenAI] = []

    def build(retriever: FakeRetriever, **options: object) -> Agent:
        agent, client = make_agent(fake_openai, retriever, **options)  # type: ignore[arg-type]
        if client is not None:
            clients.append(client)
        return agent

    yield build
    for client in clients:
        await client.close()


# The strategies in which the model calls the tool: the same contract, so the same tests.
AGENTIC_STRATEGIES = ("agentic", "agents_sdk")


@pytest.fixture(params=AGENTIC_STRATEGIES)
def agentic_strategy(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def build_agentic(build_agent: AgentFactory, agentic_strategy: str) -> AgentFactory:
    """build_agent for each strategy in which the model calls the tool (one test each)."""

    def build(retriever: FakeRetriever, **options: object) -> Agent:
        return build_agent(retriever, strategy=agentic_strategy, **options)

    return build
