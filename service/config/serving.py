"""Settings of serving and of who is calling (docs/security.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, field_validator

from service.config.paths import default_data_dir


class ServingSettings(BaseModel):
    """Where and how the server listens, and its shutdown."""

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

    @field_validator("address")
    @classmethod
    def _check_address(cls, value: str) -> str:
        host, sep, port = value.rpartition(":")
        if not sep or not host or not port.isdigit() or int(port) > 65535:
            raise ValueError("must be HOST:PORT, e.g. 127.0.0.1:50051")
        return value


class CallerSettings(BaseModel):
    """TLS, authentication, authorisation and rate limits (docs/security.md)."""

    tls_cert_file: Path | None = Field(
        None,
        description="PEM certificate chain the server presents; with TLS_KEY_FILE the server "
        "speaks TLS only, on the gRPC port and on the HTTP listener (HTTPS, no plaintext "
        "HTTP). Re-read on SIGHUP without dropping calls.",
    )
    tls_key_file: Path | None = Field(
        None, description="PEM private key of TLS_CERT_FILE (re-read on SIGHUP)."
    )
    tls_client_ca_file: Path | None = Field(
        None,
        description="PEM CA certificates that sign client certificates; set = mutual TLS on "
        "both listeners (gRPC and HTTP): every client must present one, and it names the "
        "principal (URI SAN such as a SPIFFE id, else DNS SAN, else CN). Re-read on SIGHUP.",
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
