"""The one place where blocking work runs: a bounded pool of threads owned by the runtime.

Every stream of the server shares one event loop, so a synchronous call on it (chunking a
page, ONNX inference, the embedded Qdrant client, which is synchronous behind ``async def``)
stalls all of them. Such calls go through :class:`Blocking`. The composition root builds one
:class:`BlockingExecutor`, sized by ``RAGAGENT_BLOCKING_THREADS``, hands it to the components
that block, and shuts it down last. Nothing else makes threads: ``asyncio.to_thread`` would
use the loop's default executor, which nobody here sizes or shuts down.

The pool's threads keep the loop's CPU priority on purpose. Lowering it (tried: nice +10)
let other processes preempt a pool thread while it held the GIL, and the loop then waited
for the GIL as long as that thread waited for a core: 0.1-0.4 s on 2 busy cores.

Cancelling the awaiting task raises :class:`asyncio.CancelledError` in it at once. Work not
yet started is dropped; work already running cannot be interrupted and finishes in its thread
with its result discarded (callers that share state with it guard that state themselves).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, ParamSpec, Protocol, TypeVar

P = ParamSpec("P")
T = TypeVar("T")

THREAD_NAME = "ragagent-blocking"


class Blocking(Protocol):
    """Runs a synchronous function without blocking the event loop."""

    async def run(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """``fn(*args, **kwargs)``'s result (or exception), once it has run."""
        ...


class BlockingExecutor:
    """A bounded thread pool with an ``async run``; see the module docstring."""

    def __init__(self, threads: int) -> None:
        if threads < 1:
            raise ValueError("threads must be at least 1")
        self.threads = threads
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix=THREAD_NAME)
        # Submitted and not done, so that shutdown can wait for them on the loop.
        self._jobs: set[Future[Any]] = set()

    async def run(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        # The caller's context goes along (as with asyncio.to_thread), so that log lines
        # written in the thread still carry the request id.
        context = contextvars.copy_context()
        job = self._pool.submit(functools.partial(context.run, fn, *args, **kwargs))
        self._jobs.add(job)
        job.add_done_callback(self._jobs.discard)
        # A plain await of the wrapping future: cancelling it cancels a job still queued,
        # and the CancelledError reaches the caller unchanged.
        return await asyncio.wrap_future(job)

    async def shutdown(self) -> None:
        """Drops queued work, then waits (on the loop, not blocking it) for running work."""
        self._pool.shutdown(wait=False, cancel_futures=True)
        running = [asyncio.wrap_future(job) for job in list(self._jobs)]
        # Their callers have gone or will hear of the outcome themselves.
        await asyncio.gather(*running, return_exceptions=True)


class Inline:
    """Runs the function on the calling thread: the default of components built outside a
    runtime (unit tests, one-shot scripts) that have no other work on their loop to starve."""

    async def run(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        return fn(*args, **kwargs)


INLINE = Inline()
