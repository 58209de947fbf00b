"""The store's writes, one transaction each: what :class:`~service.sessions.store.SessionStore`
hands to its writer (:mod:`service.sessions.writer`). Each is a small frozen value called
with a blocking connection inside the writer's transaction, built from
:mod:`service.sessions.writes`. They read only what the write needs, and the one larger
read, a turn's history, is bounded by its token budget: in the SQLite writer's thread it
costs far less than a second trip through a busy event loop would."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.engine import Connection

from service.domain import ConversationTurn, RunResult
from service.sessions import reads, writes
from service.sessions import schema as t
from service.sessions.records import RUN_STATUS_OF_RESPONSE, RunStatus, TokenCounter
from service.sessions.sealing import Content


@dataclass(frozen=True, slots=True)
class BeginTurn:
    """Claims the session (a new one, or the owner's idle one), inserts the turn, and
    reads the history to give the model.

    Returns that history, or None when the session had expired: it is then marked expired
    (the caller reports it as not found). Raises SessionNotFound or SessionBusy.
    """

    turn_id: str
    session_id: str
    new_session: bool
    owner: str
    question: str
    request_id: str
    now: datetime
    lifetimes: writes.Lifetimes
    history_tokens: int
    count_tokens: TokenCounter
    content: Content
    metadata: Mapping[str, str] = field(default_factory=dict)

    def __call__(self, connection: Connection) -> list[ConversationTurn] | None:
        sid, now = self.session_id, self.now
        history: list[ConversationTurn] = []
        if self.new_session:
            seq = writes.create_session(connection, sid, self.owner, self.turn_id, now)
        else:
            try:
                seq = writes.claim_session(
                    connection,
                    sid,
                    self.owner,
                    self.turn_id,
                    now,
                    lifetimes=self.lifetimes,
                    content=self.content,
                )
            except writes.Expired:
                writes.mark_expired(connection, sid)
                return None
            if self.content.record:  # else no turn has text to replay
                history = reads.history(
                    connection,
                    sid,
                    token_budget=self.history_tokens,
                    count=self.count_tokens,
                    content=self.content,
                )
        writes.insert_turn(
            connection,
            turn_id=self.turn_id,
            sid=sid,
            seq=seq,
            request_id=self.request_id,
            question=self.question,
            now=now,
            content=self.content,
            metadata=self.metadata,
        )
        return history


@dataclass(frozen=True, slots=True)
class CompleteTurn:
    """Ends the turn with the run's outcome, messages and tool calls; False (nothing
    written) when the turn was no longer active."""

    turn_id: str
    result: RunResult
    now: datetime
    content: Content
    error: str = ""  # why the run did not complete; "" : its finish reason

    def __call__(self, connection: Connection) -> bool:
        status = RUN_STATUS_OF_RESPONSE[self.result.status]
        error = "" if status == RunStatus.COMPLETED else self.error or self.result.finish_reason
        turn = writes.end_turn(
            connection, self.turn_id, status, error, self.now, content=self.content
        )
        if turn is None:
            return False
        writes.record_outcome(
            connection,
            turn,
            self.turn_id,
            self.result,
            now=self.now,
            content=self.content,
        )
        return True


@dataclass(frozen=True, slots=True)
class AbortTurn:
    """Ends the turn without an answer; False when it was no longer active."""

    turn_id: str
    status: RunStatus
    error: str
    now: datetime
    content: Content

    def __call__(self, connection: Connection) -> bool:
        ended = writes.end_turn(
            connection, self.turn_id, self.status, self.error, self.now, content=self.content
        )
        return ended is not None


@dataclass(frozen=True, slots=True)
class AbandonTurns:
    """Fails the active turns begun before ``since_before`` (all of them if None)."""

    now: datetime
    reason: str
    since_before: datetime | None
    content: Content

    def __call__(self, connection: Connection) -> None:
        writes.abandon_turns(
            connection, self.now, self.reason, self.content, since_before=self.since_before
        )


@dataclass(frozen=True, slots=True)
class DeleteSession:
    """Removes the owner's session and everything of it; SessionNotFound otherwise."""

    session_id: str
    owner: str | None  # None: whoever owns it (admin)

    def __call__(self, connection: Connection) -> None:
        row = writes.session_row(connection, self.session_id)
        if row is None or (self.owner is not None and row.owner != self.owner):
            raise writes.not_found(self.session_id)
        writes.delete_sessions(connection, [self.session_id])


@dataclass(frozen=True, slots=True)
class PurgeExpired:
    """Fails stale turns, then deletes up to ``limit`` expired sessions; returns how many
    it deleted, or -1 when another replica's purge holds the purge lock."""

    now: datetime
    lifetimes: writes.Lifetimes
    limit: int
    content: Content

    def __call__(self, connection: Connection) -> int:
        lifetimes, now = self.lifetimes, self.now
        if not writes.purge_lock(connection):
            return -1  # another replica is purging right now
        writes.abandon_turns(
            connection,
            now,
            lifetimes.abandoned_reason(),
            self.content,
            since_before=now - lifetimes.stale,
        )
        query = select(t.sessions.c.id).where(lifetimes.expired_sql(now)).limit(self.limit)
        ids = list(connection.execute(query).scalars())
        # The rows this transaction deleted: what it reports.
        return writes.delete_sessions(connection, ids)


@dataclass(frozen=True, slots=True)
class RenewTurns:
    """Renews the lease of this process's running turns (see SessionStore)."""

    turn_ids: list[str]
    now: datetime

    def __call__(self, connection: Connection) -> None:
        writes.renew_turns(connection, self.turn_ids, self.now)
