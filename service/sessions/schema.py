"""The tables of the session database as of the latest schema version.

Queries use these definitions; the revisions of :mod:`service.sessions.migrations` build
the database up to them (a test checks, with Alembic's comparison, that a migrated database
matches this file).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, TypeAlias

from sqlalchemy import (
    JSON,
    BigInteger,
    CheckConstraint,
    Column,
    DateTime,
    Dialect,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    Row,
    String,
    Table,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.types import TypeDecorator


class UTCDateTime(TypeDecorator[datetime]):
    """Aware UTC datetimes in, aware UTC datetimes out, on every backend.

    SQLite keeps no time zone, so values are stored as naive UTC there; comparisons stay
    correct because every value goes through the same conversion.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("session timestamps must be timezone-aware")
        value = value.astimezone(UTC)
        return value if dialect.name == "postgresql" else value.replace(tzinfo=None)

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        moment: datetime = value
        return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


AnyRow: TypeAlias = Row[*tuple[Any, ...]]
"""A result row of any shape (mypy cannot follow column names through Core queries)."""

# SQLite only auto-increments a column declared exactly INTEGER PRIMARY KEY.
Serial = BigInteger().with_variant(Integer(), "sqlite")
Json = JSON(none_as_null=True)
ID_LENGTH = 36  # a UUID in text form

metadata = MetaData()

sessions = Table(
    "sessions",
    metadata,
    Column("id", String(ID_LENGTH), primary_key=True),
    Column("owner", String(256), nullable=False),
    Column("status", String(16), nullable=False),
    Column("created_at", UTCDateTime(), nullable=False),
    Column("last_accessed", UTCDateTime(), nullable=False),
    Column("turn_count", Integer, nullable=False, server_default=text("0")),
    # The one turn in progress, if any: the conditional UPDATE on this column is what
    # keeps two requests from running on the same session at once (see store.py).
    Column("active_turn_id", String(ID_LENGTH), nullable=True),
    Column("active_since", UTCDateTime(), nullable=True),
    CheckConstraint("status IN ('new', 'active', 'expired')", name="ck_sessions_status"),
    # Listing is per owner, newest first; keyset pagination walks (created_at, id).
    Index("ix_sessions_owner_created_at", "owner", "created_at", "id"),
    # The purger looks for sessions idle since before a cut-off.
    Index("ix_sessions_last_accessed", "last_accessed"),
)

turns = Table(
    "turns",
    metadata,
    Column("id", String(ID_LENGTH), primary_key=True),
    Column(
        "session_id",
        String(ID_LENGTH),
        ForeignKey("sessions.id", ondelete="CASCADE"),
        nullable=False,
    ),
    Column("seq", Integer, nullable=False),
    Column("request_id", String(128), nullable=False),
    Column("question", Text, nullable=False),
    Column("status", String(16), nullable=False),
    Column("created_at", UTCDateTime(), nullable=False),
    Column("completed_at", UTCDateTime(), nullable=True),
    Column("error", Text, nullable=False, server_default=text("''")),
    # The request's metadata as a JSON object, sealed like the question; "" for none.
    Column("labels", Text, nullable=False, server_default=text("''")),
    UniqueConstraint("session_id", "seq", name="uq_turns_session_seq"),
    CheckConstraint(
        "status IN ('active', 'completed', 'error', 'timeout', 'cancelled')",
        name="ck_turns_status",
    ),
    # A second guard behind the session row's: the database itself refuses two active
    # turns in one session, whatever code path tries.
    Index(
        "ux_turns_one_active",
        "session_id",
        unique=True,
        sqlite_where=text("status = 'active'"),
        postgresql_where=text("status = 'active'"),
    ),
)

messages = Table(
    "messages",
    metadata,
    Column("id", Serial, primary_key=True, autoincrement=True),
    Column("session_id", String(ID_LENGTH), nullable=False, index=True),
    Column(
        "turn_id",
        String(ID_LENGTH),
        ForeignKey("turns.id", ondelete="CASCADE"),
        nullable=False,
        index=True,
    ),
    Column("role", String(16), nullable=False),
    Column("content", Text, nullable=False),
    Column("created_at", UTCDateTime(), nullable=False),
    # The service cuts text to MAX_MESSAGE_CHARS before sealing it (sealed text is longer).
    CheckConstraint("role IN ('user', 'assistant', 'system')", name="ck_messages_role"),
)

tool_calls = Table(
    "tool_calls",
    metadata,
    Column("id", Serial, primary_key=True, autoincrement=True),
    Column("session_id", String(ID_LENGTH), nullable=False, index=True),
    Column(
        "turn_id",
        String(ID_LENGTH),
        ForeignKey("turns.id", ondelete="CASCADE"),
        nullable=False,
        index=True,
    ),
    Column("position", Integer, nullable=False),
    Column("call_id", String(128), nullable=False),
    Column("function_name", String(128), nullable=False),
    Column("arguments", Json, nullable=False),
    Column("result", Json, nullable=True),
    Column("status", String(16), nullable=False),
    Column("error", Text, nullable=False),
    Column("started_at", UTCDateTime(), nullable=True),
    Column("duration_s", Float, nullable=True),
    Column("created_at", UTCDateTime(), nullable=False),
    Index("ix_tool_calls_function_name", "function_name"),
)

responses = Table(
    "responses",
    metadata,
    Column(
        "turn_id",
        String(ID_LENGTH),
        ForeignKey("turns.id", ondelete="CASCADE"),
        primary_key=True,
    ),
    Column("session_id", String(ID_LENGTH), nullable=False, index=True),
    Column("status", String(16), nullable=False),
    Column("confidence", Float, nullable=False),
    Column("sources", Json, nullable=False),
    Column("prompt_tokens", Integer, nullable=False),
    Column("completion_tokens", Integer, nullable=False),
    Column("retrieval_s", Float, nullable=False),
    Column("time_to_first_token_s", Float, nullable=True),
    Column("total_s", Float, nullable=False),
    Column("finish_reason", String(64), nullable=False),
    Column("model", String(256), nullable=False),
    Column("created_at", UTCDateTime(), nullable=False),
)

runs = Table(
    "runs",
    metadata,
    # Unguessable (secrets.token_urlsafe): holding the id is not enough, the owner is checked.
    Column("id", String(64), primary_key=True),
    Column("owner", String(256), nullable=False),
    Column("session_id", String(ID_LENGTH), nullable=False),
    Column("status", String(16), nullable=False),
    # The replica running it renews this with every write; a running run not renewed for a
    # turn lease was lost with its replica (see service.sessions.runs).
    Column("renewed_at", UTCDateTime(), nullable=False),
    Column("created_at", UTCDateTime(), nullable=False),
    Column("ended_at", UTCDateTime(), nullable=True),
    Column("last_sequence", Integer, nullable=False, server_default=text("0")),
    # How the run's stream ended: the gRPC status code's name ("" for OK) and its message.
    Column("end_code", String(64), nullable=False, server_default=text("''")),
    Column("end_message", Text, nullable=False, server_default=text("''")),
    Column("cancel_requested", Integer, nullable=False, server_default=text("0")),
    CheckConstraint(
        "status IN ('running', 'success', 'no_answer', 'error', 'timeout', 'cancelled')",
        name="ck_runs_status",
    ),
    # The purger deletes runs ended before a cut-off.
    Index("ix_runs_ended_at", "ended_at"),
)

run_events = Table(
    "run_events",
    metadata,
    Column("run_id", String(64), ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
    Column("sequence", Integer, primary_key=True, autoincrement=False),
    # The serialized AskStreamResponse, base64, sealed like a turn's text.
    Column("payload", Text, nullable=False),
)
