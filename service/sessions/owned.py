"""The store's side of its writer: waiting for writes that a cancelled caller cannot cut
short, and the turns this process began and has not ended.

A write handed to the writer belongs to it (:mod:`service.sessions.writer`): the caller
waits through a shield, so its cancellation ends the wait, never the write; a write whose
caller left has its failure logged rather than lost. A turn's begin is the exception: if its
caller is cancelled, the turn would stay active with nobody to end it, so the begin is
withdrawn if it has not started, and otherwise the turn is marked cancelled once it is in.
"""

from __future__ import annotations

import asyncio
from typing import Any, TypeVar

from service.domain import ConversationTurn
from service.observability.logging import get_logger
from service.sessions import jobs
from service.sessions.records import Clock, RunStatus
from service.sessions.sealing import Content
from service.sessions.writer import Pending, Work, Writer

log = get_logger("ragagent.sessions")
T = TypeVar("T")

_WENT_AWAY = "the caller went away before the answer began"


class OwnedWrites:
    """Writes through ``writer``; :attr:`running` holds the turns begun and not ended."""

    def __init__(self, writer: Writer, clock: Clock, content: Content) -> None:
        self._writer = writer
        self._clock = clock
        self._content = content
        self.running: set[str] = set()

    async def run(self, work: Work[T]) -> T:
        """Submits ``work`` and waits for it; a cancelled caller stops waiting (and sees its
        CancelledError) but the write still runs to its end."""
        pending = self._submit(work)
        try:
            return await asyncio.shield(pending.future)
        except asyncio.CancelledError:
            pending.future.add_done_callback(_log_failure)
            raise

    async def begin(self, job: jobs.BeginTurn) -> list[ConversationTurn] | None:
        """:meth:`run` for a turn's begin, undone if its caller is cancelled meanwhile."""
        pending = self._writer.submit(job)
        turn_id = job.turn_id
        pending.future.add_done_callback(lambda done: self._began(turn_id, done))
        try:
            return await asyncio.shield(pending.future)
        except asyncio.CancelledError:
            if not pending.withdraw():
                # Claimed, or about to be, for a caller that is gone: nobody would end it.
                pending.future.add_done_callback(lambda done: self._undo(turn_id, done))
            raise

    def release(self, turn_id: str, status: RunStatus, error: str) -> None:
        """Ends a turn whose caller will not: nobody waits, a failure is logged."""
        try:
            pending = self._submit(
                jobs.AbortTurn(turn_id, status, error, self._clock(), self._content)
            )
        except Exception as failure:  # noqa: BLE001 (closed: close() marks the turn instead)
            log.warning("could not end an abandoned turn", turn_id=turn_id, error=repr(failure))
            return
        pending.future.add_done_callback(_log_failure)

    async def drain(self) -> None:
        await self._writer.drain()

    async def close(self) -> None:
        await self._writer.close()

    def _submit(self, work: Work[T]) -> Pending[T]:
        pending = self._writer.submit(work)
        if isinstance(work, jobs.CompleteTurn | jobs.AbortTurn):
            turn_id = work.turn_id
            pending.future.add_done_callback(lambda done: self._ended(turn_id, done))
        return pending

    def _began(self, turn_id: str, done: asyncio.Future[Any]) -> None:
        if _succeeded(done) and done.result() is not None:
            self.running.add(turn_id)

    def _ended(self, turn_id: str, done: asyncio.Future[Any]) -> None:
        # A failed end leaves the turn running: close() tries again.
        if _succeeded(done):
            self.running.discard(turn_id)

    def _undo(self, turn_id: str, done: asyncio.Future[Any]) -> None:
        if _succeeded(done) and done.result() is not None:
            self.release(turn_id, RunStatus.CANCELLED, _WENT_AWAY)


def _succeeded(done: asyncio.Future[Any]) -> bool:
    return not done.cancelled() and done.exception() is None


def _log_failure(done: asyncio.Future[Any]) -> None:
    # Retrieved here so that a write whose caller went away still gets logged.
    if not done.cancelled() and done.exception() is not None:
        log.warning("a session write failed after its caller left", error=repr(done.exception()))
