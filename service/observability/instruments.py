"""Decorators that time and trace the protocol objects: embedder, retriever, chunk store,
session turns. The composition root wraps the real objects in them once; the objects
themselves know nothing of metrics or spans.

Span attributes never hold question or passage text unless ``RAGAGENT_TRACE_CONTENT=true``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Literal

from opentelemetry.trace import Span

from service.access import ReadAccess
from service.domain import Chunk, Deadline, DocumentSummary, RunResult, ScoredChunk, SearchFilters
from service.observability.metrics import Metrics
from service.observability.tracing import Tracing
from service.retrieval.base import DocumentWrites, Embedder, QueryVectors, Retriever, embed_chunks
from service.sessions.turns import TurnHandleLike, Turns


class ObservedEmbedder:
    """An Embedder whose every call is timed (ragagent_embedding_seconds) and a span."""

    def __init__(self, embedder: Embedder, metrics: Metrics, tracing: Tracing) -> None:
        self.inner = embedder
        self._metrics = metrics
        self._tracer = tracing.tracer
        # GenAI conventions: "openai" for an OpenAI-compatible endpoint; the local ONNX
        # model has no well-known name, so it is named after its runtime.
        self._provider = str(getattr(embedder, "provider_name", "fastembed"))

    @property
    def model_name(self) -> str:
        return self.inner.model_name

    @property
    def dimension(self) -> int:
        return self.inner.dimension

    @property
    def max_tokens(self) -> int:
        return self.inner.max_tokens

    def count_tokens(self, text: str) -> int:
        return self.inner.count_tokens(text)

    async def embed_documents(
        self, texts: Sequence[str], *, deadline: Deadline | None = None
    ) -> list[list[float]]:
        with self._span(len(texts)):
            started = time.perf_counter()
            try:
                return await self.inner.embed_documents(texts, deadline=deadline)
            finally:
                self._metrics.embedding.observe(time.perf_counter() - started)

    async def embed_query(self, text: str, *, deadline: Deadline | None = None) -> list[float]:
        with self._span(1):
            started = time.perf_counter()
            try:
                return await self.inner.embed_query(text, deadline=deadline)
            finally:
                self._metrics.embedding.observe(time.perf_counter() - started)

    async def embed_with_pieces(
        self,
        texts: Sequence[str],
        spans: Sequence[Sequence[tuple[int, int] | None]],
        shifts: Sequence[int],
        *,
        deadline: Deadline | None = None,
    ) -> tuple[list[list[float]], list[list[list[float]]]]:
        with self._span(len(texts)):
            started = time.perf_counter()
            try:
                return await embed_chunks(self.inner, texts, spans, shifts, deadline=deadline)
            finally:
                self._metrics.embedding.observe(time.perf_counter() - started)

    def _span(self, inputs: int) -> AbstractContextManager[Span]:
        return self._tracer.start_as_current_span(
            f"embeddings {self.inner.model_name}",
            attributes={
                "gen_ai.operation.name": "embeddings",
                "gen_ai.provider.name": self._provider,
                "gen_ai.request.model": self.inner.model_name,
                "ragagent.embedding.inputs": inputs,
            },
        )


class ObservedRetriever:
    """A Retriever whose searches are timed (ragagent_retrieval_seconds) and a span."""

    def __init__(self, retriever: Retriever, metrics: Metrics, tracing: Tracing) -> None:
        self.inner = retriever
        self._metrics = metrics
        self._tracer = tracing.tracer
        self._content = tracing.record_content

    async def search(
        self,
        query: str,
        *,
        limit: int,
        threshold: float,
        filters: SearchFilters | None = None,
        deadline: Deadline | None = None,
        vectors: QueryVectors | None = None,
        with_pieces: bool = False,
    ) -> list[ScoredChunk]:
        attributes: dict[str, str | int | float] = {
            "db.system.name": "qdrant",
            "db.operation.name": "search",
            "ragagent.search.limit": limit,
            "ragagent.search.threshold": threshold,
        }
        if self._content:
            attributes["ragagent.search.query"] = query
        with self._tracer.start_as_current_span("vector_search", attributes=attributes) as span:
            started = time.perf_counter()
            try:
                hits = await self.inner.search(
                    query,
                    limit=limit,
                    threshold=threshold,
                    filters=filters,
                    deadline=deadline,
                    vectors=vectors,
                    with_pieces=with_pieces,
                )
            finally:
                self._metrics.retrieval.observe(time.perf_counter() - started)
            span.set_attribute("ragagent.search.hits", len(hits))
            return hits


class CountingChunkStore:
    """A DocumentWrites that counts the chunks ingestion writes (ragagent_ingest_chunks_total)."""

    def __init__(self, store: DocumentWrites, metrics: Metrics) -> None:
        self.inner = store
        self._metrics = metrics

    async def document_hashes(self, *, deadline: Deadline | None = None) -> dict[str, str]:
        return await self.inner.document_hashes(deadline=deadline)

    async def replace_document(
        self,
        document_id: str,
        chunks: Sequence[Chunk],
        vectors: Sequence[Sequence[float]],
        *,
        deadline: Deadline | None = None,
    ) -> int:
        removed = await self.inner.replace_document(document_id, chunks, vectors, deadline=deadline)
        self._metrics.ingest_chunks.inc(len(chunks))
        return removed

    async def delete_document(self, document_id: str, *, deadline: Deadline | None = None) -> int:
        return await self.inner.delete_document(document_id, deadline=deadline)

    async def list_documents(
        self,
        *,
        after: str,
        limit: int,
        deadline: Deadline | None = None,
        access: ReadAccess | None = None,
    ) -> list[DocumentSummary]:
        return await self.inner.list_documents(
            after=after, limit=limit, deadline=deadline, access=access
        )

    async def count(
        self, *, deadline: Deadline | None = None, access: ReadAccess | None = None
    ) -> tuple[int, int]:
        return await self.inner.count(deadline=deadline, access=access)

    async def document_access(
        self, *, deadline: Deadline | None = None
    ) -> dict[str, tuple[str, ...]]:
        return await self.inner.document_access(deadline=deadline)

    async def set_document_access(
        self, document_id: str, labels: Sequence[str], *, deadline: Deadline | None = None
    ) -> int:
        return await self.inner.set_document_access(document_id, labels, deadline=deadline)


class ObservedTurns:
    """The session store's turn writes, timed (ragagent_session_store_seconds{op}) and spans."""

    def __init__(self, turns: Turns, metrics: Metrics, tracing: Tracing) -> None:
        self.inner = turns
        self._metrics = metrics
        self._tracer = tracing.tracer

    async def begin_turn(
        self,
        *,
        session_id: str | None,
        owner: str,
        question: str,
        request_id: str,
        new_id: str | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> TurnHandleLike:
        with self._timed("begin"):
            return await self.inner.begin_turn(
                session_id=session_id,
                owner=owner,
                question=question,
                request_id=request_id,
                new_id=new_id,
                metadata=metadata,
            )

    async def complete_turn(self, turn_id: str, result: RunResult, error: str = "") -> bool:
        with self._timed("complete"):
            return await self.inner.complete_turn(turn_id, result, error)

    async def abort_turn(
        self, turn_id: str, status: Literal["error", "cancelled", "timeout"], error: str = ""
    ) -> bool:
        with self._timed("abort"):
            return await self.inner.abort_turn(turn_id, status, error)

    @contextmanager
    def _timed(self, op: str) -> Iterator[None]:
        with self._tracer.start_as_current_span(
            f"session_store {op}_turn", attributes={"db.operation.name": f"{op}_turn"}
        ):
            started = time.perf_counter()
            try:
                yield
            finally:
                self._metrics.session_store.labels(op).observe(time.perf_counter() - started)
