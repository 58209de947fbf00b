"""The server interceptor: request ids, validation, error mapping and the access log.

One wrapper around every RPC handler, so that servicers only convert messages and call
the domain: they raise :class:`~service.errors.RagAgentError` and never pick status codes.

- Request id: the request's own ``request_id`` field, else the ``x-request-id`` header,
  else a new UUID; bound in structlog's contextvars and echoed in initial and trailing
  metadata.
- Validation: every request message (each message of a client stream) is checked with
  protovalidate; violations become INVALID_ARGUMENT with a ``google.rpc.BadRequest``.
- Errors: mapped once, by :func:`service.errors.to_rpc_status`, and sent as rich status.
- Access log: method, peer, status code, duration, request id. Never the question text.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, cast

import grpc
import protovalidate
import structlog
from google.protobuf.message import Message
from grpc_status import rpc_status

from service.errors import FieldViolation, InvalidArgument, RagAgentError, to_rpc_status
from service.observability.logging import get_logger

REQUEST_ID_HEADER = "x-request-id"
# Infrastructure services pass through untouched.
_QUIET_PREFIXES = ("/grpc.health.v1.", "/grpc.reflection.")

log = get_logger("ragagent.access")
_validator = protovalidate.Validator()


def field_path(violation: protovalidate.Violation) -> str:
    """Renders a violation's field path the way clients write it: ``filters.module``,
    ``metadata["key"]``, ``sources[2].url``."""
    parts: list[str] = []
    elements = violation.proto.field.elements if violation.proto.field else []
    for element in elements:
        name = element.field_name or str(element.field_number)
        subscript = ""
        which = element.subscript
        if which is not None:
            value = getattr(which, "value", which)
            subscript = f'["{value}"]' if isinstance(value, str) else f"[{value}]"
        parts.append(name + subscript)
    return ".".join(parts)


def validate(message: Message) -> None:
    """Raises InvalidArgument listing every violation of the message's protovalidate rules."""
    violations = _validator.collect_violations(message)
    if violations:
        raise InvalidArgument(
            [
                FieldViolation(
                    field=field_path(v),
                    description=v.proto.message or "",
                    reason=v.proto.rule_id or "",
                )
                for v in violations
            ]
        )


def current_request_id() -> str:
    """The request id the interceptor bound for the call being handled."""
    value = structlog.contextvars.get_contextvars().get("request_id")
    return value if isinstance(value, str) else ""


def _request_id_from(context: grpc.aio.ServicerContext[Any, Any]) -> str:
    for key, value in context.invocation_metadata() or ():
        if key == REQUEST_ID_HEADER:
            text = value.decode() if isinstance(value, bytes) else value
            if text and len(text) <= 128 and text.isprintable():
                return text
    return str(uuid.uuid4())


class _Call:
    """The state one RPC carries through the wrapper."""

    def __init__(self, method: str, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        self.method = method
        self.context = context
        self.request_id = _request_id_from(context)
        self.started = time.perf_counter()

    def adopt(self, request: object) -> None:
        """Validates a request message and lets its own request_id win over the header."""
        if isinstance(request, Message):
            validate(request)
        own = getattr(request, "request_id", "")
        if isinstance(own, str) and own:
            self.request_id = own
            structlog.contextvars.bind_contextvars(request_id=own)

    async def begin(self) -> None:
        structlog.contextvars.clear_contextvars()
        structlog.contextvars.bind_contextvars(request_id=self.request_id, method=self.method)

    async def fail(self, error: BaseException) -> None:
        """Ends the call with the mapped status; logs bugs with their traceback."""
        status = rpc_status.to_status(to_rpc_status(error, request_id=self.request_id))
        if not isinstance(error, RagAgentError):
            log.exception("unhandled error", error_type=type(error).__name__)
        self._log(status.code)
        await self.context.abort(
            status.code,
            status.details,
            (*status.trailing_metadata, (REQUEST_ID_HEADER, self.request_id)),
        )

    @contextlib.asynccontextmanager
    async def outcome(self) -> AsyncIterator[None]:
        """How the handler ended, turned into the call's status and its access-log line."""
        try:
            yield
        except grpc.aio.AbortError:
            raise
        except Exception as error:  # mapped: RagAgentError, else INTERNAL
            await self.fail(error)
            raise AssertionError("unreachable: abort raises") from error
        except BaseException:  # cancelled, or the stream was closed: never swallowed
            self.cancelled()
            raise
        else:
            self.ok()

    def ok(self) -> None:
        self.context.set_trailing_metadata(((REQUEST_ID_HEADER, self.request_id),))
        self._log(grpc.StatusCode.OK)

    def cancelled(self) -> None:
        self._log(grpc.StatusCode.CANCELLED)

    def _log(self, code: grpc.StatusCode) -> None:
        log.info(
            "rpc",
            peer=self.context.peer(),
            code=code.name,
            duration_ms=round((time.perf_counter() - self.started) * 1000, 2),
        )


async def _send_request_id(call: _Call) -> None:
    await call.context.send_initial_metadata(((REQUEST_ID_HEADER, call.request_id),))


def _wrap_unary_unary(
    method: str, behaviour: Callable[[Any, Any], Awaitable[Any]]
) -> Callable[[Any, Any], Awaitable[Any]]:
    async def handler(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        call = _Call(method, context)
        await call.begin()
        async with call.outcome():
            call.adopt(request)
            await _send_request_id(call)
            return await behaviour(request, context)

    return handler


def _wrap_unary_stream(
    method: str, behaviour: Callable[[Any, Any], AsyncIterator[Any]]
) -> Callable[[Any, Any], AsyncIterator[Any]]:
    async def handler(
        request: Any, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[Any]:
        call = _Call(method, context)
        await call.begin()
        async with call.outcome():
            call.adopt(request)
            await _send_request_id(call)
            async for response in behaviour(request, context):
                yield response

    return handler


def _wrap_stream_unary(
    method: str, behaviour: Callable[[Any, Any], Awaitable[Any]]
) -> Callable[[Any, Any], Awaitable[Any]]:
    async def handler(request_iterator: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        call = _Call(method, context)
        await call.begin()

        async def validated() -> AsyncIterator[Any]:
            index = 0
            async for message in request_iterator:
                try:
                    call.adopt(message)
                except InvalidArgument as error:
                    # Name the offending message of the stream in each field path.
                    raise InvalidArgument(
                        [
                            FieldViolation(f"[{index}].{v.field}", v.description, v.reason)
                            for v in error.violations
                        ]
                    ) from None
                index += 1
                yield message

        async with call.outcome():
            await _send_request_id(call)
            return await behaviour(validated(), context)

    return handler


class ServerInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[type-arg]
    """Wraps every handler of the server with request ids, validation, errors and logs."""

    async def intercept_service(
        self,
        continuation: Callable[
            [grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any]]
        ],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any]:
        handler = await continuation(handler_call_details)
        method = handler_call_details.method
        if handler is None or method.startswith(_QUIET_PREFIXES):
            # Health and reflection are the library's own; probes must not flood the log.
            return handler
        common = {
            "request_deserializer": handler.request_deserializer,
            "response_serializer": handler.response_serializer,
        }
        if handler.unary_unary:
            return grpc.unary_unary_rpc_method_handler(
                _wrap_unary_unary(method, handler.unary_unary), **common
            )
        if handler.unary_stream:
            return grpc.unary_stream_rpc_method_handler(
                _wrap_unary_stream(method, cast(Any, handler.unary_stream)), **common
            )
        if handler.stream_unary:
            return grpc.stream_unary_rpc_method_handler(
                _wrap_stream_unary(method, handler.stream_unary), **common
            )
        return handler  # bidirectional streams: none in this service
