"""Query embeddings asked for at the same time, computed together in one model call.

A local model's call has a fixed cost that dominates short texts: one ~15-token query costs
about 4 ms of CPU alone and 1.8-2.3 ms in a call of 4-16 (measured on 2 cores, 1 ONNX
thread). Under concurrent streams every run embeds its question, so queries arriving while
a call runs wait for it and then go together (what inference servers call dynamic batching).
A query that arrives when a lane is free (``lanes`` calls may run at once, one per thread
that runs them) goes at once, alone: no timer ever holds one back.

Each caller waits for its own vector within its own deadline. A caller that gives up (its
deadline, a cancel) leaves the batch to finish for the others. A failed call fails every
query in it. The batch task lives only while queries wait; the executor's shutdown ends it.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from service.domain import Deadline
from service.errors import DeadlineExceeded, ShuttingDown

EmbedMany = Callable[[list[str]], Awaitable[Sequence[list[float]]]]

MAX_BATCH = 32
"""Most queries in one call: past 16 the cost per query no longer falls (1.8 ms)."""


@dataclass(eq=False, slots=True)
class _Waiting:
    text: str
    vector: asyncio.Future[list[float]] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


class QueryBatches:
    """Embeds queries through ``embed_many``, those that wait for a running call together."""

    def __init__(
        self, embed_many: EmbedMany, *, lanes: int = 1, max_batch: int = MAX_BATCH
    ) -> None:
        """``lanes``: calls that may run at once (the threads that run them)."""
        if max_batch < 1 or lanes < 1:
            raise ValueError("max_batch and lanes must be at least 1")
        self._embed_many = embed_many
        self._max_batch = max_batch
        self._lanes = lanes
        self._queue: list[_Waiting] = []
        self._running = 0  # lanes draining the queue, counted without awaiting
        self._tasks: set[asyncio.Task[None]] = set()

    async def embed(self, text: str, deadline: Deadline | None = None) -> list[float]:
        """``text``'s vector; DeadlineExceeded when ``deadline`` runs out first."""
        waiting = _Waiting(text)
        self._queue.append(waiting)
        if self._running < self._lanes:
            self._running += 1
            # A context of its own: the batch serves many requests, not the first one's.
            task = asyncio.create_task(
                self._drain(), name="query-embedding-batches", context=contextvars.Context()
            )
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        try:
            async with asyncio.timeout(deadline.remaining() if deadline else None):
                # Leaving cancels this caller's own future only: the batch skips it.
                return await waiting.vector
        except TimeoutError:
            raise DeadlineExceeded("the deadline ran out while embedding") from None

    async def _drain(self) -> None:
        try:
            await self._drain_queue()
        finally:
            # In the same step as the last look at the queue: a query queued after it
            # finds this lane free and starts one.
            self._running -= 1

    async def _drain_queue(self) -> None:
        while self._queue:
            batch = self._queue[: self._max_batch]
            del self._queue[: self._max_batch]
            texts = list(dict.fromkeys(w.text for w in batch if not w.vector.done()))
            if not texts:
                continue
            try:
                vectors = dict(zip(texts, await self._embed_many(texts), strict=True))
            except asyncio.CancelledError:
                task = asyncio.current_task()
                failure = ShuttingDown("the embedder stopped: the server is shutting down")
                _fail(batch, failure)
                _fail(self._queue, failure)
                self._queue.clear()
                if task is not None and task.cancelling():
                    raise  # this task itself was cancelled: never swallowed
                return  # the executor dropped the job (shutdown)
            except Exception as exc:  # noqa: BLE001 (each waiter gets it, raised where it waits)
                _fail(batch, exc)
                continue
            for waiting in batch:
                if not waiting.vector.done():
                    waiting.vector.set_result(vectors[waiting.text])


def _fail(batch: Sequence[_Waiting], failure: BaseException) -> None:
    for waiting in batch:
        if not waiting.vector.done():
            waiting.vector.set_exception(failure)
