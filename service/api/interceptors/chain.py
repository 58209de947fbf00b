"""The interceptor chain: one wrapper around every handler, whatever its call shape.

The chain reads the call once when it starts (:class:`~.call.Call`), decodes each request
message itself (so that undecodable bytes are INVALID_ARGUMENT, not grpc's UNKNOWN), runs
the layers in the order they were given, and maps how the handler ended to the call's status
in one place: a :class:`~service.errors.RagAgentError` keeps its code and details, anything
else is INTERNAL (logged with its traceback), a cancellation is re-raised untouched. After a
call has been cancelled the context is never touched again (grpc frees the call's core
object; see :mod:`.call`).

All four call shapes are wrapped, bidirectional streams (server reflection) included, so no
RPC skips the chain. Unknown methods never reach a handler; the chain still logs them.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, cast

import grpc
from google.protobuf.message import DecodeError
from grpc_status import rpc_status

from service.api.interceptors.call import REQUEST_ID_HEADER, Call
from service.api.interceptors.layers import Layer, start_layers
from service.errors import FieldViolation, InvalidArgument, RagAgentError, to_rpc_status
from service.observability.logging import get_logger

log = get_logger("ragagent.server")

Context = grpc.aio.ServicerContext[Any, Any]
Deserializer = Callable[[bytes], Any] | None


class _Steps:
    """What the chain does for one method, shared by the four call shapes."""

    def __init__(self, layers: Sequence[Layer], method: str, deserializer: Deserializer) -> None:
        self.layers = layers
        self.method = method
        self._deserializer = deserializer

    def decode(self, call: Call, raw: bytes, index: int | None) -> Any:
        """The request message of ``raw``, seen by every layer; undecodable bytes are the
        caller's mistake: INVALID_ARGUMENT, one WARNING line, no traceback."""
        if self._deserializer is None:
            return raw
        try:
            message = self._deserializer(raw)
        except (DecodeError, ValueError) as error:  # upb: bad wire format, bad UTF-8, depth
            where = "request" if index is None else f"[{index}]"
            log.warning(
                "undecodable request",
                message_index=index,
                size_bytes=len(raw),
                error=str(error)[:200],
            )
            raise InvalidArgument(
                [
                    FieldViolation(
                        where,
                        f"the bytes are not a valid protobuf message of this method ({error})",
                        "request.undecodable",
                    )
                ]
            ) from None
        for layer in self.layers:
            layer.message(call, message, index)
        return message

    async def stream(self, call: Call, raw: AsyncIterable[bytes]) -> AsyncIterator[Any]:
        index = 0
        async for item in raw:
            yield self.decode(call, item, index)
            index += 1

    @contextlib.asynccontextmanager
    async def outcome(self, call: Call, context: Context) -> AsyncIterator[None]:
        """Runs the layers' starts, then the handler; turns how it ended into the status.

        While a stream is open its credential is checked again every ``RECHECK_S``: one
        that lapsed (a key revoked, a token or certificate expired, a CA removed) cancels
        the handler, and the call ends UNAUTHENTICATED; what the handler committed before
        stays."""
        watchdog: asyncio.Task[None] | None = None
        try:
            await start_layers(self.layers, call)
            if call.streaming and call.recheck is not None:
                handler = asyncio.current_task()
                assert handler is not None
                watchdog = asyncio.create_task(
                    watch_credential(call, handler), name="credential-watch"
                )
            yield
        except grpc.aio.AbortError:  # the servicers never abort; pass it through as it is
            self._end(call, grpc.StatusCode.UNKNOWN)
            raise
        except asyncio.CancelledError:
            lapsed = call.lapsed
            task = asyncio.current_task()
            if lapsed is None or task is None or task.uncancel() > 0:
                self._end(call, grpc.StatusCode.CANCELLED)  # a real cancellation: re-raised
                raise
            await self._fail(call, context, lapsed)
        except Exception as error:  # noqa: BLE001 (mapped: RagAgentError, else INTERNAL)
            await self._fail(call, context, error)
        except BaseException:  # the stream was closed: never swallowed
            self._end(call, grpc.StatusCode.CANCELLED)
            raise
        else:
            if call.shape in ("unary", "client_stream"):
                call.sent = 1  # the one response (streams count theirs as they go)
            context.set_trailing_metadata(((REQUEST_ID_HEADER, call.request_id), *call.trailing))
            self._end(call, grpc.StatusCode.OK)
        finally:
            if watchdog is not None:
                watchdog.cancel()

    async def _fail(self, call: Call, context: Context, error: Exception) -> None:
        """Ends the call with the status ``error`` maps to (INTERNAL for a bug)."""
        status = rpc_status.to_status(to_rpc_status(error, request_id=call.request_id))
        if isinstance(error, NotImplementedError):
            # A method the library declares but this server does not offer (grpc's
            # Health/List): the caller's choice, not a bug; no traceback, and the
            # access log's line (rate-limited for refusals) is the record of it.
            pass
        elif not isinstance(error, RagAgentError):
            log.exception("unhandled error", error_type=type(error).__name__)
        self._end(call, status.code)
        await context.abort(
            status.code,
            status.details,
            (*status.trailing_metadata, (REQUEST_ID_HEADER, call.request_id), *call.trailing),
        )

    def _end(self, call: Call, code: grpc.StatusCode) -> None:
        for layer in reversed(self.layers):
            layer.end(call, code)


# How often an open stream's credential is checked again: a revoked key ends its streams
# within this plus the key file's one-second reload; a removed CA within this of SIGHUP.
RECHECK_S = 0.5


async def watch_credential(call: Call, handler: asyncio.Task[Any]) -> None:
    """Checks the call's credential until cancelled; cancels ``handler`` once it lapsed
    (the HTTP chain runs it too: service.http.chain.credential_watched)."""
    assert call.recheck is not None
    while True:
        await asyncio.sleep(RECHECK_S)
        try:
            call.recheck()
        except RagAgentError as error:
            log.warning("credential lapsed during the call; ending it", reason=error.reason)
            call.lapsed = error
            handler.cancel()
            return


async def _send_request_id(call: Call, context: Context) -> None:
    await context.send_initial_metadata(((REQUEST_ID_HEADER, call.request_id),))


def _wrap(steps: _Steps, handler: grpc.RpcMethodHandler[Any, Any]) -> Any:
    """The handler of the same shape with the chain around it, taking raw request bytes."""
    method = steps.method
    common = {"request_deserializer": None, "response_serializer": handler.response_serializer}
    if handler.unary_unary:
        unary = cast(Callable[[Any, Context], Awaitable[Any]], handler.unary_unary)

        async def unary_unary(raw: bytes, context: Context) -> Any:
            call = Call.starting(method, context)
            async with steps.outcome(call, context):
                request = steps.decode(call, raw, None)
                await _send_request_id(call, context)
                return await unary(request, context)

        return grpc.unary_unary_rpc_method_handler(unary_unary, **common)
    if handler.unary_stream:
        streaming = cast(Callable[[Any, Context], Any], handler.unary_stream)
        if not inspect.isasyncgenfunction(streaming):  # writes with context.write()

            async def unary_writer(raw: bytes, context: Context) -> None:
                call = Call.starting(method, context, streaming=True, shape="server_stream")
                async with steps.outcome(call, context):
                    request = steps.decode(call, raw, None)
                    await _send_request_id(call, context)
                    await streaming(request, context)

            return grpc.unary_stream_rpc_method_handler(unary_writer, **common)

        async def unary_stream(raw: bytes, context: Context) -> AsyncIterator[Any]:
            call = Call.starting(method, context, streaming=True, shape="server_stream")
            async with steps.outcome(call, context):
                request = steps.decode(call, raw, None)
                await _send_request_id(call, context)
                async for response in streaming(request, context):
                    call.sent += 1
                    yield response

        return grpc.unary_stream_rpc_method_handler(unary_stream, **common)
    if handler.stream_unary:
        collecting = cast(Callable[[Any, Context], Awaitable[Any]], handler.stream_unary)

        async def stream_unary(raw: AsyncIterable[bytes], context: Context) -> Any:
            call = Call.starting(method, context, streaming=True, shape="client_stream")
            async with steps.outcome(call, context):
                await _send_request_id(call, context)
                return await collecting(steps.stream(call, raw), context)

        return grpc.stream_unary_rpc_method_handler(stream_unary, **common)
    if handler.stream_stream:
        both = cast(Callable[[Any, Context], Any], handler.stream_stream)
        if not inspect.isasyncgenfunction(both):  # writes with context.write()

            async def stream_writer(raw: AsyncIterable[bytes], context: Context) -> None:
                call = Call.starting(method, context, streaming=True, shape="bidi_stream")
                async with steps.outcome(call, context):
                    await _send_request_id(call, context)
                    await both(steps.stream(call, raw), context)

            return grpc.stream_stream_rpc_method_handler(stream_writer, **common)

        async def stream_stream(raw: AsyncIterable[bytes], context: Context) -> AsyncIterator[Any]:
            call = Call.starting(method, context, streaming=True, shape="bidi_stream")
            async with steps.outcome(call, context):
                await _send_request_id(call, context)
                async for response in both(steps.stream(call, raw), context):
                    call.sent += 1
                    yield response

        return grpc.stream_stream_rpc_method_handler(stream_stream, **common)
    raise TypeError(f"{method}: a handler of no known call shape cannot go through the chain")


class Chain(grpc.aio.ServerInterceptor):  # type: ignore[type-arg]
    """The server's one interceptor: ``layers`` run in order around every handler."""

    def __init__(self, layers: Sequence[Layer]) -> None:
        self._layers = tuple(layers)
        self._wrapped: dict[str, Any] = {}

    async def intercept_service(
        self,
        continuation: Callable[
            [grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any]]
        ],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any]:
        method = handler_call_details.method
        wrapped = self._wrapped.get(method)
        if wrapped is not None:
            return cast("grpc.RpcMethodHandler[Any, Any]", wrapped)
        handler = await continuation(handler_call_details)
        if handler is None:
            # grpc answers UNIMPLEMENTED itself; no handler means no context to read the peer.
            log.info("rpc", method=method, peer="", code="UNIMPLEMENTED", duration_ms=0.0)
            return handler
        # A method's handler never changes, so it is wrapped once, not on every call.
        wrapped = _wrap(_Steps(self._layers, method, handler.request_deserializer), handler)
        self._wrapped[method] = wrapped
        return cast("grpc.RpcMethodHandler[Any, Any]", wrapped)
