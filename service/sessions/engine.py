"""Engines for the session database: SQLite (the default, a file under DATA_DIR) or PostgreSQL.

SQLite needs care to behave like a server database under asyncio:

- WAL journal, so readers never wait for the writer;
- the driver's own transaction handling is switched off and we emit BEGIN ourselves, so
  that DDL runs inside transactions (migrations are all-or-nothing) and so that writers
  can ask for ``BEGIN IMMEDIATE``: a deferred transaction that reads and then writes fails
  at once with "database is locked" when another writer got in between, whereas an
  immediate one waits for the lock (up to the busy timeout) before reading anything.

Errors that mean "the database is not there right now" become
:class:`~service.errors.DatabaseUnavailable`; anything else is a bug and propagates.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import URL, Connection, make_url
from sqlalchemy.exc import (
    ArgumentError,
    DBAPIError,
    DisconnectionError,
    InterfaceError,
    OperationalError,
)
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from service.errors import ConfigurationError, DatabaseUnavailable
from service.observability.logging import get_logger

log = get_logger("ragagent.sessions")

SQLITE_FILE = "sessions.db"
_IMMEDIATE = "ragagent_immediate"
_BUSY_TIMEOUT_S = 10.0
_CONNECT_TIMEOUT_S = 10.0


def sqlite_url(data_dir: Path) -> str:
    """The default database: a SQLite file in the data folder."""
    return f"sqlite+aiosqlite:///{data_dir / SQLITE_FILE}"


def create_engine(url: str | URL, *, connect_args: Mapping[str, Any] | None = None) -> AsyncEngine:
    """An async engine for ``url``; plain ``sqlite://`` and ``postgresql://`` get async drivers."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise ConfigurationError("RAGAGENT_DATABASE_URL is not a database URL") from None
    backend = parsed.get_backend_name()
    extra = dict(connect_args or {})
    if backend == "sqlite":
        database = parsed.database
        if not database or database == ":memory:":
            # Every pooled connection would get a database of its own.
            raise ConfigurationError("the session database must be a file, not :memory:")
        Path(database).parent.mkdir(parents=True, exist_ok=True)
        engine = create_async_engine(
            parsed.set(drivername="sqlite+aiosqlite"),
            connect_args={"timeout": _BUSY_TIMEOUT_S, **extra},
        )
        _prepare_sqlite(engine)
        return engine
    if backend == "postgresql":
        return create_async_engine(
            parsed.set(drivername="postgresql+asyncpg"),
            # Replicas and restarts of the database leave dead connections in the pool.
            pool_pre_ping=True,
            pool_timeout=_CONNECT_TIMEOUT_S,
            connect_args={"timeout": _CONNECT_TIMEOUT_S, **extra},
        )
    raise ConfigurationError(
        f"RAGAGENT_DATABASE_URL: unsupported database {backend!r} (use sqlite or postgresql)"
    )


def _prepare_sqlite(engine: AsyncEngine) -> None:
    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # we emit BEGIN (see the module docstring)
        cursor = dbapi_connection.cursor()
        for pragma in (
            "PRAGMA journal_mode=WAL",
            "PRAGMA synchronous=NORMAL",  # durable at each checkpoint; WAL keeps it consistent
            "PRAGMA foreign_keys=ON",
            f"PRAGMA busy_timeout={int(_BUSY_TIMEOUT_S * 1000)}",
        ):
            cursor.execute(pragma)
        cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(connection: Connection) -> None:
        immediate = connection.get_execution_options().get(_IMMEDIATE, False)
        connection.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")


def writer(engine: AsyncEngine) -> AsyncEngine:
    """The same engine, for transactions that will write (SQLite: take the lock up front)."""
    return engine.execution_options(**{_IMMEDIATE: True})


def is_unavailable(error: BaseException) -> bool:
    """The database cannot be reached or used right now (as opposed to a bug)."""
    if isinstance(error, OperationalError | InterfaceError | DisconnectionError | PoolTimeout):
        return True
    if isinstance(error, DBAPIError) and error.connection_invalidated:
        return True
    # asyncpg reports a refused or dropped connection as a bare OSError at connect time.
    return isinstance(error, OSError | TimeoutError)


@asynccontextmanager
async def transaction(engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
    """One transaction, committed when the block ends; database outages become
    DatabaseUnavailable (without the driver's message, which may quote SQL or the DSN)."""
    try:
        async with engine.begin() as connection:
            yield connection
    except Exception as error:
        if not is_unavailable(error):
            raise
        log.warning("session database unavailable", error=repr(error)[:500])
        raise DatabaseUnavailable(
            "the session database is unavailable; retry later",
            metadata={"cause": type(error).__name__},
        ) from error
