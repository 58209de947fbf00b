"""The composition root's translation: each component's config, read from Settings once.

Components below the root take their own config; its defaults must stay the settings'
defaults, or a program that builds a component from its config alone would behave unlike
the server with no RAGAGENT_ variable set.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from service.agent import AgentConfig, ModelClientConfig
from service.config import Settings
from service.configs import agent_config, model_client_config, session_store_config
from service.sessions import SessionStoreConfig

# Environment variables that would change Settings() here (the tests run with none of them).
_ENV = ("OPENAI_API_KEY", "OPENAI_BASE_URL")


@pytest.fixture
def defaults(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Settings:
    for name in _ENV:
        monkeypatch.delenv(name, raising=False)
    return Settings(data_dir=tmp_path)


def test_the_agent_config_defaults_are_the_settings_defaults(defaults: Settings) -> None:
    # auto with no endpoint resolves to extractive; a config built by hand chose its own.
    assert agent_config(defaults) == dataclasses.replace(AgentConfig(), auto=True)


def test_the_model_client_config_defaults_are_the_settings_defaults(defaults: Settings) -> None:
    assert model_client_config(defaults) == ModelClientConfig()


def test_the_session_store_config_defaults_are_the_settings_defaults(defaults: Settings) -> None:
    config = session_store_config(defaults)
    assert config == SessionStoreConfig(url=config.url)
    assert config.url.startswith("sqlite+aiosqlite:///")
    assert str(defaults.data_dir) in config.url


def test_auto_with_an_endpoint_resolves_to_the_agentic_strategy(defaults: Settings) -> None:
    config = agent_config(defaults.model_copy(update={"llm_base_url": "http://127.0.0.1:9/v1"}))
    assert (config.strategy, config.auto) == ("agentic", True)
    explicit = agent_config(defaults.model_copy(update={"agent_strategy": "retrieve_first"}))
    assert (explicit.strategy, explicit.auto) == ("retrieve_first", False)


def test_secrets_are_kept_out_of_the_configs_repr(defaults: Settings) -> None:
    settings = Settings(
        data_dir=defaults.data_dir,
        llm_api_key="sk-secret-1",
        database_url="postgresql+asyncpg://u:pw-secret-2@db/x",
        session_encryption_key="k1:" + "A" * 44,
    )
    shown = repr(model_client_config(settings)) + repr(session_store_config(settings))
    assert "sk-secret-1" not in shown
    assert "pw-secret-2" not in shown
    assert "AAAA" not in shown
    assert model_client_config(settings).api_key == "sk-secret-1"


def test_tool_calling_auto_means_learn_it_from_the_endpoint(defaults: Settings) -> None:
    streamed = defaults.model_copy(update={"llm_tool_calling": "streamed"})
    assert model_client_config(streamed).tool_calling == "streamed"
    assert model_client_config(defaults).tool_calling is None


def test_settings_from_values_read_no_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAGAGENT_AGENT_STRATEGY", "agentic")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("RAGAGENT_HEARTBEAT_INTERVAL", "not a number")
    isolated = Settings.from_values(heartbeat_interval=2.0)
    assert isolated.llm_base_url is None
    assert agent_config(isolated) == dataclasses.replace(
        AgentConfig(), auto=True, heartbeat_interval=2.0
    )
    with pytest.raises(ValueError, match="heartbeat_interval"):
        Settings.from_values(heartbeat_interval=-1)


async def test_the_whole_service_is_built_from_values_alone(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # The environment names a model endpoint and a server that do not exist; the service
    # built from values alone uses neither: embedded store, extractive answers.
    monkeypatch.setenv("RAGAGENT_QDRANT_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("RAGAGENT_LLM_BASE_URL", "http://127.0.0.1:9/v1")
    from service.runtime import Runtime
    from tests.helpers import local_embedder

    embedder = local_embedder()  # skips where the model is not provisioned
    runtime = await Runtime.open(Settings.from_values(data_dir=tmp_path), embedder=embedder)
    try:
        assert runtime.agent is not None
        assert runtime.agent.strategy == "extractive"
        assert type(runtime.store).__name__ == "EdgeStore"
        assert await runtime.retriever.search("robots", limit=1, threshold=0.0) == []
    finally:
        await runtime.close()
