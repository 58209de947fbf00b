"""The single SQLite writer: writes run in the order they came, many to a transaction, a
failing write fails alone and reaches its caller, and closing waits for every write."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import Connection, Engine, event, text

from service.errors import DatabaseUnavailable
from service.sessions.engine import sqlite_writer
from service.sessions.writer import SerialWriter


@pytest.fixture
def engine(tmp_path: Path) -> Engine:
    engine = sqlite_writer(f"sqlite:///{tmp_path / 'w.db'}")
    with engine.begin() as connection:
        connection.exec_driver_sql("CREATE TABLE log (n INTEGER NOT NULL UNIQUE)")
    return engine


@pytest.fixture
async def writer(engine: Engine) -> AsyncIterator[SerialWriter]:
    writer = SerialWriter(engine)
    yield writer
    await writer.close()


def insert(n: int) -> object:
    def work(connection: Connection) -> int:
        connection.execute(text("INSERT INTO log (n) VALUES (:n)"), {"n": n})
        return n

    return work


def logged(engine: Engine) -> list[int]:
    """What the writer committed (asked when it is idle, on its own engine)."""
    with engine.connect() as connection:
        return list(connection.execute(text("SELECT n FROM log ORDER BY rowid")).scalars())


class Gate:
    """A write that holds the writer's thread until opened, to line writes up behind it."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.opened = threading.Event()

    def __call__(self, _connection: Connection) -> None:
        self.entered.set()
        self.opened.wait(10)

    async def wait_entered(self) -> None:
        await asyncio.to_thread(self.entered.wait, 10)


async def test_writes_commit_in_order_many_to_a_transaction(
    engine: Engine, writer: SerialWriter
) -> None:
    commits = []
    event.listen(engine, "commit", lambda _connection: commits.append(1))
    futures = [writer.submit(insert(n)).future for n in range(300)]
    assert await asyncio.gather(*futures) == list(range(300))
    assert logged(engine) == list(range(300))
    assert len(commits) < 30  # batched: not one transaction per write


async def test_a_failing_write_fails_alone_and_reaches_its_caller(
    engine: Engine, writer: SerialWriter
) -> None:
    def half_then_fail(connection: Connection) -> None:
        connection.execute(text("INSERT INTO log (n) VALUES (100)"))
        raise ValueError("refused")

    gate = Gate()
    writer.submit(gate)
    await gate.wait_entered()
    # Queued behind the gate, so that they share the next transaction.
    before, failing, duplicate, after = (
        writer.submit(insert(1)),
        writer.submit(half_then_fail),
        writer.submit(insert(1)),  # violates UNIQUE: an IntegrityError for this caller only
        writer.submit(insert(2)),
    )
    gate.opened.set()
    assert await before.future == 1
    with pytest.raises(ValueError, match="refused"):
        await failing.future
    with pytest.raises(Exception, match="UNIQUE"):
        await duplicate.future
    assert await after.future == 2
    assert logged(engine) == [1, 2]  # the failing write's own insert was rolled back


async def test_a_write_alone_is_its_own_transaction_and_a_failure_rolls_it_back(
    engine: Engine, writer: SerialWriter
) -> None:
    statements: list[str] = []
    event.listen(
        engine, "before_cursor_execute", lambda *args: statements.append(args[2].split()[0])
    )

    def half_then_fail(connection: Connection) -> None:
        connection.execute(text("INSERT INTO log (n) VALUES (100)"))
        raise ValueError("refused")

    assert await writer.submit(insert(1)).future == 1
    with pytest.raises(ValueError, match="refused"):
        await writer.submit(half_then_fail).future
    assert await writer.submit(insert(2)).future == 2
    assert logged(engine) == [1, 2]  # the failing write's insert was rolled back with it
    assert "SAVEPOINT" not in statements  # one write to a transaction needs none


async def test_a_database_failure_is_database_unavailable_for_that_write_only(
    engine: Engine, writer: SerialWriter
) -> None:
    def broken(connection: Connection) -> None:
        connection.exec_driver_sql("INSERT INTO missing_table VALUES (1)")

    gate = Gate()
    writer.submit(gate)
    await gate.wait_entered()
    ok, bad, later = writer.submit(insert(1)), writer.submit(broken), writer.submit(insert(2))
    gate.opened.set()
    with pytest.raises(DatabaseUnavailable):
        await bad.future
    assert (await ok.future, await later.future) == (1, 2)
    assert logged(engine) == [1, 2]


async def test_close_commits_every_accepted_write_then_refuses_more(
    engine: Engine, writer: SerialWriter
) -> None:
    futures = [writer.submit(insert(n)).future for n in range(200)]
    await writer.close()
    assert all(f.done() and f.exception() is None for f in futures)
    assert logged(engine) == list(range(200))
    with pytest.raises(DatabaseUnavailable):
        writer.submit(insert(999))


async def test_a_write_is_withdrawn_only_before_it_starts(
    engine: Engine, writer: SerialWriter
) -> None:
    gate = Gate()
    running = writer.submit(gate)
    await gate.wait_entered()
    queued = writer.submit(insert(1))
    assert not running.withdraw()  # started: it runs to its end
    assert queued.withdraw()
    gate.opened.set()
    await writer.drain()
    assert queued.future.cancelled()
    assert logged(engine) == []


async def test_a_cancelled_waiter_never_cancels_the_write(
    engine: Engine, writer: SerialWriter
) -> None:
    gate = Gate()
    writer.submit(gate)
    await gate.wait_entered()
    pending = writer.submit(insert(7))
    waiter = asyncio.ensure_future(asyncio.shield(pending.future))
    await asyncio.sleep(0)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    gate.opened.set()
    assert await pending.future == 7
    assert logged(engine) == [7]
