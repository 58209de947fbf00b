"""One contract for both ChunkStores: the embedded engine (qdrant-edge) and the server path
(QdrantStore on qdrant-client, run here against its local mode since no Qdrant server can
be installed). Each test runs once per store and expects the same behaviour."""

from __future__ import annotations

import asyncio
import hashlib
import math
import re
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from qdrant_client import AsyncQdrantClient

from service.domain import Chunk, Deadline, SearchFilters
from service.errors import DeadlineExceeded, StoreLocked, StoreMismatch
from service.executor import BlockingExecutor
from service.retrieval.base import ChunkStore
from service.retrieval.edge_store import EdgeStore
from service.retrieval.pipeline import SearchPipeline, SearchSteps
from service.retrieval.qdrant_store import QdrantStore

DIM = 64


class WordsEmbedder:
    """Bag-of-words vectors over hashed words: texts sharing words are near, as with a model."""

    def __init__(self, model_name: str = "words", dimension: int = DIM) -> None:
        self._model_name = model_name
        self._dimension = dimension

    @property
    def model_name(self) -> str:
        return self._model_name

    @property
    def dimension(self) -> int:
        return self._dimension

    @property
    def max_tokens(self) -> int:
        return 512

    def count_tokens(self, text: str) -> int:
        return len(text.split())

    def vector(self, text: str) -> list[float]:
        v = [0.0] * self._dimension
        for word in re.findall(r"[a-z0-9]+", text.lower()):
            v[int(hashlib.sha256(word.encode()).hexdigest(), 16) % self._dimension] += 1.0
        norm = math.sqrt(sum(x * x for x in v)) or 1.0
        return [x / norm for x in v]

    async def embed_documents(
        self, texts: Sequence[str], *, deadline: Deadline | None = None
    ) -> list[list[float]]:
        return [self.vector(t) for t in texts]

    async def embed_query(self, text: str, *, deadline: Deadline | None = None) -> list[float]:
        return self.vector(text)


def chunk(doc: str, position: int, text: str, *, version: str = "v1", count: int = 1) -> Chunk:
    return Chunk(
        chunk_id=str(uuid.uuid5(uuid.NAMESPACE_URL, f"{doc}#{position}")),
        document_id=doc,
        text=text,
        url=f"https://book.example/{doc.replace('-', '/')}/",
        title=doc.title(),
        module=doc.split("-", maxsplit=1)[0],
        chapter=doc,
        position=position,
        document_hash=version,
        chunk_count=count,
        created_at="2026-01-02T03:04:05+00:00",
    )


async def open_store(
    kind: str, root: Path, embedder: WordsEmbedder, executor: BlockingExecutor
) -> EdgeStore | QdrantStore:
    if kind == "edge":
        return await EdgeStore.open(root / "edge", embedder, collection="docs", executor=executor)
    client = AsyncQdrantClient(path=str(root / "qdrant"))
    store = QdrantStore(client, embedder, collection="docs", payload_indexes=False, hybrid=True)
    await store.ensure_collection()
    return store


@pytest.fixture(params=["edge", "server"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[ChunkStore]:
    executor = BlockingExecutor(2)
    opened: ChunkStore = await open_store(request.param, tmp_path, WordsEmbedder(), executor)
    yield opened
    await opened.close()
    await executor.shutdown()


async def put(store: ChunkStore, chunks: Sequence[Chunk]) -> int:
    vectors = await store.embedder.embed_documents([c.text for c in chunks])
    return await store.replace_document(chunks[0].document_id, chunks, vectors)


ROBOTS = [
    chunk("ros-nodes", 0, "ROS nodes publish messages on topics", count=2),
    chunk("ros-nodes", 1, "a subscriber node receives the topic messages", count=2),
]
GAZEBO = [chunk("sim-gazebo", 0, "Gazebo simulates robots with physics engines")]


async def test_search_ranks_by_similarity_and_reports_scores_in_0_1(store: ChunkStore) -> None:
    await put(store, ROBOTS)
    await put(store, GAZEBO)
    hits = await store.search("gazebo physics simulates robots", limit=3, threshold=0.0)
    assert hits[0].chunk.document_id == "sim-gazebo"
    assert hits[0].chunk.text == GAZEBO[0].text
    assert hits[0].chunk.url == GAZEBO[0].url
    assert all(0.0 <= h.score <= 1.0 for h in hits)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert await store.search("gazebo physics", limit=3, threshold=0.99) == []


async def test_filters_by_module_chapter_and_url_prefix(store: ChunkStore) -> None:
    await put(store, ROBOTS)
    await put(store, GAZEBO)
    query = "robots nodes topics physics"
    by_module = await store.search(query, limit=5, threshold=0, filters=SearchFilters(module="sim"))
    assert {h.chunk.document_id for h in by_module} == {"sim-gazebo"}
    chapter = SearchFilters(chapter="ros-nodes")
    by_chapter = await store.search(query, limit=5, threshold=0, filters=chapter)
    assert {h.chunk.document_id for h in by_chapter} == {"ros-nodes"}
    for prefix in ("https://book.example/ros/", "https://book.example/ro"):
        hits = await store.search(
            query, limit=5, threshold=0, filters=SearchFilters(url_prefix=prefix)
        )
        assert {h.chunk.document_id for h in hits} == {"ros-nodes"}, prefix


async def test_documents_listed_counted_and_hashed_from_their_records(store: ChunkStore) -> None:
    await put(store, ROBOTS)
    await put(store, GAZEBO)
    assert await store.count() == (2, 3)
    assert await store.document_hashes() == {"ros-nodes": "v1", "sim-gazebo": "v1"}
    listed = await store.list_documents(after="", limit=10)
    assert [(d.document_id, d.chunk_count, d.module) for d in listed] == [
        ("ros-nodes", 2, "ros"),
        ("sim-gazebo", 1, "sim"),
    ]
    assert listed[0].url == ROBOTS[0].url
    assert listed[0].ingested_at is not None
    assert [d.document_id for d in await store.list_documents(after="ros-nodes", limit=10)] == [
        "sim-gazebo"
    ]
    assert len(await store.list_documents(after="", limit=1)) == 1


async def test_replacing_a_document_removes_its_stale_chunks(store: ChunkStore) -> None:
    await put(store, ROBOTS)
    newer = [chunk("ros-nodes", 0, "ROS 2 nodes use DDS", version="v2")]
    assert await put(store, newer) == 1
    assert await store.count() == (1, 1)
    assert await store.document_hashes() == {"ros-nodes": "v2"}
    hits = await store.search("subscriber receives topic messages", limit=5, threshold=0)
    assert [h.chunk.text for h in hits] == ["ROS 2 nodes use DDS"]


async def test_deleting_a_document(store: ChunkStore) -> None:
    await put(store, ROBOTS)
    await put(store, GAZEBO)
    assert await store.delete_document("ros-nodes") == 2
    assert await store.delete_document("ros-nodes") == 0
    assert await store.count() == (1, 1)
    assert await store.document_hashes() == {"sim-gazebo": "v1"}


async def test_a_spent_deadline_fails_before_calling(store: ChunkStore) -> None:
    with pytest.raises(DeadlineExceeded):
        await store.count(deadline=Deadline.after(0))


async def test_a_store_built_for_another_embedder_is_refused(tmp_path: Path) -> None:
    for kind in ("edge", "server"):
        executor = BlockingExecutor(1)
        first = await open_store(kind, tmp_path, WordsEmbedder(), executor)
        await first.close()
        with pytest.raises(StoreMismatch, match="vector size 64 != embedder's 32"):
            await open_store(kind, tmp_path, WordsEmbedder(dimension=32), executor)
        await executor.shutdown()


async def test_the_embedded_store_is_one_process_at_a_time(tmp_path: Path) -> None:
    executor = BlockingExecutor(1)
    first = await open_store("edge", tmp_path, WordsEmbedder(), executor)
    try:
        with pytest.raises(StoreLocked, match="open in another process"):
            await open_store("edge", tmp_path, WordsEmbedder(), executor)
    finally:
        await first.close()
    reopened = await open_store("edge", tmp_path, WordsEmbedder(), executor)
    assert await reopened.count() == (0, 0)
    await reopened.close()
    await executor.shutdown()


async def test_the_embedded_store_indexes_once_writes_go_quiet(tmp_path: Path) -> None:
    executor = BlockingExecutor(1)
    store = await EdgeStore.open(tmp_path, WordsEmbedder(), collection="d", executor=executor)
    store.optimizer.after_points, store.optimizer.quiet_s = 2, 0.2
    runs: list[float] = []
    real = store.optimize

    async def counted() -> None:
        runs.append(asyncio.get_running_loop().time())
        await real()

    store.optimizer.optimize = counted
    try:
        for _ in range(3):  # writes closer together than the quiet time: one run after them
            await put(store, ROBOTS)
            await asyncio.sleep(0.05)
        assert runs == []
        await asyncio.sleep(0.5)
        assert len(runs) == 1
        hits = await store.search("subscriber node", limit=1, threshold=0)
        assert hits[0].chunk.document_id == "ros-nodes"
    finally:
        await store.close()
        await executor.shutdown()


async def test_hybrid_fuses_by_rank_and_keeps_cosine_scores(store: ChunkStore) -> None:
    assert isinstance(store, EdgeStore | QdrantStore)
    await put(store, ROBOTS)
    await put(store, GAZEBO)
    query = "gazebo physics engines"
    dense = await store.search(query, limit=3, threshold=0.0)
    fusing = SearchPipeline(store, store.embedder, SearchSteps(hybrid=True))
    hybrid = await fusing.search(query, limit=3, threshold=0.0)
    assert hybrid[0].chunk == dense[0].chunk
    # Scores are each hit's cosine, whatever the fused order.
    by_text = {h.chunk.text: h.score for h in dense}
    for hit in hybrid:
        assert hit.score == pytest.approx(by_text[hit.chunk.text], abs=1e-4)
    assert await fusing.search(query, limit=3, threshold=0.99) == []
    ros_only = SearchFilters(module="ros")
    filtered = await fusing.search(query, limit=3, threshold=0.0, filters=ros_only)
    assert {h.chunk.document_id for h in filtered} <= {"ros-nodes"}


def with_pieces(embedder: WordsEmbedder, item: Chunk, pieces: Sequence[str]) -> Chunk:
    """The chunk with its pieces' vectors stored, as ingestion stores them."""
    matrix = np.asarray([embedder.vector(p) for p in pieces], dtype=np.float32)
    return replace(item, piece_vectors=matrix.tolist())


FACT = "the depth camera streams ninety frames each second"
MIXED = with_pieces(
    WordsEmbedder(),
    chunk(
        "sim-sensors", 0,
        "Gazebo simulates robots with physics engines, joints, friction, gravity and "
        f"collisions of every link. Meanwhile {FACT}.",
    ),
    ["Gazebo simulates robots with physics engines, joints, friction, gravity and "
     "collisions of every link.", f"Meanwhile {FACT}."],
)  # fmt: skip
CAMERAS = [chunk("cameras", 0, "a depth camera and a colour camera on the robot head")]


async def test_a_chunk_is_also_scored_by_its_best_piece(store: ChunkStore) -> None:
    assert isinstance(store, EdgeStore | QdrantStore)
    embedder = WordsEmbedder()
    await put(store, [MIXED])
    await put(store, CAMERAS)
    query = "how many frames each second does the depth camera stream"
    whole = dot(embedder.vector(query), embedder.vector(MIXED.text))
    best = dot(embedder.vector(query), embedder.vector(f"Meanwhile {FACT}."))
    # The fact is diluted in its chunk: by chunk vectors alone the other page comes first.
    assert whole < dot(embedder.vector(query), embedder.vector(CAMERAS[0].text)) < 0.9 * best
    plain = await store.search(query, limit=2, threshold=0.0)
    assert [h.chunk.document_id for h in plain] == ["cameras", "sim-sensors"]
    pieces = SearchPipeline(store, embedder, SearchSteps(piece_weight=0.9))
    scored = await pieces.search(query, limit=2, threshold=0.0, with_pieces=True)
    assert [h.chunk.document_id for h in scored] == ["sim-sensors", "cameras"]
    assert scored[0].score == pytest.approx(0.9 * best, abs=1e-3)  # float16 pieces
    # Asked for, the engine gives the chunk's piece vectors with it, row by row (the
    # extractive strategy quotes by them); a chunk stored without pieces has none.
    stored = np.asarray(scored[0].chunk.piece_vectors)
    assert stored.shape == (2, embedder.dimension)
    assert float(stored[1] @ embedder.vector(f"Meanwhile {FACT}.")) == pytest.approx(1, abs=1e-3)
    assert len(scored[1].chunk.piece_vectors) == 0
    # A threshold above the chunk's own cosine: its piece still carries it through.
    assert whole < 0.9 * best - 0.05
    above = await pieces.search(query, limit=2, threshold=whole + 0.05)
    assert above[0].chunk.document_id == "sim-sensors"
    # Hybrid keeps the fusion's order and the cosine scores (pieces not used).
    fusing = SearchPipeline(store, embedder, SearchSteps(hybrid=True, piece_weight=0.9))
    fused = await fusing.search(query, limit=2, threshold=0.0)
    assert {h.chunk.document_id: h.score for h in fused}["sim-sensors"] == pytest.approx(
        whole, abs=1e-4
    )


def dot(a: Sequence[float], b: Sequence[float]) -> float:
    return float(np.dot(a, b))


async def test_a_search_that_does_not_quote_gets_no_piece_vectors(store: ChunkStore) -> None:
    """Piece rows cost a search about 2.5 ms in-process and about 30 kB a hit from a server:
    only a caller that quotes by them asks (the extractive strategy); for the others the
    pieces still score the chunks, in the engine."""
    embedder = WordsEmbedder()
    await put(store, [MIXED])
    await put(store, CAMERAS)
    pieces = SearchPipeline(store, embedder, SearchSteps(piece_weight=0.9))
    query = "how many frames each second does the depth camera stream"
    scored = await pieces.search(query, limit=2, threshold=0.0)
    assert [h.chunk.document_id for h in scored] == ["sim-sensors", "cameras"]
    assert [len(h.chunk.piece_vectors) for h in scored] == [0, 0]
