"""A bound on each wait for a stream's next chunk, with one timer for many waits.

``asyncio.timeout`` around every read of a streamed answer creates a timeout object and
schedules (then cancels) a timer per chunk, several microseconds each for answers of
thousands of chunks that come milliseconds apart. :class:`WaitClock` keeps one timer: each
wait moves its end, and the timer, when it fires, either finds the current wait past its
end (and cancels the task, as ``asyncio.timeout`` does) or sets itself for the current
wait's end. While chunks keep coming the timer fires about once per bound, not per chunk.

A wait that is cut short raises ``CancelledError`` inside it; :meth:`WaitClock.end` tells
that cancellation apart from any other (the caller's own cancellation always wins, as with
``asyncio.timeout``).
"""

from __future__ import annotations

import asyncio


class WaitClock:
    """Bounds waits one at a time: ``begin(bound)``, await, ``end()``; ``close()`` after."""

    __slots__ = ("_cancelling", "_end", "_fired", "_handle", "_loop", "_task", "_waiting")

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._task: asyncio.Task[object] | None = None
        self._handle: asyncio.TimerHandle | None = None
        self._end = 0.0
        self._waiting = False
        self._fired = False
        self._cancelling = 0

    def begin(self, bound: float) -> None:
        """A wait of at most ``bound`` seconds starts now."""
        self._end = self._loop.time() + bound
        self._waiting = True
        self._fired = False
        # The task that waits now (a stream may be read from more than one task).
        self._task = task = asyncio.current_task()
        if task is None:  # pragma: no cover - streams are read in tasks
            raise RuntimeError("a WaitClock wait needs a task")
        self._cancelling = task.cancelling()
        if self._handle is not None and self._handle.when() > self._end:
            self._handle.cancel()  # this wait ends sooner than the timer is set for
            self._handle = None
        if self._handle is None:
            self._handle = self._loop.call_at(self._end, self._fire, self._end)

    def end(self) -> bool:
        """The wait is over; True when the clock cut it short (its CancelledError is the
        clock's, to be turned into a timeout), False otherwise."""
        self._waiting = False
        if not self._fired:
            return False
        self._fired = False
        assert self._task is not None  # fired during a wait
        # As asyncio.timeout: the clock's cancellation is withdrawn; a timeout only when no
        # other cancellation was asked for meanwhile.
        return self._task.uncancel() <= self._cancelling

    def close(self) -> None:
        """No wait follows: the timer is dropped."""
        self._waiting = False
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _fire(self, when: float) -> None:
        self._handle = None
        if not self._waiting or self._fired:
            return  # between waits: the next one sets the timer again
        if self._end <= when and self._task is not None:  # set for this wait's end or later
            self._fired = True
            self._task.cancel()
        else:
            self._handle = self._loop.call_at(self._end, self._fire, self._end)
