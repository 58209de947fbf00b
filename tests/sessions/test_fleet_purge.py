"""Three stores (three replicas' worth) purging one database at once: one purge runs at a
time on PostgreSQL, and what they report deleting adds up to what was expired."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from sqlalchemy import insert, select

from service.sessions import schema as t
from tests.sessions.support import FakeClock, OpenStore

EXPIRED = 2000


async def test_three_stores_purging_at_once_report_deletions_adding_up(
    open_store: OpenStore, clock: FakeClock
) -> None:
    stores = [await open_store(ttl_s=60) for _ in range(3)]
    old = clock.now - timedelta(hours=1)
    rows = [
        {
            "id": f"00000000-0000-4000-8000-{n:012d}",
            "owner": "alice",
            "status": "active",
            "created_at": old,
            "last_accessed": old,
            "turn_count": 0,
        }
        for n in range(EXPIRED)
    ]
    async with stores[0].engine.begin() as connection:
        await connection.execute(insert(t.sessions), rows)

    reported = await asyncio.gather(*(store.purge_expired() for store in stores))
    # A store that found another's purge running skips its round; the next one finishes.
    reported.append(sum([await store.purge_expired() for store in stores]))

    async with stores[0].engine.connect() as connection:
        left = (await connection.execute(select(t.sessions.c.id))).all()
    assert left == []
    print(f"reported by the three stores, then the follow-up round: {reported}")
    assert sum(reported) == EXPIRED, reported
