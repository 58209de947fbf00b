"""One mapper from failures of an OpenAI-compatible endpoint to the service's errors.

The chat model and the OpenAI-compatible embedder both use :func:`endpoint_error`, so that
the same HTTP answer means the same thing whichever of them got it (a client timeout was
DEADLINE_EXCEEDED for one and UNAVAILABLE for the other). The endpoint's own message is kept
(its first 300 characters): "failed with HTTP 500" alone tells an operator nothing.
:func:`retryable` says which failures are worth another attempt: llama-cpp-python answers
500 to a request it finds invalid, and sending it again cannot help.
"""

from __future__ import annotations

import re

import openai

from service.domain import Deadline
from service.errors import (
    DeadlineExceeded,
    ModelAuthFailed,
    ModelContextExceeded,
    ModelRateLimited,
    ModelRequestRejected,
    ModelUnavailable,
    RagAgentError,
    Unavailable,
)

# A deadline this close is as good as gone: the timer that fired may run a hair early.
_DEADLINE_SLACK_S = 0.05
MESSAGE_CHARS = 300

# How servers word "the prompt is too long": OpenAI's code, vLLM's and llama.cpp's texts.
_CONTEXT_EXCEEDED = re.compile(
    r"context_length_exceeded|maximum context length|exceeds? (?:the )?context (?:window|size)"
    r"|context (?:window|size) (?:of|is) \d+|too many tokens|prompt is too long"
    r"|input.{0,40}longer than.{0,40}(?:context|model)",
    re.IGNORECASE,
)
# A 5xx whose body says the request itself was wrong (pydantic's wording in FastAPI-based
# servers such as llama-cpp-python, and plain "invalid ..." messages).
_VALIDATION = re.compile(
    r"validation error|field required|input should be|unexpected keyword|not supported"
    r"|invalid (?:request|value|parameter|type|argument)|unrecognized|must be",
    re.IGNORECASE,
)


def endpoint_error(  # noqa: PLR0911 (one return per kind of failure)
    exc: Exception,
    deadline: Deadline | None,
    *,
    unavailable: type[Unavailable] = ModelUnavailable,
    what: str = "the model endpoint",
    key_setting: str = "RAGAGENT_LLM_API_KEY",
) -> RagAgentError:
    """The service's error for a failed request to an OpenAI-compatible endpoint.

    ``unavailable`` is the class for "down or broken, retry later" (the embedder has its
    own reason); rejected requests and credentials are the same for both.
    """
    if isinstance(exc, openai.RateLimitError):
        error = ModelRateLimited(f"{what} is rate limiting requests: {message_of(exc)}")
        error.retry_after_s = _retry_after(exc.response.headers.get("retry-after"))
        return error
    if isinstance(exc, openai.AuthenticationError | openai.PermissionDeniedError):
        return ModelAuthFailed(
            f"{what} rejected the credentials (HTTP {exc.status_code}): check {key_setting}"
        )
    if isinstance(exc, openai.APITimeoutError):
        # The attempt's timeout was the deadline's remainder when that was the shorter.
        left = deadline.remaining() if deadline is not None else None
        if left is not None and left < _DEADLINE_SLACK_S:
            return DeadlineExceeded(f"the deadline ran out while waiting for {what}")
        return unavailable(f"{what} did not answer in time")
    if isinstance(exc, openai.APIStatusError):
        body = message_of(exc)
        if _CONTEXT_EXCEEDED.search(body):
            return ModelContextExceeded(
                f"{what}: the prompt does not fit the model's context window "
                f"(HTTP {exc.status_code}): {body}"
            )
        if exc.status_code >= 500 and not _VALIDATION.search(body):
            return unavailable(f"{what} failed with HTTP {exc.status_code}: {body}")
        return ModelRequestRejected(f"{what} rejected the request (HTTP {exc.status_code}): {body}")
    if isinstance(exc, openai.APIConnectionError):
        return unavailable(f"{what} cannot be reached or hung up: {exc}")
    if isinstance(exc, openai.APIError):
        return unavailable(f"{what} reported an error: {message_of(exc)}")
    return unavailable(f"{what} sent a malformed answer: {exc}"[: MESSAGE_CHARS + 60])


def retryable(error: RagAgentError) -> bool:
    """Whether another attempt may succeed: rate limits, 5xx that are not about the request,
    unreachable endpoints. Never a timeout: a stalled model server is still busy with the
    abandoned request, and a second one would only queue behind it."""
    if isinstance(error, ModelRateLimited):
        return True
    return isinstance(error, Unavailable) and "did not answer in time" not in error.message


def message_of(exc: openai.APIError) -> str:
    """The endpoint's own words: the body's error message, else the body, clipped."""
    body = exc.body
    text = ""
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict):
            text = str(inner.get("message") or inner.get("detail") or inner)
        else:
            text = str(body.get("message") or body.get("detail") or inner)
    elif body is not None:
        text = str(body)
    text = " ".join((text or exc.message).split())
    return text[:MESSAGE_CHARS]


def _retry_after(value: str | None) -> float | None:
    try:
        return max(0.0, float(value)) if value is not None else 1.0
    except ValueError:
        return 1.0
