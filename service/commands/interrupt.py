"""Stopping a long command on SIGINT or SIGTERM: at once, and saying where it got to.

Without this, SIGTERM killed an ingest without a word, and SIGINT cancelled it only to wait
for the embedding batch in flight (seconds of work nobody wants any more) before exiting
silently. Here the signal cancels the command's work, whose own clean-up (closing the
store) runs; the command then reports what was done and raises :class:`Interrupted`, and
``ragagent`` exits with 128 + the signal number without waiting for worker threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(Exception):
    """The command was stopped by a signal and has said what it had done."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        self.signal_name = signal.Signals(signum).name
        super().__init__(f"stopped by {self.signal_name}")

    @property
    def exit_code(self) -> int:
        """The shell's convention: 130 for SIGINT, 143 for SIGTERM."""
        return 128 + self.signum


async def until_signalled(work: Coroutine[Any, Any, T]) -> T:
    """``work``'s result; SIGINT or SIGTERM cancel it and, once its clean-up has run, raise
    :class:`Interrupted`.

    The handlers are installed even when SIGINT was ignored at start (as for a background
    job of a script): whoever sends a signal to a running ingest wants it to stop. They
    are removed, and the previous ones restored, when ``work`` ends. Outside the main
    thread, where signals cannot be handled, ``work`` simply runs.
    """
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(work)
    received: list[int] = []

    def stop(signum: int) -> None:
        # One cancellation only: a second Ctrl-C must not cut the first one's clean-up short.
        if not received:
            received.append(signum)
            task.cancel()

    previous = {sig: signal.getsignal(sig) for sig in SIGNALS}
    try:
        for sig in SIGNALS:
            loop.add_signal_handler(sig, stop, sig)
    except (ValueError, RuntimeError):  # not the main thread
        return await task
    try:
        return await task
    except BaseException:
        # Whatever the cancelled work raised on its way out (CancelledError, or a gRPC
        # CANCELLED status), the cause is the signal.
        if received:
            raise Interrupted(received[0]) from None
        raise
    finally:
        for sig, handler in previous.items():
            loop.remove_signal_handler(sig)
            with contextlib.suppress(TypeError, ValueError):  # None: not set from Python
                signal.signal(sig, handler)
