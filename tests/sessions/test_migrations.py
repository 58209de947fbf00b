"""The service creates and upgrades its own schema: a newer release opens an older
database, an older release refuses a newer one, and replicas may start together."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection, insert, inspect, select, text

from service.config import Settings
from service.configs import session_store_config
from service.domain import ConversationTurn
from service.errors import ConfigurationError, DatabaseUnavailable
from service.sessions import RunStatus, SessionStore, open_session_store
from service.sessions import schema as tables
from service.sessions.engine import create_engine
from service.sessions.migrations import LATEST_VERSION, migrate, schema_version
from tests.sessions.support import START, Database, OpenStore

SESSION = "11111111-1111-4111-8111-111111111111"
TURN = "22222222-2222-4222-8222-222222222222"


def engine_for(database: Database) -> Any:
    return create_engine(database.url, connect_args=database.connect_args)


async def versions(store: SessionStore) -> list[int]:
    async with store.engine.connect() as connection:
        query = select(schema_version.c.version).order_by(schema_version.c.version)
        return list((await connection.execute(query)).scalars())


def describe(connection: Connection) -> dict[str, tuple[set[str], set[str]]]:
    """Per table: its columns (name:nullable) and its index names."""
    inspector = inspect(connection)
    return {
        name: (
            {f"{c['name']}:{c['nullable']}" for c in inspector.get_columns(name)},
            {str(i["name"]) for i in inspector.get_indexes(name)},
        )
        for name in inspector.get_table_names()
    }


async def test_a_migrated_database_is_exactly_the_latest_schema(store: SessionStore) -> None:
    async with store.engine.connect() as connection:
        actual = await connection.run_sync(describe)
    assert set(actual) == {*tables.metadata.tables, "schema_version"}
    for name, table in tables.metadata.tables.items():
        columns, indexes = actual[name]
        assert columns == {f"{c.name}:{c.nullable}" for c in table.columns}, name
        assert {str(i.name) for i in table.indexes} <= indexes, name
    assert await versions(store) == list(range(1, LATEST_VERSION + 1))


async def test_a_version_1_database_is_upgraded_with_its_conversations(
    database: Database, open_store: OpenStore
) -> None:
    engine = engine_for(database)
    assert await migrate(engine, target=1) == 1
    async with engine.begin() as connection:
        # Rows as release 1 wrote them: no turns.error column yet.
        await connection.execute(
            insert(tables.sessions).values(
                id=SESSION,
                owner="alice",
                status="active",
                created_at=START,
                last_accessed=START,
                turn_count=1,
            )
        )
        await connection.execute(
            insert(tables.turns).values(
                id=TURN,
                session_id=SESSION,
                seq=1,
                request_id="r1",
                question="old question",
                status="completed",
                created_at=START,
                completed_at=START,
            )
        )
        await connection.execute(
            insert(tables.messages),
            [
                {"session_id": SESSION, "turn_id": TURN, "role": role, "content": content}
                | {"created_at": START}
                for role, content in (("user", "old question"), ("assistant", "old answer"))
            ],
        )
        columns = await connection.run_sync(
            lambda sync: {c["name"] for c in inspect(sync).get_columns("turns")}
        )
    assert "error" not in columns
    await engine.dispose()

    store = await open_store()
    assert await versions(store) == list(range(1, LATEST_VERSION + 1))
    [turn] = (await store.get_session(SESSION, "alice")).turns
    assert (turn.question, turn.answer, turn.status, turn.error) == (
        "old question",
        "old answer",
        RunStatus.COMPLETED,
        "",
    )
    handle = await store.begin_turn(
        session_id=SESSION, owner="alice", question="new question", request_id="r2"
    )
    assert handle.history == [ConversationTurn("old question", "old answer")]
    assert await store.abort_turn(handle.turn_id, "error", "uses the new column")


async def test_a_database_from_a_newer_release_is_refused(
    database: Database, open_store: OpenStore
) -> None:
    engine = engine_for(database)
    await migrate(engine)
    async with engine.begin() as connection:
        await connection.execute(
            insert(schema_version).values(version=99, description="future", applied_at=START)
        )
    await engine.dispose()
    with pytest.raises(ConfigurationError, match="schema version 99"):
        await open_store()


async def test_replicas_starting_together_upgrade_once(open_store: OpenStore) -> None:
    stores = await asyncio.gather(*(open_store() for _ in range(3)))
    assert await versions(stores[0]) == list(range(1, LATEST_VERSION + 1))


async def test_a_failed_step_leaves_the_database_as_it_was(
    database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    from service.sessions import migrations

    def broken(connection: Connection) -> None:
        connection.exec_driver_sql("ALTER TABLE turns ADD COLUMN error TEXT NOT NULL DEFAULT ''")
        raise RuntimeError("step 2 fails half-way")

    engine = engine_for(database)
    await migrate(engine, target=1)
    monkeypatch.setattr(
        migrations, "MIGRATIONS", (migrations.MIGRATIONS[0], migrations.Migration(2, "x", broken))
    )
    with pytest.raises(RuntimeError, match="half-way"):
        await migrate(engine)
    async with engine.connect() as connection:
        columns = await connection.run_sync(
            lambda sync: {c["name"] for c in inspect(sync).get_columns("turns")}
        )
        version = (
            await connection.execute(text("SELECT max(version) FROM schema_version"))
        ).scalar()
    await engine.dispose()
    assert "error" not in columns
    assert version == 1


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
