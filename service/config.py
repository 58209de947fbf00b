"""The service's one configuration object.

Every setting comes from the environment (prefix ``RAGAGENT_``) or a ``.env`` file in the
working directory; the CLI's flags override a few. ``ragagent serve --help`` lists them all
with these descriptions.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from service.errors import ConfigurationError


def _xdg(var: str, fallback: str) -> Path:
    return Path(os.environ.get(var) or Path.home() / fallback)


def default_data_dir() -> Path:
    """Where embedded state (Qdrant folder, SQLite database) lives unless configured."""
    return _xdg("XDG_DATA_HOME", ".local/share") / "ragagent"


def default_model_dir() -> Path:
    """Where `make setup` provisions the default embedding model."""
    return _xdg("XDG_CACHE_HOME", ".cache") / "ragagent" / "models" / "all-MiniLM-L6-v2-int8"


Strategy = Literal["auto", "agentic", "agents_sdk", "retrieve_first", "extractive"]


class Settings(BaseSettings):
    """All settings of ragagent. Env var = ``RAGAGENT_`` + the field name in upper case."""

    model_config = SettingsConfigDict(
        env_prefix="RAGAGENT_",
        env_file=".env",
        env_file_encoding="utf-8",
        extra="ignore",
        validate_default=True,
        populate_by_name=True,
    )

    # --- serving -----------------------------------------------------------------------
    address: str = Field(
        "127.0.0.1:50051",
        description="HOST:PORT the gRPC server listens on (port 0 picks a free port).",
    )
    grace_period: float = Field(
        10.0,
        ge=0,
        description="Seconds in-flight calls may take to finish after SIGTERM/SIGINT; an "
        "answer still running 1 s before the end (half the period if shorter) is stopped and "
        "sent with status CANCELLED, then UNAVAILABLE (SHUTTING_DOWN).",
    )
    blocking_threads: int = Field(
        4,
        ge=1,
        le=64,
        description="Threads of the one pool that runs blocking work off the event loop: "
        "chunking, local embedding, the embedded Qdrant store. More lets a query's search "
        "run beside an ingest's chunking; the embedded store writes one call at a time.",
    )
    max_message_bytes: int = Field(
        8 * 1024 * 1024,
        ge=64 * 1024,
        le=256 * 1024 * 1024,
        description="Largest gRPC message accepted or sent, in bytes.",
    )
    keepalive_time: float = Field(
        60.0,
        gt=0,
        description="Seconds between server keepalive pings on idle connections.",
    )
    keepalive_timeout: float = Field(
        20.0, gt=0, description="Seconds to wait for a keepalive ping's acknowledgement."
    )
    max_connection_age: float = Field(
        0.0,
        ge=0,
        description="Seconds after which the server asks a client connection to go away "
        "(GOAWAY), so that long-lived clients reconnect and spread over new replicas; "
        "0 = never.",
    )
    max_connection_age_grace: float = Field(
        30.0,
        ge=0,
        description="Seconds the calls open on a connection past its maximum age may take "
        "before it is closed.",
    )
    call_queue_timeout: int = Field(
        600,
        ge=1,
        le=86_400,
        description="Seconds a call may wait in grpc's queue for the server to take it up "
        "(all of its event loop busy) before grpc cancels it: the client then gets CANCELLED "
        "and the server never sees the call. Above any client deadline, so that a queued "
        "call ends by its own deadline (DEADLINE_EXCEEDED) instead; grpc's default is 30.",
    )
    metrics_address: str = Field(
        "",
        description="host:port of the Prometheus endpoint (GET /metrics); empty = not served.",
    )
    trace_content: bool = Field(
        False,
        description="Put question, search and tool-argument text on trace spans (off: spans "
        "carry names, sizes, timings and token counts only).",
    )
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(
        "INFO", description="Lowest log level written."
    )
    log_format: Literal["auto", "json", "console"] = Field(
        "auto", description="Log format; auto = console on a TTY, JSON otherwise."
    )
    data_dir: Path = Field(
        default_factory=default_data_dir,
        description="Folder for embedded state: the embedded Qdrant store (qdrant-edge, in "
        "edge/) and the SQLite session database. Only one process may open it at a time.",
    )

    # --- who is calling (docs/security.md) ----------------------------------------------
    tls_cert_file: Path | None = Field(
        None,
        description="PEM certificate chain the server presents; with TLS_KEY_FILE the server "
        "speaks TLS only. Re-read on SIGHUP without dropping calls.",
    )
    tls_key_file: Path | None = Field(
        None, description="PEM private key of TLS_CERT_FILE (re-read on SIGHUP)."
    )
    tls_client_ca_file: Path | None = Field(
        None,
        description="PEM CA certificates that sign client certificates; set = mutual TLS: "
        "every client must present one, and it names the principal (URI SAN such as a "
        "SPIFFE id, else DNS SAN, else CN).",
    )
    api_keys_file: Path | None = Field(
        None,
        description="File of API key hashes with their principal and roles, managed with "
        "`ragagent keys`; callers send `authorization: Bearer <key>`. Re-read within a "
        "second of a change.",
    )
    jwt_jwks_file: Path | None = Field(
        None, description="JSON Web Key Set file whose keys sign accepted JWTs (bearer tokens)."
    )
    jwt_jwks_url: str | None = Field(
        None,
        description="URL of the JSON Web Key Set (instead of JWT_JWKS_FILE); fetched at "
        "start-up, every JWT_JWKS_REFRESH seconds, and soon after an unknown key id.",
    )
    jwt_issuer: str | None = Field(None, description="Required `iss` claim of accepted JWTs.")
    jwt_audience: str | None = Field(
        None, description="Required `aud` claim of accepted JWTs (this service's name)."
    )
    jwt_roles_claim: str = Field(
        "roles",
        min_length=1,
        description="Claim holding a JWT's roles (a list, or a space-separated string); the "
        "principal is the `sub` claim.",
    )
    jwt_leeway: float = Field(
        30.0, ge=0, le=600, description="Seconds of clock skew allowed on exp/nbf/iat."
    )
    jwt_jwks_refresh: float = Field(
        300.0, ge=10, description="Seconds between fetches of JWT_JWKS_URL."
    )
    trusted_principal_header: str | None = Field(
        None,
        description="Header naming the principal, set by a mesh sidecar or gateway that "
        "authenticated the caller already. Only for servers no one else can reach.",
    )
    principal_roles: dict[str, list[str]] = Field(
        default_factory=dict,
        description="Roles of principals named by a client certificate or the trusted header, "
        'as JSON: {"spiffe://example.org/ci": ["corpus:write"], "*": ["ask"]}; "*" applies to '
        "any other such principal. API keys and JWTs carry their own roles.",
    )
    auth_protect_open_methods: bool = Field(
        False,
        description="Also require credentials for health checks and server reflection "
        "(open by default, for probes and grpcurl).",
    )
    rate_limit_requests_per_minute: int = Field(
        0, ge=0, description="Requests per minute per principal (bursts up to that); 0 = off."
    )
    rate_limit_concurrent_streams: int = Field(
        0, ge=0, description="Streaming calls one principal may have open at once; 0 = off."
    )

    # --- vector store ------------------------------------------------------------------
    qdrant_url: str | None = Field(
        None,
        description="URL of a Qdrant server or cluster; unset = embedded store under DATA_DIR.",
    )
    qdrant_api_key: SecretStr | None = Field(None, description="API key for QDRANT_URL.")
    qdrant_collection: str = Field(
        "ragagent", min_length=1, max_length=255, description="Qdrant collection name."
    )
    qdrant_timeout: float = Field(
        10.0, gt=0, description="Upper bound in seconds on one Qdrant request."
    )
    confidence_threshold: float = Field(
        0.35,
        ge=0,
        le=1,
        description="Default minimum relevance score (0-1) for a source to be used.",
    )
    # 0.5: the best cosine of a question naming what the book lacks reaches 0.63 on the
    # tuned set (ros2_control, next to the URDF hardware-interface pages); halved, it falls
    # below the default threshold. Answerable questions there never get the factor.
    unknown_term_penalty: float = Field(
        0.5,
        ge=0,
        le=1,
        description="Factor applied to every score when the question names a specific term "
        "(a rare word, a name, a version, an acronym, a compound identifier such as "
        "ros2_control) that no chunk contains; 1 disables the check.",
    )
    retrieval_mode: Literal["dense", "hybrid"] = Field(
        "dense",
        description="dense: embedding similarity alone. hybrid: embedding and BM25 term "
        "matches fused by rank (RRF); scores stay the embedding's cosine.",
    )
    reranker: Literal["none", "lexical"] = Field(
        "none",
        description="Reorders 3x the requested results after retrieval; lexical: a bonus for "
        "the query's rarer words found in a chunk. Scores and the threshold are unchanged.",
    )

    # --- embeddings --------------------------------------------------------------------
    embedding_provider: Literal["fastembed", "openai"] = Field(
        "fastembed", description="fastembed (local ONNX) or openai (any /v1/embeddings)."
    )
    embedding_model: str = Field(
        "sentence-transformers/all-MiniLM-L6-v2",
        min_length=1,
        description="Embedding model name (a fastembed model, or the model of the "
        "OpenAI-compatible endpoint).",
    )
    embedding_model_dir: Path | None = Field(
        default_factory=default_model_dir,
        description="Local ONNX model folder for fastembed (model.onnx, tokenizer.json, "
        "config.json); when it does not exist, fastembed resolves EMBEDDING_MODEL itself.",
    )
    embedding_max_tokens: int = Field(
        256, ge=16, le=8192, description="Token limit of one embedded text (longer is cut)."
    )
    embedding_batch_size: int = Field(
        64,
        ge=1,
        le=1024,
        description="Most texts per model call (local embedder) or per request (OpenAI-"
        "compatible endpoint).",
    )
    embedding_batch_tokens: int = Field(
        256,
        ge=1,
        le=65536,
        description="Most padded tokens per model call of the local embedder: short texts "
        "(the extractive strategy's sentences) share a call, chunks go one or two at a time, "
        "which on CPU was measured fastest for them.",
    )
    embedding_threads: int | None = Field(
        1,
        ge=1,
        description="ONNX runtime threads per fastembed inference; unset = all cores. One "
        "by default: concurrent requests already run on the blocking threads, and a query "
        "took 3.9 ms on one thread against 7.8 ms on all of 2 busy cores.",
    )
    embedding_base_url: str | None = Field(
        None, description="Base URL of the OpenAI-compatible embeddings endpoint."
    )
    embedding_api_key: SecretStr | None = Field(
        None, description="API key for EMBEDDING_BASE_URL (falls back to LLM_API_KEY)."
    )
    embedding_dimensions: int | None = Field(
        None, ge=1, description="Vector size of the OpenAI embedding model (asked if unset)."
    )

    # --- model -------------------------------------------------------------------------
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

    # --- agent -------------------------------------------------------------------------
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

    # --- sessions ----------------------------------------------------------------------
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
        "counts only: GetSession shows empty questions and answers, and no earlier turn is "
        "replayed to the model.",
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

    @field_validator("address")
    @classmethod
    def _check_address(cls, value: str) -> str:
        host, sep, port = value.rpartition(":")
        if not sep or not host or not port.isdigit() or int(port) > 65535:
            raise ValueError("must be HOST:PORT, e.g. 127.0.0.1:50051")
        return value

    @property
    def effective_strategy(
        self,
    ) -> Literal["agentic", "agents_sdk", "retrieve_first", "extractive"]:
        """The strategy that runs: auto resolves by whether a model endpoint is configured."""
        if self.agent_strategy != "auto":
            return self.agent_strategy
        return "agentic" if self.llm_configured else "extractive"

    @property
    def allowed_models(self) -> frozenset[str]:
        """The names a request may choose: LLM_ALLOWED_MODELS and LLM_MODEL."""
        listed = (name.strip() for name in self.llm_allowed_models.split(","))
        return frozenset({self.llm_model, *(name for name in listed if name)})

    @property
    def llm_configured(self) -> bool:
        """A model endpoint is configured (a base URL or an API key for the default one)."""
        return self.llm_base_url is not None or self.llm_api_key is not None

    @property
    def authentication_configured(self) -> bool:
        """Some way of authenticating callers is set up (else every caller is trusted)."""
        return bool(
            self.api_keys_file
            or self.jwt_jwks_file
            or self.jwt_jwks_url
            or self.tls_client_ca_file
            or self.trusted_principal_header
        )

    @property
    def qdrant_path(self) -> Path:
        """Folder of the old embedded store (qdrant-client's local mode), migrated at start."""
        return self.data_dir / "qdrant"

    @property
    def edge_path(self) -> Path:
        """Folder of the embedded store's shard (qdrant-edge) for the configured collection."""
        return self.data_dir / "edge" / self.qdrant_collection


def load_settings(**overrides: object) -> Settings:
    """Builds Settings, turning validation errors into a one-line ConfigurationError."""
    try:
        return Settings(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        first = exc.errors()[0]
        name = str(first["loc"][0]) if first["loc"] else "?"
        env = name if name.isupper() else f"RAGAGENT_{name.upper()}"
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        raise ConfigurationError(
            f"invalid setting {env}={first.get('input')!r}: {first['msg']}{more}"
        ) from None


def describe_settings() -> list[tuple[str, str, str]]:
    """(env var, default, description) for every setting, for --help and the README."""
    rows = []
    for name, field in Settings.model_fields.items():
        default = "" if field.default_factory is not None else repr(field.default)
        if field.default_factory is not None:
            default = "(see description)"
        rows.append((f"RAGAGENT_{name.upper()}", default, field.description or ""))
    return rows
