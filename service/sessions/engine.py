"""Engines for the session database: SQLite (the default, a file under DATA_DIR) or PostgreSQL.

SQLite needs care to behave like a server database under asyncio:

- WAL journal, so readers never wait for the writer. The mode is a property of the file,
  set once at start-up (:func:`prepare`): switching it needs a lock that SQLite will not
  wait for, so concurrent first connections retry instead of failing;
- the driver's own transaction handling is switched off and we emit BEGIN ourselves, so
  that DDL runs inside transactions (migrations are all-or-nothing) and so that writers
  can ask for ``BEGIN IMMEDIATE``: a deferred transaction that reads and then writes fails
  at once with "database is locked" when another writer got in between, whereas an
  immediate one waits for the lock (up to the busy timeout) before reading anything.

All writes to a SQLite file go through one connection of their own (:func:`sqlite_writer`,
used by :class:`~service.sessions.writer.SerialWriter`); the async engine serves reads.

Errors that mean "the database is not there right now" become
:class:`~service.errors.DatabaseUnavailable`; anything else is a bug and propagates.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine as create_sync_engine
from sqlalchemy import event
from sqlalchemy.engine import URL, Connection, Engine, make_url
from sqlalchemy.exc import (
    ArgumentError,
    DBAPIError,
    DisconnectionError,
    InterfaceError,
    OperationalError,
)
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from service.datadir import private_file
from service.errors import ConfigurationError, DatabaseUnavailable
from service.observability.logging import get_logger

log = get_logger("ragagent.sessions")

SQLITE_FILE = "sessions.db"
_IMMEDIATE = "ragagent_immediate"
_NO_BEGIN = "ragagent_no_begin"
_BUSY_TIMEOUT_S = 10.0
_CONNECT_TIMEOUT_S = 10.0
_WAL_ATTEMPTS = 40


@dataclass(frozen=True, slots=True)
class Pool:
    """Connections per process: on PostgreSQL for everything, on SQLite for reads (its
    writes have one connection of their own). Sized for hundreds of concurrent streams,
    each holding a connection for the few statements of a turn's begin or end: on a busy
    event loop those take long enough that SQLAlchemy's 5 + 10 made waiters time out."""

    size: int = 10
    max_overflow: int = 20
    timeout_s: float = 30.0


DEFAULT_POOL = Pool()


def sqlite_url(data_dir: Path) -> str:
    """The default database: a SQLite file in the data folder."""
    return f"sqlite+aiosqlite:///{data_dir / SQLITE_FILE}"


def create_engine(
    url: str | URL,
    *,
    connect_args: Mapping[str, Any] | None = None,
    pool: Pool = DEFAULT_POOL,
    pgbouncer: bool = False,
) -> AsyncEngine:
    """An async engine for ``url``; plain ``sqlite://`` and ``postgresql://`` get async drivers.

    ``pgbouncer``: PostgreSQL is reached through PgBouncer in transaction mode, where
    consecutive transactions may run on different server connections: asyncpg's statement
    cache and SQLAlchemy's are off, and each prepared statement gets a unique name, so no
    statement is looked for on a connection that never prepared it."""
    parsed = _parse(url)
    backend = parsed.get_backend_name()
    extra = dict(connect_args or {})
    if pgbouncer and backend == "postgresql":
        extra = {
            "statement_cache_size": 0,
            "prepared_statement_cache_size": 0,
            "prepared_statement_name_func": _statement_name,
            **extra,
        }
    sizes: dict[str, Any] = {
        "pool_size": pool.size,
        "max_overflow": pool.max_overflow,
        "pool_timeout": pool.timeout_s,
        # Errors quote their statement, and without this its parameters too: a question, an
        # answer. They reach logs (session database unavailable, a failed write).
        "hide_parameters": True,
    }
    if backend == "sqlite":
        _create_private_file(_sqlite_file(parsed))
        engine = create_async_engine(
            parsed.set(drivername="sqlite+aiosqlite"),
            connect_args={"timeout": _BUSY_TIMEOUT_S, **extra},
            **sizes,
        )
        _prepare_sqlite(engine.sync_engine)
        return engine
    if backend == "postgresql":
        return create_async_engine(
            parsed.set(drivername="postgresql+asyncpg"),
            # Replicas and restarts of the database leave dead connections in the pool.
            pool_pre_ping=True,
            connect_args={"timeout": _CONNECT_TIMEOUT_S, **extra},
            **sizes,
        )
    raise ConfigurationError(
        f"RAGAGENT_DATABASE_URL: unsupported database {backend!r} (use sqlite or postgresql)"
    )


def _statement_name() -> str:
    return f"__ragagent_{uuid.uuid4().hex}__"


def sqlite_writer(url: str | URL) -> Engine:
    """The blocking engine of a SQLite file's single writer: one connection, every
    transaction ``BEGIN IMMEDIATE``. Used from one thread only, so that a whole batch of
    writes runs without waiting for the event loop between statements (which, on a busy
    loop, is what held the write lock long enough for other writers to time out)."""
    parsed = _parse(url)
    _create_private_file(_sqlite_file(parsed))
    engine = create_sync_engine(
        parsed.set(drivername="sqlite+pysqlite"),
        pool_size=1,
        max_overflow=0,
        hide_parameters=True,  # see create_engine
        # Created in the writer's thread, closed by dispose() from whichever thread.
        connect_args={"timeout": _BUSY_TIMEOUT_S, "check_same_thread": False},
    )
    _prepare_sqlite(engine)
    return engine.execution_options(**{_IMMEDIATE: True})


def _parse(url: str | URL) -> URL:
    try:
        return make_url(url)
    except ArgumentError:
        raise ConfigurationError("RAGAGENT_DATABASE_URL is not a database URL") from None


def _sqlite_file(url: URL) -> Path:
    database = url.database
    if not database or database == ":memory:":
        # Every pooled connection would get a database of its own.
        raise ConfigurationError("the session database must be a file, not :memory:")
    return Path(database)


def _create_private_file(path: Path) -> None:
    """Creates the database file readable by its owner only; SQLite gives its -wal and
    -shm files the same mode. An existing file keeps the mode its operator chose."""
    private_file(path)  # SQLite takes an empty file for a new database


def _prepare_sqlite(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # we emit BEGIN (see the module docstring)
        cursor = dbapi_connection.cursor()
        for pragma in (
            "PRAGMA synchronous=NORMAL",  # durable at each checkpoint; WAL keeps it consistent
            "PRAGMA foreign_keys=ON",
            f"PRAGMA busy_timeout={int(_BUSY_TIMEOUT_S * 1000)}",
        ):
            cursor.execute(pragma)
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Connection) -> None:
        options = connection.get_execution_options()
        if options.get(_NO_BEGIN, False):
            return
        connection.exec_driver_sql("BEGIN IMMEDIATE" if options.get(_IMMEDIATE, False) else "BEGIN")


async def prepare(engine: AsyncEngine) -> None:
    """Puts a SQLite file in WAL mode (a no-op elsewhere, and once the file is in WAL)."""
    if engine.dialect.name != "sqlite":
        return
    delay = 0.01
    for _ in range(_WAL_ATTEMPTS):
        try:
            async with engine.connect() as connection:
                # The journal mode cannot change inside a transaction: no BEGIN for this one.
                bare = await connection.execution_options(**{_NO_BEGIN: True})
                mode = (await bare.exec_driver_sql("PRAGMA journal_mode=WAL")).scalar()
        except OperationalError as error:
            if "locked" not in str(error).lower():
                raise
        else:
            if str(mode).lower() != "wal":
                raise ConfigurationError(f"the session database refused WAL mode ({mode})")
            return
        await asyncio.sleep(delay)
        delay = min(delay * 2, 0.5)
    raise DatabaseUnavailable("the session database stayed locked while opening it")


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
