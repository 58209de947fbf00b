"""The session store through a real PgBouncer in transaction mode (RAGAGENT_DATABASE_PGBOUNCER):
migrations, concurrent turns and the purge's advisory lock all work with consecutive
transactions on different server connections."""

from __future__ import annotations

import asyncio

import pytest

from service.sessions import SessionStore
from tests.fleet.support import pgbouncer, postgres_role
from tests.sessions.support import result


async def _turns(dsn: str, *, pgbouncer_mode: bool) -> int:
    url = dsn.replace("postgresql://", "postgresql+asyncpg://", 1)
    stores = [await SessionStore.open(url, ttl_s=1800, pgbouncer=pgbouncer_mode) for _ in range(2)]
    try:

        async def one(n: int) -> None:
            store = stores[n % 2]
            handle = await store.begin_turn(
                session_id=None, owner=f"user-{n}", question=f"q{n}", request_id=f"r{n}"
            )
            assert await store.complete_turn(handle.turn_id, result())
            again = await store.begin_turn(
                session_id=handle.session_id, owner=f"user-{n}", question="q", request_id="r"
            )
            assert await store.complete_turn(again.turn_id, result())

        await asyncio.gather(*(one(n) for n in range(40)))
        await asyncio.gather(*(s.purge_expired() for s in stores))
        sessions, _ = await stores[0].list_sessions("user-7")
        return len(sessions[0].turns) + sessions[0].turn_count
    finally:
        for store in stores:
            await store.close()


@pytest.mark.timeout(120)
def test_sessions_work_through_pgbouncer_in_transaction_mode() -> None:
    with postgres_role() as dsn, pgbouncer(dsn) as bounced:
        assert asyncio.run(_turns(bounced, pgbouncer_mode=True)) == 2


@pytest.mark.timeout(120)
def test_without_the_setting_asyncpg_fails_behind_pgbouncer() -> None:
    # The control: asyncpg's cached statements meet server connections that never saw them.
    with (
        postgres_role() as dsn,
        pgbouncer(dsn) as bounced,
        pytest.raises(Exception, match="prepared statement"),
    ):
        asyncio.run(_turns(bounced, pgbouncer_mode=False))
