"""A CPU budget for the parsing and chunking of one document, checked as the work goes.

Python threads cannot be killed, so a runaway parse is stopped from inside: the parser and
the chunker call :func:`check` as they go (every line, every token count), and it raises
:class:`BudgetExceeded` once the thread has used the document's CPU seconds, or
:class:`WorkCancelled` once the awaiting task was cancelled (a client gone, the server
stopping). Without this a cancelled ingest kept its pool thread busy for minutes, and the
pool's shutdown (and so SIGTERM) waited for it.

The active budget is per thread (the pool thread doing the work), so the parsing code
needs no extra parameters; outside :func:`active` :func:`check` does nothing.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator


class BudgetExceeded(Exception):
    """The document used more CPU time than its budget."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"parsing and chunking used more than its {seconds:g} s CPU budget")
        self.seconds = seconds


class WorkCancelled(Exception):
    """Whoever waited for the work has gone: stop, the result would be discarded."""


class WorkBudget:
    """CPU seconds for one document's work (0: unlimited), and a flag to cancel it."""

    def __init__(self, cpu_seconds: float) -> None:
        if cpu_seconds < 0:
            raise ValueError("cpu_seconds must not be negative")
        self.cpu_seconds = cpu_seconds
        self._cancelled = threading.Event()
        self._started = 0.0

    def cancel(self) -> None:
        """Makes the next :func:`check` in the working thread raise :class:`WorkCancelled`."""
        self._cancelled.set()

    def start(self) -> None:
        self._started = time.thread_time()

    def check(self) -> None:
        if self._cancelled.is_set():
            raise WorkCancelled
        if self.cpu_seconds and time.thread_time() - self._started > self.cpu_seconds:
            raise BudgetExceeded(self.cpu_seconds)


_local = threading.local()


@contextlib.contextmanager
def active(budget: WorkBudget) -> Iterator[WorkBudget]:
    """Makes ``budget`` the one :func:`check` consults on this thread, from now on."""
    previous = getattr(_local, "budget", None)
    budget.start()
    _local.budget = budget
    try:
        yield budget
    finally:
        _local.budget = previous


def check() -> None:
    """Raises when the current thread's document is over budget or cancelled."""
    budget: WorkBudget | None = getattr(_local, "budget", None)
    if budget is not None:
        budget.check()
