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

from sqlalchemy import ColumnElement, and_, delete, insert, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from service.domain import ConversationTurn, RunResult
from service.errors import SessionBusy, SessionNotFound
from service.observability.logging import get_logger
from service.sessions import reads
from service.sessions import schema as t
from service.sessions.codec import (
    decode_page_token,
    encode_page_token,
    response_values,
    tool_call_values,
)
from service.sessions.engine import create_engine, transaction, writer
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
    truncate,
    utc_now,
)
from service.sessions.schema import AnyRow

log = get_logger("ragagent.sessions")
T = TypeVar("T")

DEFAULT_STALE_TURN_S = 600.0
DEFAULT_HISTORY_TOKENS = 2000
DEFAULT_PAGE_SIZE = 20
_PURGE_BATCH = 500
_SHUT_DOWN = "the server shut down before the answer was complete"
_RESTARTED = "the server restarted before the answer was complete"


class _Expired(Exception):
    """Internal: the session exists but has expired (recorded, then reported as not found)."""


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
        self._ttl = timedelta(seconds=ttl_s)
        self._stale = timedelta(seconds=stale_turn_s)
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
        await migrate(self._engine, clock=self._clock)
        if self._engine.dialect.name == "sqlite":
            async with transaction(self._writer) as connection:
                await self._abandon(connection, self._clock(), _RESTARTED, stale_only=False)

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
        """Starts a turn: in a new session when ``session_id`` is None, else in the owner's
        session, which must be unexpired and idle. Returns the history to give the model."""
        now = self._clock()
        turn_id = str(uuid.uuid4())
        new_session = session_id is None
        sid = session_id or str(uuid.uuid4())
        history: list[ConversationTurn] = []
        try:
            async with transaction(self._writer) as connection:
                if new_session:
                    seq = await self._create(connection, sid, owner, turn_id, now)
                else:
                    seq = await self._claim(connection, sid, owner, turn_id, now)
                    history = await reads.history(
                        connection, sid, token_budget=self._history_tokens, count=self._count_tokens
                    )
                await connection.execute(
                    insert(t.turns).values(
                        id=turn_id,
                        session_id=sid,
                        seq=seq,
                        request_id=request_id[:128],
                        question=truncate(question),
                        status=RunStatus.ACTIVE,
                        created_at=now,
                    )
                )
        except _Expired:
            async with transaction(self._writer) as connection:
                await connection.execute(
                    update(t.sessions).where(t.sessions.c.id == sid).values(status="expired")
                )
            raise _not_found(sid) from None
        except IntegrityError as error:
            # Only the one-active-turn index can refuse this insert.
            raise _busy(sid) from error
        self._running.add(turn_id)
        return TurnHandle(turn_id, sid, history, new_session)

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
                raise _not_found(session_id)
            turns = await reads.turn_records(connection, session_id)
        return self._record(row, self._clock(), turns)

    async def list_sessions(
        self, owner: str, *, page_size: int = DEFAULT_PAGE_SIZE, page_token: str = ""
    ) -> tuple[list[SessionRecord], str]:
        """One page of the owner's sessions, newest first, and the next page's token ("" at
        the end). Raises InvalidArgument for a token this store did not issue."""
        after = decode_page_token(page_token) if page_token else None
        size = max(1, page_size)
        async with transaction(self._engine) as connection:
            rows = await reads.session_page(connection, owner, limit=size + 1, after=after)
        now = self._clock()
        page = [self._record(row, now) for row in rows[:size]]
        token = (
            encode_page_token(page[-1].created_at, page[-1].session_id) if len(rows) > size else ""
        )
        return page, token

    async def delete_session(self, session_id: str, owner: str) -> None:
        """Removes the owner's session with its turns, messages, tool calls and responses."""
        async with transaction(self._writer) as connection:
            row = await reads.session_row(connection, session_id)
            if row is None or row.owner != owner:
                raise _not_found(session_id)
            await _delete_sessions(connection, [session_id])

    async def purge_expired(self) -> int:
        """Deletes every expired session (in batches); returns how many."""
        purged = 0
        while True:
            now = self._clock()
            async with transaction(self._writer) as connection:
                await self._abandon(connection, now, None, stale_only=True)
                ids = list(
                    (
                        await connection.execute(
                            select(t.sessions.c.id)
                            .where(self._expired_sql(now))
                            .limit(_PURGE_BATCH)
                        )
                    ).scalars()
                )
                await _delete_sessions(connection, ids)
            purged += len(ids)
            if len(ids) < _PURGE_BATCH:
                return purged

    # --- internals -----------------------------------------------------------------

    async def _create(
        self, connection: AsyncConnection, sid: str, owner: str, turn_id: str, now: datetime
    ) -> int:
        await connection.execute(
            insert(t.sessions).values(
                id=sid,
                owner=owner,
                status=SessionStatus.NEW,
                created_at=now,
                last_accessed=now,
                turn_count=1,
                active_turn_id=turn_id,
                active_since=now,
            )
        )
        return 1

    async def _claim(
        self, connection: AsyncConnection, sid: str, owner: str, turn_id: str, now: datetime
    ) -> int:
        """Makes ``turn_id`` the session's active turn; returns its sequence number."""
        row = await reads.session_row(connection, sid)
        if row is None or row.owner != owner:
            raise _not_found(sid)
        previous = row.active_turn_id
        if previous is not None and row.active_since > now - self._stale:
            raise _busy(sid)
        if row.status == SessionStatus.EXPIRED or row.last_accessed <= now - self._ttl:
            raise _Expired
        sessions = t.sessions.c
        unchanged = (
            sessions.active_turn_id.is_(None)
            if previous is None
            else sessions.active_turn_id == previous
        )
        seq = (
            await connection.execute(
                update(t.sessions)
                .where(sessions.id == sid, unchanged)
                .values(
                    active_turn_id=turn_id,
                    active_since=now,
                    last_accessed=now,
                    turn_count=sessions.turn_count + 1,
                )
                .returning(sessions.turn_count)
            )
        ).scalar_one_or_none()
        if seq is None:
            raise _busy(sid)  # another request claimed it between our read and our write
        if previous is not None:
            await self._end_turn(
                connection, previous, RunStatus.ERROR, self._abandoned(), now, touch=False
            )
        return int(seq)

    async def _complete(self, turn_id: str, result: RunResult) -> bool:
        now = self._clock()
        status = RUN_STATUS_OF_RESPONSE[result.status]
        error = "" if status == RunStatus.COMPLETED else result.finish_reason
        async with transaction(self._writer) as connection:
            turn = await self._end_turn(connection, turn_id, status, error, now)
            if turn is not None:
                sid = turn.session_id
                rows = [{"role": "user", "content": turn.question, "created_at": turn.created_at}]
                if result.answer:
                    answer = truncate(result.answer)
                    rows.append({"role": "assistant", "content": answer, "created_at": now})
                await connection.execute(
                    insert(t.messages), [{**r, "session_id": sid, "turn_id": turn_id} for r in rows]
                )
                if result.tool_calls:
                    await connection.execute(
                        insert(t.tool_calls),
                        [
                            tool_call_values(
                                c, position=i, session_id=sid, turn_id=turn_id, now=now
                            )
                            for i, c in enumerate(result.tool_calls)
                        ],
                    )
                await connection.execute(
                    insert(t.responses).values(
                        response_values(result, session_id=sid, turn_id=turn_id, now=now)
                    )
                )
                if status == RunStatus.COMPLETED:
                    await connection.execute(
                        update(t.sessions)
                        .where(t.sessions.c.id == sid, t.sessions.c.status == SessionStatus.NEW)
                        .values(status=SessionStatus.ACTIVE)
                    )
        self._running.discard(turn_id)
        if turn is None:
            log.warning("turn no longer active; its outcome was not recorded", turn_id=turn_id)
        return turn is not None

    async def _abort(self, turn_id: str, status: RunStatus, error: str) -> bool:
        async with transaction(self._writer) as connection:
            turn = await self._end_turn(connection, turn_id, status, error, self._clock())
        self._running.discard(turn_id)
        return turn is not None

    async def _end_turn(
        self,
        connection: AsyncConnection,
        turn_id: str,
        status: RunStatus,
        error: str,
        now: datetime,
        *,
        touch: bool = True,
    ) -> AnyRow | None:
        """Moves an active turn to ``status`` and frees its session; None if not active.

        ``touch`` counts the end as use of the session; an abandoned turn is not use.
        """
        turn = (
            await connection.execute(
                update(t.turns)
                .where(t.turns.c.id == turn_id, t.turns.c.status == RunStatus.ACTIVE)
                .values(status=status, error=truncate(error), completed_at=now)
                .returning(t.turns.c.session_id, t.turns.c.question, t.turns.c.created_at)
            )
        ).one_or_none()
        if turn is not None:
            freed: dict[str, Any] = {"active_turn_id": None, "active_since": None}
            if touch:
                freed["last_accessed"] = now
            await connection.execute(
                update(t.sessions)
                .where(t.sessions.c.id == turn.session_id, t.sessions.c.active_turn_id == turn_id)
                .values(freed)
            )
        return turn

    async def _abandon(
        self, connection: AsyncConnection, now: datetime, reason: str | None, *, stale_only: bool
    ) -> None:
        """Marks active turns as failed: all of them, or those past the stale limit."""
        query = select(t.sessions.c.active_turn_id).where(t.sessions.c.active_turn_id.is_not(None))
        if stale_only:
            query = query.where(t.sessions.c.active_since <= now - self._stale)
        for turn_id in (await connection.execute(query)).scalars().all():
            await self._end_turn(
                connection, turn_id, RunStatus.ERROR, reason or self._abandoned(), now, touch=False
            )

    def _abandoned(self) -> str:
        return (
            f"abandoned: no answer was recorded within {self._stale.total_seconds():g} s "
            "(the server running it may have stopped)"
        )

    def _expired_sql(self, now: datetime) -> ColumnElement[bool]:
        sessions = t.sessions.c
        idle = or_(sessions.active_turn_id.is_(None), sessions.active_since <= now - self._stale)
        return and_(sessions.last_accessed <= now - self._ttl, idle)

    def _record(
        self, row: AnyRow, now: datetime, turns: list[TurnRecord] | None = None
    ) -> SessionRecord:
        in_use = row.active_turn_id is not None and row.active_since > now - self._stale
        expired = row.status == SessionStatus.EXPIRED or (
            not in_use and row.last_accessed <= now - self._ttl
        )
        return SessionRecord(
            session_id=row.id,
            owner=row.owner,
            status=SessionStatus.EXPIRED if expired else SessionStatus(row.status),
            created_at=row.created_at,
            last_accessed=row.last_accessed,
            expires_at=row.last_accessed + self._ttl,
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


async def _delete_sessions(connection: AsyncConnection, ids: list[str]) -> None:
    if not ids:
        return
    # Children first: correct with or without foreign keys enforced (SQLite needs a pragma).
    for table in (t.responses, t.tool_calls, t.messages, t.turns):
        await connection.execute(delete(table).where(table.c.session_id.in_(ids)))
    await connection.execute(delete(t.sessions).where(t.sessions.c.id.in_(ids)))


def _not_found(session_id: str) -> SessionNotFound:
    return SessionNotFound(
        "session",
        session_id,
        f"session {session_id!r} does not exist, has expired, or is not yours",
    )


def _busy(session_id: str) -> SessionBusy:
    return SessionBusy(
        f"session {session_id!r} is answering another question; retry when it is done",
        metadata={"session_id": session_id},
    )
