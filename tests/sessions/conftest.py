"""Every session test runs twice: on SQLite in a temporary folder, and on PostgreSQL in a
schema of its own that is dropped afterwards (marked ``postgres``)."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from service.sessions import SessionStore
from tests.sessions.support import Database, FakeClock, OpenStore

POSTGRES_DSN = os.environ.get("TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")


async def _postgres_schema() -> AsyncIterator[Database]:
    import asyncpg

    try:
        admin = await asyncpg.connect(POSTGRES_DSN, timeout=3)
    except (OSError, TimeoutError, asyncpg.PostgresError) as error:
        pytest.skip(f"PostgreSQL is not reachable at {POSTGRES_DSN} ({error!r})")
    schema = f"rag_test_{uuid.uuid4().hex[:12]}"
    await admin.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield Database(
            "postgres",
            POSTGRES_DSN.replace("postgresql://", "postgresql+asyncpg://", 1),
            {"server_settings": {"search_path": schema}},
        )
    finally:
        await admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        await admin.close()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def database(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Database]:
    if request.param == "sqlite":
        # A folder that does not exist yet: the store creates it.
        yield Database("sqlite", f"sqlite+aiosqlite:///{tmp_path / 'data' / 'sessions.db'}")
        return
    async for database in _postgres_schema():
        yield database


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def open_store(database: Database, clock: FakeClock) -> AsyncIterator[OpenStore]:
    """Opens stores on the test's database (the fake clock unless told otherwise); closes
    whatever is still open at the end."""
    opened: list[SessionStore] = []

    async def open_(**options: Any) -> SessionStore:
        options.setdefault("ttl_s", 1800.0)
        options.setdefault("clock", clock)
        store = await SessionStore.open(database.url, connect_args=database.connect_args, **options)
        opened.append(store)
        return store

    yield open_
    for store in opened:
        await store.close()


@pytest.fixture
async def store(open_store: OpenStore) -> SessionStore:
    return await open_store()
