"""The statements that change sessions: claim a session for a turn, end a turn, record its
outcome, abandon stale turns, delete. Each runs inside the caller's transaction; the rules
they implement are described in :mod:`service.sessions.store`.

They are blocking functions of a blocking connection: the SQLite writer runs a whole batch
of them in its thread (:mod:`service.sessions.writer`), PostgreSQL through ``run_sync``.
The statements of a turn's begin and end are built once, with bound parameters: building
them per call (and their cache keys) cost more than running them, in the thread that
bounds how many turns a second SQLite can record."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import (
    BindParameter,
    ColumnElement,
    and_,
    bindparam,
    case,
    delete,
    insert,
    or_,
    select,
    text,
    update,
)
from sqlalchemy.engine import Connection
from sqlalchemy.sql.dml import ReturningUpdate

from service.domain import RunResult
from service.errors import SessionBusy, SessionNotFound
from service.sessions import schema as t
from service.sessions.codec import response_values, tool_call_values
from service.sessions.records import RunStatus, SessionStatus, truncate
from service.sessions.schema import AnyRow, UTCDateTime
from service.sessions.sealing import Content

_s, _t = t.sessions.c, t.turns.c
_NOW = bindparam("now", type_=UTCDateTime())
_SESSION_ROW = select(t.sessions).where(_s.id == bindparam("sid"))
_INSERT_SESSION = insert(t.sessions)
_INSERT_TURN = insert(t.turns)
_INSERT_MESSAGES = insert(t.messages)
_INSERT_TOOL_CALLS = insert(t.tool_calls)
_INSERT_RESPONSE = insert(t.responses)


def _claim(*, after_stale: bool) -> ReturningUpdate[int]:
    """The compare-and-set of a claim: the session's active turn is still what we read."""
    previous: BindParameter[str] = bindparam("previous")
    unchanged = _s.active_turn_id == previous if after_stale else _s.active_turn_id.is_(None)
    return (
        update(t.sessions)
        .where(_s.id == bindparam("sid"), unchanged)
        .values(
            active_turn_id=bindparam("turn"),
            active_since=_NOW,
            last_accessed=_NOW,
            turn_count=_s.turn_count + 1,
        )
        .returning(_s.turn_count)
    )


_CLAIM_IDLE, _CLAIM_STALE = _claim(after_stale=False), _claim(after_stale=True)
_END_TURN = (
    update(t.turns)
    .where(_t.id == bindparam("turn"), _t.status == RunStatus.ACTIVE)
    .values(status=bindparam("new_status"), error=bindparam("message"), completed_at=_NOW)
    .returning(_t.session_id, _t.question, _t.created_at)
)
_FREE = update(t.sessions).where(_s.id == bindparam("sid"), _s.active_turn_id == bindparam("turn"))
_FREE_IDLE = _FREE.values(active_turn_id=None, active_since=None)
_FREE_USED = _FREE.values(active_turn_id=None, active_since=None, last_accessed=_NOW)
# A completed turn also makes a new session active, in the same statement (one statement
# fewer per turn in the thread that bounds how many turns a second SQLite records).
_FREE_ANSWERED = _FREE.values(
    active_turn_id=None,
    active_since=None,
    last_accessed=_NOW,
    status=case((_s.status == SessionStatus.NEW, SessionStatus.ACTIVE), else_=_s.status),
)


class Expired(Exception):
    """The session exists but has expired (recorded as such, then reported as not found)."""


@dataclass(frozen=True, slots=True)
class Lifetimes:
    """How long a session lives without use, and how long a turn may claim its session."""

    ttl: timedelta
    stale: timedelta

    def in_use(self, row: AnyRow, now: datetime) -> bool:
        return row.active_turn_id is not None and row.active_since > now - self.stale

    def expired(self, row: AnyRow, now: datetime) -> bool:
        # A running turn is use; expiry is final, whatever the clock does later.
        if row.status == SessionStatus.EXPIRED:
            return True
        return not self.in_use(row, now) and row.last_accessed <= now - self.ttl

    def expired_sql(self, now: datetime) -> ColumnElement[bool]:
        """:meth:`expired` as a WHERE clause (the stored 'expired' rows are also idle)."""
        s = t.sessions.c
        idle = or_(s.active_turn_id.is_(None), s.active_since <= now - self.stale)
        return and_(s.last_accessed <= now - self.ttl, idle)

    def abandoned_reason(self) -> str:
        return (
            f"abandoned: its lease ({self.stale.total_seconds():g} s, RAGAGENT_TURN_LEASE) "
            "was not renewed: the server running it stopped before the answer was recorded"
        )


def session_row(connection: Connection, sid: str) -> AnyRow | None:
    return connection.execute(_SESSION_ROW, {"sid": sid}).one_or_none()


def create_session(
    connection: Connection, sid: str, owner: str, turn_id: str, now: datetime
) -> int:
    """A new session already claimed by its first turn; returns that turn's number."""
    connection.execute(
        _INSERT_SESSION,
        {
            "id": sid,
            "owner": owner,
            "status": SessionStatus.NEW,
            "created_at": now,
            "last_accessed": now,
            "turn_count": 1,
            "active_turn_id": turn_id,
            "active_since": now,
        },
    )
    return 1


def claim_session(
    connection: Connection,
    sid: str,
    owner: str,
    turn_id: str,
    now: datetime,
    *,
    lifetimes: Lifetimes,
    content: Content,
) -> int:
    """Makes ``turn_id`` the session's active turn; returns its number in the session.

    Raises SessionNotFound, Expired, or SessionBusy when the session has a live turn or
    another request claimed it between our read and our compare-and-set.
    """
    row = session_row(connection, sid)
    if row is None or row.owner != owner:
        raise not_found(sid)
    if lifetimes.in_use(row, now):
        raise busy(sid)
    if lifetimes.expired(row, now):
        raise Expired
    previous = row.active_turn_id
    seq = connection.execute(
        _CLAIM_IDLE if previous is None else _CLAIM_STALE,
        {"sid": sid, "turn": turn_id, "now": now, "previous": previous},
    ).scalar_one_or_none()
    if seq is None:
        raise busy(sid)
    if previous is not None:
        # Taken over from a stale turn: fail it before ours is inserted (one active turn).
        reason = lifetimes.abandoned_reason()
        end_turn(connection, previous, RunStatus.ERROR, reason, now, content=content, touch=False)
    return int(seq)


def insert_turn(
    connection: Connection,
    *,
    turn_id: str,
    sid: str,
    seq: int,
    request_id: str,
    question: str,
    now: datetime,
    content: Content,
    metadata: Mapping[str, str] | None = None,
) -> None:
    labels = content.seal(json.dumps(dict(metadata)), turn_id, "labels") if metadata else ""
    connection.execute(
        _INSERT_TURN,
        {
            "labels": labels,
            "id": turn_id,
            "session_id": sid,
            "seq": seq,
            "request_id": request_id[:128],
            "question": content.seal(truncate(question), turn_id, "question"),
            "status": RunStatus.ACTIVE,
            "created_at": now,
        },
    )


def end_turn(
    connection: Connection,
    turn_id: str,
    status: RunStatus,
    error: str,
    now: datetime,
    *,
    content: Content,
    touch: bool = True,
) -> AnyRow | None:
    """Moves an active turn to ``status`` and frees its session; None if it was not active
    (already ended, or deleted). ``touch``: the end counts as use of the session, which an
    abandoned turn does not; a completed turn makes a new session active."""
    turn = connection.execute(
        _END_TURN,
        {
            "turn": turn_id,
            "new_status": status,
            "message": content.seal(truncate(error), turn_id, "error"),
            "now": now,
        },
    ).one_or_none()
    if turn is not None:
        if not touch:
            free = _FREE_IDLE
        else:
            free = _FREE_ANSWERED if status == RunStatus.COMPLETED else _FREE_USED
        connection.execute(free, {"sid": turn.session_id, "turn": turn_id, "now": now})
    return turn


def record_outcome(
    connection: Connection,
    turn: AnyRow,
    turn_id: str,
    result: RunResult,
    *,
    now: datetime,
    content: Content,
) -> None:
    """The messages, tool calls and response of a turn that :func:`end_turn` just ended."""
    sid = turn.session_id
    # The question as the turn row holds it, sealed or not: the same text under the same
    # associated data (see sealing.py), so it is copied rather than opened and sealed again.
    said = [{"role": "user", "content": turn.question, "created_at": turn.created_at}]
    if result.answer:
        answer = content.seal(truncate(result.answer), turn_id, "answer")
        said.append({"role": "assistant", "content": answer, "created_at": now})
    connection.execute(
        _INSERT_MESSAGES, [{**m, "session_id": sid, "turn_id": turn_id} for m in said]
    )
    if result.tool_calls:
        connection.execute(
            _INSERT_TOOL_CALLS,
            [
                tool_call_values(
                    call, position=i, session_id=sid, turn_id=turn_id, now=now, content=content
                )
                for i, call in enumerate(result.tool_calls)
            ],
        )
    connection.execute(
        _INSERT_RESPONSE, response_values(result, session_id=sid, turn_id=turn_id, now=now)
    )


def abandon_turns(
    connection: Connection,
    now: datetime,
    reason: str,
    content: Content,
    *,
    since_before: datetime | None,
) -> None:
    """Fails the active turns (only those begun before ``since_before``, if given)."""
    query = select(t.sessions.c.active_turn_id).where(t.sessions.c.active_turn_id.is_not(None))
    if since_before is not None:
        query = query.where(t.sessions.c.active_since <= since_before)
    for turn_id in (connection.execute(query)).scalars().all():
        end_turn(connection, turn_id, RunStatus.ERROR, reason, now, content=content, touch=False)


def mark_expired(connection: Connection, sid: str) -> None:
    connection.execute(
        update(t.sessions).where(t.sessions.c.id == sid).values(status=SessionStatus.EXPIRED)
    )


def delete_sessions(connection: Connection, ids: list[str]) -> int:
    """Deletes the sessions and everything of theirs; returns the sessions this deleted
    (rows another transaction deleted first are not counted)."""
    if not ids:
        return 0
    # Children first: correct with or without foreign keys enforced (SQLite needs a pragma).
    for table in (t.responses, t.tool_calls, t.messages, t.turns):
        connection.execute(delete(table).where(table.c.session_id.in_(ids)))
    return int(connection.execute(delete(t.sessions).where(t.sessions.c.id.in_(ids))).rowcount)


def renew_turns(connection: Connection, turn_ids: list[str], now: datetime) -> None:
    """Renews the lease of running turns: their session's ``active_since`` moves to now,
    so that only a turn whose process stopped renewing goes stale."""
    s = t.sessions.c
    connection.execute(
        update(t.sessions).where(s.active_turn_id.in_(turn_ids)).values(active_since=now)
    )


# Any constant shared by every replica: the key of the purge's advisory lock.
PURGE_LOCK_KEY = 0x7261_6761_7075_7267  # "ragapurg"


def purge_lock(connection: Connection) -> bool:
    """True when this transaction may purge: on PostgreSQL one replica's purge at a time
    (a transaction-scoped advisory lock, released at commit; the others skip this round);
    SQLite has one process."""
    if connection.dialect.name != "postgresql":
        return True
    taken = connection.execute(
        text("SELECT pg_try_advisory_xact_lock(:key)"), {"key": PURGE_LOCK_KEY}
    ).scalar_one()
    return bool(taken)


def not_found(session_id: str) -> SessionNotFound:
    return SessionNotFound(
        "session",
        session_id,
        f"session {session_id!r} does not exist, has expired, or is not yours",
    )


def busy(session_id: str) -> SessionBusy:
    return SessionBusy(
        f"session {session_id!r} is answering another question; retry when it is done",
        metadata={"session_id": session_id},
    )
