"""The one way the client commands (ask, health, ingest --address, eval --address) reach a
server: plaintext or TLS, with a client certificate and/or an API key or token.

Each flag has an environment variable, so that secrets need not be typed where ``ps`` and
the shell history can see them:

=====================  ===============================  ====================================
flag                   environment                      meaning
=====================  ===============================  ====================================
``--tls``              ``RAGAGENT_CLIENT_TLS=1``        TLS, trusting the system's CAs
``--tls-ca``           ``RAGAGENT_CLIENT_TLS_CA``       TLS, trusting this PEM CA file
``--tls-cert``         ``RAGAGENT_CLIENT_TLS_CERT``     client certificate (mutual TLS)
``--tls-key``          ``RAGAGENT_CLIENT_TLS_KEY``      its private key
``--tls-server-name``  ``RAGAGENT_CLIENT_TLS_SERVER_NAME``  name to expect in the server's
                                                        certificate (default: the host)
``--api-key``          ``RAGAGENT_API_KEY``             sent as ``authorization: Bearer``
                                                        (an API key or a JWT)
=====================  ===============================  ====================================
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from service.config import Settings
from service.errors import ConfigurationError

_SECURITY_OFF: dict[str, object] = {
    "tls_cert_file": None,
    "tls_key_file": None,
    "tls_client_ca_file": None,
    "api_keys_file": None,
    "jwt_jwks_file": None,
    "jwt_jwks_url": None,
    "trusted_principal_header": None,
    "rate_limit_requests_per_minute": 0,
    "rate_limit_concurrent_streams": 0,
}


def in_process(settings: Settings) -> Settings:
    """The settings of a server a command starts for itself (demo, eval without --address):
    it listens on loopback for its one client, the same process, so TLS and credentials
    between the two would protect nothing."""
    return settings.model_copy(update={"address": "127.0.0.1:0", **_SECURITY_OFF})


def local_target(address: str) -> str:
    """Where a client on this host reaches a server bound to ``address``."""
    host, _, port = address.rpartition(":")
    # A server bound to every interface is reached on loopback (also inside its container).
    wildcard = host in ("0.0.0.0", "[::]", "")  # noqa: S104
    return f"{'127.0.0.1' if wildcard else host}:{port}"


def add_connection_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("connection (docs/security.md)")
    group.add_argument(
        "--tls", action="store_true", help="use TLS with the system's CAs (RAGAGENT_CLIENT_TLS)"
    )
    group.add_argument(
        "--tls-ca", help="PEM CA file to trust; implies TLS (RAGAGENT_CLIENT_TLS_CA)"
    )
    group.add_argument(
        "--tls-cert", help="PEM client certificate for mutual TLS (RAGAGENT_CLIENT_TLS_CERT)"
    )
    group.add_argument("--tls-key", help="PEM key of --tls-cert (RAGAGENT_CLIENT_TLS_KEY)")
    group.add_argument(
        "--tls-server-name",
        help="name the server certificate must carry, when it is not the host dialled "
        "(RAGAGENT_CLIENT_TLS_SERVER_NAME)",
    )
    group.add_argument(
        "--api-key",
        help="API key or JWT sent as 'authorization: Bearer'; prefer RAGAGENT_API_KEY, "
        "which other users cannot see in the process list",
    )


@dataclass(frozen=True, slots=True)
class Connection:
    target: str
    tls: bool = False
    ca: Path | None = None
    cert: Path | None = None
    key: Path | None = None
    server_name: str | None = None
    api_key: str | None = None


def _given(args: argparse.Namespace, flag: str, env: str) -> str | None:
    value = getattr(args, flag, None) or os.environ.get(env) or None
    return str(value) if value is not None else None


def connection(args: argparse.Namespace, address: str) -> Connection:
    """What the flags (else their environment variables) say about reaching ``address``."""
    ca = _given(args, "tls_ca", "RAGAGENT_CLIENT_TLS_CA")
    cert = _given(args, "tls_cert", "RAGAGENT_CLIENT_TLS_CERT")
    key = _given(args, "tls_key", "RAGAGENT_CLIENT_TLS_KEY")
    if (cert is None) != (key is None):
        raise ConfigurationError("--tls-cert and --tls-key go together: give both or neither")
    wants_tls = bool(getattr(args, "tls", False)) or os.environ.get("RAGAGENT_CLIENT_TLS") in (
        "1",
        "true",
        "yes",
    )
    return Connection(
        target=local_target(address),
        tls=wants_tls or ca is not None or cert is not None,
        ca=Path(ca) if ca else None,
        cert=Path(cert) if cert else None,
        key=Path(key) if key else None,
        server_name=_given(args, "tls_server_name", "RAGAGENT_CLIENT_TLS_SERVER_NAME"),
        api_key=_given(args, "api_key", "RAGAGENT_API_KEY"),
    )


def _read(path: Path | None, what: str) -> bytes | None:
    if path is None:
        return None
    try:
        return path.read_bytes()
    except OSError as error:
        raise ConfigurationError(f"cannot read the {what} {path}: {error.strerror}") from None


def open_channel(conn: Connection) -> grpc.aio.Channel:
    """A channel to ``conn.target``; use it with ``async with``."""
    # grpc-stubs types client interceptors as a placeholder that nothing satisfies.
    interceptors: Any = _bearer_interceptors(conn.api_key) if conn.api_key else None
    if not conn.tls:
        host = conn.target.rpartition(":")[0]
        if conn.api_key and not (host.startswith("127.") or host in ("localhost", "[::1]")):
            print(
                f"ragagent: warning: sending the API key to {conn.target} without TLS",
                file=sys.stderr,
            )
        return grpc.aio.insecure_channel(conn.target, interceptors=interceptors)
    credentials = grpc.ssl_channel_credentials(
        root_certificates=_read(conn.ca, "CA file"),
        private_key=_read(conn.key, "client key"),
        certificate_chain=_read(conn.cert, "client certificate"),
    )
    options = [("grpc.ssl_target_name_override", conn.server_name)] if conn.server_name else []
    return grpc.aio.secure_channel(
        conn.target, credentials, options=options, interceptors=interceptors
    )


class _Bearer:
    """Adds ``authorization: Bearer <credential>`` to a call's metadata (call credentials
    would do it too, but only over TLS; a laptop server listens in plaintext)."""

    def __init__(self, credential: str) -> None:
        self._header = ("authorization", f"Bearer {credential}")

    def details(self, details: grpc.aio.ClientCallDetails) -> grpc.aio.ClientCallDetails:
        metadata = grpc.aio.Metadata(*(details.metadata or ()), self._header)
        return grpc.aio.ClientCallDetails(
            details.method,
            details.timeout,
            metadata,
            details.credentials,
            details.wait_for_ready,
        )


# grpc.aio files an interceptor under the first of the four kinds it is an instance of, so
# each call shape needs an object of its own.
class _UnaryUnary(_Bearer, grpc.aio.UnaryUnaryClientInterceptor):  # type: ignore[type-arg]
    async def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        return await continuation(self.details(details), request)


class _UnaryStream(_Bearer, grpc.aio.UnaryStreamClientInterceptor):  # type: ignore[type-arg]
    async def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        return await continuation(self.details(details), request)


class _StreamUnary(_Bearer, grpc.aio.StreamUnaryClientInterceptor):  # type: ignore[type-arg]
    async def intercept_stream_unary(self, continuation: Any, details: Any, requests: Any) -> Any:
        return await continuation(self.details(details), requests)


class _StreamStream(_Bearer, grpc.aio.StreamStreamClientInterceptor):  # type: ignore[type-arg]
    async def intercept_stream_stream(self, continuation: Any, details: Any, requests: Any) -> Any:
        return await continuation(self.details(details), requests)


def _bearer_interceptors(credential: str) -> list[_Bearer]:
    return [kind(credential) for kind in (_UnaryUnary, _UnaryStream, _StreamUnary, _StreamStream)]


def connection_hint(error: grpc.aio.AioRpcError, conn: Connection) -> str | None:
    """The likely cause when TLS and plaintext (or a missing client certificate) meet: grpc
    reports them as UNAVAILABLE with a transport message nobody reads as advice."""
    if error.code() != grpc.StatusCode.UNAVAILABLE:
        return None
    details = f"{error.details()} {error.debug_error_string()}"
    if not conn.tls and "Socket closed" in details:
        return (
            "the server likely speaks TLS: pass --tls-ca CA.pem (or --tls for a public CA), "
            "and --tls-cert/--tls-key if it asks for a client certificate"
        )
    if conn.tls and "WRONG_VERSION_NUMBER" in details:
        return "the server speaks plaintext, not TLS: drop --tls/--tls-ca (RAGAGENT_CLIENT_TLS*)"
    if conn.tls and "CERTIFICATE_VERIFY_FAILED" in details:
        return (
            "the server's certificate is not trusted: pass --tls-ca with the CA that signed "
            "it, and --tls-server-name if it names another host"
        )
    if conn.tls and conn.cert is None and "Socket closed" in details:
        return (
            "the server likely requires a client certificate (mutual TLS): pass --tls-cert "
            "and --tls-key"
        )
    return None


def print_rpc_error(error: grpc.aio.AioRpcError, conn: Connection, what: str) -> None:
    """``ragagent: WHAT: CODE: details`` on stderr, and the likely cause when there is one."""
    print(f"ragagent: {what}{error.code().name}: {error.details()}", file=sys.stderr)
    hint = connection_hint(error, conn)
    if hint is not None:
        print(f"ragagent: {hint}", file=sys.stderr)
