"""The embedded store at 1k, 10k and 100k chunks: qdrant-edge against the old local mode.

Synthetic chunks (clustered 384-dimensional vectors, like a text embedder's, and short
texts) go through each store's API: ``replace_document`` in documents of 10 chunks, then
the search pipeline's ``search_vector`` (the query already embedded), the two stores' queries
interleaved one by one so that both see the same machine load. Baselines, measured in the
same run: qdrant-client's local mode (the previous embedded store) searching in memory (its
on-disk mode searches the same way), and writing on disk for the storage cost. The query
embedding is timed apart and reported beside the search (it is the same for both stores).
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
import uuid
from dataclasses import asdict
from pathlib import Path

import numpy as np
from qdrant_client import AsyncQdrantClient, models

from service.config.retrieval import StoreSettings
from service.domain import Chunk
from service.executor import BlockingExecutor
from service.retrieval.edge_store import EdgeStore
from service.retrieval.pipeline import SearchPipeline, SearchSteps
from service.retrieval.qdrant_payload import DENSE
from service.retrieval.qdrant_store import QdrantStore
from tests.bench.common import report, summary

DIM = 384
SIZES = (1_000, 10_000, 100_000)
QUERIES = 30
PER_DOCUMENT = 10
OLD_DISK_CHUNKS = 200
DEFAULT_PIECE_WEIGHT = StoreSettings.model_fields["piece_weight"].default


class FixedEmbedder:
    """Only its identity is used: vectors are given to the stores ready-made."""

    model_name = "synthetic"
    dimension = DIM
    max_tokens = 256

    def count_tokens(self, text: str) -> int:
        return len(text.split())

    async def embed_documents(self, texts: object, *, deadline: object = None) -> list[list[float]]:
        raise NotImplementedError

    async def embed_query(self, text: str, *, deadline: object = None) -> list[float]:
        raise NotImplementedError


class Synthetic:
    def __init__(self, seed: int = 7) -> None:
        self._rng = np.random.default_rng(seed)
        self._centres = self._rng.standard_normal((200, DIM))

    def vectors(self, n: int) -> np.ndarray:
        picked = self._centres[self._rng.integers(0, len(self._centres), n)]
        v = picked + 0.7 * self._rng.standard_normal((n, DIM))
        return v / np.linalg.norm(v, axis=1, keepdims=True)

    def documents(self, n: int) -> list[tuple[str, list[Chunk], list[list[float]]]]:
        vectors = self.vectors(n).tolist()
        docs = []
        for start in range(0, n, PER_DOCUMENT):
            doc = f"doc-{start // PER_DOCUMENT:06d}"
            chunks = [
                Chunk(
                    chunk_id=str(uuid.uuid5(uuid.NAMESPACE_URL, f"{doc}#{i}")),
                    document_id=doc,
                    text=f"synthetic passage {i} of {doc} about robots sensors and actuators",
                    url=f"https://book.example/{doc}/",
                    module=f"module-{start % 7}",
                    position=i - start,
                    document_hash="h",
                    chunk_count=min(PER_DOCUMENT, n - start),
                )
                for i in range(start, min(n, start + PER_DOCUMENT))
            ]
            docs.append((doc, chunks, vectors[start : start + len(chunks)]))
        return docs


async def ingest(
    store: EdgeStore | QdrantStore, docs: list[tuple[str, list[Chunk], list[list[float]]]]
) -> float:
    """Seconds per chunk written."""
    started = time.perf_counter()
    for doc, chunks, vectors in docs:
        await store.replace_document(doc, chunks, vectors)
    return (time.perf_counter() - started) / sum(len(c) for _, c, _ in docs)


async def bulk_load(
    client: AsyncQdrantClient, docs: list[tuple[str, list[Chunk], list[list[float]]]]
) -> None:
    """Fills the baseline at once: its replace_document scans every point to count a
    document's stale chunks, quadratic over a whole ingest (its writes are timed on disk)."""
    points = [
        models.PointStruct(id=c.chunk_id, vector={DENSE: v}, payload=asdict(c))
        for _, chunks, vectors in docs
        for c, v in zip(chunks, vectors, strict=True)
    ]
    for start in range(0, len(points), 1024):
        await client.upsert("bench", points=points[start : start + 1024], wait=True)


async def interleaved(
    edge: EdgeStore, old: QdrantStore, queries: list[list[float]]
) -> tuple[list[float], list[float]]:
    edge_s, old_s = [], []
    # As served by default: scored by pieces too, so 20 candidates are read per search
    # (synthetic chunks carry no piece vectors; scoring them is timed by bench_retrieve).
    steps = SearchSteps(piece_weight=DEFAULT_PIECE_WEIGHT)
    searches = (
        (SearchPipeline(edge, edge.embedder, steps), edge_s),
        (SearchPipeline(old, old.embedder, steps), old_s),
    )
    for vector in [queries[0], *queries]:  # the first one warms both up, and is dropped
        for pipeline, samples in searches:
            started = time.perf_counter()
            await pipeline.search_vector(vector, query="", limit=5, threshold=0.0)
            samples.append(time.perf_counter() - started)
    return edge_s[1:], old_s[1:]


async def embedding_p50() -> str:
    try:
        from tests.helpers import local_embedder

        embedder = local_embedder()
    except BaseException:  # pytest.skip where the model is not provisioned
        return "embedding not measured (model not provisioned)"
    samples = []
    for i in range(21):
        started = time.perf_counter()
        await embedder.embed_query(f"How do ROS 2 nodes exchange messages, take {i}?")
        samples.append(time.perf_counter() - started)
    p50 = statistics.median(samples[1:]) * 1000
    return f"query embedding beside it (same for both stores): p50 {p50:.2f} ms"


async def one_size(n: int, tmp: Path, executor: BlockingExecutor) -> float:
    synthetic = Synthetic()
    docs = synthetic.documents(n)
    queries = synthetic.vectors(QUERIES).tolist()
    embedder = FixedEmbedder()
    edge = await EdgeStore.open(
        tmp / f"edge-{n}",
        embedder,  # type: ignore[arg-type]
        collection="bench",
        executor=executor,
    )
    edge.optimizer.after_points = 10**12  # indexed below, timed
    client = AsyncQdrantClient(location=":memory:")
    old = QdrantStore(
        client,
        embedder,  # type: ignore[arg-type]
        collection="bench",
        payload_indexes=False,
        executor=executor,
    )
    await old.ensure_collection()
    try:
        per_chunk = await ingest(edge, docs)
        started = time.perf_counter()
        await edge.optimize()
        indexing = time.perf_counter() - started
        await bulk_load(client, docs)
        edge_s, old_s = await interleaved(edge, old, queries)
    finally:
        await edge.close()
        await old.close()
    ratio = statistics.median(edge_s) / statistics.median(old_s)
    report(
        f"search at {n:,} chunks (embedding excluded)",
        f"qdrant-edge: {summary(edge_s)}",
        f"old local mode: {summary(old_s)}",
        ratio,
        "target: edge p50 <= 5 ms at 100k",
    )
    print(
        f"  ingest:   {1 / per_chunk:,.0f} chunks/s ({per_chunk * 1000:.3f} ms per chunk, "
        f"embedding excluded); HNSW index built after in {indexing:.1f} s"
    )
    return per_chunk


async def old_disk_cost(tmp: Path, executor: BlockingExecutor) -> float:
    docs = Synthetic(seed=3).documents(OLD_DISK_CHUNKS)
    old = QdrantStore(
        AsyncQdrantClient(path=str(tmp / "old-disk")),
        FixedEmbedder(),  # type: ignore[arg-type]
        collection="bench",
        payload_indexes=False,
        executor=executor,
    )
    await old.ensure_collection()
    try:
        return await ingest(old, docs)
    finally:
        await old.close()


async def main(sizes: tuple[int, ...] = SIZES) -> None:
    executor = BlockingExecutor(2)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            print(f"{QUERIES} queries per size, interleaved; {await embedding_p50()}")
            costs = {n: await one_size(n, Path(tmp), executor) for n in sizes}
            old_cost = await old_disk_cost(Path(tmp), executor)
    finally:
        await executor.shutdown()
    edge_cost = costs[max(costs)]
    report(
        "storage cost per chunk (embedding excluded)",
        f"qdrant-edge at {max(costs):,} chunks: {edge_cost * 1000:.3f} ms",
        f"old local mode on disk ({OLD_DISK_CHUNKS} chunks): {old_cost * 1000:.2f} ms",
        edge_cost / old_cost,
        "target: edge <= 0.5 ms per chunk",
    )


if __name__ == "__main__":
    asyncio.run(main())
