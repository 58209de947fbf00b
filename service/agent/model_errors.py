"""How failures of the chat model's endpoint become the service's errors.

Two kinds: the request failed (HTTP status, connection, timeout: :func:`model_error`, the
chat model's use of :func:`service.openai_errors.endpoint_error`, which the embedder shares),
or the answer stream began and broke off before the model said how it ended, which is
:class:`ModelStreamInterrupted` whatever the transport made of it (:func:`stream_ended_early`
for a body that simply ended, :func:`stream_broke` for one whose connection broke).
"""

from __future__ import annotations

import openai

from service.domain import Deadline
from service.errors import ModelStreamInterrupted, RagAgentError
from service.openai_errors import endpoint_error, message_of, retryable

__all__ = [
    "EmptyStream",
    "MalformedChunk",
    "endpoint_error",
    "message_of",
    "model_error",
    "retryable",
    "stream_broke",
    "stream_ended_early",
]


class EmptyStream(ModelStreamInterrupted):
    """HTTP 200 and no chunk at all: how llama-cpp-python answers a streamed request with
    ``tool_choice: "auto"`` it cannot stream (and a prompt that overflows its window)."""


class MalformedChunk(ModelStreamInterrupted):
    """A streamed chunk that is valid JSON but not a Chat Completions chunk (a proxy's
    error page re-encoded, a server speaking another dialect): the answer cannot go on."""

    @classmethod
    def of(cls, what: str, value: object) -> MalformedChunk:
        shown = repr(value)
        shown = shown if len(shown) <= 80 else shown[:77] + "..."
        return cls(f"the model endpoint sent {what} in its answer stream: {shown}")


def model_error(exc: Exception, deadline: Deadline) -> RagAgentError:
    """:func:`endpoint_error` for the chat model."""
    return endpoint_error(exc, deadline)


def stream_ended_early(chunks: int) -> ModelStreamInterrupted:
    """The error for a stream that ended without a finish reason after ``chunks`` chunks."""
    if chunks == 0:
        return EmptyStream(
            "the model endpoint answered with an empty stream (llama.cpp does this when the "
            "prompt overflows its context window, and llama-cpp-python for streamed tool calls)"
        )
    return ModelStreamInterrupted(
        f"the model's answer stream ended after {chunks} chunks without a finish reason "
        "(the model server stopped or a proxy cut the connection)"
    )


def stream_broke(exc: Exception) -> ModelStreamInterrupted:
    """The error for a body that broke mid-way; names the transport error under the SDK's
    generic "Connection error." so that the log tells a reset from a truncated chunk."""
    cause = exc.__cause__ if isinstance(exc, openai.APIConnectionError) else None
    broken = cause or exc
    what = f"{type(broken).__name__}: {broken}" if str(broken) else type(broken).__name__
    return ModelStreamInterrupted(
        f"the model endpoint's connection broke while it was answering ({what})"
    )
