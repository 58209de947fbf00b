"""Concurrent query embeddings: batched as the embedder does now, against one call each.

200 distinct questions are embedded at once through the local model on a pool of the
runtime's default size, as 200 streams starting together embed theirs. Baseline: each
question in a model call of its own (what ``embed_query`` did before
``service.retrieval.query_batches``). Rounds alternate between the two; the figures are the
process's CPU seconds and the wall clock of the whole burst, and each query's own latency.
"""

from __future__ import annotations

import asyncio
import resource
import statistics
import time
from collections.abc import Awaitable, Callable

from service.config import Settings
from service.executor import BlockingExecutor
from service.runtime import build_local_embedder
from tests.bench.common import report
from tests.bench.overhead_load import QUESTIONS

BURST = 200
ROUNDS = 5


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def _burst(
    embed: Callable[[str], Awaitable[object]], queries: list[str]
) -> tuple[float, float, list[float]]:
    """(wall s, CPU s, per-query latencies) of ``queries`` embedded all at once."""
    latencies: list[float] = []

    async def one(query: str) -> None:
        started = time.perf_counter()
        await embed(query)
        latencies.append(time.perf_counter() - started)

    cpu, started = _cpu(), time.perf_counter()
    await asyncio.gather(*(one(q) for q in queries))
    return time.perf_counter() - started, _cpu() - cpu, sorted(latencies)


async def main() -> None:
    settings = Settings(log_level="WARNING")
    executor = BlockingExecutor(settings.blocking_threads)
    embedder = build_local_embedder(settings, executor)  # the runtime's embedder, as built
    queries = [f"{QUESTIONS[i % len(QUESTIONS)]} ({i})" for i in range(BURST)]
    sides: dict[str, Callable[[str], Awaitable[object]]] = {
        "batched": embedder.embed_query,
        "alone": lambda q: embedder.embed_documents([q]),
    }
    figures: dict[str, list[tuple[float, float, list[float]]]] = {name: [] for name in sides}
    try:
        await embedder.embed_documents(queries[:8])  # warm-up
        for _ in range(ROUNDS):
            for name, embed in sides.items():
                figures[name].append(await _burst(embed, queries))
    finally:
        await executor.shutdown()

    def median(name: str, pick: Callable[[tuple[float, float, list[float]]], float]) -> float:
        return statistics.median(pick(f) for f in figures[name])

    def p99(f: tuple[float, float, list[float]]) -> float:
        return f[2][int(len(f[2]) * 0.99) - 1]

    threads = f"{settings.blocking_threads} pool threads, {ROUNDS} rounds, medians"
    print(f"== {BURST} query embeddings at once ({threads})")
    for label, pick, unit in (
        ("CPU", lambda f: f[1], "s"),
        ("wall clock", lambda f: f[0], "s"),
        ("query latency p99", p99, "s"),
    ):
        mine, base = median("batched", pick), median("alone", pick)
        report(
            f"{label} of the burst",
            f"{mine:.3f} {unit} batched",
            f"{base:.3f} {unit} one model call per query",
            mine / base,
            "lower is better; the batched side must not be slower",
        )
