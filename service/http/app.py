"""The HTTP listener's ASGI application: one connectrpc application per service, CORS, and
the chat widget's files.

Requests go to the service named by the first segment of their path
(``/ragagent.v1.AgentService/AskStream``); connectrpc negotiates the protocol from the
content type: Connect (``application/json``, ``application/proto``, ``application/connect+*``)
or gRPC-Web (``application/grpc-web*``). A browser page of another origin may call only if
its origin is listed (RAGAGENT_HTTP_CORS_ORIGINS); the preflight says which headers Connect
and gRPC-Web need and which response headers the page may read.
"""

from __future__ import annotations

import mimetypes
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from connectrpc.method import IdempotencyLevel, MethodInfo, StreamType
from connectrpc.server import ConnectASGIApplication, Endpoint
from google.protobuf.descriptor import ServiceDescriptor
from google.protobuf.message_factory import GetMessageClass

from service.http.bridge import snake_case
from service.http.peer import bind_scope
from service.observability.logging import get_logger

log = get_logger("ragagent.access")

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
Asgi = Callable[[Scope, Receive, Send], Awaitable[None]]

# What Connect and gRPC-Web clients send and read (connect-es' cors lists), and ours.
ALLOWED_HEADERS = (
    "content-type, connect-protocol-version, connect-timeout-ms, connect-accept-encoding, "
    "connect-content-encoding, grpc-timeout, grpc-accept-encoding, x-grpc-web, x-user-agent, "
    "authorization, x-request-id, x-user-id, traceparent, tracestate"
)
EXPOSED_HEADERS = (
    "grpc-status, grpc-message, grpc-status-details-bin, x-request-id, trailer-x-request-id, "
    "x-trace-id, trailer-x-trace-id"
)
PREFLIGHT_MAX_AGE_S = "7200"


class DescriptorApplication(ConnectASGIApplication[Any]):
    """A service with no generated Connect code (grpc's health), from its descriptor."""

    def __init__(self, service: ServiceDescriptor, handlers: Any, **options: Any) -> None:
        self._path = f"/{service.full_name}"

        def endpoints(svc: Any) -> Mapping[str, Any]:
            found: dict[str, Any] = {}
            for method in service.methods:
                stream = StreamType.SERVER_STREAM if method.server_streaming else StreamType.UNARY
                info = MethodInfo(
                    name=method.name,
                    service_name=service.full_name,
                    input=GetMessageClass(method.input_type),
                    output=GetMessageClass(method.output_type),
                    idempotency_level=IdempotencyLevel.UNKNOWN,
                    stream_type=stream,
                )
                function = getattr(svc, snake_case(method.name))
                make = Endpoint.server_stream if method.server_streaming else Endpoint.unary
                found[f"{self._path}/{method.name}"] = make(info, function)
            return found

        super().__init__(service=handlers, endpoints=endpoints, **options)

    @property
    def path(self) -> str:
        return self._path


class HttpApp:
    """Routes by service, answers CORS, serves the widget's files (``web``)."""

    def __init__(
        self,
        services: Mapping[str, Asgi],
        *,
        methods: frozenset[str] = frozenset(),
        cors_origins: frozenset[str] = frozenset(),
        web: Path | None = None,
    ) -> None:
        self._services = dict(services)
        # Every served method path: anything else is answered here, and logged like gRPC's
        # unknown methods, instead of reaching connectrpc's bare 404.
        self._methods = methods
        self._origins = cors_origins
        self._web = web.resolve() if web is not None else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            return  # websockets are off (uvicorn ws="none")
        origin = _header(scope, b"origin")
        allowed = origin is not None and self._allows(origin)
        if scope["method"] == "OPTIONS" and _header(scope, b"access-control-request-method"):
            await self._preflight(send, origin if allowed else None)
            return
        if allowed and origin is not None:
            send = _with_cors(send, origin)
        path: str = scope["path"]
        app = self._services.get(path.rpartition("/")[0])
        if app is not None and (not self._methods or path in self._methods):
            bind_scope(scope)  # this task's: the chain makes the call's auth context of it
            await app(scope, receive, send)
        elif self._web is not None and scope["method"] in ("GET", "HEAD"):
            await self._file(path, send)
        else:
            log.info("rpc", method=path[:200], peer=_client(scope), code="UNIMPLEMENTED")
            await _plain(send, 404, b"no such service or method\n")

    def _allows(self, origin: str) -> bool:
        return "*" in self._origins or origin in self._origins

    async def _preflight(self, send: Send, origin: str | None) -> None:
        if origin is None:  # not an allowed origin: no CORS headers, the browser refuses
            await _plain(send, 403, b"cross-origin calls from this origin are not allowed\n")
            return
        headers = [
            (b"access-control-allow-origin", origin.encode()),
            (b"access-control-allow-methods", b"POST, GET"),
            (b"access-control-allow-headers", ALLOWED_HEADERS.encode()),
            (b"access-control-expose-headers", EXPOSED_HEADERS.encode()),
            (b"access-control-max-age", PREFLIGHT_MAX_AGE_S.encode()),
            (b"vary", b"Origin"),
        ]
        await send({"type": "http.response.start", "status": 204, "headers": headers})
        await send({"type": "http.response.body", "body": b""})

    async def _file(self, path: str, send: Send) -> None:
        assert self._web is not None
        name = "index.html" if path in ("", "/") else path.lstrip("/")
        target = (self._web / name).resolve()
        if not target.is_relative_to(self._web) or not target.is_file():
            await _plain(send, 404, b"not found\n")
            return
        body = target.read_bytes()  # a few small files, read once per page load
        kind = mimetypes.guess_type(target.name)[0] or "application/octet-stream"
        if kind.startswith("text/") or kind.endswith("javascript"):
            kind += "; charset=utf-8"
        headers = [
            (b"content-type", kind.encode()),
            (b"content-length", str(len(body)).encode()),
            (b"cache-control", b"no-cache"),
            (b"x-content-type-options", b"nosniff"),
        ]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def _with_cors(send: Send, origin: str) -> Send:
    async def sending(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            message = {
                **message,
                "headers": [
                    *message.get("headers", ()),
                    (b"access-control-allow-origin", origin.encode()),
                    (b"access-control-expose-headers", EXPOSED_HEADERS.encode()),
                    (b"vary", b"Origin"),
                ],
            }
        await send(message)

    return sending


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return str(value.decode("latin-1"))
    return None


def _client(scope: Scope) -> str:
    client = scope.get("client")
    return f"ipv4:{client[0]}:{client[1]}" if client else ""


async def _plain(send: Send, status: int, body: bytes) -> None:
    headers = [(b"content-type", b"text/plain; charset=utf-8")]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
