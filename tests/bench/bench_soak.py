"""Soak: many concurrent AskStream streams for a while, with cancellations and killed clients.

N workers each run AskStream streams back to back against a server process: most read to
the end, some cancel before the first message, some cancel mid-stream; meanwhile a small
client process is SIGKILLed mid-stream every few seconds. The workers run in client
processes of up to 125 streams each (soak_clients.py), each reporting how far its own event
loop fell behind, so that a starved load generator shows as such. Extractive answers (no
model) and agentic ones over a fake model process (tests/fakes/model_process.py, dozens of
deltas per answer); the session store on SQLite or PostgreSQL.

Baseline: the server itself after a warm-up at the same concurrency and a quiet spell, so
that what the warm-up allocates for good (model, pools, arenas) is not counted as growth.
Prints completions by status, first-token p50/p99, and the server's RSS, open FDs and
asyncio tasks at the baseline and again once the soak has ended and the server is quiet.

Targets: 0 unexpected statuses (client side: a CANCELLED the client did not ask for counts
as unexpected whatever the stream meant to do; server side: none but OK/CANCELLED nor any
error line in its log), 0 crashes, RSS growth < 10%, FDs back to baseline (outside the bounded
connection pools, see soak_probe.py), idle asyncio tasks back to baseline.

Run: ``python -m tests.bench.bench_soak [--streams N] [--seconds T] [--store sqlite|postgres]
[--strategy extractive|model|both] [--full]``; ``make bench`` runs it in quick mode
(100 streams x 30 s), ``make bench BENCH_MODE=full`` in full mode (500 streams x 600 s).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from tests.bench.soak_clients import LoopLag, run_clients
from tests.bench.soak_load import Tally, kill_clients
from tests.bench.soak_probe import Resources, quiet
from tests.processes import ServerProcess, ingest_documents, model_process, start_server

QUICK = (100, 30.0)
FULL = (500, 600.0)
POSTGRES_DSN = os.environ.get("TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")
KILL_EVERY_S = 4.0


@contextlib.asynccontextmanager
async def database(store: str) -> AsyncIterator[dict[str, str]]:
    """Settings for the session store: SQLite under the data dir, or a fresh PostgreSQL
    database dropped afterwards."""
    if store == "sqlite":
        yield {}
        return
    import asyncpg

    admin = await asyncpg.connect(POSTGRES_DSN.rsplit("/", 1)[0] + "/postgres", timeout=3)
    name = f"ragagent_soak_{uuid.uuid4().hex[:10]}"
    await admin.execute(f'CREATE DATABASE "{name}"')
    try:
        url = POSTGRES_DSN.replace("postgresql://", "postgresql+asyncpg://", 1)
        yield {"database_url": f"{url.rsplit('/', 1)[0]}/{name}"}
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


async def load(
    server: ServerProcess, streams: int, seconds: float, *, kill_every: float | None = None
) -> tuple[Tally, list[LoopLag], Counter[str]]:
    """``streams`` workers for ``seconds`` in client processes of their own (and a client
    process SIGKILLed every ``kill_every`` s); nothing new starts once the server has died."""
    until = time.monotonic() + seconds

    def running() -> bool:
        return time.monotonic() < until and server.alive()

    killing = (
        kill_clients(server.target, running, kill_every, 5)
        if kill_every
        else asyncio.sleep(0, Counter[str]())
    )
    (tally, lags), killed = await asyncio.gather(
        run_clients(server.target, streams, seconds, server.alive), killing
    )
    return tally, lags, killed


@dataclass
class Soak:
    """What one soak measured."""

    tally: Tally
    lags: list[LoopLag]  # of each client process
    killed: Counter[str]
    start: Resources | None  # None: the server died before the baseline
    end: Resources | None  # None: the server died during the soak
    death: str  # how the server died or failed to stop cleanly; empty if it did not
    log_codes: Counter[str]
    log_errors: int

    def report(self) -> bool:
        """Prints the figures and the targets; True when every target is met."""
        by_kind: dict[str, Counter[str]] = {}
        for (behaviour, code), n in self.tally.outcomes.items():
            by_kind.setdefault(behaviour, Counter())[code] += n
        for behaviour, counts in sorted(by_kind.items()):
            print(f"  {behaviour}: {sum(counts.values())} streams, {dict(counts.most_common())}")
        answers = dict(self.tally.answers.most_common())
        print(f"  answers of completed streams: {answers}; {self.tally.deltas} deltas in all")
        print(f"  first answer delta: {self.tally.first_token()}")
        for detail, n in self.tally.unexpected_details.most_common(3):
            print(f"  unexpected: {n} x {detail}")
        print(
            f"  client processes: {len(self.lags)}; event-loop lag p50/p99/max of each: "
            + ", ".join(str(lag) for lag in self.lags)
        )
        print(f"  client processes SIGKILLed: {dict(self.killed)}")
        print(f"  server access log: {dict(self.log_codes.most_common())}")
        print(f"  server error log lines: {self.log_errors}")
        start = self.start or self.end or Resources(1)
        end = self.end or start  # a dead server has no end figures: compare nothing
        growth = (end.rss_kib - start.rss_kib) / start.rss_kib
        print(f"  server RSS: {start.rss_kib / 1024:.1f} -> {end.rss_kib / 1024:.1f} MiB")
        print(f"  server open FDs: {start.fds} -> {end.fds}")
        for kind in sorted(start.fd_kinds.keys() | end.fd_kinds.keys()):
            print(f"    {kind}: {start.fd_kinds[kind]} -> {end.fd_kinds[kind]}")
        print(f"  server asyncio tasks when idle: {start.tasks} -> {end.tasks}")
        unexpected = self.tally.unexpected
        # What the server says it answered: the client cannot see a stream it killed.
        odd = {code: n for code, n in self.log_codes.items() if code not in ("OK", "CANCELLED")}
        checks = [
            (
                f"server log: codes other than OK/CANCELLED {odd}, error lines "
                f"{self.log_errors} (target none)",
                not odd and not self.log_errors,
            ),
            (f"unexpected statuses {sum(unexpected.values())} {dict(unexpected)}", not unexpected),
            (f"crashes {int(bool(self.death))} (target 0)", not self.death),
            (f"RSS growth {growth:+.1%} (target < 10%)", growth < 0.10),
            (
                f"open FDs but the pools {start.fds_but_pools} -> {end.fds_but_pools} "
                "(target: back to baseline)",
                end.fds_but_pools <= start.fds_but_pools,
            ),
            (
                f"idle asyncio tasks {start.tasks} -> {end.tasks} (target: back to baseline)",
                start.tasks is None or (end.tasks or 0) <= start.tasks,
            ),
        ]
        print("  targets:")
        for what, met in checks:
            print(f"    {'ok  ' if met else 'MISS'} {what}")
        if self.death:
            print("  " + self.death.replace("\n", "\n  "))
        return all(met for _, met in checks)


async def soak(store: str, strategy: str, streams: int, seconds: float) -> Soak:
    """One soak: server (and model) up, warm-up, baseline, soak, quiet, figures."""
    warm_up = min(10.0, seconds / 3)
    print(
        f"soak: {store}, {strategy}, {streams} streams x {seconds:.0f} s (+{warm_up:.0f} s warm-up)"
    )
    async with contextlib.AsyncExitStack() as stack:
        settings = {
            "agent_strategy": "extractive",
            "log_format": "json",
            "log_level": "INFO",
            "embedding_threads": "1",
        }
        model_port = None
        if strategy == "model":
            model = stack.enter_context(model_process(deltas=60, interval=0.01))
            model_port = model.port
            settings |= {
                "agent_strategy": "agentic",
                "llm_base_url": model.base_url,
                "llm_api_key": "x",
            }
        settings |= await stack.enter_async_context(database(store))
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        stats = tmp / "tasks"
        command = ("-m", "tests.bench.soak_load", "serve", str(stats))
        server = await asyncio.to_thread(start_server, tmp, command=command, **settings)
        stack.callback(server.stop)
        await asyncio.to_thread(ingest_documents, server.target)

        await load(server, streams, warm_up)
        start = await quiet(server, stats, model_port, None) if server.alive() else None
        tally, lags, killed = await load(server, streams, seconds, kill_every=KILL_EVERY_S)
        end = await quiet(server, stats, model_port, start) if server.alive() else None
        death = "" if server.alive() else server.describe_death()
        exit_code = server.stop()
        if exit_code != 0 and not death:
            death = f"the server exited with {exit_code} on SIGTERM:\n{server.log_tail()}"
        codes, errors = _server_log(tmp / "server.log")
    return Soak(tally, lags, killed, start, end, death, codes, errors)


def _server_log(path: Path) -> tuple[Counter[str], int]:
    """Status codes of the server's access log, and its error lines."""
    codes: Counter[str] = Counter()
    errors = 0
    for line in path.read_text(errors="replace").splitlines():
        with contextlib.suppress(ValueError):
            entry = json.loads(line)
            if entry.get("event") == "rpc":
                codes[str(entry.get("code"))] += 1
            errors += entry.get("level") in ("error", "critical")
    return codes, errors


async def main(
    *,
    full: bool = False,
    stores: tuple[str, ...] = ("sqlite", "postgres"),
    strategies: tuple[str, ...] = ("extractive", "model"),
    streams: int | None = None,
    seconds: float | None = None,
) -> bool:
    default_streams, default_seconds = FULL if full else QUICK
    met = True
    for store in stores:
        if store == "postgres" and not await _postgres_reachable():
            print(f"soak: postgres skipped, PostgreSQL is not reachable at {POSTGRES_DSN}")
            continue
        for strategy in strategies:
            result = await soak(
                store, strategy, streams or default_streams, seconds or default_seconds
            )
            met &= result.report()
    return met


async def _postgres_reachable() -> bool:
    import asyncpg

    try:
        connection = await asyncpg.connect(POSTGRES_DSN, timeout=3)
    except (OSError, TimeoutError, asyncpg.PostgresError):
        return False
    await connection.close()
    return True


def cli(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.bench_soak")
    parser.add_argument("--streams", type=int, help="concurrent streams (quick 100, full 500)")
    parser.add_argument("--seconds", type=float, help="soak duration (quick 30, full 600)")
    parser.add_argument("--store", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--strategy", choices=["extractive", "model", "both"], default="both")
    parser.add_argument("--full", action="store_true", help="500 streams x 600 s by default")
    args = parser.parse_args(argv)
    strategies = ("extractive", "model") if args.strategy == "both" else (args.strategy,)
    met = asyncio.run(
        main(
            full=args.full,
            stores=(args.store,),
            strategies=strategies,
            streams=args.streams,
            seconds=args.seconds,
        )
    )
    return 0 if met else 1


if __name__ == "__main__":
    from service.observability.logging import configure_logging

    configure_logging("WARNING", "console")
    sys.exit(cli())
