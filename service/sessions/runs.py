"""Background runs in the session database: who owns each, how it ended, and its events.

A background run's events are written as they happen (in batches, by the replica running
it), so that a caller who lost its connection can resume from any replica sharing the
database. Each write renews the run's ``renewed_at``; a run still ``running`` whose renewal
is older than the turn lease (RAGAGENT_TURN_LEASE) was lost with its replica, and whoever
notices first (a resume, the purger) marks it ERROR with why, by a conditional UPDATE so
that a slow-but-alive replica's next write finds it ended rather than overwriting the mark.

Events are stored as their serialized ``AskStreamResponse``, sealed like a turn's text
(:mod:`service.sessions.sealing`), so an encrypted store keeps answers encrypted here too.
Runs that ended more than RAGAGENT_RUN_RETENTION ago are deleted with their events.
"""

from __future__ import annotations

import base64
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, delete, insert, select, update
from sqlalchemy.engine import Connection

from service.errors import NotFound
from service.sessions import schema
from service.sessions.records import Clock
from service.sessions.sealing import Content
from service.sessions.writer import Work

Write = Callable[[Work[Any]], Awaitable[Any]]
Read = Callable[[Callable[[Connection], Any]], Awaitable[Any]]

RUNNING = "running"
ENDED = ("success", "no_answer", "error", "timeout", "cancelled")
LOST_CODE = "ABORTED:RUN_LOST"
_PAGE = 500
_PURGE_BATCH = 500


class RunNotFound(NotFound):
    """Unknown, purged, or another principal's: the same answer for all three."""

    reason = "RUN_NOT_FOUND"

    def __init__(self, run_id: str) -> None:
        super().__init__("run", run_id[:64], "no such run (unknown, expired or not yours)")


@dataclass(frozen=True, slots=True)
class StoredRun:
    """A run's row: ``end_code`` is the gRPC status its stream ended with ("" for OK)."""

    run_id: str
    owner: str
    session_id: str
    status: str
    renewed_at: datetime
    last_sequence: int
    end_code: str
    end_message: str
    cancel_requested: bool

    @property
    def running(self) -> bool:
        return self.status == RUNNING


@dataclass(frozen=True, slots=True)
class Event:
    """One stored event: its sequence number and the serialized stream message."""

    sequence: int
    payload: bytes


class RunLog:
    """The runs table and its events; writes go through the session store's writer."""

    def __init__(
        self,
        *,
        write: Write,
        read: Read,
        content: Content,
        clock: Clock,
        lease: timedelta,
        retention: timedelta,
    ) -> None:
        self._write = write
        self._read = read
        self._content = content
        self._clock = clock
        self.lease = lease
        self._retention = retention

    @property
    def keeps_content(self) -> bool:
        """False when the store records no text (RAGAGENT_RECORD_CONTENT=false)."""
        return self._content.record

    def is_stale(self, run: StoredRun) -> bool:
        """Running, but not renewed for a lease: its replica is gone."""
        return run.running and run.renewed_at < self._clock() - self.lease

    async def create(self, run_id: str, *, owner: str, session_id: str) -> None:
        now = self._clock()
        row = {
            "id": run_id,
            "owner": owner,
            "session_id": session_id,
            "status": RUNNING,
            "renewed_at": now,
            "created_at": now,
        }
        await self._write(lambda connection: connection.execute(insert(schema.runs).values(row)))

    async def append(self, run_id: str, events: Sequence[Event]) -> bool:
        """Adds ``events`` and renews the run; True when a cancel was asked for it. A run
        marked ended meanwhile (lost, by another replica) gets nothing more."""
        rows = self._sealed(run_id, events)
        now = self._clock()

        def work(connection: Connection) -> bool:
            values: dict[str, Any] = {"renewed_at": now}
            if rows:
                values["last_sequence"] = rows[-1]["sequence"]
            renewed = connection.execute(
                update(schema.runs)
                .where(schema.runs.c.id == run_id, schema.runs.c.status == RUNNING)
                .values(values)
                .returning(schema.runs.c.cancel_requested)
            ).first()
            if renewed is None:
                return False
            if rows:
                connection.execute(insert(schema.run_events), rows)
            return bool(renewed.cancel_requested)

        return bool(await self._write(work))

    async def end(
        self, run_id: str, events: Sequence[Event], *, status: str, code: str, message: str
    ) -> None:
        """The run's last events and how it ended, in one transaction."""
        if status not in ENDED:
            raise ValueError(f"not a final status: {status!r}")
        rows = self._sealed(run_id, events)
        now = self._clock()

        def work(connection: Connection) -> None:
            values: dict[str, Any] = {
                "status": status,
                "renewed_at": now,
                "ended_at": now,
                "end_code": code,
                "end_message": message[:2000],
            }
            if rows:
                values["last_sequence"] = rows[-1]["sequence"]
            ended = connection.execute(
                update(schema.runs)
                .where(schema.runs.c.id == run_id, schema.runs.c.status == RUNNING)
                .values(values)
            )
            if ended.rowcount and rows:
                connection.execute(insert(schema.run_events), rows)

        await self._write(work)

    async def get(self, run_id: str, owner: str) -> StoredRun:
        row = await self._read(
            lambda connection: connection.execute(
                select(schema.runs).where(schema.runs.c.id == run_id)
            ).first()
        )
        if row is None or row.owner != owner:
            raise RunNotFound(run_id)
        return _stored(row)

    async def events_after(self, run_id: str, after: int) -> list[Event]:
        """Up to a page of the run's events with a sequence above ``after``, in order."""
        rows = await self._read(
            lambda connection: connection.execute(
                select(schema.run_events.c.sequence, schema.run_events.c.payload)
                .where(schema.run_events.c.run_id == run_id, schema.run_events.c.sequence > after)
                .order_by(schema.run_events.c.sequence)
                .limit(_PAGE)
            ).all()
        )
        return [
            Event(
                row.sequence,
                base64.b64decode(self._content.open(row.payload, run_id, f"event.{row.sequence}")),
            )
            for row in rows
        ]

    async def request_cancel(self, run_id: str, owner: str) -> None:
        """Flags the owner's running run; its replica stops it at its next write."""
        await self._write(
            lambda connection: connection.execute(
                update(schema.runs)
                .where(
                    schema.runs.c.id == run_id,
                    schema.runs.c.owner == owner,
                    schema.runs.c.status == RUNNING,
                )
                .values(cancel_requested=1)
            )
        )

    async def mark_lost(self, run_id: str | None, why: str) -> int:
        """Ends as ERROR the running runs (``run_id``'s, or all) not renewed for a lease;
        returns how many."""
        now = self._clock()
        cutoff = now - self.lease
        condition = and_(schema.runs.c.status == RUNNING, schema.runs.c.renewed_at < cutoff)
        if run_id is not None:
            condition = and_(condition, schema.runs.c.id == run_id)
        return await self._end_where(condition, why, now)

    async def abandon_all(self, why: str) -> int:
        """Ends every running run as ERROR: on SQLite, whose file one process owns, every
        run still running when it opens was lost with the previous process."""
        return await self._end_where(schema.runs.c.status == RUNNING, why, self._clock())

    async def purge(self) -> int:
        """Deletes runs that ended before the retention cut-off (with their events, in
        batches); returns how many."""
        cutoff = self._clock() - self._retention
        purged = 0
        while True:

            def work(connection: Connection) -> int:
                ids = [
                    row.id
                    for row in connection.execute(
                        select(schema.runs.c.id)
                        .where(schema.runs.c.ended_at < cutoff)
                        .limit(_PURGE_BATCH)
                    )
                ]
                if ids:
                    # Events first: SQLite enforces the cascade only with foreign keys on.
                    connection.execute(
                        delete(schema.run_events).where(schema.run_events.c.run_id.in_(ids))
                    )
                    connection.execute(delete(schema.runs).where(schema.runs.c.id.in_(ids)))
                return len(ids)

            count = int(await self._write(work))
            purged += count
            if count < _PURGE_BATCH:
                return purged

    async def _end_where(self, condition: Any, why: str, now: datetime) -> int:
        def work(connection: Connection) -> int:
            return int(
                connection.execute(
                    update(schema.runs)
                    .where(condition)
                    .values(
                        status="error",
                        ended_at=now,
                        end_code=LOST_CODE,
                        end_message=why,
                    )
                ).rowcount
            )

        return int(await self._write(work))

    def _sealed(self, run_id: str, events: Sequence[Event]) -> list[dict[str, Any]]:
        return [
            {
                "run_id": run_id,
                "sequence": event.sequence,
                "payload": self._content.seal(
                    base64.b64encode(event.payload).decode("ascii"),
                    run_id,
                    f"event.{event.sequence}",
                ),
            }
            for event in events
        ]


def _stored(row: Any) -> StoredRun:
    return StoredRun(
        run_id=row.id,
        owner=row.owner,
        session_id=row.session_id,
        status=row.status,
        renewed_at=row.renewed_at,
        last_sequence=row.last_sequence,
        end_code=row.end_code,
        end_message=row.end_message,
        cancel_requested=bool(row.cancel_requested),
    )
