"""structlog set-up: JSON lines when not on a TTY, readable console output on one.

Every line carries the request id bound in contextvars by the server interceptor, and the
trace and span ids when it is written inside a traced call. By the privacy rule, question
and answer text is never logged at INFO or above.

The libraries' own records (grpc, SQLAlchemy, qdrant, openai, and Python warnings) come
through at WARNING and above, so that what goes wrong underneath is seen; the openai SDK
says that it retries a request only at INFO, so that one line is raised to WARNING.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping, MutableMapping
from typing import Any, Literal

import structlog


class _Stderr:
    """Whatever ``sys.stderr`` is at the time of writing (tests and embedders replace it)."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def add_trace_ids(_logger: Any, _method: str, event: MutableMapping[str, Any]) -> Mapping[str, Any]:
    """The current trace and span ids on every line written inside a span. OpenTelemetry is
    looked up, not imported: commands that never trace do not pay for importing it."""
    trace = sys.modules.get("opentelemetry.trace")
    if trace is not None:
        ctx = trace.get_current_span().get_span_context()
        if ctx.is_valid:
            event.setdefault("trace_id", format(ctx.trace_id, "032x"))
            event.setdefault("span_id", format(ctx.span_id, "016x"))
    return event


# Request fields whose values are the caller's own data: the database seals them, so the log
# must not hold them in clear. Only their keys are logged.
_PRIVATE_MAPPINGS = frozenset({"metadata"})


def redact_private(
    _logger: Any, _method: str, event: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """Replaces a ``metadata`` mapping (QuestionRequest.metadata) by its sorted keys."""
    for name in _PRIVATE_MAPPINGS & event.keys():
        value = event[name]
        if isinstance(value, Mapping):
            event[name] = {"keys": sorted(str(key) for key in value)}
        elif value is not None:
            event[name] = "<redacted>"
    return event


def configure_logging(
    level: str = "INFO", fmt: Literal["auto", "json", "console"] = "auto"
) -> None:
    """Configures structlog and routes the stdlib's logging (grpc, qdrant) through it."""
    use_json = fmt == "json" or (fmt == "auto" and not sys.stderr.isatty())
    shared: list[structlog.typing.Processor] = [
        structlog.contextvars.merge_contextvars,
        add_trace_ids,
        redact_private,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer()
        if use_json
        else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )
    structlog.configure(
        processors=[
            *shared,
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level)),
        logger_factory=structlog.PrintLoggerFactory(file=_Stderr()),  # type: ignore[arg-type]
        cache_logger_on_first_use=False,
    )
    handler = logging.StreamHandler(_Stderr())
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(processors=[*shared, renderer], foreign_pre_chain=[])
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    # Never below WARNING: the libraries' DEBUG and INFO records (httpx's one line per
    # request, for one) would drown the service's own.
    root.setLevel(max(logging.WARNING, logging.getLevelName(level)))
    logging.captureWarnings(True)  # SQLAlchemy's and others' warnings.warn() calls
    retries = logging.getLogger("openai._base_client")
    retries.setLevel(logging.INFO)
    if not any(isinstance(f, _RetriesAsWarnings) for f in retries.filters):
        retries.addFilter(_RetriesAsWarnings())


class _RetriesAsWarnings(logging.Filter):
    """Lets the openai SDK's "Retrying request" lines through as WARNING, no other INFO."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.WARNING:
            return True
        if record.levelno == logging.INFO and str(record.msg).startswith("Retrying request"):
            record.levelno, record.levelname = logging.WARNING, "WARNING"
            return True
        return False


def get_logger(name: str) -> structlog.typing.FilteringBoundLogger:
    logger: structlog.typing.FilteringBoundLogger = structlog.get_logger(name)
    return logger
