"""The steps of the interceptor chain: each one concern, run in the order server.py lists.

A layer sees a call three ways: when it starts (``start``: may refuse it by raising a
:class:`~service.errors.RagAgentError`), each request message (``message``: ``index`` is the
position in a client stream, None for a unary request), and when it has ended (``end``,
with the status code the caller got). None of them gets the gRPC context: what they need
was read when the call started (see :mod:`.call`).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
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


async def start_layers(layers: Sequence[Layer], call: Call) -> None:
    """Each layer's ``start`` in order, and, for a layer that asks a shared store (the
    fleet's limits in Redis), its ``admit`` right after: both transports start calls here."""
    for layer in layers:
        layer.start(call)
        admit = getattr(layer, "admit", None)
        if admit is not None:
            await admit(call)


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
    # Refusals a hostile caller can repeat at will: one WARNING line per peer host and
    # window, the next one saying how many were left out (100 bad calls made 140 kB).
    REFUSED = frozenset(
        {
            grpc.StatusCode.UNAUTHENTICATED,
            grpc.StatusCode.PERMISSION_DENIED,
            grpc.StatusCode.UNIMPLEMENTED,
        }
    )

    def __init__(self, refusal_window_s: float = 10.0) -> None:
        self._log = get_logger("ragagent.access")
        self._refusals = RefusalWindows(refusal_window_s)

    def start(self, call: Call) -> None:
        return None

    def message(self, call: Call, message: Message, index: int | None) -> None:
        return None

    def end(self, call: Call, code: grpc.StatusCode) -> None:
        emit = self._log.debug if call.method.startswith(self._QUIET) else self._log.info
        extra: dict[str, int] = {}
        if code in self.REFUSED:
            left_out = self._refusals.admit(peer_host(call.peer))
            if left_out is None:
                return
            emit = self._log.warning
            if left_out:
                extra["refusals_not_logged"] = left_out
        emit(
            "rpc",
            **extra,
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


def peer_host(peer: str) -> str:
    """The host of a grpc peer string ("ipv4:10.0.0.7:5123" -> "ipv4:10.0.0.7"): a caller
    opens new connections (new ports) at will, its address it cannot change as easily."""
    host, _, port = peer.rpartition(":")
    return host if host and port.isdigit() else peer


class RefusalWindows:
    """Per key, whether a line may be written now: the first in each window is; the others
    are counted and that count is returned with the next admitted one. Bounded in keys."""

    MAX_KEYS = 4096

    def __init__(self, window_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._window_s = window_s
        self._clock = clock
        self._seen: OrderedDict[str, tuple[float, int]] = OrderedDict()

    def admit(self, key: str) -> int | None:
        """None: do not log; else how many lines of ``key`` were left out before this one."""
        now = self._clock()
        started, skipped = self._seen.get(key, (float("-inf"), 0))
        if now - started < self._window_s:
            self._seen[key] = (started, skipped + 1)
            return None
        self._seen[key] = (now, 0)
        self._seen.move_to_end(key)
        if len(self._seen) > self.MAX_KEYS:
            self._seen.popitem(last=False)
        return skipped
