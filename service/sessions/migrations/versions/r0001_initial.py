"""The initial schema: sessions, turns, messages, tool calls, responses, background runs.

Revision ID: 0001
Revises:
Create Date: 2026-11-26

Spelled out here rather than borrowed from :mod:`service.sessions.schema`, which describes
the latest schema: this revision must keep creating what it created when it was released.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op
from sqlalchemy import (
    CheckConstraint,
    Column,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    text,
)

from service.sessions.schema import Json, Serial, UTCDateTime

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

UUID = 36


def upgrade() -> None:
    meta = MetaData()
    Table(
        "sessions",
        meta,
        Column("id", String(UUID), primary_key=True),
        Column("owner", String(256), nullable=False),
        Column("status", String(16), nullable=False),
        Column("created_at", UTCDateTime(), nullable=False),
        Column("last_accessed", UTCDateTime(), nullable=False),
        Column("turn_count", Integer, nullable=False, server_default=text("0")),
        Column("active_turn_id", String(UUID), nullable=True),
        Column("active_since", UTCDateTime(), nullable=True),
        CheckConstraint("status IN ('new', 'active', 'expired')", name="ck_sessions_status"),
        Index("ix_sessions_owner_created_at", "owner", "created_at", "id"),
        Index("ix_sessions_last_accessed", "last_accessed"),
    )
    Table(
        "turns",
        meta,
        Column("id", String(UUID), primary_key=True),
        Column(
            "session_id",
            String(UUID),
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
        Column("labels", Text, nullable=False, server_default=text("''")),
        UniqueConstraint("session_id", "seq", name="uq_turns_session_seq"),
        CheckConstraint(
            "status IN ('active', 'completed', 'error', 'timeout', 'cancelled')",
            name="ck_turns_status",
        ),
        Index(
            "ux_turns_one_active",
            "session_id",
            unique=True,
            sqlite_where=text("status = 'active'"),
            postgresql_where=text("status = 'active'"),
        ),
    )

    def turn_child(name: str, *columns: Column[object] | CheckConstraint | Index) -> None:
        Table(
            name,
            meta,
            Column("session_id", String(UUID), nullable=False, index=True),
            Column(
                "turn_id",
                String(UUID),
                ForeignKey("turns.id", ondelete="CASCADE"),
                nullable=False,
                index=True,
            ),
            *columns,
        )

    turn_child(
        "messages",
        Column("id", Serial, primary_key=True, autoincrement=True),
        Column("role", String(16), nullable=False),
        Column("content", Text, nullable=False),
        Column("created_at", UTCDateTime(), nullable=False),
        CheckConstraint("role IN ('user', 'assistant', 'system')", name="ck_messages_role"),
    )
    turn_child(
        "tool_calls",
        Column("id", Serial, primary_key=True, autoincrement=True),
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
    Table(
        "responses",
        meta,
        Column(
            "turn_id",
            String(UUID),
            ForeignKey("turns.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        Column("session_id", String(UUID), nullable=False, index=True),
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
    Table(
        "runs",
        meta,
        Column("id", String(64), primary_key=True),
        Column("owner", String(256), nullable=False),
        Column("session_id", String(UUID), nullable=False),
        Column("status", String(16), nullable=False),
        Column("renewed_at", UTCDateTime(), nullable=False),
        Column("created_at", UTCDateTime(), nullable=False),
        Column("ended_at", UTCDateTime(), nullable=True),
        Column("last_sequence", Integer, nullable=False, server_default=text("0")),
        Column("end_code", String(64), nullable=False, server_default=text("''")),
        Column("end_message", Text, nullable=False, server_default=text("''")),
        Column("cancel_requested", Integer, nullable=False, server_default=text("0")),
        CheckConstraint(
            "status IN ('running', 'success', 'no_answer', 'error', 'timeout', 'cancelled')",
            name="ck_runs_status",
        ),
        Index("ix_runs_ended_at", "ended_at"),
    )
    Table(
        "run_events",
        meta,
        Column("run_id", String(64), ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
        Column("sequence", Integer, primary_key=True, autoincrement=False),
        Column("payload", Text, nullable=False),
    )
    meta.create_all(op.get_bind(), checkfirst=False)


def downgrade() -> None:
    # The service never downgrades: an older release refuses a newer database instead.
    raise NotImplementedError("downgrades are not supported")
