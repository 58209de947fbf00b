"""What one call carries through the chain, read from its context once, when it starts.

grpc's aio server frees a call's core object once the call has ended; reading the peer or
the metadata of a cancelled call afterwards is a use-after-free that kills the process
(grpc/grpc#29069). So everything the chain's layers need is copied out of the context here,
at the start, and the layers see this object, never the context.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import grpc
import structlog

from service.security.principal import Principal

REQUEST_ID_HEADER = "x-request-id"
MAX_REQUEST_ID = 128


def current_request_id() -> str:
    """The request id bound for the call being handled (empty outside a call)."""
    value = structlog.contextvars.get_contextvars().get("request_id")
    return value if isinstance(value, str) else ""


def usable_id(value: str) -> bool:
    """Whether ``value`` can be a request id: it goes into response metadata, which takes
    printable ASCII only (anything else fails the call in grpc's core)."""
    return 0 < len(value) <= MAX_REQUEST_ID and value.isascii() and value.isprintable()


def _text(value: str | bytes) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else value


@dataclass
class Call:
    """One RPC as the layers see it: method, peer and metadata as they were at the start."""

    method: str
    peer: str
    metadata: tuple[tuple[str, str], ...]
    request_id: str = ""
    started: float = field(default_factory=time.perf_counter)
    # The transport's view of the peer (grpc's auth context: with TLS, the client
    # certificate as ``x509_pem_cert``), read at the start like everything else.
    auth: dict[str, tuple[bytes, ...]] = field(default_factory=dict)
    # A response or request stream (counts against the concurrent-streams limit).
    streaming: bool = False
    # Set by the authentication layer; None before it ran or when it refused the call.
    principal: Principal | None = None
    # Set by the authentication layer for a credential that can lapse (a key revoked, a
    # token expired): raises Unauthenticated once it has. The chain calls it while a
    # stream is open, and stores here why it ended the stream.
    recheck: Callable[[], None] | None = None
    lapsed: Exception | None = None
    # Whose concurrent-stream slot the call holds, for the limits layer to give back.
    stream_slot: str | None = None
    # unary, server_stream, client_stream or bidi_stream (go-grpc-prometheus' grpc_type).
    shape: str = "unary"
    # Response messages handed to grpc so far (counted by the chain).
    sent: int = 0
    # Trailing metadata that layers add at the start (the trace id); sent with the status.
    trailing: list[tuple[str, str]] = field(default_factory=list)

    @classmethod
    def starting(
        cls,
        method: str,
        context: grpc.aio.ServicerContext[Any, Any],
        *,
        streaming: bool = False,
        shape: str = "unary",
    ) -> Call:
        metadata = tuple((key, _text(value)) for key, value in context.invocation_metadata() or ())
        auth = {key: tuple(values) for key, values in (context.auth_context() or {}).items()}
        call = cls(
            method=method,
            peer=context.peer(),
            metadata=metadata,
            auth=auth,
            streaming=streaming,
            shape=shape,
        )
        call.request_id = call.header(REQUEST_ID_HEADER) or str(uuid.uuid4())
        return call

    def value(self, name: str) -> str | None:
        """The first value of header ``name`` as sent (None when absent)."""
        for key, value in self.metadata:
            if key == name:
                return value
        return None

    def header(self, name: str) -> str:
        """The first value of header ``name`` if it is a usable id, else empty."""
        for key, value in self.metadata:
            if key == name:
                return value if usable_id(value) else ""
        return ""

    @property
    def elapsed_ms(self) -> float:
        return round((time.perf_counter() - self.started) * 1000, 2)
