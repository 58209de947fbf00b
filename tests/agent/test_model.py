"""The OpenAI chat model and the client factory the composition root uses."""

from __future__ import annotations

import openai
import pytest

from service.agent import ModelClientConfig, build_openai_client
from service.agent.model import OpenAIChatModel, TextDelta, TurnEnd
from service.config import Settings
from service.configs import model_client_config
from service.domain import Deadline, Usage
from service.errors import ConfigurationError
from tests.fakes.openai_server import ChatReply, FakeOpenAI, ToolCallScript


def test_a_local_server_needs_no_key() -> None:
    client = build_openai_client(
        model_client_config(
            Settings(llm_base_url="http://127.0.0.1:8080/v1", llm_timeout=12, llm_max_retries=4)
        )
    )
    assert client.api_key == "not-needed"
    assert str(client.base_url).startswith("http://127.0.0.1:8080/v1")
    assert client.max_retries == 4
    assert client.timeout == 12


def test_a_key_is_used_when_given() -> None:
    client = build_openai_client(model_client_config(Settings(llm_api_key="sk-test")))
    assert client.api_key == "sk-test"


def test_no_endpoint_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="RAGAGENT_LLM_BASE_URL"):
        build_openai_client(ModelClientConfig())


async def test_the_factory_client_talks_to_the_endpoint(fake_openai: FakeOpenAI) -> None:
    fake_openai.script_chat(ChatReply.text("ok"))
    settings = Settings(llm_base_url=fake_openai.base_url, llm_model="local-model")
    config = model_client_config(settings)
    async with build_openai_client(config) as client:
        model = OpenAIChatModel.from_config(client, config)
        events = [
            e
            async for e in model.stream(
                [{"role": "user", "content": "hi"}], temperature=0.0, deadline=Deadline()
            )
        ]
    assert events[-1] == TurnEnd("stop", [], Usage(11, 7), "fake-model")
    [sent] = fake_openai.chat_requests
    assert sent.headers["authorization"] == "Bearer not-needed"
    assert sent.body["model"] == "local-model"
    assert sent.body["max_tokens"] == settings.llm_max_tokens


async def test_a_turn_assembles_text_and_fragmented_tool_calls(
    fake_openai: FakeOpenAI, openai_client: openai.AsyncOpenAI
) -> None:
    fake_openai.script_chat(
        ChatReply(
            deltas=["Let me ", "search."],
            tool_calls=[
                ToolCallScript("qdrant_retrieval", '{"query": "urdf links", "top_k": 4}', id="a"),
                ToolCallScript("qdrant_retrieval", '{"query": "joints"}', id="b"),
            ],
        )
    )
    model = OpenAIChatModel(openai_client, model="m", max_tokens=100, timeout=5, idle_timeout=5)

    events = [
        e
        async for e in model.stream(
            [{"role": "user", "content": "q"}], temperature=0.2, deadline=Deadline.after(5)
        )
    ]

    assert events[:2] == [TextDelta("Let me "), TextDelta("search.")]
    end = events[-1]
    assert isinstance(end, TurnEnd)
    assert end.finish_reason == "tool_calls"
    assert [(c.id, c.name, c.arguments) for c in end.tool_calls] == [
        ("a", "qdrant_retrieval", '{"query": "urdf links", "top_k": 4}'),
        ("b", "qdrant_retrieval", '{"query": "joints"}'),
    ]
