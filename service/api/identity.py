"""Who is calling. Until authentication exists, the optional ``x-user-id`` header."""

from __future__ import annotations

import grpc

USER_ID_HEADER = "x-user-id"
ANONYMOUS = ""


def caller_identity(context: grpc.aio.ServicerContext[object, object]) -> str:
    """The caller's identity; empty string for an anonymous caller."""
    for key, value in context.invocation_metadata() or ():
        if key == USER_ID_HEADER:
            text = value.decode() if isinstance(value, bytes) else value
            return text.strip()[:256]
    return ANONYMOUS
