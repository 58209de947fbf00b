"""When the embedded engine builds its index: once writes have gone quiet.

Written points sit in a segment that is searched exhaustively (30 ms at 100k chunks here)
until the engine's optimiser indexes them (HNSW; 34 s to minutes per 100k chunks on these 2
cores, writes waiting meanwhile). Running it after every document would rebuild it again
and again during an ingest, so it runs once enough points were written and no write came
for a while.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

from service.observability.logging import get_logger

log = get_logger("ragagent.store")


class QuietOptimizer:
    """Calls ``optimize`` once ``after_points`` were written and ``quiet_s`` passed with no
    write."""

    def __init__(
        self,
        optimize: Callable[[], Awaitable[object]],
        *,
        after_points: int = 2000,
        quiet_s: float = 2.0,
    ) -> None:
        self.optimize = optimize
        self.after_points = after_points
        self.quiet_s = quiet_s
        self._unindexed = 0
        self._writes = 0
        self._task: asyncio.Task[None] | None = None

    def wrote(self, points: int) -> None:
        self._writes += 1
        self._unindexed += points
        if self._unindexed < self.after_points:
            return
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._when_quiet())

    async def _when_quiet(self) -> None:
        while True:
            seen = self._writes
            await asyncio.sleep(self.quiet_s)
            if self._writes == seen:
                break
        self._unindexed = 0
        try:
            await self.optimize()
        except Exception as exc:  # noqa: BLE001 (searches still work, only slower: say so)
            log.warning("optimising the embedded store failed", error=str(exc))

    async def close(self) -> None:
        """Drops a run not yet started (the next start's writes schedule it again); one
        already running is finished by the executor, and the shard's close waits for it."""
        if self._task is not None and not self._task.done():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
