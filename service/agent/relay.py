"""The events of one run on their way from the run's task to the consumer.

A bounded buffer (a stalled consumer stalls the run instead of letting it run ahead) and one
heartbeat timer per stream. The timer is armed once and moved only when it fires: an event
costs no timer of its own (an ``asyncio.timeout`` around each wait made and cancelled one
per event). It fires at the earliest when the consumer has been waiting for ``interval``
seconds; then it puts a heartbeat in the queue, or, when the run's task has ended without a
last event, the marker that makes the consumer raise what ended it.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
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
    """Items from one producer task to one consumer, with silence reported as :data:`BEAT`.

    A waiting consumer is woken by each item (the first token must not wait for company); a
    producer held back by a full relay is woken only once the consumer has taken it down to
    half, so that it refills several items per turn instead of one per item taken.
    """

    def __init__(self, interval: float, *, size: int = QUEUE_SIZE) -> None:
        self._items: deque[T | Signal] = deque()
        self._size = size
        self._low = size // 2
        self._getter: asyncio.Future[None] | None = None
        self._putters: list[asyncio.Future[None]] = []
        self._interval = interval
        self._loop = asyncio.get_running_loop()
        self._producer: asyncio.Task[Any] | None = None
        self._since = self._loop.time()  # when the consumer began its current wait
        self._timer = self._loop.call_at(self._since + interval, self._tick)

    async def put(self, item: T) -> None:
        """Waits while the relay is full (the producer's emit)."""
        while len(self._items) >= self._size:
            room = self._loop.create_future()
            self._putters.append(room)
            try:
                await room
            finally:
                if room in self._putters:
                    self._putters.remove(room)
        self._add(item)

    def watch(self, producer: asyncio.Task[Any]) -> None:
        """The task that puts; its end without a last item is reported as :data:`ENDED`."""
        self._producer = producer

    async def get(self) -> T | Signal:
        """The next item, :data:`BEAT` after ``interval`` s of silence, or :data:`ENDED`."""
        items = self._items
        while not items:
            self._since = self._loop.time()
            self._getter = self._loop.create_future()
            try:
                await self._getter
            finally:
                self._getter = None
        item = items.popleft()
        self._taken()
        return item

    def take_while(self, accept: Callable[[T | Signal], bool]) -> list[T | Signal]:
        """The items queued right now, from the front, as long as ``accept`` takes them;
        never waits."""
        items = self._items
        taken: list[T | Signal] = []
        while items and accept(items[0]):
            taken.append(items.popleft())
        if taken:
            self._taken()
        return taken

    def close(self) -> None:
        self._timer.cancel()

    def _taken(self) -> None:
        if self._putters and len(self._items) <= self._low:
            for room in self._putters:
                if not room.done():
                    room.set_result(None)
            self._putters.clear()

    def _add(self, item: T | Signal) -> None:
        self._items.append(item)
        getter = self._getter
        if getter is not None and not getter.done():
            getter.set_result(None)

    def _tick(self) -> None:
        now = self._loop.time()
        due = self._since + self._interval
        if self._getter is None or self._items:
            # Busy elsewhere (sending) or about to get something: no silence to report yet.
            self._timer = self._loop.call_at(now + self._interval, self._tick)
            return
        if now < due:
            self._timer = self._loop.call_at(due, self._tick)
            return
        producer = self._producer
        # Past the bound on purpose: the consumer is waiting, so the relay is empty.
        self._add(ENDED if producer is not None and producer.done() else BEAT)
        self._timer = self._loop.call_at(now + self._interval, self._tick)
