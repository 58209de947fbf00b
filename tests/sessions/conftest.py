"""Every session test runs twice: on SQLite in a temporary folder, and on PostgreSQL in a
schema of its own that is dropped afterwards (marked ``postgres``). Under pytest-xdist each
worker has a database of its own (TEST_POSTGRES_DSN's name + ``_gw0``, ``_gw1`` ...), created
on first use and kept for the next run, so that workers never contend on one catalog."""

from __future__ import annotations

import os
import urllib.parse
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from service.sessions import SessionStore
from tests.sessions.support import Database, FakeClock, OpenStore

POSTGRES_DSN = os.environ.get("TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")
_worker_dsn: str | None = None


async def _worker_database() -> str:
    """This process's DSN: TEST_POSTGRES_DSN itself, or under xdist a database of the worker's
    own beside it, created if absent (two workers never create the same one)."""
    global _worker_dsn  # noqa: PLW0603 (once per process; the name depends on the worker)
    if _worker_dsn is not None:
        return _worker_dsn
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if not worker:
        _worker_dsn = POSTGRES_DSN
        return _worker_dsn
    import asyncpg

    parts = urllib.parse.urlsplit(POSTGRES_DSN)
    name = f"{parts.path.lstrip('/') or 'postgres'}_{worker}"
    admin = await asyncpg.connect(POSTGRES_DSN, timeout=3)
    try:
        if not await admin.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", name):
            await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    _worker_dsn = urllib.parse.urlunsplit(parts._replace(path=f"/{name}"))
    return _worker_dsn


async def _postgres_schema() -> AsyncIterator[Database]:
    import asyncpg

    try:
        dsn = await _worker_database()
        admin = await asyncpg.connect(dsn, timeout=3)
    except (OSError, TimeoutError, asyncpg.PostgresError) as error:
        pytest.skip(f"PostgreSQL is not reachable at {POSTGRES_DSN} ({error!r})")
    schema = f"rag_test_{uuid.uuid4().hex[:12]}"
    await admin.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield Database(
            "postgres",
            dsn.replace("postgresql://", "postgresql+asyncpg://", 1),
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
