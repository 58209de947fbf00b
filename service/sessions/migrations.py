"""Versioned schema of the session database, applied by the service at start-up.

The ``schema_version`` table lists every step applied. At start-up the pending steps run
in order inside one transaction, with the version rows they add, so a failed upgrade
leaves the database as it was (SQLite and PostgreSQL both have transactional DDL). On
PostgreSQL the transaction first takes an advisory lock, so that replicas starting at the
same moment upgrade one after the other instead of racing.

A step, once released, never changes: it describes how the schema *was* changed, and
databases in the field went through it. Each step therefore spells out its tables rather
than borrowing them from :mod:`service.sessions.schema`, which only describes the latest
version. A database newer than this release is refused rather than guessed at.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

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
    func,
    insert,
    select,
    text,
)
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

from service.errors import ConfigurationError
from service.sessions.engine import transaction, writer
from service.sessions.records import Clock, utc_now
from service.sessions.schema import Json, Serial, UTCDateTime


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    description: str
    apply: Callable[[Connection], None]


schema_version = Table(
    "schema_version",
    MetaData(),
    Column("version", Integer, primary_key=True, autoincrement=False),
    Column("description", String(200), nullable=False),
    Column("applied_at", UTCDateTime(), nullable=False),
)


def _v1_initial(connection: Connection) -> None:
    meta = MetaData()
    uuid = String(36)
    Table(
        "sessions",
        meta,
        Column("id", uuid, primary_key=True),
        Column("owner", String(256), nullable=False),
        Column("status", String(16), nullable=False),
        Column("created_at", UTCDateTime(), nullable=False),
        Column("last_accessed", UTCDateTime(), nullable=False),
        Column("turn_count", Integer, nullable=False, server_default=text("0")),
        Column("active_turn_id", uuid, nullable=True),
        Column("active_since", UTCDateTime(), nullable=True),
        CheckConstraint("status IN ('new', 'active', 'expired')", name="ck_sessions_status"),
        Index("ix_sessions_owner_created_at", "owner", "created_at", "id"),
        Index("ix_sessions_last_accessed", "last_accessed"),
    )
    Table(
        "turns",
        meta,
        Column("id", uuid, primary_key=True),
        Column("session_id", uuid, ForeignKey("sessions.id", ondelete="CASCADE"), nullable=False),
        Column("seq", Integer, nullable=False),
        Column("request_id", String(128), nullable=False),
        Column("question", Text, nullable=False),
        Column("status", String(16), nullable=False),
        Column("created_at", UTCDateTime(), nullable=False),
        Column("completed_at", UTCDateTime(), nullable=True),
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

    def turn_child(name: str, *columns: Column[object] | CheckConstraint) -> None:
        Table(
            name,
            meta,
            Column("session_id", uuid, nullable=False, index=True),
            Column(
                "turn_id",
                uuid,
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
        CheckConstraint("length(content) <= 10000", name="ck_messages_length"),
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
    )
    Table(
        "responses",
        meta,
        Column("turn_id", uuid, ForeignKey("turns.id", ondelete="CASCADE"), primary_key=True),
        Column("session_id", uuid, nullable=False, index=True),
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
    meta.create_all(connection, checkfirst=False)


def _v2_turn_errors(connection: Connection) -> None:
    # Plain DDL that both backends accept; SQLite can add a column with a constant default.
    connection.exec_driver_sql("ALTER TABLE turns ADD COLUMN error TEXT NOT NULL DEFAULT ''")
    connection.exec_driver_sql(
        "CREATE INDEX ix_tool_calls_function_name ON tool_calls (function_name)"
    )


def _v3_unbounded_messages(connection: Connection) -> None:
    # Sealed text is longer than its plaintext (base64, nonce, tag): the 10,000-character
    # limit stays, applied to the plaintext by the service, and leaves the table.
    if connection.dialect.name != "sqlite":
        connection.exec_driver_sql("ALTER TABLE messages DROP CONSTRAINT ck_messages_length")
        return
    # SQLite cannot drop a constraint: the table is rebuilt, rows and indexes included.
    meta = MetaData()
    Table("turns", meta, Column("id", String(36), primary_key=True))
    rebuilt = Table(
        "messages_v3",
        meta,
        Column("id", Serial, primary_key=True, autoincrement=True),
        Column("session_id", String(36), nullable=False),
        Column("turn_id", String(36), ForeignKey("turns.id", ondelete="CASCADE"), nullable=False),
        Column("role", String(16), nullable=False),
        Column("content", Text, nullable=False),
        Column("created_at", UTCDateTime(), nullable=False),
        CheckConstraint("role IN ('user', 'assistant', 'system')", name="ck_messages_role"),
    )
    rebuilt.create(connection)
    connection.exec_driver_sql(
        "INSERT INTO messages_v3 (id, session_id, turn_id, role, content, created_at) "
        "SELECT id, session_id, turn_id, role, content, created_at FROM messages"
    )
    connection.exec_driver_sql("DROP TABLE messages")
    connection.exec_driver_sql("ALTER TABLE messages_v3 RENAME TO messages")
    for column in ("session_id", "turn_id"):
        connection.exec_driver_sql(f"CREATE INDEX ix_messages_{column} ON messages ({column})")


def _v4_turn_labels(connection: Connection) -> None:
    connection.exec_driver_sql("ALTER TABLE turns ADD COLUMN labels TEXT NOT NULL DEFAULT ''")


def _v5_background_runs(connection: Connection) -> None:
    meta = MetaData()
    Table(
        "runs",
        meta,
        Column("id", String(64), primary_key=True),
        Column("owner", String(256), nullable=False),
        Column("session_id", String(36), nullable=False),
        Column("status", String(16), nullable=False),
        Column("renewed_at", UTCDateTime(), nullable=False),
        Column("created_at", UTCDateTime(), nullable=False),
        Column("ended_at", UTCDateTime(), nullable=True),
        Column("last_sequence", Integer, nullable=False, server_default=text("0")),
        Column("end_code", String(32), nullable=False, server_default=text("''")),
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
    meta.create_all(connection, checkfirst=False)


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "sessions, turns, messages, tool calls and responses", _v1_initial),
    Migration(2, "why a turn failed; tool calls indexed by function name", _v2_turn_errors),
    Migration(3, "message length checked before sealing, not by the table", _v3_unbounded_messages),
    Migration(4, "the request's metadata kept with its turn", _v4_turn_labels),
    Migration(5, "background runs and their events", _v5_background_runs),
)
LATEST_VERSION = MIGRATIONS[-1].version


async def migrate(
    engine: AsyncEngine, *, target: int = LATEST_VERSION, clock: Clock = utc_now
) -> int:
    """Applies the steps up to ``target`` that the database lacks; returns its version."""
    async with transaction(writer(engine)) as connection:
        if connection.dialect.name == "postgresql":
            # Scoped to the schema, so separate schemas (tests, tenants) do not wait on
            # each other; released with the transaction.
            await connection.execute(
                text(
                    "SELECT pg_advisory_xact_lock("
                    "hashtext('ragagent.sessions:' || current_schema()))"
                )
            )
        return await connection.run_sync(_migrate, target, clock())


def _migrate(connection: Connection, target: int, now: datetime) -> int:
    schema_version.create(connection, checkfirst=True)
    current = connection.execute(select(func.max(schema_version.c.version))).scalar() or 0
    if current > LATEST_VERSION:
        raise ConfigurationError(
            f"the session database has schema version {current}, newer than this release "
            f"supports ({LATEST_VERSION}); upgrade ragagent or point RAGAGENT_DATABASE_URL "
            "elsewhere"
        )
    for step in MIGRATIONS:
        if current < step.version <= target:
            step.apply(connection)
            connection.execute(
                insert(schema_version).values(
                    version=step.version, description=step.description, applied_at=now
                )
            )
            current = step.version
    return current
