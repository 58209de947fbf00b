"""The composition root's translation: ``Settings`` -> each component's own config.

The only place besides the root's builders (``service.runtime``, ``service.server``,
``service.wiring``) and the CLI that reads ``Settings``; everything below gets a small frozen
config of its own and never sees the other settings. ``tests/test_configs.py`` holds each
config's defaults equal to the settings' defaults.
"""

from __future__ import annotations

from service.agent import AgentConfig, ModelClientConfig
from service.config import Settings
from service.sessions import Pool, SessionStoreConfig, sqlite_url


def agent_config(settings: Settings) -> AgentConfig:
    """How the agent answers; auto resolves here (agentic with a model endpoint)."""
    return AgentConfig(
        strategy=settings.effective_strategy,
        auto=settings.agent_strategy == "auto",
        confidence_threshold=settings.confidence_threshold,
        temperature=settings.llm_temperature,
        max_tool_rounds=settings.max_tool_rounds,
        heartbeat_interval=settings.heartbeat_interval,
        extractive_sentences=settings.extractive_sentences,
        extractive_candidates=settings.extractive_candidates,
        agents_sdk_tracing=settings.agents_sdk_tracing,
    )


def model_client_config(settings: Settings) -> ModelClientConfig:
    """The chat endpoint and its clocks."""
    key = settings.llm_api_key
    tool_calling = settings.llm_tool_calling
    return ModelClientConfig(
        base_url=settings.llm_base_url,
        api_key=key.get_secret_value() if key is not None else None,
        model=settings.llm_model,
        max_tokens=settings.llm_max_tokens,
        timeout=settings.llm_timeout,
        max_retries=settings.llm_max_retries,
        idle_timeout=settings.llm_stream_idle_timeout,
        first_token_timeout=settings.llm_first_token_timeout,
        context_tokens=settings.llm_context_tokens,
        tool_calling=None if tool_calling == "auto" else tool_calling,
    )


def session_store_config(settings: Settings) -> SessionStoreConfig:
    """RAGAGENT_DATABASE_URL, else SQLite under RAGAGENT_DATA_DIR."""
    url = settings.database_url
    key = settings.session_encryption_key
    return SessionStoreConfig(
        url=url.get_secret_value() if url is not None else sqlite_url(settings.data_dir),
        ttl_s=settings.session_ttl,
        stale_turn_s=settings.turn_lease,
        history_tokens=settings.session_history_tokens,
        run_retention_s=settings.run_retention,
        pgbouncer=settings.database_pgbouncer,
        pool=Pool(
            size=settings.database_pool_size,
            max_overflow=settings.database_max_overflow,
            timeout_s=settings.database_pool_timeout,
        ),
        record_content=settings.record_content,
        encryption_key=key.get_secret_value() if key is not None else None,
    )
