"""The one error hierarchy of the service, and its one mapping to gRPC statuses.

Every failure a caller can see is a :class:`RagAgentError`. Each class fixes its status
code and a ``google.rpc.ErrorInfo`` reason; :func:`to_rpc_status` turns any exception into
a ``google.rpc.Status`` with details. Nothing else in the code base picks status codes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

# Imported as modules: mypy only reads googleapis-common-protos' stubs this way.
import google.rpc.code_pb2 as code_pb2  # noqa: PLR0402
import google.rpc.error_details_pb2 as error_details_pb2  # noqa: PLR0402
import google.rpc.status_pb2 as status_pb2  # noqa: PLR0402
import grpc
from google.protobuf import any_pb2, duration_pb2
from google.protobuf.message import Message

DOMAIN = "ragagent.dev"


@dataclass(frozen=True, slots=True)
class FieldViolation:
    """One invalid field: its path (``filters.module``, ``metadata["k"]``) and why."""

    field: str
    description: str
    reason: str = ""


class RagAgentError(Exception):
    """Base of every error the service reports to callers."""

    code: grpc.StatusCode = grpc.StatusCode.INTERNAL
    reason: str = "INTERNAL"

    def __init__(self, message: str, *, metadata: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.metadata: dict[str, str] = dict(metadata or {})

    def details(self) -> list[any_pb2.Any]:
        """The rich-status details sent with the error (ErrorInfo by default)."""
        info = error_details_pb2.ErrorInfo(
            reason=self.reason, domain=DOMAIN, metadata=self.metadata
        )
        return [_pack(info)]


class InvalidArgument(RagAgentError):
    """The request breaks the contract; lists every offending field."""

    code = grpc.StatusCode.INVALID_ARGUMENT
    reason = "INVALID_ARGUMENT"

    # The status travels in trailers, which clients cap at 8 KiB by default: a request with
    # hundreds of bad map keys must still get its INVALID_ARGUMENT, not RESOURCE_EXHAUSTED
    # from the client's own transport. So the list and every string in it are bounded.
    MAX_VIOLATIONS = 8
    MAX_FIELD_CHARS = 100
    MAX_DESCRIPTION_CHARS = 200
    SUMMARISED = 3

    def __init__(self, violations: Sequence[FieldViolation], message: str | None = None) -> None:
        listed = [
            FieldViolation(
                _clip(v.field, self.MAX_FIELD_CHARS),
                _clip(v.description, self.MAX_DESCRIPTION_CHARS),
                v.reason,
            )
            for v in violations[: self.MAX_VIOLATIONS]
        ]
        if len(violations) > self.MAX_VIOLATIONS:
            unlisted = len(violations) - self.MAX_VIOLATIONS
            listed.append(FieldViolation("", f"{unlisted} more violations", "violations.more"))
        self.violations = listed
        summary = "; ".join(
            f"{v.field}: {v.description}" if v.field else v.description
            for v in listed[: self.SUMMARISED]
        )
        if len(listed) > self.SUMMARISED:
            summary += f" (and {len(violations) - self.SUMMARISED} more)"
        super().__init__(message or f"invalid request: {summary}")

    def details(self) -> list[any_pb2.Any]:
        bad_request = error_details_pb2.BadRequest(
            field_violations=[
                error_details_pb2.BadRequest.FieldViolation(
                    field=v.field, description=v.description, reason=v.reason
                )
                for v in self.violations
            ]
        )
        return [_pack(bad_request), *super().details()]


class NotFound(RagAgentError):
    """A named resource does not exist (or is not the caller's to see)."""

    code = grpc.StatusCode.NOT_FOUND
    reason = "NOT_FOUND"

    def __init__(self, resource_type: str, resource_name: str, description: str = "") -> None:
        self.resource_type = resource_type
        self.resource_name = resource_name
        self.description = description or f"{resource_type} {resource_name!r} was not found"
        super().__init__(self.description)

    def details(self) -> list[any_pb2.Any]:
        info = error_details_pb2.ResourceInfo(
            resource_type=self.resource_type,
            resource_name=self.resource_name,
            description=self.description,
        )
        return [_pack(info), *super().details()]


class SessionNotFound(NotFound):
    """The session does not exist, has expired, or belongs to another caller."""

    reason = "SESSION_NOT_FOUND"


class DocumentNotFound(NotFound):
    """The document is not indexed."""

    reason = "DOCUMENT_NOT_FOUND"


class SessionBusy(RagAgentError):
    """Another request is running on the same session; the caller may retry after it."""

    code = grpc.StatusCode.ABORTED
    reason = "SESSION_BUSY"


class RunEnded(RagAgentError):
    """How a background run's stream ended, replayed to a caller that resumes it: the
    status code and reason its own stream ended with."""

    def __init__(self, code: grpc.StatusCode, reason: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason


class Unavailable(RagAgentError):
    """A dependency cannot be reached right now; retrying later may succeed."""

    code = grpc.StatusCode.UNAVAILABLE
    reason = "UNAVAILABLE"
    retry_after_s: float | None = 1.0

    def details(self) -> list[any_pb2.Any]:
        details = super().details()
        if self.retry_after_s is not None:
            delay = duration_pb2.Duration()
            delay.FromMilliseconds(int(self.retry_after_s * 1000))
            details.append(_pack(error_details_pb2.RetryInfo(retry_delay=delay)))
        return details


class StoreUnavailable(Unavailable):
    """The vector store (Qdrant) failed or cannot be reached."""

    reason = "STORE_UNAVAILABLE"


class ModelUnavailable(Unavailable):
    """The model endpoint failed with 5xx or a connection error after the configured retries."""

    reason = "MODEL_UNAVAILABLE"


class ModelStreamInterrupted(ModelUnavailable):
    """The model's answer stream ended without a finish reason: the connection closed or
    broke mid-body, or the body was empty. The answer is incomplete; never a success."""

    reason = "MODEL_STREAM_INTERRUPTED"


class ModelEmptyAnswer(ModelUnavailable):
    """The model ended its answer without writing any text (and asked for no tools)."""

    reason = "MODEL_EMPTY_ANSWER"


class DatabaseUnavailable(Unavailable):
    """The session database failed or cannot be reached."""

    reason = "DATABASE_UNAVAILABLE"


class ModelRateLimited(Unavailable):
    """The model endpoint answered 429."""

    code = grpc.StatusCode.RESOURCE_EXHAUSTED
    reason = "MODEL_RATE_LIMITED"


class RateLimited(Unavailable):
    """The caller (its principal) has used up its requests per minute; RetryInfo says when
    the next one will be admitted."""

    code = grpc.StatusCode.RESOURCE_EXHAUSTED
    reason = "RATE_LIMITED"

    def __init__(self, message: str, *, retry_after_s: float) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class TooManyStreams(RateLimited):
    """The caller already has as many streaming calls open as it may."""

    reason = "TOO_MANY_STREAMS"


class Unauthenticated(RagAgentError):
    """The call carries no credentials this server accepts. Says nothing about whether
    what the call names exists."""

    code = grpc.StatusCode.UNAUTHENTICATED
    reason = "UNAUTHENTICATED"


class CredentialsInvalid(Unauthenticated):
    """The call carries credentials that are unknown, revoked, expired or malformed."""

    reason = "CREDENTIALS_INVALID"


class PermissionDenied(RagAgentError):
    """The caller is known but its roles do not allow the method."""

    code = grpc.StatusCode.PERMISSION_DENIED
    reason = "PERMISSION_DENIED"


class ShuttingDown(Unavailable):
    """The server is draining and takes no new calls."""

    reason = "SHUTTING_DOWN"


class FailedPrecondition(RagAgentError):
    """The system is not in a state that allows the call (configuration, store contents)."""

    code = grpc.StatusCode.FAILED_PRECONDITION
    reason = "FAILED_PRECONDITION"


class ModelAuthFailed(FailedPrecondition):
    """The model endpoint rejected our credentials (401/403)."""

    reason = "MODEL_AUTH_FAILED"


class ModelRequestRejected(FailedPrecondition):
    """The endpoint refused the request itself (4xx): unknown model, prompt too long..."""

    reason = "MODEL_REQUEST_REJECTED"


class ModelContextExceeded(ModelRequestRejected):
    """The prompt and the reserved answer do not fit the model's context window, even after
    dropping history and passages (or the endpoint said so): a shorter question or a new
    session fits; RAGAGENT_LLM_CONTEXT_TOKENS may be wrong."""

    reason = "MODEL_CONTEXT_EXCEEDED"


class StoreMismatch(FailedPrecondition):
    """The existing collection does not fit the configured embedder."""

    reason = "STORE_MISMATCH"


class StoreLocked(FailedPrecondition):
    """The embedded store folder is already open in another process."""

    reason = "STORE_LOCKED"


class DeadlineExceeded(RagAgentError):
    """The call's deadline (or a configured idle timeout) ran out."""

    code = grpc.StatusCode.DEADLINE_EXCEEDED
    reason = "DEADLINE_EXCEEDED"


class ModelStalled(DeadlineExceeded):
    """The model stream sent nothing for longer than the configured idle timeout."""

    reason = "MODEL_STREAM_STALLED"


class Unimplemented(RagAgentError):
    """The method is declared in the contract but this server does not offer it."""

    code = grpc.StatusCode.UNIMPLEMENTED
    reason = "UNIMPLEMENTED"


class ConfigurationError(Exception):
    """A setting is invalid; raised at start-up only, never seen by callers."""


def to_rpc_status(error: BaseException, *, request_id: str) -> status_pb2.Status:
    """Maps any exception to the status a caller receives.

    A :class:`RagAgentError` keeps its code and details. Anything else is a bug: INTERNAL,
    with the request id in the message so that the log line can be found, and no internals.
    """
    if isinstance(error, NotImplementedError):
        # What the generated servicer base classes raise for a method nobody implemented.
        error = Unimplemented("method not implemented by this server")
    if isinstance(error, RagAgentError):
        return status_pb2.Status(
            code=_CODES[error.code], message=error.message, details=error.details()
        )
    info = error_details_pb2.ErrorInfo(
        reason="INTERNAL", domain=DOMAIN, metadata={"request_id": request_id}
    )
    return status_pb2.Status(
        code=code_pb2.INTERNAL,
        message=f"internal error (request id {request_id}); the server log has the details",
        details=[_pack(info)],
    )


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _pack(message: Message) -> any_pb2.Any:
    packed = any_pb2.Any()
    packed.Pack(message)
    return packed


_CODES: dict[grpc.StatusCode, int] = {code: code.value[0] for code in grpc.StatusCode}
