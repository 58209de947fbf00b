"""The steps of the interceptor chain: each one concern, run in the order server.py lists.

A layer sees a call three ways: when it starts (``start``: may refuse it by raising a
:class:`~service.errors.RagAgentError`), each request message (``message``: ``index`` is the
position in a client stream, None for a unary request), and when it has ended (``end``,
with the status code the caller got). None of them gets the gRPC context: what they need
was read when the call started (see :mod:`.call`).
"""

from __future__ import annotations

from typing import Protocol

import grpc
import structlog
from google.protobuf.message import Message

from service.api.interceptors.call import Call, usable_id
from service.api.interceptors.validation import validate
from service.errors import FieldViolation, InvalidArgument
from service.observability.logging import get_logger


class Layer(Protocol):
    def start(self, call: Call) -> None: ...

    def message(self, call: Call, message: Message, index: int | None) -> None: ...

    def end(self, call: Call, code: grpc.StatusCode) -> None: ...


class RequestIds:
    """Binds the request id (the request's own ``request_id`` field, else the header, else a
    new UUID) and the method to every log line of the call."""

    def start(self, call: Call) -> None:
        structlog.contextvars.clear_contextvars()
        structlog.contextvars.bind_contextvars(request_id=call.request_id, method=call.method)

    def message(self, call: Call, message: Message, index: int | None) -> None:
        own = getattr(message, "request_id", "")
        # An unusable id is left to validation to reject; the call keeps its own meanwhile.
        if isinstance(own, str) and usable_id(own) and own != call.request_id:
            call.request_id = own
            structlog.contextvars.bind_contextvars(request_id=own)

    def end(self, call: Call, code: grpc.StatusCode) -> None:
        return None


class AccessLog:
    """One line per call: method, peer, principal, status code, duration, request id; never
    the text, never a credential.
    Health checks log at DEBUG so that probes do not flood the log."""

    _QUIET = ("/grpc.health.v1.",)

    def __init__(self) -> None:
        self._log = get_logger("ragagent.access")

    def start(self, call: Call) -> None:
        return None

    def message(self, call: Call, message: Message, index: int | None) -> None:
        return None

    def end(self, call: Call, code: grpc.StatusCode) -> None:
        emit = self._log.debug if call.method.startswith(self._QUIET) else self._log.info
        emit(
            "rpc",
            method=call.method,
            request_id=call.request_id,
            peer=call.peer,
            # Who was authenticated and how; the credential's id, never the credential.
            principal=call.principal.name if call.principal else None,
            auth=call.principal.method if call.principal else None,
            credential_id=(call.principal.credential_id or None) if call.principal else None,
            code=code.name,
            duration_ms=call.elapsed_ms,
        )


class Validation:
    """Every request message against its protovalidate rules; a message of a client stream
    is named by its position in each field path (``[3].document.path``)."""

    def start(self, call: Call) -> None:
        return None

    def message(self, call: Call, message: Message, index: int | None) -> None:
        try:
            validate(message)
        except InvalidArgument as error:
            if index is None:
                raise
            raise InvalidArgument(
                [
                    FieldViolation(f"[{index}].{v.field}", v.description, v.reason)
                    for v in error.violations
                ]
            ) from None

    def end(self, call: Call, code: grpc.StatusCode) -> None:
        return None
