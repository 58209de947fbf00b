"""The grpc servicers behind Connect: one handler per RPC, calling the servicer's method.

No RPC is implemented twice: each Connect handler runs the request through the layers'
``message`` hook and calls the very servicer object the grpc.aio server registered, with
:class:`ServicerContext` standing in for grpc's context (deadline, metadata, peer, abort,
write, read). The handlers are built from the service's descriptor, so an RPC added to the
protos is served over Connect as soon as its servicer implements it.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import re
from collections.abc import AsyncIterator, Callable, Sequence
from types import SimpleNamespace
from typing import Any

import grpc
from connectrpc.request import RequestContext
from google.protobuf.descriptor import MethodDescriptor, ServiceDescriptor

from service.api.interceptors import Call, Layer
from service.http.chain import Aborted, credential_watched, current_call, see_message

Ctx = RequestContext[Any, Any]
_WRITTEN_END = object()


class ServicerContext:
    """What the servicers use of ``grpc.aio.ServicerContext``, over a Connect call."""

    def __init__(self, ctx: Ctx, call: Call, requests: AsyncIterator[Any] | None = None) -> None:
        self._ctx = ctx
        self._call = call
        self._requests = requests
        self._written: asyncio.Queue[Any] | None = None

    def time_remaining(self) -> float | None:
        remaining = self._ctx.timeout_ms
        return None if remaining is None else max(0.0, remaining / 1000)

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return self._call.metadata

    def peer(self) -> str:
        return self._call.peer

    def auth_context(self) -> dict[str, tuple[bytes, ...]]:
        return self._call.auth

    def cancelled(self) -> bool:
        return False  # a cancelled call's task is cancelled: the handler never asks after

    async def abort(self, code: grpc.StatusCode, details: str = "", *_: Any) -> None:
        raise Aborted(code, details)

    async def send_initial_metadata(self, metadata: Sequence[tuple[str, str]]) -> None:
        for key, value in metadata:
            self._ctx.response_headers[key] = value

    def set_trailing_metadata(self, metadata: Sequence[tuple[str, str]]) -> None:
        self._call.trailing.extend(metadata)

    async def read(self) -> Any:
        """The next request of a client stream, or ``grpc.aio.EOF``."""
        if self._requests is None:
            return grpc.aio.EOF  # type: ignore[attr-defined]
        return await anext(self._requests, grpc.aio.EOF)  # type: ignore[attr-defined]

    async def write(self, message: Any) -> None:
        """A response of a handler that writes instead of yielding (grpc's health Watch)."""
        if self._written is None:
            raise RuntimeError("write() outside a server-streaming call")
        await self._written.put(message)

    async def written(self, run: Callable[[], Any]) -> AsyncIterator[Any]:
        """Runs a writing handler as a task of this call and yields what it writes."""
        queue = self._written = asyncio.Queue(maxsize=1)

        async def body() -> None:
            try:
                await run()
            finally:
                await queue.put(_WRITTEN_END)

        task = asyncio.create_task(body(), name=f"connect-writer {self._call.method}")
        try:
            while (message := await queue.get()) is not _WRITTEN_END:
                yield message
            await task  # its error, if any, is the call's
        finally:
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task


def snake_case(name: str) -> str:
    """``AskStream`` -> ``ask_stream``: the names of connectrpc's generated service classes."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _handler(method: MethodDescriptor, servicer: Any, layers: Sequence[Layer]) -> Any:
    grpc_method = getattr(servicer, method.name)
    if method.client_streaming and method.server_streaming:
        raise TypeError(f"{method.full_name}: bidirectional streams are not served over HTTP")
    if method.client_streaming:

        async def client_stream(requests: AsyncIterator[Any], ctx: Ctx) -> Any:
            async def seen() -> AsyncIterator[Any]:
                index = 0
                async for message in requests:
                    see_message(layers, ctx, message, index)
                    index += 1
                    yield message

            messages = seen()
            call = current_call()
            async with credential_watched(call):
                return await grpc_method(messages, ServicerContext(ctx, call, messages))

        return client_stream
    if method.server_streaming:
        writes = not inspect.isasyncgenfunction(grpc_method)

        async def server_stream(request: Any, ctx: Ctx) -> AsyncIterator[Any]:
            call = see_message(layers, ctx, request, None)
            context = ServicerContext(ctx, call)
            responses = (
                context.written(lambda: grpc_method(request, context))
                if writes
                else grpc_method(request, context)
            )
            async with credential_watched(call):
                async for response in responses:
                    call.sent += 1
                    yield response

        return server_stream

    async def unary(request: Any, ctx: Ctx) -> Any:
        call = see_message(layers, ctx, request, None)
        return await grpc_method(request, ServicerContext(ctx, call))

    return unary


def bridge(servicer: Any, service: ServiceDescriptor, layers: Sequence[Layer]) -> Any:
    """An object with one handler per RPC of ``service``, named as connectrpc's generated
    ``*ASGIApplication`` expects (``ask_stream``), each calling ``servicer``."""
    return SimpleNamespace(
        **{snake_case(m.name): _handler(m, servicer, layers) for m in service.methods}
    )
