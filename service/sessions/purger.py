"""The background task that deletes expired sessions, owned by the server.

Stopping is cooperative: :meth:`SessionPurger.stop` sets an event that the loop waits on
between purges, so a purge in progress finishes its transaction instead of being cut off;
only a purge that outlasts ``stop_timeout_s`` is cancelled. A failed purge (database down)
is logged and retried at the next interval: expiry is enforced on every request anyway,
so purging late only costs disk space.
"""

from __future__ import annotations

import asyncio
import contextlib
from types import TracebackType

from service.errors import DatabaseUnavailable
from service.observability.logging import get_logger
from service.sessions.store import SessionStore

log = get_logger("ragagent.sessions")


async def run_purger(store: SessionStore, interval_s: float, stop: asyncio.Event) -> None:
    """Purges expired sessions now and every ``interval_s`` seconds until ``stop`` is set."""
    while not stop.is_set():
        try:
            purged = await store.purge_expired()
        except DatabaseUnavailable:
            log.warning("purging expired sessions failed: database unavailable")
        except Exception:
            log.exception("purging expired sessions failed")
        else:
            if purged:
                log.info("purged expired sessions", count=purged)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), interval_s)


class SessionPurger:
    """Runs :func:`run_purger` as a task between :meth:`start` and :meth:`stop`."""

    def __init__(
        self, store: SessionStore, *, interval_s: float, stop_timeout_s: float = 5.0
    ) -> None:
        self._store = store
        self._interval_s = interval_s
        self._stop_timeout_s = stop_timeout_s
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def start(self) -> None:
        if self._task is not None:
            raise RuntimeError("the session purger is already running")
        self._stop = asyncio.Event()
        self._task = asyncio.create_task(
            run_purger(self._store, self._interval_s, self._stop), name="session-purger"
        )

    async def stop(self) -> None:
        """Ends the loop and waits for it; re-raises anything unexpected that ended it."""
        task, self._task = self._task, None
        if task is None:
            return
        self._stop.set()
        try:
            done, _ = await asyncio.wait({task}, timeout=self._stop_timeout_s)
            if not done:
                task.cancel()
                await asyncio.wait({task})
        except asyncio.CancelledError:
            # stop() itself was cancelled: the loop must not outlive it; the cancellation
            # goes on to our caller.
            task.cancel()
            raise
        if not task.cancelled():
            task.result()

    async def __aenter__(self) -> SessionPurger:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.stop()
