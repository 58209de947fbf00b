"""Who runs the session store's writes: one writer for SQLite, the pool for PostgreSQL.

A write is a plain function of a (blocking) SQLAlchemy connection, run inside a transaction;
:meth:`Writer.submit` hands it over and returns a :class:`Pending` whose future the caller
awaits. The writer owns the write from then on: a caller that is cancelled stops waiting
(it should shield the future), but the write still runs to its end, and :meth:`Writer.close`
waits for every write it accepted. A failed write's exception goes to its future, the
database's own failures as :class:`~service.errors.DatabaseUnavailable`.

SQLite allows one writer per file, and a second connection waiting for the lock polls it
with sleeps: under load some waiters starve until their busy timeout ("database is
locked"). :class:`SerialWriter` is therefore the only writer of its file: a task takes
every queued write, up to :data:`MAX_BATCH`, and runs them in one ``BEGIN IMMEDIATE``
transaction in one thread, each write in a savepoint so that one failing write rolls back
alone (a write alone needs none: the transaction is its own); the futures are resolved
once the batch is committed. Writes run in the order they were submitted. PostgreSQL has
row locks and a server: :class:`ConcurrentWriter` runs each write in its own transaction
on a pooled connection, as many at once as the pool allows.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from sqlalchemy.engine import Connection, Engine
from sqlalchemy.ext.asyncio import AsyncEngine

from service.errors import DatabaseUnavailable
from service.observability.logging import get_logger
from service.sessions.engine import is_unavailable, transaction, writer

log = get_logger("ragagent.sessions")
T = TypeVar("T")
Work = Callable[[Connection], T]

MAX_BATCH = 100
"""Most writes committed together: bounds how long one batch keeps the others waiting."""


@dataclass(eq=False, slots=True)
class Pending(Generic[T]):
    """A submitted write: its future, and whether the writer has started it."""

    work: Work[T]
    future: asyncio.Future[T]
    started: bool = False

    def withdraw(self) -> bool:
        """Drops the write if it has not started (True); else it runs to its end (False)."""
        if self.started or self.future.done():
            return False
        self.future.cancel()
        return True

    def begin(self) -> bool:
        """Called by the writer when it takes the write; False if it was withdrawn."""
        if self.future.cancelled():
            return False
        self.started = True
        return True


class Writer(Protocol):
    def submit(self, work: Work[T]) -> Pending[T]: ...

    async def drain(self) -> None: ...

    async def close(self) -> None: ...


@dataclass(slots=True)
class _Outstanding:
    """The futures of accepted writes not yet finished, for drain()."""

    futures: set[asyncio.Future[Any]] = field(default_factory=set)

    def add(self, future: asyncio.Future[Any]) -> None:
        self.futures.add(future)
        future.add_done_callback(self.futures.discard)

    async def drain(self) -> None:
        while self.futures:
            await asyncio.wait(set(self.futures))


def _unavailable(error: BaseException) -> DatabaseUnavailable:
    log.warning("session database unavailable", error=repr(error)[:500])
    failure = DatabaseUnavailable(
        "the session database is unavailable; retry later",
        metadata={"cause": type(error).__name__},
    )
    failure.__cause__ = error
    return failure


class _Failed:
    __slots__ = ("error",)

    def __init__(self, error: Exception) -> None:
        self.error = error


class SerialWriter:
    """The single writer of a SQLite file (see the module docstring)."""

    def __init__(self, engine: Engine, *, max_batch: int = MAX_BATCH) -> None:
        self._engine = engine
        self._max_batch = max_batch
        self._queue: asyncio.Queue[Pending[Any]] = asyncio.Queue()
        self._outstanding = _Outstanding()
        # One thread: the connection is used by nothing else, and batches cannot overlap.
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="session-writer")
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    def submit(self, work: Work[T]) -> Pending[T]:
        if self._closed:
            raise DatabaseUnavailable("the session store is closed")
        loop = asyncio.get_running_loop()
        if self._task is None or self._task.done():
            # Started by the first write (it needs the running loop), again after a crash.
            self._task = loop.create_task(self._run(), name="session-writer")
        pending = Pending(work, loop.create_future())
        self._outstanding.add(pending.future)
        self._queue.put_nowait(pending)
        return pending

    async def drain(self) -> None:
        await self._outstanding.drain()

    async def close(self) -> None:
        """Waits for every accepted write, then stops the task and closes the connection."""
        first = not self._closed
        self._closed = True
        await self.drain()
        if not first:
            return
        if self._task is not None:
            # Idle now: nothing is queued, so cancelling cuts no write short.
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._thread, self._engine.dispose)
        self._thread.shutdown(wait=False)

    async def _run(self) -> None:
        batch: list[Pending[Any]] = []
        try:
            while True:
                batch = [await self._queue.get()]
                while len(batch) < self._max_batch and not self._queue.empty():
                    batch.append(self._queue.get_nowait())
                live = [pending for pending in batch if pending.begin()]
                if live:
                    loop = asyncio.get_running_loop()
                    outcomes = await loop.run_in_executor(self._thread, self._apply, live)
                    for pending, outcome in zip(live, outcomes, strict=True):
                        _resolve(pending.future, outcome)
                batch = []
        except BaseException as error:
            # Only a cancelled loop stops this task with writes on hand (close() waits
            # for them first). Their callers must not wait forever; a write already in
            # the thread may still have been committed.
            while not self._queue.empty():
                batch.append(self._queue.get_nowait())
            stopped = DatabaseUnavailable("the session store stopped before the write ended")
            for pending in batch:
                if not pending.future.done():
                    pending.future.set_exception(stopped)
            if not isinstance(error, asyncio.CancelledError):
                log.exception("the session writer failed")
            raise

    def _apply(self, batch: list[Pending[Any]]) -> list[Any]:
        """In the writer's thread: the batch in one transaction, or, when the transaction
        itself fails, each write in its own, so that only the culprit fails."""
        try:
            return self._transaction(batch)
        except Exception as error:  # noqa: BLE001 (retried write by write below)
            if len(batch) == 1:
                return [_Failed(error)]
        outcomes = []
        for pending in batch:
            try:
                outcomes.extend(self._transaction([pending]))
            except Exception as error:  # noqa: BLE001 (goes to the caller's future)
                outcomes.append(_Failed(error))
        return outcomes

    def _transaction(self, batch: list[Pending[Any]]) -> list[Any]:
        if len(batch) == 1:
            # Alone, a write's transaction is its savepoint: two statements fewer for each
            # write that finds no company (every write when requests come one at a time).
            try:
                with self._engine.begin() as connection:
                    return [batch[0].work(connection)]
            except Exception as error:
                if is_unavailable(error):
                    raise
                return [_Failed(error)]
        outcomes: list[Any] = []
        with self._engine.begin() as connection:
            for pending in batch:
                try:
                    with connection.begin_nested():
                        outcomes.append(pending.work(connection))
                except Exception as error:
                    if is_unavailable(error):
                        raise  # the transaction itself is in doubt
                    outcomes.append(_Failed(error))
        return outcomes


def _resolve(future: asyncio.Future[Any], outcome: Any) -> None:
    if future.done():
        return
    if isinstance(outcome, _Failed):
        error = outcome.error
        future.set_exception(_unavailable(error) if is_unavailable(error) else error)
    else:
        future.set_result(outcome)


class ConcurrentWriter:
    """PostgreSQL: each write in its own transaction, concurrently, on the async pool."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = writer(engine)
        self._outstanding = _Outstanding()
        self._closed = False

    def submit(self, work: Work[T]) -> Pending[T]:
        if self._closed:
            raise DatabaseUnavailable("the session store is closed")
        pending: Pending[T] = Pending(work, asyncio.get_running_loop().create_future())
        # A task of its own: the caller's cancellation cannot cut the transaction short.
        # Outstanding keeps a reference to it (the loop only keeps a weak one).
        task = asyncio.ensure_future(self._execute(pending))
        task.add_done_callback(lambda done: _copy(done, pending.future))
        self._outstanding.add(task)
        return pending

    async def _execute(self, pending: Pending[T]) -> T:
        async with transaction(self._engine) as connection:
            # Started once it has a connection: until then (the pool may be exhausted) a
            # caller that goes away can still withdraw it.
            if not pending.begin():
                raise asyncio.CancelledError  # withdrawn: roll back the empty transaction
            return await connection.run_sync(pending.work)

    async def drain(self) -> None:
        await self._outstanding.drain()

    async def close(self) -> None:
        self._closed = True
        await self.drain()


def _copy(task: asyncio.Future[Any], future: asyncio.Future[Any]) -> None:
    if future.done():
        return
    if task.cancelled():
        future.cancel()
    elif (error := task.exception()) is not None:
        future.set_exception(error)
    else:
        future.set_result(task.result())
