"""The service creates and upgrades its own schema (Alembic): the result is exactly
``schema.py``, an older release refuses a newer database, a pre-release database is refused
with what to do, a failed upgrade changes nothing, and replicas may start together."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Connection, inspect, text
from sqlalchemy.exc import DBAPIError

from service.config import Settings
from service.configs import session_store_config
from service.errors import ConfigurationError, DatabaseUnavailable
from service.sessions import SessionStore, open_session_store
from service.sessions import schema as tables
from service.sessions.engine import create_engine
from service.sessions.migrations import head, migrate
from tests.sessions.support import Database, OpenStore


def engine_for(database: Database) -> Any:
    return create_engine(database.url, connect_args=database.connect_args)


async def revision(store: SessionStore) -> str | None:
    async with store.engine.connect() as connection:
        return await connection.run_sync(
            lambda sync: MigrationContext.configure(sync).get_current_revision()
        )


def differences(connection: Connection) -> list[Any]:
    """What Alembic finds between the database and schema.py (tables, columns, types,
    nullability, indexes, unique constraints)."""
    return list(compare_metadata(MigrationContext.configure(connection), tables.metadata))


async def test_a_migrated_database_is_exactly_the_latest_schema(store: SessionStore) -> None:
    async with store.engine.connect() as connection:
        found = await connection.run_sync(differences)
        names = await connection.run_sync(lambda sync: set(inspect(sync).get_table_names()))
    assert found == []
    assert names == {*tables.metadata.tables, "alembic_version"}
    assert await revision(store) == head()


async def test_a_database_from_a_newer_release_is_refused(
    database: Database, open_store: OpenStore
) -> None:
    engine = engine_for(database)
    await migrate(engine)
    async with engine.begin() as connection:
        await connection.execute(text("UPDATE alembic_version SET version_num = 'f00d'"))
    await engine.dispose()
    with pytest.raises(ConfigurationError, match=r"revision 'f00d'.*newer release"):
        await open_store()


async def test_a_pre_release_database_is_refused_with_what_to_do(
    database: Database, open_store: OpenStore
) -> None:
    engine = engine_for(database)
    async with engine.begin() as connection:
        await connection.execute(text("CREATE TABLE schema_version (version INTEGER)"))
    await engine.dispose()
    with pytest.raises(ConfigurationError, match=r"pre-release build.*RAGAGENT_DATABASE_URL"):
        await open_store()


async def test_replicas_starting_together_upgrade_once(open_store: OpenStore) -> None:
    stores = await asyncio.gather(*(open_store() for _ in range(3)))
    assert {await revision(store) for store in stores} == {head()}


async def test_a_failed_upgrade_leaves_the_database_as_it_was(database: Database) -> None:
    engine = engine_for(database)
    # A table in the way of the last one the initial revision creates: it fails after
    # creating the others, and none of them may remain.
    async with engine.begin() as connection:
        await connection.execute(text("CREATE TABLE run_events (x INTEGER)"))
    # SQLite's "table exists" reads as an OperationalError (so, unavailable); PostgreSQL's
    # as a programming error.
    with pytest.raises((DatabaseUnavailable, DBAPIError)):
        await migrate(engine)
    async with engine.connect() as connection:
        names = await connection.run_sync(lambda sync: set(inspect(sync).get_table_names()))
    await engine.dispose()
    assert names == {"run_events"}


# --- not per backend -------------------------------------------------------------------


async def test_the_default_database_is_sqlite_in_wal_mode_under_the_data_dir(
    tmp_path: Path,
) -> None:
    settings = Settings(data_dir=tmp_path / "data", database_url=None)
    store = await open_session_store(session_store_config(settings))
    try:
        async with store.engine.connect() as connection:
            mode = (await connection.exec_driver_sql("PRAGMA journal_mode")).scalar()
        await store.begin_turn(session_id=None, owner="alice", question="q", request_id="r")
        files = sorted((tmp_path / "data").iterdir())
        # Conversations are private: the file, its WAL and the folder are the owner's only.
        assert [f.name for f in files] == ["sessions.db", "sessions.db-shm", "sessions.db-wal"]
        assert {f.stat().st_mode & 0o777 for f in files} == {0o600}
        assert (tmp_path / "data").stat().st_mode & 0o077 == 0
    finally:
        await store.close()
    assert mode == "wal"


async def test_an_unreachable_database_is_unavailable() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(DatabaseUnavailable) as caught:
        await SessionStore.open(f"postgresql://postgres@127.0.0.1:{port}/test", ttl_s=60)
    assert "postgres@" not in caught.value.message  # no DSN in what callers see


@pytest.mark.parametrize(
    ("url", "complaint"),
    [
        ("mysql://db/sessions", "unsupported database"),
        ("sqlite+aiosqlite:///:memory:", "must be a file"),
        ("not a url", "not a database URL"),
    ],
)
async def test_database_urls_we_cannot_use_are_refused_at_start_up(
    url: str, complaint: str
) -> None:
    with pytest.raises(ConfigurationError, match=complaint):
        await SessionStore.open(url, ttl_s=60)
