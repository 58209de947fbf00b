"""The vector store on a Qdrant server or cluster (RAGAGENT_QDRANT_URL).

The embedded default is :mod:`service.retrieval.edge_store` (qdrant-edge); this store also
runs over qdrant-client's local mode, which the tests use for the same client code. On a
server the collection is addressed by an alias with generations behind it
(:mod:`service.retrieval.qdrant_aliases`), so that ``ragagent reindex`` can replace it whole.

Scores: the collection uses cosine distance on normalised vectors; a cosine in [-1, 1] is
reported as ``max(0, cosine)`` so that clients see 0.0-1.0 (negative similarity means
unrelated, and thresholds are only meaningful above 0).

Calls run through :class:`~service.retrieval.qdrant_calls.QdrantCalls`: an embedded
client's on the runtime's executor (it is synchronous), a server's on the loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

import qdrant_edge as qe
from qdrant_client import AsyncQdrantClient, models

from service.access import FIELD, ReadAccess
from service.domain import Chunk, Deadline, DocumentSummary, SearchFilters
from service.executor import Blocking
from service.observability.logging import get_logger
from service.retrieval.base import Embedder, EngineHit
from service.retrieval.chunk_payload import chunk_payload
from service.retrieval.edge_payload import RRF_K, cosine, hit_payload
from service.retrieval.piece_vectors import PIECES
from service.retrieval.pipeline import EngineSearch
from service.retrieval.qdrant_aliases import generation, point
from service.retrieval.qdrant_calls import SPARSE, Layout, QdrantCalls, ensure_collection
from service.retrieval.qdrant_create import setup_call
from service.retrieval.qdrant_payload import (
    DENSE,
    blend_formula,
    match_value,
    open_qdrant_client,
    piece_blend,
    to_filter,
)
from service.retrieval.qdrant_records import DocumentRecords

__all__ = ["QdrantStore", "open_qdrant_client", "read_consistency"]

log = get_logger("ragagent.store")

_SCROLL_PAGE = 512


class QdrantStore(EngineSearch):
    """Retriever and ChunkStore over one Qdrant collection.

    ``executor`` is for an embedded client only (see the module docstring); without one,
    calls are awaited on the loop, as a server's client needs.
    """

    def __init__(
        self,
        client: AsyncQdrantClient,
        embedder: Embedder,
        *,
        collection: str,
        timeout: float = 10.0,
        payload_indexes: bool = True,
        executor: Blocking | None = None,
        hybrid: bool = False,
        cluster: dict[str, Any] | None = None,
        read_consistency: models.ReadConsistency | None = None,
    ) -> None:
        self._calls = QdrantCalls(
            client, timeout=timeout, executor=executor, read_consistency=read_consistency
        )
        # Shards, replication, write consistency of the collections this store creates.
        self.cluster = dict(cluster or {})
        self._call = self._calls.run
        self._client = client
        # The embedded store ignores payload indexes (and warns); a server needs them.
        self._payload_indexes = payload_indexes
        self._embedder = embedder
        self._collection = collection
        self._records = DocumentRecords(self._calls, collection)
        self.hybrid = hybrid
        # Learnt from the collection by ensure_collection().
        self._layout = Layout(named=False, pieces=False)
        self._bm25 = qe.Bm25()  # the embedded engine's BM25 tokenizer, for the same terms

    @property
    def collection(self) -> str:
        return self._collection

    @property
    def embedder(self) -> Embedder:
        return self._embedder

    @property
    def calls(self) -> QdrantCalls:
        """How this store reaches Qdrant (the corpus write lease uses it too)."""
        return self._calls

    async def ensure_collection(self, *, deadline: Deadline | None = None) -> None:
        """Checks that the collection fits the embedder; when nothing has the name yet,
        makes its first generation and the aliases that name it (see qdrant_aliases)."""
        exists = await setup_call(
            self._calls,
            partial(self._client.collection_exists, self._collection),
            deadline,
            "checking the collection",
        )
        if not exists:
            await self.create_generation(generation(self._collection, 1), deadline=deadline)
            await point(self._calls, self._collection, generation(self._collection, 1), deadline)
        self._layout = await self._ensure(self._collection, deadline)
        await self._records.ensure(deadline=deadline, cluster=self.cluster)
        if not self._layout.pieces:
            log.warning(
                "this collection predates the pieces' multivector, so chunks are scored by "
                "their own vector alone: `ragagent reindex` makes a generation that has it",
                collection=self._collection,
            )
        if self.hybrid and not self._layout.named:
            log.warning(
                "hybrid retrieval needs a collection with named dense and bm25 vectors; this "
                "one predates them, so searches are dense: re-ingest into a new collection",
                collection=self._collection,
            )

    async def create_generation(self, name: str, *, deadline: Deadline | None = None) -> None:
        """Makes (or checks) the collection ``name`` and its records, for this embedder."""
        layout = await self._ensure(name, deadline)
        if name == self._collection:  # a store over the generation itself (reindex)
            self._layout = layout
        await DocumentRecords(self._calls, name).ensure(deadline=deadline, cluster=self.cluster)

    async def _ensure(self, name: str, deadline: Deadline | None) -> Layout:
        return await ensure_collection(
            self._calls,
            name,
            dimension=self._embedder.dimension,
            model_name=self._embedder.model_name,
            payload_indexes=self._payload_indexes,
            deadline=deadline,
            cluster=self.cluster,
        )

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
        query_filter = to_filter(filters)[0]
        if piece_weight > 0 and self._layout.pieces:
            request = partial(
                self._client.query_points,
                self._collection,
                prefetch=piece_blend(vector, piece_weight, limit, query_filter),
                query=blend_formula(piece_weight),
            )
        else:
            request = partial(
                self._client.query_points,
                self._collection,
                query=list(vector),
                using=DENSE if self._layout.named else None,
                query_filter=query_filter,
            )
        response = await self._call(
            partial(
                request,
                limit=limit,
                score_threshold=score_threshold,
                with_payload=True,
                with_vectors=[PIECES] if with_pieces and self._layout.pieces else False,
                consistency=self._calls.read_consistency,
            ),
            deadline,
            "searching",
        )
        return [
            EngineHit(hit_payload(p.payload, p.vector), float(p.score)) for p in response.points
        ]

    async def fused(
        self,
        vector: Sequence[float],
        query: str,
        *,
        limit: int,
        filters: SearchFilters | None,
        deadline: Deadline | None,
    ) -> list[EngineHit]:
        """Dense and BM25 candidates fused by RRF on the server; scores stay cosine (see
        :meth:`EdgeStore.fused`, which does the same in the embedded engine). A collection
        from before named vectors has no BM25 vectors: its searches stay dense."""
        if not self._layout.named:
            return await self.nearest(
                vector, limit=limit, filters=filters, score_threshold=None, deadline=deadline
            )
        query_filter = to_filter(filters)[0]
        candidates = max(limit * 4, 20)
        terms = self._bm25.embed_query(query)
        response = await self._call(
            partial(
                self._client.query_points,
                self._collection,
                prefetch=[
                    models.Prefetch(
                        query=list(vector), using=DENSE, limit=candidates, filter=query_filter
                    ),
                    models.Prefetch(
                        query=models.SparseVector(indices=terms.indices, values=terms.values),
                        using=SPARSE,
                        limit=candidates,
                        filter=query_filter,
                    ),
                ],
                query=models.RrfQuery(rrf=models.Rrf(k=RRF_K)),
                limit=limit,
                with_payload=True,
                with_vectors=[DENSE],
                consistency=self._calls.read_consistency,
            ),
            deadline,
            "searching",
        )
        return [
            EngineHit(
                p.payload or {},
                cosine(vector, p.vector.get(DENSE) if isinstance(p.vector, dict) else None),
            )
            for p in response.points
        ]

    # --- ChunkStore --------------------------------------------------------------------

    async def document_hashes(self, *, deadline: Deadline | None = None) -> dict[str, str]:
        """Hashes of the documents that have a record: those written completely."""
        return {r.document_id: r.document_hash for r in await self._records.all(deadline=deadline)}

    def _vectors(self, chunk: Chunk, vector: Sequence[float]) -> Any:
        if not self._layout.named:
            return list(vector)
        terms = self._bm25.embed_document(chunk.text)
        sparse = models.SparseVector(indices=terms.indices, values=terms.values)
        named: dict[str, Any] = {DENSE: list(vector), SPARSE: sparse}
        # None for a chunk without pieces: the engine takes no empty multivector.
        if chunk.piece_vectors and self._layout.pieces:
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
        points = [
            models.PointStruct(
                id=chunk.chunk_id,
                vector=self._vectors(chunk, vector),
                payload=chunk_payload(chunk),
            )
            for chunk, vector in zip(chunks, vectors, strict=True)
        ]
        for start in range(0, len(points), _SCROLL_PAGE):
            await self._call(
                partial(
                    self._client.upsert,
                    self._collection,
                    points=points[start : start + _SCROLL_PAGE],
                    wait=True,
                ),
                deadline,
                "writing chunks",
            )
        # Only after the new version is complete do the old chunks go: a crash in between
        # leaves a document that document_hashes() reports as incomplete, never a gap.
        stale = models.Filter(
            must=[match_value("document_id", document_id)],
            must_not=[models.HasIdCondition(has_id=[c.chunk_id for c in chunks])],
        )
        removed = await self._delete(stale, deadline)
        # Last: the record says the document is whole (see qdrant_records).
        await self._records.put(document_id, chunks, deadline=deadline)
        return removed

    async def delete_document(self, document_id: str, *, deadline: Deadline | None = None) -> int:
        # The record goes first: chunks a crash leaves behind are an incomplete document.
        await self._records.delete(document_id, deadline=deadline)
        return await self._delete(
            models.Filter(must=[match_value("document_id", document_id)]), deadline
        )

    async def _delete(self, selector: models.Filter, deadline: Deadline | None) -> int:
        count = await self._count_chunks(selector, deadline)
        if count:
            await self._call(
                partial(
                    self._client.delete,
                    self._collection,
                    points_selector=models.FilterSelector(filter=selector),
                    wait=True,
                ),
                deadline,
                "deleting chunks",
            )
        return count

    async def _count_chunks(self, selector: models.Filter, deadline: Deadline | None) -> int:
        found = await self._call(
            partial(self._client.count, self._collection, count_filter=selector, exact=True),
            deadline,
            "counting chunks",
        )
        return found.count

    async def list_documents(
        self,
        *,
        after: str,
        limit: int,
        deadline: Deadline | None = None,
        access: ReadAccess | None = None,
    ) -> list[DocumentSummary]:
        records = [r for r in await self._readable(access, deadline) if r.document_id > after]
        return sorted(records, key=lambda r: r.document_id)[:limit]

    async def count(
        self, *, deadline: Deadline | None = None, access: ReadAccess | None = None
    ) -> tuple[int, int]:
        records = await self._readable(access, deadline)
        return len(records), sum(r.chunk_count for r in records)

    async def _readable(
        self, access: ReadAccess | None, deadline: Deadline | None
    ) -> list[DocumentSummary]:
        """The records of the documents ``access`` may read (all of them without one)."""
        records = await self._records.all(deadline=deadline)
        return [r for r in records if access is None or access.permits(r.access)]

    async def document_access(
        self, *, deadline: Deadline | None = None
    ) -> dict[str, tuple[str, ...]]:
        """document_id -> labels of every complete document."""
        return {r.document_id: r.access for r in await self._records.all(deadline=deadline)}

    async def set_document_access(
        self, document_id: str, labels: Sequence[str], *, deadline: Deadline | None = None
    ) -> int:
        """Relabels a document's chunks, then its record (see EdgeStore.set_document_access)."""
        selector = models.Filter(must=[match_value("document_id", document_id)])
        count = await self._count_chunks(selector, deadline)
        if count:
            await self._call(
                partial(
                    self._client.set_payload,
                    self._collection,
                    payload={FIELD: list(labels)},
                    points=selector,
                    wait=True,
                ),
                deadline,
                "relabelling a document",
            )
            await self._records.relabel(document_id, labels, deadline=deadline)
        return count

    async def close(self) -> None:
        await self._calls.close()


def read_consistency(value: int | str | None) -> models.ReadConsistency | None:
    """RAGAGENT_QDRANT_READ_CONSISTENCY as the client's type: a replica count or a name."""
    if value is None or isinstance(value, int):
        return value
    return models.ReadConsistencyType(value)
