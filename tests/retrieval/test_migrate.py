"""A data dir of the old embedded format (qdrant-client's local mode) moves to qdrant-edge on
the first start, with nothing lost: every chunk, its vector and payload, the completeness of
each document, and the old folder itself (renamed, not deleted)."""

from __future__ import annotations

import os
from contextlib import AsyncExitStack
from pathlib import Path

import pytest
from qdrant_client import AsyncQdrantClient

from service.config import Settings
from service.errors import StoreMismatch
from service.executor import BlockingExecutor
from service.retrieval.edge_migrate import migrate_local, old_store_holds
from service.retrieval.edge_store import EdgeStore
from service.retrieval.qdrant_store import QdrantStore
from service.runtime import open_store
from tests.retrieval.test_store_contract import GAZEBO, ROBOTS, WordsEmbedder, chunk, put

# A document half-written by an interrupted ingest: two chunks of three.
PARTIAL = [chunk("ros-launch", i, f"launch files start nodes part {i}", count=3) for i in (0, 1)]


async def make_old_store(path: Path, embedder: WordsEmbedder, *, extra: int = 0) -> None:
    store = QdrantStore(
        AsyncQdrantClient(path=str(path)), embedder, collection="docs", payload_indexes=False
    )
    await store.ensure_collection()
    for chunks in (ROBOTS, GAZEBO, PARTIAL):
        await put(store, chunks)
    for i in range(extra):  # more than a page, to migrate in several
        await put(store, [chunk(f"bulk-{i:04d}", 0, f"bulk text number {i}")])
    await store.close()


async def test_first_start_migrates_everything_and_keeps_the_old_folder(tmp_path: Path) -> None:
    embedder = WordsEmbedder()
    settings = Settings(data_dir=tmp_path, qdrant_collection="docs")
    await make_old_store(settings.qdrant_path, embedder, extra=520)
    before = QdrantStore(
        AsyncQdrantClient(path=str(settings.qdrant_path)), embedder, collection="docs"
    )
    await before.ensure_collection()
    expected_hits = await before.search("gazebo physics robots", limit=5, threshold=0)
    expected_docs = await before.list_documents(after="", limit=1000)
    await before.close()

    executor = BlockingExecutor(2)
    async with AsyncExitStack() as stack:
        stack.push_async_callback(executor.shutdown)
        store = await open_store(settings, embedder, executor, stack)
        assert isinstance(store, EdgeStore)
        assert await store.count_chunk_points() == 2 + 1 + 2 + 520
        # The incomplete document is copied but not reported whole, as before.
        assert await store.count() == (522, 523)
        hashes = await store.document_hashes()
        assert "ros-launch" not in hashes
        assert hashes["ros-nodes"] == "v1"
        listed = await store.list_documents(after="", limit=1000)
        assert [(d.document_id, d.chunk_count, d.url, d.title) for d in listed] == [
            (d.document_id, d.chunk_count, d.url, d.title)
            for d in expected_docs
            if d.document_id != "ros-launch"
        ]
        hits = await store.search("gazebo physics robots", limit=5, threshold=0)
        # Equal scores may come in another order; the chunks and scores are the same.
        assert hits[0].chunk == expected_hits[0].chunk
        assert [round(h.score, 4) for h in hits] == [round(h.score, 4) for h in expected_hits]
    assert not old_store_holds(settings.qdrant_path, "docs")
    kept = tmp_path / "qdrant.migrated"
    assert (kept / "collection" / "docs").is_dir()

    # A second start finds nothing to migrate and the same data.
    executor = BlockingExecutor(1)
    async with AsyncExitStack() as stack:
        stack.push_async_callback(executor.shutdown)
        store = await open_store(settings, embedder, executor, stack)
        assert await store.count() == (522, 523)


async def test_progress_is_reported_page_by_page(tmp_path: Path) -> None:
    embedder = WordsEmbedder()
    await make_old_store(tmp_path / "qdrant", embedder, extra=520)
    executor = BlockingExecutor(1)
    seen: list[tuple[int, int]] = []
    store = await EdgeStore.open(tmp_path / "edge", embedder, collection="docs", executor=executor)
    result = await migrate_local(
        tmp_path / "qdrant", store, executor=executor, progress=lambda *a: seen.append(a)
    )
    await store.close()
    await executor.shutdown()
    assert seen == [(512, 525), (525, 525)]
    assert (result.chunks, result.documents) == (525, 522)


async def test_an_old_store_of_another_embedder_is_refused_and_kept(tmp_path: Path) -> None:
    await make_old_store(tmp_path / "qdrant", WordsEmbedder(model_name="other-model"))
    executor = BlockingExecutor(1)
    store = await EdgeStore.open(
        tmp_path / "edge", WordsEmbedder(), collection="docs", executor=executor
    )
    try:
        with pytest.raises(StoreMismatch, match="other-model"):
            await migrate_local(tmp_path / "qdrant", store, executor=executor)
    finally:
        await store.close()
        await executor.shutdown()
    assert old_store_holds(tmp_path / "qdrant", "docs")


def test_ragagent_migrate_shows_progress_and_keeps_the_old_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import asyncio

    from service.cli import main
    from tests.helpers import local_embedder

    real = local_embedder()  # skips where the model is not provisioned
    like_real = WordsEmbedder(model_name=real.model_name, dimension=real.dimension)
    asyncio.run(make_old_store(tmp_path / "qdrant", like_real))
    for name in [k for k in os.environ if k.startswith("RAGAGENT_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("RAGAGENT_QDRANT_COLLECTION", "docs")
    assert main(["migrate", "--data-dir", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert "migrating: 5/5 chunks" in err
    assert "migrated 5 chunks of 2 complete documents" in out
    assert (tmp_path / "qdrant.migrated").is_dir()
    assert main(["migrate", "--data-dir", str(tmp_path)]) == 0
    assert "already migrated" in capsys.readouterr().out
