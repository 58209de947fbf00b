"""Settings of the chat model, the agent that uses it, and the sessions it records."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, BaseModel, Field, SecretStr

Strategy = Literal["auto", "agentic", "agents_sdk", "retrieve_first", "extractive"]


class ModelSettings(BaseModel):
    """The OpenAI-compatible chat endpoint and its clocks."""

    llm_base_url: str | None = Field(
        None,
        validation_alias=AliasChoices("RAGAGENT_LLM_BASE_URL", "OPENAI_BASE_URL", "llm_base_url"),
        description="Base URL of an OpenAI-compatible Chat Completions endpoint "
        "(also read from OPENAI_BASE_URL).",
    )
    llm_api_key: SecretStr | None = Field(
        None,
        validation_alias=AliasChoices("RAGAGENT_LLM_API_KEY", "OPENAI_API_KEY", "llm_api_key"),
        description="API key of the model endpoint (also read from OPENAI_API_KEY).",
    )
    llm_model: str = Field("gpt-4o-mini", min_length=1, description="Chat model name.")
    llm_temperature: float = Field(
        0.2, ge=0, le=2, description="Default sampling temperature (requests may override)."
    )
    llm_max_tokens: int = Field(
        1024,
        ge=16,
        description="Most tokens the model may write per turn (fewer when the prompt leaves "
        "less room in the context window).",
    )
    llm_timeout: float = Field(
        60.0,
        gt=0,
        description="Seconds to connect to the model endpoint (at most 10), and what a "
        "non-streamed turn (deciding on tool calls) may take beyond LLM_FIRST_TOKEN_TIMEOUT.",
    )
    llm_max_retries: int = Field(
        2,
        ge=0,
        le=10,
        description="Retries of a model call that failed before answering (429, a 5xx not "
        "about the request, no connection); a stalled call is never retried.",
    )
    llm_stream_idle_timeout: float = Field(
        30.0,
        gt=0,
        description="Seconds a model stream may stay silent between chunks, once its first "
        "chunk came, before it is abandoned (MODEL_STREAM_STALLED; never retried).",
    )
    llm_first_token_timeout: float = Field(
        180.0,
        gt=0,
        description="Seconds the model may take to send its first chunk (a CPU server reads "
        "a long RAG prompt first) before the call is abandoned (MODEL_STREAM_STALLED; never "
        "retried).",
    )
    llm_context_tokens: int | None = Field(
        None,
        ge=512,
        description="The model's context window in tokens; the prompt (instructions, passages, "
        "history, question) and LLM_MAX_TOKENS are fitted into it. Unset: read from the "
        "endpoint (/v1/models max_model_len, llama.cpp /props), else known OpenAI models, "
        "else 4096.",
    )
    llm_tool_calling: Literal["auto", "streamed", "non_streamed", "none"] = Field(
        "auto",
        description="How the agentic strategy gets tool calls: streamed; non_streamed (a "
        "non-streamed turn decides, for servers that cannot stream tool calls, such as "
        "llama-cpp-python); none (the endpoint has no tool calling: retrieve_first runs); "
        "auto: learned from the endpoint once.",
    )
    llm_allowed_models: str = Field(
        "",
        description="Comma-separated model names a request may choose as QuestionRequest.model "
        "(same endpoint); LLM_MODEL is always allowed. Empty: only LLM_MODEL.",
    )
    system_prompt_file: Path | None = Field(
        None,
        description="File whose text opens the model's system prompt (who it is, what it "
        "answers about), read once at start-up; the service's grounding and citation rules "
        "always follow it. Unset: the built-in opening.",
    )


class AgentSettings(BaseModel):
    """Which strategy answers, and its limits."""

    agent_strategy: Strategy = Field(
        "auto",
        description="agentic (model calls the tool), agents_sdk (the agentic run on the OpenAI "
        "Agents SDK; needs the extra: pip install 'ragagent[agents-sdk]'), retrieve_first (one "
        "search, one model call), extractive (no model), or auto: agentic with a model "
        "endpoint, else extractive.",
    )
    max_tool_rounds: int = Field(4, ge=1, le=16, description="Most model turns with tool calls.")
    agents_sdk_tracing: bool = Field(
        False,
        description="agents_sdk strategy: keep the Agents SDK's own tracing on, which exports "
        "spans (never prompts, tool arguments or answers) to OpenAI's tracing endpoint with "
        "OPENAI_API_KEY. Off: the SDK traces nothing and nothing leaves for any host but the "
        "model endpoint.",
    )
    heartbeat_interval: float = Field(
        5.0, gt=0, description="Seconds of silence in a stream before a heartbeat event."
    )
    extractive_sentences: int = Field(
        6, ge=1, le=20, description="Sentences the extractive strategy quotes."
    )
    extractive_candidates: int = Field(
        24,
        ge=1,
        le=300,
        description="Pieces the extractive strategy embeds per question, the best by word "
        "overlap and chunk score: more can find better sentences, each costs model time "
        "before the first delta.",
    )


class SessionSettings(BaseModel):
    """The session database and how long conversations live."""

    database_url: SecretStr | None = Field(
        None,
        description="SQLAlchemy URL of the session database, e.g. "
        "postgresql+asyncpg://user@host/db; unset = SQLite under DATA_DIR.",
    )
    session_ttl: float = Field(
        1800.0, gt=0, description="Seconds of inactivity after which a session expires."
    )
    session_history_tokens: int = Field(
        2000, ge=0, description="Token budget of earlier turns sent to the model."
    )
    session_purge_interval: float = Field(
        60.0, gt=0, description="Seconds between purges of expired sessions."
    )
    run_retention: float = Field(
        3600.0,
        gt=0,
        description="Seconds a background run's events are kept after it ends, for "
        "ResumeStream; then the run is deleted with them (by the session purger).",
    )
    run_max_per_caller: int = Field(
        16,
        ge=1,
        description="Background runs one caller (principal) may have going on one replica; "
        "more are refused with RESOURCE_EXHAUSTED (TOO_MANY_STREAMS).",
    )
    run_poll_interval: float = Field(
        0.2,
        gt=0,
        le=5,
        description="Seconds between reads of a background run's new events when it runs on "
        "another replica (ResumeStream); the latency a resume adds there. A run on the same "
        "replica is followed without polling.",
    )
    session_encryption_key: SecretStr | None = Field(
        None,
        description="AES-256-GCM keys sealing the text of stored turns (questions, answers, "
        "errors, tool-call arguments and results): KEY_ID:BASE64_KEY[,KEY_ID:BASE64_KEY...]; "
        "the first seals, all open (rotation). `ragagent sessions new-key` makes one. Unset = "
        "stored in the clear. See docs/security.md, Data at rest.",
    )
    record_content: bool = Field(
        True,
        description="Store the text of turns; false keeps statuses, timings, sources and token "
        "counts only: GetSession shows empty questions and answers, no earlier turn is "
        "replayed to the model, and background runs are refused (their events are text).",
    )
    database_pool_size: int = Field(
        10,
        ge=1,
        description="Session-database connections kept open (PostgreSQL; on SQLite for reads "
        "only: its writes go through one connection of their own).",
    )
    database_max_overflow: int = Field(
        20,
        ge=0,
        description="Further connections opened under load and closed once idle. Mind the "
        "server's max_connections: replicas x (pool size + overflow) must fit.",
    )
    database_pool_timeout: float = Field(
        30.0,
        gt=0,
        description="Seconds a request waits for a free session-database connection before "
        "failing UNAVAILABLE.",
    )
