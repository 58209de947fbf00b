"""The listeners' settings: gRPC channel options, the HTTP listener, and what to warn about
before serving. Read from ``Settings`` by the composition root (``service.server``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from service.api.interceptors import Layer
from service.config import Settings
from service.errors import ConfigurationError
from service.observability.logging import get_logger
from service.wiring.security import Security

if TYPE_CHECKING:
    from service.http import HttpListener

log = get_logger("ragagent.server")


def check_web(settings: Settings) -> None:
    """The chat widget must be built before --web can serve it."""
    if not (settings.http_address and settings.http_web):
        return
    from service.http import default_web_dir

    web = settings.http_web_dir or default_web_dir()
    if not (web / "index.html").is_file():
        raise ConfigurationError(
            f"--web / RAGAGENT_HTTP_WEB: the chat widget is not built ({web}/index.html is "
            "missing); run `make web`, or set RAGAGENT_HTTP_WEB_DIR to its folder"
        )


def http_listener(
    settings: Settings, layers: list[Layer], security: Security, *servicers: Any
) -> HttpListener | None:
    """Connect and gRPC-Web at RAGAGENT_HTTP_ADDRESS, if set (service.http); over TLS,
    with the gRPC listener's certificate and client CAs, whenever gRPC has TLS."""
    if not settings.http_address:
        return None
    from service.http import HttpListener, connect_application, default_web_dir

    agent, corpus, sessions, health = servicers
    web = (settings.http_web_dir or default_web_dir()) if settings.http_web else None
    app = connect_application(
        agent=agent,
        corpus=corpus,
        sessions=sessions,
        health=health,
        layers=layers,
        max_message_bytes=settings.max_message_bytes,
        cors_origins=settings.cors_origins,
        web=web,
    )
    tls = security.tls
    return HttpListener(
        app, settings.http_address, ssl_context=tls.https() if tls is not None else None
    )


def warn_if_exposed(settings: Settings) -> None:
    """Say so when more than this machine can reach a port that trusts what callers claim:
    every caller without authentication, or the principal header without a sidecar in front."""
    host = settings.address.rpartition(":")[0].strip("[]")
    if host in ("localhost", "::1") or host.startswith("127."):
        return
    if not settings.authentication_configured:
        log.warning(
            "listening beyond loopback without authentication: anyone who can reach this port "
            "can ask, read and delete every caller's conversations (x-user-id is only a claim) "
            "and rewrite the corpus; set RAGAGENT_API_KEYS_FILE, RAGAGENT_JWT_JWKS_FILE/_URL or "
            "RAGAGENT_TLS_CLIENT_CA_FILE (see docs/security.md)",
            address=settings.address,
        )
    elif settings.trusted_principal_header:
        log.warning(
            "listening beyond loopback with RAGAGENT_TRUSTED_PRINCIPAL_HEADER set: anyone who "
            "reaches this port without going through the sidecar can name any principal in "
            "that header; bind to 127.0.0.1 behind the sidecar (see docs/security.md)",
            address=settings.address,
            header=settings.trusted_principal_header,
        )


def channel_options(settings: Settings) -> list[tuple[str, Any]]:
    return [
        ("grpc.max_receive_message_length", settings.max_message_bytes),
        ("grpc.max_send_message_length", settings.max_message_bytes),
        ("grpc.keepalive_time_ms", int(settings.keepalive_time * 1000)),
        ("grpc.keepalive_timeout_ms", int(settings.keepalive_timeout * 1000)),
        ("grpc.keepalive_permit_without_calls", 1),
        # Clients that keep long streams alive with their own pings must not be cut off.
        ("grpc.http2.min_recv_ping_interval_without_data_ms", 10_000),
        ("grpc.http2.max_pings_without_data", 0),
        # grpc sets SO_REUSEPORT by default: a second server on a busy port would then start
        # "serving" and the kernel would split the traffic between the two.
        ("grpc.so_reuseport", 0),
        # grpc.aio takes up one new call per turn of the event loop; a loop busy with many
        # streams leaves calls in the C core's queue, which after 30 s (its default) cancels
        # them unseen: the client gets a bare CANCELLED, the access log has nothing.
        ("grpc.server_max_unrequested_time_in_server", settings.call_queue_timeout),
        *_connection_age(settings),
    ]


def _connection_age(settings: Settings) -> list[tuple[str, Any]]:
    """GOAWAY after RAGAGENT_MAX_CONNECTION_AGE: a client behind a layer-4 balancer
    reconnects, and its new connection may land on a replica added since."""
    if settings.max_connection_age <= 0:
        return []
    return [
        ("grpc.max_connection_age_ms", int(settings.max_connection_age * 1000)),
        ("grpc.max_connection_age_grace_ms", int(settings.max_connection_age_grace * 1000)),
    ]
