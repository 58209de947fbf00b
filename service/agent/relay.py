"""The events of one run on their way from the run's task to the consumer.

A bounded queue (a stalled consumer stalls the run instead of letting it run ahead) and one
heartbeat timer per stream. The timer is armed once and moved only when it fires: an event
costs no timer of its own (an ``asyncio.timeout`` around each wait made and cancelled one
per event). It fires at the earliest when the consumer has been waiting for ``interval``
seconds; then it puts a heartbeat in the queue, or, when the run's task has ended without a
last event, the marker that makes the consumer raise what ended it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, Final, Generic, TypeVar

T = TypeVar("T")


class Signal:
    """What :meth:`Relay.get` returns instead of an item: :data:`BEAT` or :data:`ENDED`."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


BEAT: Final = Signal("BEAT")
"""What :meth:`Relay.get` returns after ``interval`` seconds of silence."""
ENDED: Final = Signal("ENDED")
"""What :meth:`Relay.get` returns once the producer has ended and nothing is left."""

# Enough to keep the run busy while the consumer sends; small enough that a stalled consumer
# stalls the run.
QUEUE_SIZE = 16


class Relay(Generic[T]):
    """Items from one producer task to one consumer, with silence reported as :data:`BEAT`."""

    def __init__(self, interval: float, *, size: int = QUEUE_SIZE) -> None:
        self._queue: asyncio.Queue[T | Signal] = asyncio.Queue(maxsize=size)
        self._interval = interval
        self._loop = asyncio.get_running_loop()
        self._producer: asyncio.Task[Any] | None = None
        self._waiting = False
        self._since = self._loop.time()  # when the consumer began its current wait
        self._timer = self._loop.call_at(self._since + interval, self._tick)

    def put(self, item: T) -> Awaitable[None]:
        """Waits while the queue is full (the producer's emit)."""
        return self._queue.put(item)

    def watch(self, producer: asyncio.Task[Any]) -> None:
        """The task that puts; its end without a last item is reported as :data:`ENDED`."""
        self._producer = producer

    async def get(self) -> T | Signal:
        """The next item, :data:`BEAT` after ``interval`` s of silence, or :data:`ENDED`."""
        queue = self._queue
        if not queue.empty():
            return queue.get_nowait()
        self._since = self._loop.time()
        self._waiting = True
        try:
            return await queue.get()
        finally:
            self._waiting = False

    def close(self) -> None:
        self._timer.cancel()

    def _tick(self) -> None:
        now = self._loop.time()
        due = self._since + self._interval
        if not self._waiting or not self._queue.empty():
            # Busy elsewhere (sending) or about to get something: no silence to report yet.
            self._timer = self._loop.call_at(now + self._interval, self._tick)
            return
        if now < due:
            self._timer = self._loop.call_at(due, self._tick)
            return
        producer = self._producer
        self._queue.put_nowait(ENDED if producer is not None and producer.done() else BEAT)
        self._timer = self._loop.call_at(now + self._interval, self._tick)
