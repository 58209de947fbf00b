"""Moves a data dir of the old embedded format (qdrant-client's local mode) to qdrant-edge.

Run on the first start that finds the old folder (``RAGAGENT_DATA_DIR/qdrant``) holding the
collection, or by ``ragagent migrate``. Every point is copied with its vector and payload;
documents whose chunks are complete get their record (see :mod:`edge_store`), incomplete
ones are copied without one, as before (the next ingest writes them again). Only once the
new shard holds as many chunks as the old folder is the old folder renamed, never deleted,
to ``qdrant.migrated``: an interrupted migration simply runs again (writes are upserts).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import qdrant_edge as qe
from qdrant_client import QdrantClient, models

from service.domain import Chunk
from service.executor import Blocking
from service.observability.logging import get_logger
from service.retrieval.edge_payload import document_record, record_id
from service.retrieval.edge_store import EdgeStore
from service.retrieval.qdrant_calls import check_fits
from service.retrieval.qdrant_payload import chunk_from_payload, complete_documents

log = get_logger("ragagent.migrate")

_PAGE = 512
Progress = Callable[[int, int], None]


@dataclass(frozen=True, slots=True)
class Migrated:
    chunks: int
    documents: int
    kept_at: Path


def old_store_holds(path: Path, collection: str) -> bool:
    """Whether ``path`` is an old local-mode folder with ``collection`` in it (cheap: no
    point is read)."""
    return (path / "meta.json").is_file() and (path / "collection" / collection).is_dir()


def migrated_path(path: Path) -> Path:
    return path.with_name(path.name + ".migrated")


async def migrate_local(
    old: Path,
    store: EdgeStore,
    *,
    executor: Blocking,
    progress: Progress | None = None,
) -> Migrated:
    """Copies ``store.collection`` from the local-mode folder ``old`` into ``store``."""
    client: QdrantClient = await executor.run(QdrantClient, path=str(old))
    try:
        return await _copy(client, old, store, executor=executor, progress=progress)
    finally:
        await executor.run(client.close)


async def _copy(
    client: QdrantClient,
    old: Path,
    store: EdgeStore,
    *,
    executor: Blocking,
    progress: Progress | None,
) -> Migrated:
    name = store.collection
    info = await executor.run(client.get_collection, name)
    # The old vectors are copied as they are: they must be the configured embedder's.
    check_fits(info, name, dimension=store.embedder.dimension, model_name=store.embedder.model_name)
    total = (await executor.run(client.count, name, exact=True)).count
    log.info("migrating the embedded store to qdrant-edge", source=str(old), chunks=total)
    copied = 0
    every: list[models.Record] = []
    offset: Any = None
    while True:
        page, offset = await executor.run(
            partial(
                client.scroll,
                name,
                limit=_PAGE,
                offset=offset,
                with_payload=True,
                with_vectors=True,
            )
        )
        chunks = [chunk_from_payload(r.payload or {}) for r in page]
        vectors = [_dense(r) for r in page]
        await store.write_points(store.chunk_points(chunks, vectors), deadline=None)
        every.extend(models.Record(id=r.id, payload=_ids_only(r)) for r in page)
        copied += len(page)
        if progress is not None:
            progress(copied, total)
        log.info("migrating", copied=copied, total=total)
        if offset is None:
            break
    complete = complete_documents(every)
    by_document: dict[str, list[Chunk]] = {}
    for record in every:
        payload = record.payload or {}
        if payload.get("document_id") in complete:
            by_document.setdefault(str(payload["document_id"]), []).append(_summary_chunk(payload))
    records = [
        qe.Point(record_id(doc), {}, document_record(doc, chunks))
        for doc, chunks in by_document.items()
    ]
    await store.write_points(records, deadline=None)
    # Counted from the chunks themselves, not the records, before the old folder goes.
    stored = await store.count_chunk_points()
    if stored < total:
        raise RuntimeError(f"migration copied {stored} of {total} chunks; the old store is kept")
    await executor.run(client.close)
    kept = migrated_path(old)
    await executor.run(old.rename, kept)
    log.info("migrated", chunks=total, documents=len(records), old_store_kept_at=str(kept))
    return Migrated(chunks=total, documents=len(records), kept_at=kept)


def _dense(record: models.Record) -> list[float]:
    vector: object = record.vector
    if isinstance(vector, dict):  # named: "dense" beside the sparse "bm25" (or one unnamed)
        vector = vector.get("dense", next(iter(vector.values()), None))
    if not isinstance(vector, list) or not all(isinstance(x, float) for x in vector):
        raise ValueError(f"point {record.id} has no dense vector")
    return vector


_SUMMARY_KEYS = (
    *("document_id", "document_hash", "chunk_count", "url"),
    *("title", "module", "chapter", "created_at"),
)


def _ids_only(record: models.Record) -> dict[str, object]:
    payload = record.payload or {}
    return {k: payload[k] for k in _SUMMARY_KEYS if k in payload}


def _summary_chunk(payload: dict[str, object]) -> Chunk:
    return chunk_from_payload({**payload, "chunk_id": "", "text": ""})
