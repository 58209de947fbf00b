"""How failures of an OpenAI-compatible endpoint become the service's errors.

Two kinds: the request failed (HTTP status, connection, timeout: :func:`model_error`), or the
answer stream began and broke off before the model said how it ended, which is
:class:`ModelStreamInterrupted` whatever the transport made of it (:func:`stream_ended_early`
for a body that simply ended, :func:`stream_broke` for one whose connection broke).
"""

from __future__ import annotations

import openai

from service.domain import Deadline
from service.errors import (
    DeadlineExceeded,
    ModelAuthFailed,
    ModelRateLimited,
    ModelRequestRejected,
    ModelStreamInterrupted,
    ModelUnavailable,
    RagAgentError,
)

# A deadline this close is as good as gone: the timer that fired may run a hair early.
_DEADLINE_SLACK_S = 0.05


def model_error(exc: Exception, deadline: Deadline) -> RagAgentError:  # noqa: PLR0911
    """The service's error for a failure of the model endpoint."""
    if isinstance(exc, openai.RateLimitError):
        error = ModelRateLimited(f"the model endpoint is rate limiting requests: {exc.message}")
        error.retry_after_s = _retry_after(exc.response.headers.get("retry-after"))
        return error
    if isinstance(exc, openai.AuthenticationError | openai.PermissionDeniedError):
        return ModelAuthFailed(
            f"the model endpoint rejected the credentials (HTTP {exc.status_code}): "
            "check RAGAGENT_LLM_API_KEY"
        )
    if isinstance(exc, openai.APITimeoutError):
        # The attempt's timeout was the deadline's remainder when that was the shorter.
        left = deadline.remaining()
        if left is not None and left < _DEADLINE_SLACK_S:
            return DeadlineExceeded("the deadline ran out while waiting for the model")
        return ModelUnavailable("the model endpoint did not answer in time (RAGAGENT_LLM_TIMEOUT)")
    if isinstance(exc, openai.APIStatusError):
        if exc.status_code >= 500:
            return ModelUnavailable(f"the model endpoint failed with HTTP {exc.status_code}")
        return ModelRequestRejected(
            f"the model endpoint rejected the request (HTTP {exc.status_code}): {exc.message[:300]}"
        )
    if isinstance(exc, openai.APIConnectionError):
        return ModelUnavailable(f"the model endpoint cannot be reached or hung up: {exc}")
    if isinstance(exc, openai.APIError):
        return ModelUnavailable(f"the model endpoint reported an error: {exc.message[:300]}")
    return ModelUnavailable(f"the model endpoint sent a malformed stream: {exc}")


def _retry_after(value: str | None) -> float | None:
    try:
        return max(0.0, float(value)) if value is not None else 1.0
    except ValueError:
        return 1.0


def stream_ended_early(chunks: int) -> ModelStreamInterrupted:
    """The error for a stream that ended without a finish reason after ``chunks`` chunks."""
    if chunks == 0:
        return ModelStreamInterrupted(
            "the model endpoint answered with an empty stream (llama.cpp does this when the "
            "prompt overflows its context window)"
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
