"""The session store: conversations, their turns, and who may run a turn when.

Concurrency. A session runs at most one turn at a time. The session row carries
``active_turn_id``; :meth:`SessionStore.begin_turn` claims it with a conditional UPDATE
(compare-and-set: ``... WHERE id = :session AND active_turn_id IS NULL``, or ``= :stale_turn``
when taking over an abandoned one) and a request whose UPDATE matches no row gets
:class:`~service.errors.SessionBusy` (ABORTED). The row lock of the UPDATE makes this atomic
on PostgreSQL across any number of replicas (a waiting UPDATE re-checks its condition once
the first commits), and SQLite serialises writers with ``BEGIN IMMEDIATE``. Nothing is held
in memory between requests, so no lock can outlive a crashed replica. Behind that, a
partial unique index (one ``status = 'active'`` turn per session) makes the invariant a
property of the database, whatever code writes to it. Rejecting, rather than queueing the
second request, keeps a client from stacking up questions whose answers would race.

Abandoned turns. A turn still active after ``stale_turn_s`` (its replica crashed, or the
process was killed) no longer blocks the session: the next request marks it ERROR and goes
ahead, and the purger does the same for sessions nobody returns to. A SQLite database
belongs to one process, so every turn still active when it opens is marked ERROR at once.

Atomic turns. The question is kept on the turn row while it runs; the user and assistant
messages, the tool calls and the response are written with the turn's completion, in one
transaction. A run that fails, is cancelled or crashes therefore leaves a turn marked
error/cancelled/timeout and no half of a conversation.

Expiry. A session expires after ``ttl_s`` without use (a running turn counts as use). An
expired session can still be read until purged, but never continued; the store answers a
request to continue it, to read another caller's session, or an unknown one alike, with
:class:`~service.errors.SessionNotFound`.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Coroutine, Mapping
from datetime import datetime, timedelta
from typing import Any, Literal, TypeVar

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from service.domain import ConversationTurn, RunResult
from service.observability.logging import get_logger
from service.sessions import reads, writes
from service.sessions import schema as t
from service.sessions.codec import decode_page_token, encode_page_token
from service.sessions.engine import create_engine, prepare, transaction, writer
from service.sessions.migrations import migrate
from service.sessions.records import (
    RUN_STATUS_OF_RESPONSE,
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
from service.sessions.schema import AnyRow

log = get_logger("ragagent.sessions")
T = TypeVar("T")

DEFAULT_STALE_TURN_S = 600.0
DEFAULT_HISTORY_TOKENS = 2000
DEFAULT_PAGE_SIZE = 20
MAX_PAGE_SIZE = 1000  # the API allows 100; this bounds any other caller
_PURGE_BATCH = 500
_SHUT_DOWN = "the server shut down before the answer was complete"
_RESTARTED = "the server restarted before the answer was complete"


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
    ) -> None:
        self._engine = engine
        self._writer = writer(engine)
        self._lifetimes = writes.Lifetimes(
            ttl=timedelta(seconds=ttl_s), stale=timedelta(seconds=stale_turn_s)
        )
        self._history_tokens = history_tokens
        self._count_tokens = count_tokens
        self._clock = clock
        # Turns this process began and has not finished: close() marks them, so that a
        # shutdown leaves no turn looking as if it were still running.
        self._running: set[str] = set()
        self._settling: set[asyncio.Task[Any]] = set()

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
    ) -> SessionStore:
        """Connects to ``url``, creates or upgrades the schema, recovers interrupted turns."""
        store = cls(
            create_engine(url, connect_args=connect_args),
            ttl_s=ttl_s,
            stale_turn_s=stale_turn_s,
            history_tokens=history_tokens,
            count_tokens=count_tokens,
            clock=clock,
        )
        try:
            await store.start()
        except BaseException:
            await store._engine.dispose()
            raise
        return store

    @property
    def engine(self) -> AsyncEngine:
        return self._engine

    async def start(self) -> None:
        """Migrates the schema; on SQLite (one process) fails the turns a crash left active."""
        await prepare(self._engine)
        await migrate(self._engine, clock=self._clock)
        if self._engine.dialect.name == "sqlite":
            async with transaction(self._writer) as connection:
                await writes.abandon_turns(connection, self._clock(), _RESTARTED, since_before=None)

    async def close(self) -> None:
        """Finishes pending writes, marks this process's unfinished turns, disconnects."""
        if self._settling:
            await asyncio.wait(set(self._settling))
        for turn_id in list(self._running):
            try:
                await self.abort_turn(turn_id, "error", _SHUT_DOWN)
            except Exception as error:  # noqa: BLE001 (the database may be down; still disconnect)
                log.warning("could not mark an unfinished turn", turn_id=turn_id, error=repr(error))
        await self._engine.dispose()

    # --- turns ---------------------------------------------------------------------

    async def begin_turn(
        self, *, session_id: str | None, owner: str, question: str, request_id: str
    ) -> TurnHandle:
        """Starts a turn: in a new session when ``session_id`` is None or "" (the proto
        default), else in the owner's session, which must be unexpired and idle. Returns the
        history to give the model."""
        now = self._clock()
        turn_id = str(uuid.uuid4())
        new_session = not session_id
        sid = session_id or str(uuid.uuid4())
        history: list[ConversationTurn] = []
        try:
            async with transaction(self._writer) as connection:
                if new_session:
                    seq = await writes.create_session(connection, sid, owner, turn_id, now)
                else:
                    seq = await writes.claim_session(
                        connection, sid, owner, turn_id, now, lifetimes=self._lifetimes
                    )
                    history = await reads.history(
                        connection, sid, token_budget=self._history_tokens, count=self._count_tokens
                    )
                await writes.insert_turn(
                    connection,
                    turn_id=turn_id,
                    sid=sid,
                    seq=seq,
                    request_id=request_id,
                    question=question,
                    now=now,
                )
        except writes.Expired:
            async with transaction(self._writer) as connection:
                await writes.mark_expired(connection, sid)
            raise writes.not_found(sid) from None
        except IntegrityError as error:
            # Only the one-active-turn index can refuse this insert.
            raise writes.busy(sid) from error
        self._running.add(turn_id)
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
        async with transaction(self._engine) as connection:
            return await reads.history(
                connection, session_id, token_budget=token_budget, count=count_tokens
            )

    async def complete_turn(self, turn_id: str, result: RunResult) -> bool:
        """Records the run's outcome, messages and tool calls with the turn's end, atomically.

        False (and nothing written) when the turn is no longer active: its session was
        deleted, or it ran past the stale limit and was marked abandoned.
        """
        return await self._settle(self._complete(turn_id, result))

    async def abort_turn(
        self,
        turn_id: str,
        status: Literal["error", "cancelled", "timeout"],
        error: str = "",
    ) -> bool:
        """Ends a turn without an answer; False when it was no longer active."""
        return await self._settle(self._abort(turn_id, RunStatus(status), error))

    # --- reading and deleting ------------------------------------------------------

    async def get_session(self, session_id: str, owner: str) -> SessionRecord:
        """The owner's session with all its turns (an expired one too, until purged)."""
        async with transaction(self._engine) as connection:
            row = await reads.session_row(connection, session_id)
            if row is None or row.owner != owner:
                raise writes.not_found(session_id)
            turns = await reads.turn_records(connection, session_id)
        return self._record(row, self._clock(), turns)

    async def list_sessions(
        self, owner: str, *, page_size: int = DEFAULT_PAGE_SIZE, page_token: str = ""
    ) -> tuple[list[SessionRecord], str]:
        """One page of the owner's sessions, newest first, and the next page's token ("" at
        the end). Raises InvalidArgument for a token this store did not issue."""
        after = decode_page_token(page_token) if page_token else None
        size = min(max(1, page_size), MAX_PAGE_SIZE)
        async with transaction(self._engine) as connection:
            rows = await reads.session_page(connection, owner, limit=size + 1, after=after)
        now = self._clock()
        page = [self._record(row, now) for row in rows[:size]]
        more = len(rows) > size
        return page, encode_page_token(page[-1].created_at, page[-1].session_id) if more else ""

    async def delete_session(self, session_id: str, owner: str) -> None:
        """Removes the owner's session with its turns, messages, tool calls and responses."""
        async with transaction(self._writer) as connection:
            row = await reads.session_row(connection, session_id)
            if row is None or row.owner != owner:
                raise writes.not_found(session_id)
            await writes.delete_sessions(connection, [session_id])

    async def purge_expired(self) -> int:
        """Deletes every expired session (in batches) and fails stale turns; returns how
        many sessions went."""
        purged = 0
        lifetimes = self._lifetimes
        while True:
            now = self._clock()
            async with transaction(self._writer) as connection:
                await writes.abandon_turns(
                    connection,
                    now,
                    lifetimes.abandoned_reason(),
                    since_before=now - lifetimes.stale,
                )
                query = select(t.sessions.c.id).where(lifetimes.expired_sql(now))
                ids = list((await connection.execute(query.limit(_PURGE_BATCH))).scalars())
                await writes.delete_sessions(connection, ids)
            purged += len(ids)
            if len(ids) < _PURGE_BATCH:
                return purged

    # --- internals -----------------------------------------------------------------

    async def _complete(self, turn_id: str, result: RunResult) -> bool:
        now = self._clock()
        status = RUN_STATUS_OF_RESPONSE[result.status]
        error = "" if status == RunStatus.COMPLETED else result.finish_reason
        async with transaction(self._writer) as connection:
            turn = await writes.end_turn(connection, turn_id, status, error, now)
            if turn is not None:
                await writes.record_outcome(
                    connection, turn, turn_id, result, status=status, now=now
                )
        self._running.discard(turn_id)
        if turn is None:
            log.warning("turn no longer active; its outcome was not recorded", turn_id=turn_id)
        return turn is not None

    async def _abort(self, turn_id: str, status: RunStatus, error: str) -> bool:
        async with transaction(self._writer) as connection:
            turn = await writes.end_turn(connection, turn_id, status, error, self._clock())
        self._running.discard(turn_id)
        return turn is not None

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

    async def _settle(self, work: Coroutine[Any, Any, T]) -> T:
        """Runs a turn's final write to its end even if the caller is cancelled meanwhile.

        A handler cancelled while recording its turn would otherwise roll the write back
        and leave the turn active until the stale limit. The caller still sees its
        CancelledError; close() waits for writes that outlive their caller.
        """
        task = asyncio.ensure_future(work)
        self._settling.add(task)
        task.add_done_callback(self._settled)
        return await asyncio.shield(task)

    def _settled(self, task: asyncio.Task[Any]) -> None:
        self._settling.discard(task)
        if not task.cancelled() and task.exception() is not None:
            # Retrieved here so that a write whose caller went away still gets logged.
            log.warning("recording a turn failed", error=repr(task.exception()))
