"""Fixtures of the agent tests: the scripted OpenAI server and a real client pointed at it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import openai
import pytest

from tests.fakes.openai_server import FakeOpenAI


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
