"""The HTTP listener: uvicorn serving the ASGI application on the gRPC server's event loop.

uvicorn runs in the same process and loop as grpc.aio, so both listeners share the runtime,
the servicers and the layers' state. Its own signal handling is not used (``serve`` owns
SIGTERM): the listener is started and stopped by :class:`~service.server.AgentServer`. The
socket is bound here, so that a busy port is a clear configuration error and port 0 tells
which port it got. uvicorn's access log is off: the chain's access log has every call.

With an ``ssl_context`` (the gRPC listener's certificate, key and client CAs: see
:meth:`~service.security.tls.ServerTls.https`) the listener speaks HTTPS only; its
protocol puts the client's certificate in each request's scope (:mod:`.peer`).
"""

from __future__ import annotations

import socket
import ssl
from typing import Any

import uvicorn

from service.errors import ConfigurationError
from service.http.peer import PeerProtocol


def _bind(address: str) -> socket.socket:
    host, _, port = address.rpartition(":")
    host = host.strip("[]") or "0.0.0.0"  # noqa: S104 (the operator's choice of address)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP named, not 0: asyncio sets TCP_NODELAY only on sockets that say so, and
    # without it a stream's small writes wait for the client's delayed ACK (40 ms).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, int(port)))
        sock.listen(2048)
    except OSError as error:
        sock.close()
        raise ConfigurationError(
            f"cannot listen on {address} (RAGAGENT_HTTP_ADDRESS or --http-address): {error}; "
            "is another server using that port?"
        ) from None
    sock.setblocking(False)
    return sock


class HttpListener:
    """uvicorn (HTTP/1.1, httptools) serving ``app`` at ``address``, over TLS with
    ``ssl_context``."""

    def __init__(
        self,
        app: Any,
        address: str,
        *,
        max_connections: int | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.address = address
        self.tls = ssl_context is not None
        self._config = uvicorn.Config(
            app,
            http=PeerProtocol,
            ws="none",
            lifespan="off",
            access_log=False,
            log_config=None,
            # The peer is the TCP peer: forwarded headers are a claim, as x-user-id is.
            proxy_headers=False,
            server_header=False,
            limit_concurrency=max_connections,
            # Connections idle longer than this are closed; streams are never idle for long
            # (heartbeats), browsers reuse a connection across questions.
            timeout_keep_alive=30,
            # The context as it is: uvicorn's own would read the files again, once.
            ssl_context_factory=(lambda _config, _default: ssl_context) if ssl_context else None,
        )
        self._server: uvicorn.Server | None = None
        self._socket: socket.socket | None = None
        self.port = 0

    async def start(self) -> int:
        sock = self._socket = _bind(self.address)
        self.port = sock.getsockname()[1]
        self._config.load()
        server = self._server = uvicorn.Server(self._config)
        # What uvicorn's serve() does before startup(), without its signal handlers.
        server.lifespan = self._config.lifespan_class(self._config)
        await server.startup(sockets=[sock])
        return self.port

    async def stop(self, grace: float) -> None:
        """Stops accepting, lets open calls finish for ``grace`` s, then cancels them."""
        server, self._server = self._server, None
        if server is None:
            return
        self._config.timeout_graceful_shutdown = max(1, round(grace))
        server.should_exit = True
        await server.shutdown(sockets=[self._socket] if self._socket else None)
