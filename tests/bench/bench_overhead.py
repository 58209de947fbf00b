"""What the service adds: first token, relay, CPU and concurrency against the floor and the
Agents SDK, every figure a ratio measured in the same run.

Processes: the endless fake model (tests/fakes/model_process.py, zero think time unless a
phase says otherwise); ``ragagent serve``; the floor (floor_server.py: a bare grpc.aio
AskStream doing the same search and streamed completion); the peer (peer_server.py: the
OpenAI Agents SDK with a function_tool over the same retrieval, tracing off). Each server
gets its own copy of one ingested data dir (the textbook, so retrieval runs at book size)
and the same RAGAGENT_* settings; its CPU is read from its own /proc/<pid>/stat, its peak
RSS from VmHWM. Within a phase the sides take turns in a rotating order (A B C, B C A, ...);
each figure is the median over rounds of the per-round value.

Phases (retrieve_first servers, then agentic ones):
- first token: questions one at a time, answers of 20 chunks, the sides and the model
  called directly from the benchmark taking turns question by question; the retrieval
  share is what each ragagent run reports its retrieval took (query embedding and search);
- relay: answers of 2,000 chunks, chunks per second from first delta to end of stream;
- CPU per answered question: agentic, one tool call, ~150-chunk answers, against the
  floor and the peer, the sides taking turns question by question (CPU from each thread's
  schedstat, to the nanosecond);
- concurrency: N streams at once (100 chunks 20 ms apart): all completed, first-token
  p50/p99 and peak RSS against the floor.

Run: ``python -m tests.bench overhead [--full] [--json PATH] [--phases first_token,relay,...]
[--against REV]``: quick by default (SQLite, 200 streams; every phase unless ``--phases``
names some of first_token, relay, cpu, streams); ``--full`` adds 500 streams, more rounds, and
PostgreSQL (TEST_POSTGRES_DSN, default postgresql://postgres@127.0.0.1:5432/test; skipped
with the reason when unreachable). ``--against REV`` adds ragagent at git revision REV as a
side of the CPU phase: a change of a few percent is seen against the code before it in the
same run, which the run-to-run spread of the ratios to the floor hides.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import platform
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc
from ragagent.v1 import corpus_pb2, corpus_pb2_grpc

from tests.bench.bench_soak import POSTGRES_DSN, database
from tests.bench.common import BOOK
from tests.bench.overhead_cpu import cpu
from tests.bench.overhead_phases import (
    MODEL_NAME,
    Figure,
    Size,
    concurrency,
    first_token,
    relay,
)
from tests.bench.sides import Side, ingested, launch, revision_code
from tests.processes import ModelProcess, model_process

QUICK = Size(5, 8, 20, 2000, 2, 150, (200,), 100, 0.02, 2, ("sqlite",), 15, 10)
FULL = Size(9, 16, 20, 2000, 3, 150, (200, 500), 100, 0.02, 3, ("sqlite", "postgres"), 25, 10)
# first_token and relay run against retrieve_first servers, cpu and streams against agentic ones.
PHASES = frozenset({"first_token", "relay", "cpu", "streams"})
BEFORE = "before"  # the side that runs ragagent at another revision (--against)


@dataclass(frozen=True)
class Against:
    """ragagent at git ``revision``: ``code`` goes first on its PYTHONPATH."""

    revision: str
    code: list[Path]


TINY = Size(1, 2, 5, 50, 1, 20, (4,), 5, 0.01, 1, ("sqlite",), 1, 1)  # the smoke test's


@contextlib.contextmanager
def started(*sides: Side) -> Iterator[None]:
    try:
        yield
    finally:
        for side in sides:
            side.server.stop()


async def one_store(
    *,
    prepared: Path,
    folder: Path,
    settings: dict[str, str],
    own: dict[str, str],
    model: ModelProcess,
    size: Size,
    phases: frozenset[str],
    against: Against | None = None,
) -> tuple[list[Figure], int]:
    """The phases asked for, against servers over ``prepared``; ragagent also gets ``own``;
    ``against``: ragagent at another revision, a side of the CPU phase."""

    async def start(kind: str, mode: str) -> Side:
        if kind == BEFORE:
            assert against is not None
            side = await asyncio.to_thread(
                launch, "ragagent", folder / f"{kind}-{mode}", prepared, mode,
                {**settings, **own}, code=against.code,
            )  # fmt: skip
            return Side(BEFORE, side.server)
        extra = own if kind == "ragagent" else {}
        return await asyncio.to_thread(
            launch, kind, folder / f"{kind}-{mode}", prepared, mode, {**settings, **extra}
        )

    async def start_all(*kinds: tuple[str, str]) -> list[Side]:
        """Started at the same time; all stopped again if one fails."""
        results = await asyncio.gather(*(start(*k) for k in kinds), return_exceptions=True)
        sides = [r for r in results if isinstance(r, Side)]
        if len(sides) < len(kinds):
            for side in sides:
                side.server.stop()
            raise next(r for r in results if isinstance(r, BaseException))
        return sides

    figures: list[Figure] = []
    chunks = 0
    if phases & {"first_token", "relay"}:
        rag, floor = await start_all(("ragagent", "retrieve_first"), ("floor", "retrieve_first"))
        with started(rag, floor):
            chunks = await corpus_chunks(rag.target)
            if "first_token" in phases:
                figures += await first_token(rag, floor, model, size)
            if "relay" in phases:
                figures += await relay(rag, floor, model, size)
            for side in (rag, floor):
                side.check()
    if phases & {"cpu", "streams"}:
        peer_kind = [("peer", "agentic")] if "cpu" in phases else []
        if peer_kind and against is not None:
            peer_kind.append((BEFORE, "agentic"))
        rag, floor, *peer = await start_all(
            ("ragagent", "agentic"), ("floor", "agentic"), *peer_kind
        )
        with started(rag, floor):
            chunks = chunks or await corpus_chunks(rag.target)
            if peer:
                with started(*peer):
                    sides = {"ragagent": rag, "floor": floor, **{p.name: p for p in peer}}
                    label = against.revision if against is not None else None
                    figures += await cpu(sides, model, size, against=label)
            if "streams" in phases:
                figures += await concurrency(rag, floor, model, size)
            for side in (rag, floor):
                side.check()
    return figures, chunks


async def postgres_unreachable() -> str | None:
    """Why PostgreSQL cannot be used, or None when it can."""
    import asyncpg

    try:
        connection = await asyncpg.connect(POSTGRES_DSN, timeout=3)
    except (OSError, asyncpg.PostgresError) as error:
        return f"PostgreSQL unreachable at {POSTGRES_DSN}: {error}"
    await connection.close()
    return None


async def corpus_chunks(target: str) -> int:
    async with grpc.aio.insecure_channel(target) as channel:
        stub = corpus_pb2_grpc.CorpusServiceStub(channel)
        stats = await stub.GetCorpusStats(corpus_pb2.GetCorpusStatsRequest(), timeout=30)
    return int(stats.chunk_count)


def machine() -> str:
    model = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.machine(),
    )
    return f"{os.cpu_count()} cores, {model}"


def print_table(results: dict[str, Any]) -> None:
    print(
        f"\n{results['date']}, {results['machine']}, {results['mode']} mode, "
        f"corpus: {results['corpus']}"
    )
    print("| store | figure | ragagent | baseline | ratio or value | target | |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for store, outcome in results["stores"].items():
        if "skipped" in outcome:
            print(f"| {store} | skipped: {outcome['skipped']} | | | | | |")
            continue
        for f in outcome["figures"]:
            print(
                f"| {store} | {f['name']} | {f['measured']} | {f['baseline']} | "
                f"{f['value']:.2f} | {f['target']} | {f['verdict']} |"
            )


async def run(
    size: Size,
    corpus: Path,
    mode: str,
    json_path: Path | None = None,
    *,
    phases: frozenset[str] = PHASES,
    against: str | None = None,
) -> dict[str, Any]:
    """Every phase asked for, on every store of ``size``; ``against``: a git revision of
    ragagent to add to the CPU phase."""
    other = None if against is None else Against(against, revision_code(against))
    results: dict[str, Any] = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine(),
        "mode": mode,
        "stores": {},
    }
    with tempfile.TemporaryDirectory(prefix="ragagent-overhead-") as tmp:
        prepared = await asyncio.to_thread(ingested, corpus)
        with model_process(deltas=size.short_chunks, interval=0.0) as model:
            settings = {
                "llm_base_url": model.base_url,
                "llm_api_key": "bench",
                "llm_model": MODEL_NAME,
                "llm_tool_calling": "streamed",
                "llm_context_tokens": "16384",
            }
            for store in size.stores:
                if store == "postgres" and (reason := await postgres_unreachable()):
                    results["stores"][store] = {"skipped": reason}
                    print(f"  PostgreSQL skipped: {reason}")
                    continue
                print(f"-- sessions on {store}")
                async with database(store) as own:
                    figures, chunks = await one_store(
                        prepared=prepared,
                        folder=Path(tmp) / store,
                        settings=settings,
                        own=own,
                        model=model,
                        size=size,
                        phases=phases,
                        against=other,
                    )
                results["corpus"] = f"{corpus.name} ({chunks} chunks)"
                results["stores"][store] = {
                    "figures": [asdict(f) | {"verdict": f.verdict} for f in figures]
                }
    results.setdefault("corpus", corpus.name)
    print_table(results)
    if json_path is not None:
        await asyncio.to_thread(json_path.write_text, json.dumps(results, indent=2) + "\n")
        print(f"written to {json_path}")
    return results


async def main(
    *,
    full: bool = False,
    json_path: Path | None = None,
    phases: frozenset[str] = PHASES,
    against: str | None = None,
) -> None:
    if not BOOK.is_dir():
        print(f"skipped: the textbook is absent ({BOOK}); the overhead figures are at book size")
        return
    size, mode = (FULL, "full") if full else (QUICK, "quick")
    await run(size, BOOK, mode, json_path, phases=phases, against=against)
