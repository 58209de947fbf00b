"""What document permissions cost a search: the engine's query (``nearest``, the query
already embedded) with no permission filter (an admin, or no authentication) against a
caller in 3 groups, at the book's size (336 chunks) and at 10k chunks; ``--full``
(BENCH_MODE=full) adds 100k.

Synthetic chunks (bench_scale's clustered 384-dimensional vectors) in documents of 10, each
document labelled for one of 10 groups, so that 3 groups read ~30% of the corpus; and a
caller in one rare group (1% of the documents), where the engine's keyword index, not the
HNSW graph, finds the candidates. The queries alternate between the filters one by one so
that each sees the same machine load. ``python -m tests.bench access [--full]``.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from service.access import ReadAccess, labels
from service.domain import Chunk, SearchFilters
from service.executor import BlockingExecutor
from service.retrieval.edge_store import EdgeStore
from tests.bench.bench_scale import FixedEmbedder, Synthetic
from tests.bench.common import summary

BOOK_CHUNKS = 336
QUERIES = 40
GROUPS = 10
RARE = "rare"  # one document in a hundred
THREE = SearchFilters(access=ReadAccess.of("bench", ["g0", "g1", "g2"]))
ONE_RARE = SearchFilters(access=ReadAccess.of("bench", [RARE]))


def _labelled(
    docs: list[tuple[str, list[Chunk], list[list[float]]]],
) -> list[tuple[str, list[Chunk], list[list[float]]]]:
    out = []
    for index, (doc, chunks, vectors) in enumerate(docs):
        group = RARE if index % 100 == 99 else f"g{index % GROUPS}"
        tagged = [replace(c, access=labels([group])) for c in chunks]
        out.append((doc, tagged, vectors))
    return out


async def one_size(n: int, tmp: Path, executor: BlockingExecutor) -> dict[str, float]:
    synthetic = Synthetic()
    docs = _labelled(synthetic.documents(n))
    queries = synthetic.vectors(QUERIES).tolist()
    store = await EdgeStore.open(
        tmp / f"edge-{n}",
        FixedEmbedder(),
        collection="bench",
        executor=executor,
    )
    store.optimizer.after_points = 10**12
    try:
        for doc, chunks, vectors in docs:
            await store.replace_document(doc, chunks, vectors)
        await store.optimize()
        samples = await _interleaved(store, queries)
        found = await store.nearest(
            queries[0], limit=5, filters=THREE, score_threshold=None, deadline=None
        )
        readable = {"g:g0", "g:g1", "g:g2"}
        if len(found) != 5 or not all(set(h.payload.get("access", ())) & readable for h in found):
            raise RuntimeError("the filtered search did not return 5 readable chunks")
    finally:
        await store.close()
    none, three, rare = (statistics.median(s) * 1000 for s in samples)
    print(f"search at {n:,} chunks (embedding excluded)")
    print(f"  no permission filter: {summary(samples[0])}")
    print(f"  3 groups (~30%):      {summary(samples[1])}  ({three / none:.2f}x)")
    print(f"  1 rare group (1%):    {summary(samples[2])}  ({rare / none:.2f}x)")
    return {"none": none, "three": three, "rare": rare}


async def _interleaved(
    store: EdgeStore, queries: Sequence[list[float]]
) -> tuple[list[float], list[float], list[float]]:
    out: tuple[list[float], list[float], list[float]] = ([], [], [])
    for vector in [queries[0], *queries]:  # the first warms up and is dropped below
        for filters, samples in zip((None, THREE, ONE_RARE), out, strict=True):
            started = time.perf_counter()
            await store.nearest(
                vector, limit=5, filters=filters, score_threshold=None, deadline=None
            )
            samples.append(time.perf_counter() - started)
    return out[0][1:], out[1][1:], out[2][1:]


async def main(*, full: bool = False) -> dict[int, dict[str, float]]:
    sizes = (BOOK_CHUNKS, 10_000, 100_000) if full else (BOOK_CHUNKS, 10_000)
    executor = BlockingExecutor(2)
    results = {}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for n in sizes:
                results[n] = await one_size(n, Path(tmp), executor)
    finally:
        await executor.shutdown()
    return results
