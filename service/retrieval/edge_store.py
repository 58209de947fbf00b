"""The embedded store on qdrant-edge: HNSW search, payload indexes, WAL, per-document records.

Every chunk is a point with a dense vector (cosine, on the embedder's normalised vectors),
a sparse BM25 vector (the engine applies IDF), its pieces' multivector (see
``piece_vectors``) and the rest of the chunk as payload. Every document
also has one vector-less point, its record (``kind: document``): the hash, chunk count and
titles that ingestion, ``ListDocuments`` and ``GetCorpusStats`` need, so none of them reads
the chunks. A record is written after its chunks and deleted before them, so a record
always describes a complete document (an interrupted write leaves no record, and the next
ingest writes that document again).

Scores are ``max(0, cosine)`` as on the server path, so that thresholds mean the same.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

import qdrant_edge as qe

from service.access import FIELD, ReadAccess
from service.domain import Chunk, Deadline, DocumentSummary, SearchFilters
from service.executor import Blocking
from service.observability.logging import get_logger
from service.retrieval.base import Embedder, EngineHit
from service.retrieval.chunk_payload import chunk_payload
from service.retrieval.edge_optimizer import QuietOptimizer
from service.retrieval.edge_payload import (
    RRF_K,
    cosine,
    document_record,
    hit_payload,
    is_record,
    match,
    piece_blend,
    record_id,
    summary,
    to_edge_filter,
)
from service.retrieval.edge_shard import DENSE, SPARSE, EdgeCalls
from service.retrieval.piece_vectors import PIECES
from service.retrieval.pipeline import EngineSearch

log = get_logger("ragagent.store")

_PAGE = 512


class EdgeStore(EngineSearch):
    """Retriever and ChunkStore on one qdrant-edge shard (see the module docstring)."""

    def __init__(
        self,
        calls: EdgeCalls,
        embedder: Embedder,
        *,
        collection: str,
    ) -> None:
        self._calls = calls
        self._shard = calls.shard
        self._embedder = embedder
        self._collection = collection
        self._bm25 = qe.Bm25()
        self.optimizer = QuietOptimizer(self.optimize)

    @classmethod
    async def open(
        cls,
        root: Path,
        embedder: Embedder,
        *,
        collection: str,
        executor: Blocking,
        call_timeout: float = 10.0,
    ) -> EdgeStore:
        """Opens the shard in ``root`` (made if absent) on the executor: loading blocks."""
        calls = await executor.run(
            lambda: EdgeCalls.open_blocking(
                root,
                dimension=embedder.dimension,
                model_name=embedder.model_name,
                executor=executor,
                timeout=call_timeout,
            )
        )
        return cls(calls, embedder, collection=collection)

    @property
    def collection(self) -> str:
        return self._collection

    async def optimize(self) -> None:
        """Indexes what was written since the last time (blocking work, on the executor)."""
        started = time.perf_counter()
        if await self._calls.optimize():
            log.info("embedded store optimised", seconds=round(time.perf_counter() - started, 2))

    @property
    def embedder(self) -> Embedder:
        return self._embedder

    # --- SearchEngine (service.retrieval.pipeline) ---------------------------------------

    async def nearest(
        self,
        vector: Sequence[float],
        *,
        limit: int,
        filters: SearchFilters | None,
        score_threshold: float | None,
        deadline: Deadline | None,
        piece_weight: float = 0.0,
        with_pieces: bool = False,
    ) -> list[EngineHit]:
        edge_filter = to_edge_filter(filters)[0]
        pieces = [PIECES] if with_pieces and self._calls.pieces else None
        if piece_weight > 0 and self._calls.pieces:
            prefetches, formula = piece_blend(vector, piece_weight, limit, edge_filter)
            request = qe.QueryRequest(
                limit=limit,
                prefetches=prefetches,
                query=formula,
                score_threshold=score_threshold,
                with_payload=True,
                with_vector=pieces,
            )
        else:
            request = qe.QueryRequest(
                limit=limit,
                query=qe.Query.Nearest(list(vector), using=DENSE),
                filter=edge_filter,
                score_threshold=score_threshold,
                with_payload=True,
                with_vector=pieces,
            )
        found = await self._calls.read(partial(self._shard.query, request), deadline, "searching")
        return [EngineHit(hit_payload(p.payload, p.vector), float(p.score)) for p in found]

    async def fused(
        self,
        vector: Sequence[float],
        query: str,
        *,
        limit: int,
        filters: SearchFilters | None,
        deadline: Deadline | None,
    ) -> list[EngineHit]:
        """Dense and BM25 candidates fused by rank (RRF, in the engine's Query API).

        The order is the fusion's; the score of each hit is still its cosine to the query
        (computed from its stored vector), because RRF scores depend on ranks alone and
        could not be held to the confidence threshold that decides what is answerable.
        """
        edge_filter = to_edge_filter(filters)[0]
        candidates = max(limit * 4, 20)
        request = qe.QueryRequest(
            limit=limit,
            prefetches=[
                qe.Prefetch(
                    query=qe.Query.Nearest(list(vector), using=DENSE),
                    limit=candidates,
                    filter=edge_filter,
                ),
                qe.Prefetch(
                    query=qe.Query.Nearest(self._bm25.embed_query(query), using=SPARSE),
                    limit=candidates,
                    filter=edge_filter,
                ),
            ],
            query=qe.Fusion.Rrf(k=RRF_K),  # type: ignore[arg-type]  # the stub types Fusion, not its variants
            with_payload=True,
            with_vector=[DENSE],
        )
        found = await self._calls.read(partial(self._shard.query, request), deadline, "searching")
        return [
            EngineHit(
                p.payload or {},
                cosine(vector, p.vector.get(DENSE) if isinstance(p.vector, dict) else None),
            )
            for p in found
        ]

    # --- ChunkStore --------------------------------------------------------------------

    async def _records(self, deadline: Deadline | None) -> list[DocumentSummary]:
        def scroll() -> list[DocumentSummary]:
            found: list[DocumentSummary] = []
            offset: Any = None
            while True:
                page, offset = self._shard.scroll(
                    qe.ScrollRequest(
                        offset=offset, limit=_PAGE, filter=is_record(), with_payload=True
                    )
                )
                found.extend(summary(r.payload or {}) for r in page)
                if offset is None:
                    return found

        return await self._calls.read(scroll, deadline, "reading document records")

    async def document_hashes(self, *, deadline: Deadline | None = None) -> dict[str, str]:
        """Hashes of the documents that have a record: those written completely."""
        return {r.document_id: r.document_hash for r in await self._records(deadline)}

    def chunk_points(
        self, chunks: Sequence[Chunk], vectors: Sequence[Sequence[float]]
    ) -> list[qe.Point]:
        return [
            qe.Point(chunk.chunk_id, self._vectors(chunk, vector), chunk_payload(chunk))
            for chunk, vector in zip(chunks, vectors, strict=True)
        ]

    def _vectors(self, chunk: Chunk, vector: Sequence[float]) -> dict[str, Any]:
        named: dict[str, Any] = {
            DENSE: list(vector),
            SPARSE: self._bm25.embed_document(chunk.text),
        }
        # A chunk without pieces has no multivector (the engine takes none that is empty);
        # a shard made before pieces has no place for one.
        if chunk.piece_vectors and self._calls.pieces:
            named[PIECES] = [list(row) for row in chunk.piece_vectors]
        return named

    async def replace_document(
        self,
        document_id: str,
        chunks: Sequence[Chunk],
        vectors: Sequence[Sequence[float]],
        *,
        deadline: Deadline | None = None,
    ) -> int:
        if len(chunks) != len(vectors):
            raise ValueError("one vector per chunk")
        record = qe.Point(record_id(document_id), {}, document_record(document_id, chunks))
        stale = qe.Filter(
            must=[match("document_id", document_id)],
            must_not=[qe.HasIdCondition({c.chunk_id for c in chunks})],
        )

        def write() -> int:
            points = self.chunk_points(chunks, vectors)
            for start in range(0, len(points), _PAGE):
                page = points[start : start + _PAGE]
                self._shard.update(qe.UpdateOperation.upsert_points(page))
            # Only after the new version is complete do the old chunks go, then the record
            # says the document is whole: a crash before that leaves no gap, only a
            # document that document_hashes() does not report (so it is written again).
            removed = self._shard.count(qe.CountRequest(filter=stale, exact=True))
            if removed:
                self._shard.update(qe.UpdateOperation.delete_points_by_filter(stale))
            self._shard.update(qe.UpdateOperation.upsert_points([record]))
            return removed

        removed = await self._calls.write(write, deadline, "writing chunks")
        self.optimizer.wrote(len(chunks))
        return removed

    async def delete_document(self, document_id: str, *, deadline: Deadline | None = None) -> int:
        selector = qe.Filter(must=[match("document_id", document_id)])

        def delete() -> int:
            # The record goes first: chunks left by a crash are then an incomplete
            # document (written again, or deleted again), never one reported whole.
            self._shard.update(qe.UpdateOperation.delete_points([record_id(document_id)]))
            removed = self._shard.count(qe.CountRequest(filter=selector, exact=True))
            if removed:
                self._shard.update(qe.UpdateOperation.delete_points_by_filter(selector))
            return removed

        return await self._calls.write(delete, deadline, "deleting chunks")

    async def list_documents(
        self,
        *,
        after: str,
        limit: int,
        deadline: Deadline | None = None,
        access: ReadAccess | None = None,
    ) -> list[DocumentSummary]:
        records = [
            r
            for r in await self._records(deadline)
            if r.document_id > after and (access is None or access.permits(r.access))
        ]
        return sorted(records, key=lambda r: r.document_id)[:limit]

    async def count(
        self, *, deadline: Deadline | None = None, access: ReadAccess | None = None
    ) -> tuple[int, int]:
        records = [
            r for r in await self._records(deadline) if access is None or access.permits(r.access)
        ]
        return len(records), sum(r.chunk_count for r in records)

    async def document_access(
        self, *, deadline: Deadline | None = None
    ) -> dict[str, tuple[str, ...]]:
        """document_id -> labels of every complete document."""
        return {r.document_id: r.access for r in await self._records(deadline)}

    async def set_document_access(
        self, document_id: str, labels: Sequence[str], *, deadline: Deadline | None = None
    ) -> int:
        """Relabels a document's chunks, then its record, without touching their vectors;
        returns the chunks relabelled. A crash in between leaves the record's old labels,
        which the next ingest sees differ and applies again."""
        selector = qe.Filter(must=[match("document_id", document_id)])
        payload = {FIELD: list(labels)}

        def relabel() -> int:
            found = self._shard.count(qe.CountRequest(filter=selector, exact=True))
            if found:
                self._shard.update(qe.UpdateOperation.set_payload_by_filter(selector, payload))
                self._shard.update(
                    qe.UpdateOperation.set_payload([record_id(document_id)], payload, "record")
                )
            return found

        return await self._calls.write(relabel, deadline, "relabelling a document")

    async def close(self) -> None:
        await self.optimizer.close()
        await self._calls.close()
