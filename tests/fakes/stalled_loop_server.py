"""``ragagent serve`` whose event loop can be stalled on demand, run as a process of its own.

What a server does with calls that arrive while its loop is busy (many streams, a slow
callback) cannot be seen in-process: the test's loop would stall too. This harness runs the
real server with one addition: SIGUSR1 blocks its event loop for ``STALL_LOOP_SECONDS``
(default 5), after writing ``loop stalled`` to stderr (the server's log), so that a test knows
the stall has begun. grpc's own threads go on reading the socket meanwhile, as they do under
load; only the taking up of new calls, which happens on the loop, waits.

Run: ``python -m tests.fakes.stalled_loop_server`` with the server's RAGAGENT_* settings.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time


def _stall() -> None:
    seconds = float(os.environ.get("STALL_LOOP_SECONDS", "5"))
    sys.stderr.write("loop stalled\n")
    sys.stderr.flush()
    # Blocking the loop is the fault under test: nothing else on it runs meanwhile.
    time.sleep(seconds)


class _StallablePolicy(asyncio.DefaultEventLoopPolicy):
    """Every loop made under it stalls on SIGUSR1: the hook sits under whatever runs the
    server's loop (asyncio.run, a Runner), without changing the server."""

    def new_event_loop(self) -> asyncio.AbstractEventLoop:
        loop = super().new_event_loop()
        loop.add_signal_handler(signal.SIGUSR1, _stall)
        return loop


def main() -> int:
    from service.cli import main as ragagent

    asyncio.set_event_loop_policy(_StallablePolicy())
    return ragagent(["serve"])


if __name__ == "__main__":
    sys.exit(main())
