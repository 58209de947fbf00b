"""The gRPC chain's layers around every Connect and gRPC-Web call.

The layers are the very objects the grpc.aio chain runs (server.py builds them once), so
a principal's rate limit and stream count, the metrics and the access log are shared by
both listeners. connectrpc runs metadata interceptors at the front of the list before it
reads the request body; two of them carry the layers:

- :class:`CallEnds` starts first and so ends last: it makes the :class:`~service.api.
  interceptors.Call` from the HTTP request, maps how the call ended to a Connect error
  (the same statuses and ``google.rpc`` details as gRPC) and runs every layer's ``end``;
- :class:`CallStarts` runs the layers' ``start`` (authentication, roles, limits); a refusal
  raised here ends the call before its body is read.

While a stream's handler runs, :func:`credential_watched` checks its credential again as
the gRPC chain does (a key revoked, a token or certificate expired, a client CA removed).

Each request message goes through the layers' ``message`` in :mod:`.bridge`, where it has
been decoded. Nothing here reads the request's bytes: connectrpc decodes JSON and binary.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Sequence
from contextvars import ContextVar
from typing import Any

import grpc
from connectrpc.code import Code
from connectrpc.errors import ConnectError, ErrorDetail
from connectrpc.method import StreamType
from connectrpc.request import RequestContext
from google.protobuf.message import Message
from protobuf.wkt import Any as WireAny

from service.api.interceptors import REQUEST_ID_HEADER, Call, Layer
from service.api.interceptors.call import usable_id
from service.api.interceptors.chain import watch_credential
from service.api.interceptors.layers import start_layers
from service.errors import FieldViolation, InvalidArgument, RagAgentError, to_rpc_status
from service.http.peer import peer_auth
from service.observability.logging import get_logger

log = get_logger("ragagent.server")

_SHAPES = {
    StreamType.UNARY: "unary",
    StreamType.SERVER_STREAM: "server_stream",
    StreamType.CLIENT_STREAM: "client_stream",
    StreamType.BIDI_STREAM: "bidi_stream",
}
# connectrpc's own message for a body its codec cannot read.
_UNDECODABLE = "unmarshal message"

_BY_NUMBER = {code.value[0]: code for code in grpc.StatusCode}

_current: ContextVar[Call | None] = ContextVar("ragagent_http_call", default=None)


def current_call() -> Call:
    """The call being handled in this task (set by :class:`CallEnds` before the handler)."""
    call = _current.get()
    if call is None:  # the bridge without the interceptors: a wiring mistake, fail closed
        raise RuntimeError("a Connect handler ran without the ragagent interceptors")
    return call


class Aborted(Exception):
    """``context.abort()`` of a servicer (grpc's health service) over Connect."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def grpc_code(code: Code) -> grpc.StatusCode:
    return grpc.StatusCode.CANCELLED if code is Code.CANCELED else grpc.StatusCode[code.name]


def connect_code(code: grpc.StatusCode) -> Code:
    return Code.CANCELED if code is grpc.StatusCode.CANCELLED else Code[code.name]


def _peer(ctx: RequestContext[Any, Any]) -> str:
    """grpc's spelling of the peer (``ipv4:127.0.0.1:5000``), so access log lines match."""
    address = ctx.client_address
    if not address:
        return ""
    host = address.rpartition(":")[0]
    return f"ipv6:[{host}]:{address.rpartition(':')[2]}" if ":" in host else f"ipv4:{address}"


def start_call(ctx: RequestContext[Any, Any]) -> Call:
    method = ctx.method
    headers = tuple((key.lower(), value) for key, value in ctx.request_headers.allitems())
    shape = _SHAPES[method.stream_type]
    call = Call(
        method=f"/{method.service_name}/{method.name}",
        peer=_peer(ctx),
        metadata=headers,
        auth=peer_auth(),
        streaming=shape != "unary",
        shape=shape,
    )
    call.request_id = call.header(REQUEST_ID_HEADER) or str(uuid.uuid4())
    return call


def to_connect_error(error: Exception, call: Call) -> ConnectError:
    """The Connect error of how a call ended: a RagAgentError keeps its code and details
    (BadRequest, ErrorInfo, RetryInfo as Connect error details), connectrpc's own errors
    (deadline, client gone, size) stay as they are, anything else is INTERNAL."""
    if isinstance(error, ConnectError):
        if error.code is not Code.INVALID_ARGUMENT or not error.message.startswith(_UNDECODABLE):
            return error
        # The same answer as gRPC's for undecodable bytes: BadRequest naming the request.
        log.warning("undecodable request", error=error.message[:200])
        error = InvalidArgument(
            [
                FieldViolation(
                    "request",
                    f"the body is not a valid message of this method ({error.message[:200]})",
                    "request.undecodable",
                )
            ]
        )
    if isinstance(error, Aborted):
        return ConnectError(connect_code(error.code), error.message)
    if not isinstance(error, RagAgentError | NotImplementedError):
        log.error("unhandled error", error_type=type(error).__name__, exc_info=error)
    status = to_rpc_status(error, request_id=call.request_id)
    details = [ErrorDetail(WireAny(type_url=d.type_url, value=d.value)) for d in status.details]
    return ConnectError(connect_code(_BY_NUMBER[status.code]), status.message, details)


class CallEnds:
    """Makes the call, and ends it: the status mapped, every layer's ``end`` (reversed)."""

    def __init__(self, layers: Sequence[Layer]) -> None:
        self._layers = tuple(reversed(layers))

    async def on_start(self, ctx: RequestContext[Any, Any]) -> Call:
        call = start_call(ctx)
        _current.set(call)
        ctx.response_headers[REQUEST_ID_HEADER] = call.request_id
        return call

    async def on_end(
        self, call: Call, ctx: RequestContext[Any, Any], error: Exception | None
    ) -> None:
        mapped = None if error is None else to_connect_error(error, call)
        if mapped is None and call.shape in ("unary", "client_stream"):
            call.sent = 1  # the one response (streams count theirs as they go)
        for key, value in (*call.trailing, (REQUEST_ID_HEADER, call.request_id)):
            ctx.response_trailers[key] = value
        code = grpc.StatusCode.OK if mapped is None else grpc_code(mapped.code)
        for layer in self._layers:
            layer.end(call, code)
        if mapped is not None and mapped is not error:
            raise mapped  # replaces the error connectrpc reports


class CallStarts:
    """The layers' ``start`` (and a shared store's ``admit``) in order: request ids, trace,
    authentication, roles, limits."""

    def __init__(self, layers: Sequence[Layer]) -> None:
        self._layers = tuple(layers)

    async def on_start(self, ctx: RequestContext[Any, Any]) -> None:
        await start_layers(self._layers, current_call())

    async def on_end(
        self, token: None, ctx: RequestContext[Any, Any], error: Exception | None
    ) -> None:
        return None


@contextlib.asynccontextmanager
async def credential_watched(call: Call) -> AsyncIterator[None]:
    """Around a stream's handler: once the call's credential lapses the handler is
    cancelled and the call ends with why (UNAUTHENTICATED); what it committed stays. Any
    other cancellation (the client gone, the deadline) goes on as it is."""
    task = asyncio.current_task()
    if not call.streaming or call.recheck is None or task is None:
        yield
        return
    watchdog = asyncio.create_task(watch_credential(call, task), name="credential-watch")
    try:
        yield
    except asyncio.CancelledError:
        if call.lapsed is None or task.uncancel() > 0:
            raise
        raise call.lapsed from None
    finally:
        watchdog.cancel()


def see_message(
    layers: Sequence[Layer], ctx: RequestContext[Any, Any], message: Message, index: int | None
) -> Call:
    """Every layer's ``message`` (request id, validation); the request id header follows a
    request's own ``request_id`` as gRPC's does."""
    call = current_call()
    for layer in layers:
        layer.message(call, message, index)
    if usable_id(call.request_id):
        ctx.response_headers[REQUEST_ID_HEADER] = call.request_id
    return call
