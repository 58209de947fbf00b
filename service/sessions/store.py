"""The session store: conversations, their turns, and who may run a turn when.

Concurrency. A session runs at most one turn at a time. The session row carries
``active_turn_id``; :meth:`SessionStore.begin_turn` claims it with a conditional UPDATE
(compare-and-set: ``... WHERE id = :session AND active_turn_id IS NULL``, or ``= :stale_turn``
when taking over an abandoned one) and a request whose UPDATE matches no row gets
:class:`~service.errors.SessionBusy` (ABORTED). The row lock of the UPDATE makes this atomic
on PostgreSQL across any number of replicas (a waiting UPDATE re-checks its condition once
the first commits); on SQLite one writer per process runs every write in order
(:mod:`service.sessions.writer`) and ``BEGIN IMMEDIATE`` serialises processes. Nothing is held
in memory between requests, so no lock can outlive a crashed replica. Behind that, a
partial unique index (one ``status = 'active'`` turn per session) makes the invariant a
property of the database, whatever code writes to it. Rejecting, rather than queueing the
second request, keeps a client from stacking up questions whose answers would race.

Abandoned turns. A running turn holds its session under a lease of ``stale_turn_s``
(RAGAGENT_TURN_LEASE): the process running it renews it (``active_since``) every third of
that, for all its running turns in one UPDATE. A turn whose lease ran out (its replica
crashed, or was killed) no longer blocks the session: the next request, on any replica,
marks it ERROR with why and goes ahead, and the purger does the same for sessions nobody
returns to. A SQLite database
belongs to one process, so every turn still active when it opens is marked ERROR at once.

Atomic turns. The question is kept on the turn row while it runs; the user and assistant
messages, the tool calls and the response are written with the turn's completion, in one
transaction. A run that fails, is cancelled or crashes therefore leaves a turn marked
error/cancelled/timeout and no half of a conversation.

Writes. Each operation is one short transaction (:mod:`service.sessions.jobs`): a turn's
begin (claim, history, insert) before its run, its end after; nothing is written while it
runs. Every write goes to the writer, which owns it from then on: a caller cancelled while
its write is queued or running still gets it committed (and sees its CancelledError); only
a turn's begin is dropped if it has not started, or undone (the turn marked cancelled) if it
has, since nobody would end that turn. A caller hears back once its write is committed, or
gets its failure. :meth:`SessionStore.close` waits for every accepted write.

Purging. Every replica runs a purger; on PostgreSQL one purge runs at a time (an advisory
lock; the others skip their round) and each reports the sessions it actually deleted.

Expiry. A session expires after ``ttl_s`` without use (a running turn counts as use). An
expired session can still be read until purged, but never continued; the store answers a
request to continue it, to read another caller's session, or an unknown one alike, with
:class:`~service.errors.SessionNotFound`.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from functools import partial
from typing import Any, Literal, TypeVar

from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from service.domain import ConversationTurn, RunResult
from service.observability.logging import get_logger
from service.sessions import jobs, reads, writes
from service.sessions.codec import decode_page_token, encode_page_token
from service.sessions.engine import (
    DEFAULT_POOL,
    Pool,
    create_engine,
    prepare,
    sqlite_writer,
    transaction,
)
from service.sessions.migrations import migrate
from service.sessions.owned import OwnedWrites
from service.sessions.records import (
    Clock,
    RunStatus,
    SessionRecord,
    SessionStatus,
    TokenCounter,
    TurnHandle,
    TurnRecord,
    approx_tokens,
    utc_now,
)
from service.sessions.runs import RunLog
from service.sessions.schema import AnyRow
from service.sessions.sealing import PLAIN, Content
from service.sessions.writer import ConcurrentWriter, SerialWriter, Writer

log = get_logger("ragagent.sessions")
T = TypeVar("T")

DEFAULT_STALE_TURN_S = 30.0
DEFAULT_HISTORY_TOKENS = 2000
DEFAULT_RUN_RETENTION_S = 3600.0
DEFAULT_PAGE_SIZE = 20
MAX_PAGE_SIZE = 1000  # the API allows 100; this bounds any other caller
_PURGE_BATCH = 500
_OPEN_INLINE_TURNS = 16
_SHUT_DOWN = "the server shut down before the answer was complete"
_RESTARTED = "the server restarted before the answer was complete"
_RUN_LOST = "the replica running it stopped before the answer was complete"


class SessionStore:
    """Sessions in a SQL database (SQLite or PostgreSQL) through SQLAlchemy's async engine."""

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        ttl_s: float,
        stale_turn_s: float = DEFAULT_STALE_TURN_S,
        history_tokens: int = DEFAULT_HISTORY_TOKENS,
        count_tokens: TokenCounter = approx_tokens,
        clock: Clock = utc_now,
        content: Content = PLAIN,
        run_retention_s: float = DEFAULT_RUN_RETENTION_S,
    ) -> None:
        self._engine = engine
        self._content = content
        writer: Writer = (
            SerialWriter(sqlite_writer(engine.url))
            if engine.dialect.name == "sqlite"
            else ConcurrentWriter(engine)
        )
        self._writes = OwnedWrites(writer, clock, content)
        self._lifetimes = writes.Lifetimes(
            ttl=timedelta(seconds=ttl_s), stale=timedelta(seconds=stale_turn_s)
        )
        self._history_tokens = history_tokens
        self._count_tokens = count_tokens
        self._clock = clock
        self._renew_every = stale_turn_s / 3
        self._renewing: asyncio.Task[None] | None = None
        self.runs = RunLog(
            write=self._writes.run,
            read=self._read,
            content=content,
            clock=clock,
            lease=timedelta(seconds=stale_turn_s),
            retention=timedelta(seconds=run_retention_s),
        )

    @classmethod
    async def open(
        cls,
        url: str,
        *,
        ttl_s: float,
        stale_turn_s: float = DEFAULT_STALE_TURN_S,
        history_tokens: int = DEFAULT_HISTORY_TOKENS,
        count_tokens: TokenCounter = approx_tokens,
        clock: Clock = utc_now,
        connect_args: Mapping[str, Any] | None = None,
        pool: Pool = DEFAULT_POOL,
        content: Content = PLAIN,
        pgbouncer: bool = False,
        run_retention_s: float = DEFAULT_RUN_RETENTION_S,
    ) -> SessionStore:
        """Connects to ``url``, creates or upgrades the schema, recovers interrupted turns."""
        store = cls(
            create_engine(url, connect_args=connect_args, pool=pool, pgbouncer=pgbouncer),
            ttl_s=ttl_s,
            stale_turn_s=stale_turn_s,
            history_tokens=history_tokens,
            count_tokens=count_tokens,
            clock=clock,
            content=content,
            run_retention_s=run_retention_s,
        )
        try:
            await store.start()
        except BaseException:
            await store._writes.close()
            await store._engine.dispose()
            raise
        return store

    @property
    def engine(self) -> AsyncEngine:
        return self._engine

    async def start(self) -> None:
        """Migrates the schema; on SQLite (one process) fails the turns a crash left active."""
        await prepare(self._engine)
        await migrate(self._engine)
        await self._read(partial(reads.check_keys, content=self._content))
        if self._engine.dialect.name == "sqlite":
            abandon = jobs.AbandonTurns(self._clock(), _RESTARTED, None, self._content)
            await self._writes.run(abandon)
            await self.runs.abandon_all(_RESTARTED)
        self._renewing = asyncio.create_task(self._renew_leases(), name="turn-leases")

    async def _renew_leases(self) -> None:
        """Renews the lease of every turn this process runs (see the module docstring);
        a failed renewal is logged and tried again next time."""
        while True:
            await asyncio.sleep(self._renew_every)
            running = list(self._writes.running)
            if not running:
                continue
            try:
                await self._writes.run(jobs.RenewTurns(running, self._clock()))
            except Exception as error:  # noqa: BLE001 (the database may be down for a while)
                log.warning("could not renew running turns' leases", error=repr(error))

    async def close(self) -> None:
        """Finishes pending writes, marks this process's unfinished turns, disconnects."""
        if self._renewing is not None:
            self._renewing.cancel()
            await asyncio.wait([self._renewing])
        await self._writes.drain()  # first, so that the turns they end are no longer running
        # Turns this process began and has not ended: marked, so that a shutdown leaves
        # no turn looking as if it were still running.
        for turn_id in list(self._writes.running):
            try:
                await self.abort_turn(turn_id, "error", _SHUT_DOWN)
            except Exception as error:  # noqa: BLE001 (the database may be down; still disconnect)
                log.warning("could not mark an unfinished turn", turn_id=turn_id, error=repr(error))
        await self._writes.close()
        await self._engine.dispose()

    # --- turns ---------------------------------------------------------------------

    async def begin_turn(
        self,
        *,
        session_id: str | None,
        owner: str,
        question: str,
        request_id: str,
        new_id: str | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> TurnHandle:
        """Starts a turn: in a new session when ``session_id`` is None or "" (the proto
        default), with id ``new_id`` (a new UUID when None), else in the owner's session,
        which must be unexpired and idle. Returns the history to give the model.
        ``metadata``: the caller's labels, kept with the turn."""
        turn_id = str(uuid.uuid4())
        new_session = not session_id
        sid = session_id or new_id or str(uuid.uuid4())
        job = jobs.BeginTurn(
            turn_id=turn_id,
            session_id=sid,
            new_session=new_session,
            owner=owner,
            question=question,
            request_id=request_id,
            now=self._clock(),
            lifetimes=self._lifetimes,
            history_tokens=self._history_tokens,
            count_tokens=self._count_tokens,
            content=self._content,
            metadata=dict(metadata or {}),
        )
        try:
            history = await self._writes.begin(job)
        except IntegrityError as error:
            # Only the one-active-turn index can refuse this insert.
            raise writes.busy(sid) from error
        if history is None:
            raise writes.not_found(sid)
        return TurnHandle(turn_id, sid, history, new_session=new_session)

    async def history(
        self,
        session_id: str,
        *,
        token_budget: int,
        count_tokens: TokenCounter = approx_tokens,
    ) -> list[ConversationTurn]:
        """The session's completed turns, oldest first, as many as fit ``token_budget``
        (oldest dropped first). No owner check: for callers that already hold a turn."""
        return await self._read(
            partial(
                reads.history,
                session_id=session_id,
                token_budget=token_budget,
                count=count_tokens,
                content=self._content,
            )
        )

    async def complete_turn(self, turn_id: str, result: RunResult, error: str = "") -> bool:
        """Records the run's outcome, messages and tool calls with the turn's end, atomically.

        ``error``: why a run that did not complete (ERROR, TIMEOUT, CANCELLED) ended, kept as
        the turn's error ("": its finish reason). False (and nothing written) when the turn
        is no longer active: its session was deleted, or it ran past the stale limit and was
        marked abandoned.
        """
        done = await self._writes.run(
            jobs.CompleteTurn(turn_id, result, self._clock(), self._content, error)
        )
        if not done:
            log.warning("turn no longer active; its outcome was not recorded", turn_id=turn_id)
        return done

    async def abort_turn(
        self,
        turn_id: str,
        status: Literal["error", "cancelled", "timeout"],
        error: str = "",
    ) -> bool:
        """Ends a turn without an answer; False when it was no longer active."""
        return await self._writes.run(
            jobs.AbortTurn(turn_id, RunStatus(status), error, self._clock(), self._content)
        )

    # --- reading and deleting ------------------------------------------------------

    async def get_session(self, session_id: str, owner: str | None) -> SessionRecord:
        """The owner's session with all its turns (an expired one too, until purged);
        ``owner`` None: whoever owns it (an admin's read)."""

        def read(connection: Connection) -> tuple[AnyRow | None, list[TurnRecord]]:
            row = reads.session_row(connection, session_id)
            if row is None or (owner is not None and row.owner != owner):
                return None, []
            return row, reads.turn_records(connection, session_id)

        row, turns = await self._read(read)
        if row is None:
            raise writes.not_found(session_id)
        return self._record(row, self._clock(), await self._open(turns))

    async def list_sessions(
        self, owner: str, *, page_size: int = DEFAULT_PAGE_SIZE, page_token: str = ""
    ) -> tuple[list[SessionRecord], str]:
        """One page of the owner's sessions, newest first, and the next page's token ("" at
        the end). Raises InvalidArgument for a token this store did not issue."""
        after = decode_page_token(page_token) if page_token else None
        size = min(max(1, page_size), MAX_PAGE_SIZE)
        rows = await self._read(
            partial(reads.session_page, owner=owner, limit=size + 1, after=after)
        )
        now = self._clock()
        page = [self._record(row, now) for row in rows[:size]]
        more = len(rows) > size
        return page, encode_page_token(page[-1].created_at, page[-1].session_id) if more else ""

    async def delete_session(self, session_id: str, owner: str | None) -> None:
        """Removes the owner's session with its turns, messages, tool calls and responses;
        ``owner`` None: whoever owns it (an admin's delete)."""
        await self._writes.run(jobs.DeleteSession(session_id, owner))

    async def purge_expired(self) -> int:
        """Deletes every expired session (in batches) and fails stale turns; returns how
        many sessions went."""
        purged = 0
        while True:
            batch = jobs.PurgeExpired(self._clock(), self._lifetimes, _PURGE_BATCH, self._content)
            count = await self._writes.run(batch)
            if count < 0:  # another replica is purging: this round is theirs
                return purged
            purged += count
            if count < _PURGE_BATCH:
                break
        # Background runs: those lost with their replica are ended, old ones deleted.
        await self.runs.mark_lost(None, _RUN_LOST)
        await self.runs.purge()
        return purged

    # --- internals -----------------------------------------------------------------

    async def _open(self, turns: list[TurnRecord]) -> list[TurnRecord]:
        """Opens sealed text; a long session's in a thread (about 20 µs of CPU a 4 kB turn),
        where a short one would wait longer for the thread than for the work."""

        def open_all() -> list[TurnRecord]:
            return [reads.open_record(turn, self._content) for turn in turns]

        if self._content.cipher is None or len(turns) <= _OPEN_INLINE_TURNS:
            return open_all()
        return await asyncio.to_thread(open_all)

    async def _read(self, query: Callable[[Connection], T]) -> T:
        async with transaction(self._engine) as connection:
            return await connection.run_sync(query)

    def _record(
        self, row: AnyRow, now: datetime, turns: list[TurnRecord] | None = None
    ) -> SessionRecord:
        expired = self._lifetimes.expired(row, now)
        return SessionRecord(
            session_id=row.id,
            owner=row.owner,
            status=SessionStatus.EXPIRED if expired else SessionStatus(row.status),
            created_at=row.created_at,
            last_accessed=row.last_accessed,
            expires_at=row.last_accessed + self._lifetimes.ttl,
            turn_count=row.turn_count,
            turns=turns or [],
        )
