"""The service's one configuration object.

Every setting comes from the environment (prefix ``RAGAGENT_``) or a ``.env`` file in the
working directory; the CLI's flags override a few. ``ragagent serve --help`` lists them all
with these descriptions. The fields are declared by concern in this package's modules
(serving and callers, retrieval, answering) and gathered into one :class:`Settings` here,
which is the only thing read from the environment.
"""

from __future__ import annotations

from contextvars import ContextVar
from pathlib import Path
from typing import Literal

from pydantic import ValidationError
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from service.config.access import AccessSettings
from service.config.answering import AgentSettings, ModelSettings, SessionSettings, Strategy
from service.config.fleet import FleetSettings
from service.config.health import HealthSettings
from service.config.http import HttpSettings
from service.config.identities import IdentitySettings
from service.config.ingest_limits import IngestLimitSettings
from service.config.paths import default_data_dir, default_model_dir
from service.config.retrieval import EmbeddingSettings, StoreSettings
from service.config.search import SearchStepSettings
from service.config.serving import CallerSettings, ServingSettings
from service.errors import ConfigurationError

__all__ = [
    "Settings",
    "Strategy",
    "default_data_dir",
    "default_model_dir",
    "describe_settings",
    "load_settings",
]


# Set while Settings.from_values builds one: the environment and .env are not read.
_VALUES_ONLY: ContextVar[bool] = ContextVar("settings_values_only", default=False)


# Bases in reverse: pydantic lists inherited fields from the last base to the first, and this
# order (serving first) is the one of --help and the README's table.
class Settings(
    HttpSettings,
    AccessSettings,
    FleetSettings,
    IdentitySettings,
    IngestLimitSettings,
    SessionSettings,
    AgentSettings,
    ModelSettings,
    EmbeddingSettings,
    SearchStepSettings,
    StoreSettings,
    HealthSettings,
    CallerSettings,
    ServingSettings,
    BaseSettings,
):
    """All settings of ragagent. Env var = ``RAGAGENT_`` + the field name in upper case."""

    model_config = SettingsConfigDict(
        env_prefix="RAGAGENT_",
        env_file=".env",
        env_file_encoding="utf-8",
        extra="ignore",
        validate_default=True,
        populate_by_name=True,
    )

    @classmethod
    def from_values(cls, **values: object) -> Settings:
        """Settings from ``values`` and the defaults alone: no environment variable and no
        ``.env`` file is read, so a test or an embedding program builds exactly the service
        it describes (``Runtime.open(Settings.from_values(...))``)."""
        token = _VALUES_ONLY.set(True)
        try:
            return cls(**values)  # type: ignore[arg-type]
        finally:
            _VALUES_ONLY.reset(token)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        if _VALUES_ONLY.get():
            return (init_settings,)
        return (init_settings, env_settings, dotenv_settings, file_secret_settings)

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
        """Folder of qdrant-client's local mode, which runs the server code path in one
        process (tests and tools); the embedded default is qdrant-edge under edge_path."""
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
