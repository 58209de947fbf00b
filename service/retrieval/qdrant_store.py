"""The vector store on Qdrant: embedded local mode by default, a server or cluster by URL.

The same code serves both; only the client differs (see :func:`open_qdrant_client`). The
embedded mode keeps its data in a folder that one process at a time may open: a second
process gets :class:`~service.errors.StoreLocked`, and ingesting while serving goes through
the server's CorpusService instead.

Scores: the collection uses cosine distance on normalised vectors; a cosine in [-1, 1] is
reported as ``max(0, cosine)`` so that clients see 0.0-1.0 (negative similarity means
unrelated, and thresholds are only meaningful above 0).

Calls run through :class:`~service.retrieval.qdrant_calls.QdrantCalls`: an embedded
client's on the runtime's executor (it is synchronous), a server's on the loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from functools import partial
from typing import Any

import qdrant_edge as qe
from qdrant_client import AsyncQdrantClient, models

from service.domain import Chunk, Deadline, DocumentSummary, ScoredChunk, SearchFilters
from service.executor import Blocking
from service.observability.logging import get_logger
from service.retrieval.base import Embedder, QueryVectors, query_vector
from service.retrieval.edge_payload import RRF_K, cosine
from service.retrieval.lexical import TermCheck, unknown_term_factor
from service.retrieval.qdrant_calls import DENSE, SPARSE, QdrantCalls, ensure_collection
from service.retrieval.qdrant_payload import (
    match_value,
    open_qdrant_client,
    piece_search,
    rank,
    to_filter,
    url_prefixes,
)
from service.retrieval.qdrant_records import DocumentRecords

__all__ = ["QdrantStore", "open_qdrant_client"]

log = get_logger("ragagent.store")

_SCROLL_PAGE = 512


class QdrantStore:
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
        term_check: TermCheck | None = None,
        executor: Blocking | None = None,
        hybrid: bool = False,
        piece_weight: float = 0.0,
        cluster: dict[str, Any] | None = None,
    ) -> None:
        self._calls = QdrantCalls(client, timeout=timeout, executor=executor)
        # Shards, replication, write consistency of the collections this store creates.
        self.cluster = dict(cluster or {})
        self._call = self._calls.run
        self._client = client
        self._term_check = term_check
        # > 0: dense searches also score chunks by their best piece (PieceMatch).
        self.piece_weight = piece_weight
        # The embedded store ignores payload indexes (and warns); a server needs them.
        self._payload_indexes = payload_indexes
        self._embedder = embedder
        self._collection = collection
        self._records = DocumentRecords(self._calls, collection)
        self.hybrid = hybrid
        self._named = False  # learnt from the collection by ensure_collection()
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
        """Creates the collection for the embedder, or checks that the existing one fits it."""
        self._named = await ensure_collection(
            self._calls,
            self._collection,
            dimension=self._embedder.dimension,
            model_name=self._embedder.model_name,
            payload_indexes=self._payload_indexes,
            deadline=deadline,
            cluster=self.cluster,
        )
        await self._records.ensure(deadline=deadline, cluster=self.cluster)
        if self.hybrid and not self._named:
            log.warning(
                "hybrid retrieval needs a collection with named dense and bm25 vectors; this "
                "one predates them, so searches are dense: re-ingest into a new collection",
                collection=self._collection,
            )

    # --- Retriever ---------------------------------------------------------------------

    async def search(
        self,
        query: str,
        *,
        limit: int,
        threshold: float,
        filters: SearchFilters | None = None,
        deadline: Deadline | None = None,
        vectors: QueryVectors | None = None,
    ) -> list[ScoredChunk]:
        vector = await query_vector(self._embedder, query, vectors, deadline)
        return await self.search_vector(
            vector, query=query, limit=limit, threshold=threshold, filters=filters,
            deadline=deadline,
        )  # fmt: skip

    async def search_vector(
        self,
        vector: Sequence[float],
        *,
        query: str,
        limit: int,
        threshold: float,
        filters: SearchFilters | None = None,
        deadline: Deadline | None = None,
    ) -> list[ScoredChunk]:
        """The search after embedding (benchmarks time it apart from the embedding)."""
        query_filter, exact_prefix = to_filter(filters)
        # A prefix that does not end at "/" is matched on its last "/" and refined here, so
        # ask for more to still return `limit` hits after refining.
        fetch = limit if exact_prefix is None else min(limit * 4, 200)
        pieces = None
        if self.hybrid and self._named and query.strip():
            points = await self._hybrid(vector, query, fetch, query_filter, deadline)
        else:
            pieces, fetch, cut = piece_search(vector, self.piece_weight, fetch, threshold)
            response = await self._call(
                partial(
                    self._client.query_points,
                    self._collection,
                    query=list(vector),
                    using=DENSE if self._named else None,
                    limit=fetch,
                    query_filter=query_filter,
                    score_threshold=cut,
                    with_payload=True,
                ),
                deadline,
                "searching",
            )
            points = [(p.payload or {}, float(p.score)) for p in response.points]
        factor = 1.0
        if points and self._term_check is not None:
            seen = [str(payload.get("text", "")) for payload, _ in points]
            factor = await unknown_term_factor(self._term_check, query, seen, self, deadline)
        return rank(
            points, factor=factor, exact_prefix=exact_prefix, threshold=threshold, pieces=pieces
        )[:limit]

    async def _hybrid(
        self,
        vector: Sequence[float],
        query: str,
        limit: int,
        query_filter: models.Filter | None,
        deadline: Deadline | None,
    ) -> list[tuple[dict[str, Any], float]]:
        """Dense and BM25 candidates fused by RRF on the server; scores stay cosine (see
        :meth:`EdgeStore._hybrid`, which does the same in the embedded engine)."""
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
            ),
            deadline,
            "searching",
        )
        return [
            (
                p.payload or {},
                cosine(vector, p.vector.get(DENSE) if isinstance(p.vector, dict) else None),
            )
            for p in response.points
        ]

    # --- the term check's view of the full-text index (lexical.TermIndex) ---------------

    async def count_text_any(self, words: str, deadline: Deadline | None) -> int:
        found = await self._call(
            partial(
                self._client.count,
                self._collection,
                count_filter=_text_filter(models.MatchTextAny(text_any=words)),
                exact=True,
            ),
            deadline,
            "looking up a term",
        )
        return found.count

    async def texts_with_all(self, words: str, limit: int, deadline: Deadline | None) -> list[str]:
        page, _ = await self._call(
            partial(
                self._client.scroll,
                self._collection,
                scroll_filter=_text_filter(models.MatchText(text=words)),
                limit=limit,
                with_payload=["text"],
            ),
            deadline,
            "looking up a name",
        )
        return [str((p.payload or {}).get("text", "")) for p in page]

    # --- ChunkStore --------------------------------------------------------------------

    async def document_hashes(self, *, deadline: Deadline | None = None) -> dict[str, str]:
        """Hashes of the documents that have a record: those written completely."""
        return {r.document_id: r.document_hash for r in await self._records.all(deadline=deadline)}

    def _vectors(self, text: str, vector: Sequence[float]) -> Any:
        if not self._named:
            return list(vector)
        terms = self._bm25.embed_document(text)
        sparse = models.SparseVector(indices=terms.indices, values=terms.values)
        return {DENSE: list(vector), SPARSE: sparse}

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
                vector=self._vectors(chunk.text, vector),
                payload={**asdict(chunk), "url_prefixes": url_prefixes(chunk.url)},
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
        count = await self._call(
            partial(self._client.count, self._collection, count_filter=selector, exact=True),
            deadline,
            "counting chunks",
        )
        if count.count:
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
        return count.count

    async def list_documents(
        self, *, after: str, limit: int, deadline: Deadline | None = None
    ) -> list[DocumentSummary]:
        records = [r for r in await self._records.all(deadline=deadline) if r.document_id > after]
        return sorted(records, key=lambda r: r.document_id)[:limit]

    async def count(self, *, deadline: Deadline | None = None) -> tuple[int, int]:
        records = await self._records.all(deadline=deadline)
        return len(records), sum(r.chunk_count for r in records)

    async def close(self) -> None:
        await self._calls.close()


def _text_filter(match: Any) -> models.Filter:
    return models.Filter(must=[models.FieldCondition(key="text", match=match)])
