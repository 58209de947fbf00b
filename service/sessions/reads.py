"""Queries that read sessions back: one session with its turns, the history, a list page.

Blocking functions of a blocking connection, like :mod:`service.sessions.writes`: the history
is read inside a turn's begin (in the SQLite writer's thread), the rest through ``run_sync``."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime
from typing import Any

from sqlalchemy import and_, bindparam, not_, or_, select
from sqlalchemy.engine import Connection

from service.domain import ConversationTurn
from service.errors import ConfigurationError
from service.sessions import schema as t
from service.sessions.codec import (
    citations_from_json,
    open_tool_call,
    sources_from_json,
    timings_from_row,
    tool_call_from_row,
    usage_from_row,
)
from service.sessions.records import RunStatus, TokenCounter, TurnRecord
from service.sessions.schema import AnyRow
from service.sessions.sealing import PREFIX, Content

_HISTORY_BATCH = 32
_NO_BOUND = 2**31 - 1  # above any turn number (an INTEGER column on every backend)
# Built once: the history is read inside every continued turn's begin (see writes.py).
_COMPLETED_BEFORE = (
    select(t.turns.c.id, t.turns.c.seq)
    .where(
        t.turns.c.session_id == bindparam("sid"),
        t.turns.c.status == RunStatus.COMPLETED,
        t.turns.c.seq < bindparam("before"),
    )
    .order_by(t.turns.c.seq.desc())
    .limit(_HISTORY_BATCH)
)
_MESSAGES_OF = select(t.messages.c.turn_id, t.messages.c.role, t.messages.c.content).where(
    t.messages.c.turn_id.in_(bindparam("turns", expanding=True))
)


def session_row(connection: Connection, session_id: str) -> AnyRow | None:
    result = connection.execute(select(t.sessions).where(t.sessions.c.id == session_id))
    return result.one_or_none()


def turn_records(connection: Connection, session_id: str) -> list[TurnRecord]:
    """Every turn of the session, oldest first, with its answer, sources and tool calls,
    their text as stored: :func:`open_record` opens what is sealed."""
    turn_rows = (
        connection.execute(
            select(t.turns).where(t.turns.c.session_id == session_id).order_by(t.turns.c.seq)
        )
    ).all()
    answers: dict[str, str] = {}
    for row in connection.execute(
        select(t.messages.c.turn_id, t.messages.c.content).where(
            t.messages.c.session_id == session_id, t.messages.c.role == "assistant"
        )
    ):
        answers[row.turn_id] = row.content
    calls: dict[str, list[Any]] = {}
    for row in connection.execute(
        select(t.tool_calls)
        .where(t.tool_calls.c.session_id == session_id)
        .order_by(t.tool_calls.c.turn_id, t.tool_calls.c.position)
    ):
        calls.setdefault(row.turn_id, []).append(tool_call_from_row(row))
    responses = {
        row.turn_id: row
        for row in connection.execute(
            select(t.responses).where(t.responses.c.session_id == session_id)
        )
    }
    records = []
    for turn in turn_rows:
        response = responses.get(turn.id)
        extra: dict[str, Any] = {}
        if response is not None:
            extra = {
                "sources": sources_from_json(response.sources),
                "citations": citations_from_json(response.sources),
                "confidence": response.confidence,
                "usage": usage_from_row(response),
                "timings": timings_from_row(response),
            }
        records.append(
            TurnRecord(
                turn_id=turn.id,
                request_id=turn.request_id,
                question=turn.question,
                status=RunStatus(turn.status),
                created_at=turn.created_at,
                completed_at=turn.completed_at,
                answer=answers.get(turn.id, ""),
                error=turn.error,
                metadata={_LABELS: turn.labels} if turn.labels else {},
                tool_calls=calls.get(turn.id, []),
                **extra,
            )
        )
    return records


def open_record(turn: TurnRecord, content: Content) -> TurnRecord:
    """The turn with its sealed text opened (plaintext rows pass as they are)."""
    tid = turn.turn_id
    return replace(
        turn,
        question=content.open(turn.question, tid, "question"),
        answer=content.open(turn.answer, tid, "answer"),
        error=content.open(turn.error, tid, "error"),
        metadata=_labels(turn.metadata, tid, content),
        # Listed by position, and a turn's calls are written together, numbered from 0.
        tool_calls=[
            open_tool_call(call, position=i, turn_id=tid, content=content)
            for i, call in enumerate(turn.tool_calls)
        ],
    )


# The stored labels travel unopened in a one-key dict until open_record opens them.
_LABELS = "\x00sealed"


def _labels(stored: dict[str, str], turn_id: str, content: Content) -> dict[str, str]:
    if _LABELS not in stored:
        return stored
    labels = json.loads(content.open(stored[_LABELS], turn_id, "labels"))
    return {str(k): str(v) for k, v in labels.items()}


def history(
    connection: Connection,
    session_id: str,
    *,
    token_budget: int,
    count: TokenCounter,
    content: Content,
) -> list[ConversationTurn]:
    """The newest completed turns that fit ``token_budget`` together, oldest first.

    Reads backwards in small batches, so a long session costs only what the budget admits.
    A turn that does not fit ends the history: older turns are dropped, never skipped over,
    so the model never sees a conversation with a hole in it. A turn recorded without its
    text (RAGAGENT_RECORD_CONTENT=false) ends it the same way: there is nothing to replay.
    """
    kept: list[ConversationTurn] = []
    left = token_budget
    before = _NO_BOUND
    while left > 0:
        batch = connection.execute(_COMPLETED_BEFORE, {"sid": session_id, "before": before}).all()
        if not batch:
            break
        before = batch[-1].seq
        texts: dict[str, dict[str, str]] = {row.id: {} for row in batch}
        for message in connection.execute(_MESSAGES_OF, {"turns": list(texts)}):
            name = "question" if message.role == "user" else "answer"
            texts[message.turn_id][message.role] = content.open(
                message.content, message.turn_id, name
            )
        for row in batch:
            said = texts[row.id]
            turn = ConversationTurn(said.get("user", ""), said.get("assistant", ""))
            cost = count(turn.question) + count(turn.answer)
            if cost > left or not turn.question:
                left = 0
                break
            left -= cost
            kept.append(turn)
        if len(batch) < _HISTORY_BATCH:
            break
    kept.reverse()
    return kept


def session_page(
    connection: Connection, owner: str, *, limit: int, after: tuple[datetime, str] | None
) -> list[AnyRow]:
    """Up to ``limit`` of the owner's sessions, newest first, strictly after ``after``.

    Keyset pagination on (created_at, id): stable while sessions are added or removed
    between pages, unlike an offset, and the index on (owner, created_at, id) serves it.
    """
    s = t.sessions
    query = (
        select(s)
        .where(s.c.owner == owner)
        .order_by(s.c.created_at.desc(), s.c.id.desc())
        .limit(limit)
    )
    if after is not None:
        created_at, session_id = after
        query = query.where(
            or_(
                s.c.created_at < created_at, and_(s.c.created_at == created_at, s.c.id < session_id)
            )
        )
    return list(connection.execute(query).all())


def check_keys(connection: Connection, content: Content) -> None:
    """Refuses a database holding a sealed question that the configured keys cannot open.

    Checked once at start-up, on the one text column every turn has, so that a missing key
    fails the start rather than the first caller's read; rows sealed later under a key id
    this process lacks (another replica's newer key) fail at read time (Undecryptable).
    """
    question = t.turns.c.question
    query = select(question).where(question.startswith(PREFIX, autoescape=True))
    cipher = content.cipher
    if cipher is not None:
        known = [question.startswith(f"{PREFIX}{kid}:", autoescape=True) for kid in cipher.keys]
        query = query.where(not_(or_(*known)))
    found = connection.execute(query.limit(1)).scalar_one_or_none()
    if found is None:
        return
    kid = found[len(PREFIX) :].partition(":")[0]
    raise ConfigurationError(
        "RAGAGENT_SESSION_ENCRYPTION_KEY: the session database holds text sealed with "
        + (f"key id {kid!r}, which is not listed" if cipher else "a key, and none is set")
        + " (keep retired keys after the active one until their sessions are purged)"
    )
