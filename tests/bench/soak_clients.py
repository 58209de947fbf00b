"""The soak's streams, spread over several client processes that each report their own lag.

One Python process driving 500 streams took a full core: its event loop fell behind, and a
starved load generator makes the server look slow (or worse) when it is the client that is.
So the workers run in ``processes`` client processes (``python -m tests.bench.soak_clients
TARGET STREAMS SECONDS FIRST_SEED``), each with its own channels (one HTTP/2 connection per
50 streams, as a client pool might) and a ticker that measures how late its event loop wakes
up. Each prints its tally and its lag as one JSON line when done; SIGTERM ends it early
(no new stream starts; the benchmark sends it when the server has died).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc

from tests.bench.soak_load import Tally, worker
from tests.processes import REPO, clean_env

STREAMS_PER_CHANNEL = 50
STREAMS_PER_PROCESS = 125  # 500 streams: 4 client processes
TICK_S = 0.05


@dataclass(frozen=True)
class LoopLag:
    """How late one client process's event loop woke up from a TICK_S sleep, in seconds."""

    p50: float
    p99: float
    worst: float

    @classmethod
    def of(cls, samples: list[float]) -> LoopLag:
        if not samples:
            return cls(0.0, 0.0, 0.0)
        ordered = sorted(samples)
        p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
        return cls(statistics.median(ordered), p99, ordered[-1])

    def __str__(self) -> str:
        return f"{self.p50 * 1000:.0f}/{self.p99 * 1000:.0f}/{self.worst * 1000:.0f} ms"


async def run_clients(
    target: str, streams: int, seconds: float, alive: Callable[[], bool]
) -> tuple[Tally, list[LoopLag]]:
    """``streams`` streams for ``seconds`` over as many client processes as they need;
    the clients are told to stop once ``alive()`` turns false."""
    processes = max(1, -(-streams // STREAMS_PER_PROCESS))
    shares = [streams // processes + (i < streams % processes) for i in range(processes)]
    clients = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.bench.soak_clients",
            target,
            str(share),
            str(seconds),
            str(sum(shares[:i])),  # every worker keeps its seed whatever the split
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=clean_env(),
            cwd=REPO,
        )
        for i, share in enumerate(shares)
    ]
    results = [asyncio.ensure_future(client.communicate()) for client in clients]
    while not all(result.done() for result in results):
        if not alive():
            for client in clients:
                if client.returncode is None:
                    client.send_signal(signal.SIGTERM)
            break
        await asyncio.wait(results, timeout=0.5)
    tally, lags = Tally(), []
    for client, result in zip(clients, results, strict=True):
        out, err = await result
        if client.returncode != 0:
            raise RuntimeError(
                f"a soak client exited with {client.returncode}:\n{err.decode(errors='replace')}"
            )
        report = json.loads(out.decode().strip().splitlines()[-1])
        tally.add(report["tally"])
        lags.append(LoopLag.of(report["lag_s"]))
    return tally, lags


# --- the client process --------------------------------------------------------------------


async def _ticker(samples: list[float], done: asyncio.Event) -> None:
    while not done.is_set():
        asked = time.monotonic()
        await asyncio.sleep(TICK_S)
        samples.append(time.monotonic() - asked - TICK_S)


async def _client(target: str, streams: int, seconds: float, first_seed: int) -> dict[str, Any]:
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    until = time.monotonic() + seconds

    def running() -> bool:
        return time.monotonic() < until and not stop.is_set()

    tally = Tally()
    lag: list[float] = []
    ticking = asyncio.Event()
    ticker = asyncio.create_task(_ticker(lag, ticking))
    channels = [
        grpc.aio.insecure_channel(target) for _ in range(-(-streams // STREAMS_PER_CHANNEL))
    ]
    try:
        await asyncio.gather(
            *(
                worker(channels[i % len(channels)], running, first_seed + i, tally)
                for i in range(streams)
            )
        )
    finally:
        ticking.set()
        with contextlib.suppress(asyncio.CancelledError):
            await ticker
        for channel in channels:
            await channel.close()
    return {"tally": tally.to_json(), "lag_s": lag}


if __name__ == "__main__":
    target, streams, seconds, first_seed = sys.argv[1:5]
    report = asyncio.run(_client(target, int(streams), float(seconds), int(first_seed)))
    sys.stdout.write(json.dumps(report) + "\n")
