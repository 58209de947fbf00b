"""One search, in order, over either engine: the steps a query goes through, each small.

1. embed the query (once per run: :class:`~service.retrieval.base.QueryVectors`);
2. ask the engine for candidates (:class:`SearchEngine`: the store translates the request,
   filters included, to its engine and nothing more);
3. (in the engine's query) score each candidate by its best piece too
   (:mod:`~service.retrieval.piece_vectors`);
4. hold them to the threshold (on the retrieval score, or on the reranker's when told to);
5. keep at most a few chunks of one page (:func:`diverse`);
6. rerank (:mod:`service.retrieval.rerank`) and keep the ``limit`` best.

The steps are chosen once at the composition root (``service.runtime``); a store's own
``search`` is this pipeline with none of them (the engine's cosine, held to the threshold).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, cast

from service.domain import Deadline, ScoredChunk, SearchFilters
from service.retrieval.base import Embedder, EngineHit, QueryVectors, SearchEngine, query_vector
from service.retrieval.chunk_payload import chunk_from_payload
from service.retrieval.rerank import Reranker

# Chunks read for a search scored by pieces: a chunk whose best piece answers the question
# can sit below the requested few by its own vector. 20 found the most on the read question
# sets (10, 15 and 50 candidates: one question fewer each, of 137).
PIECE_CANDIDATES = 20
# A prefix filter not ending at "/" is matched on its last "/" and refined here: more
# candidates are read so that ``limit`` still remain after refining.
_PREFIX_FACTOR, _PREFIX_MOST = 4, 200
# With page diversity on, the engine is asked for this many times the candidates wanted.
_DIVERSE_FACTOR = 2
# A search for fewer results than this reads and reranks the candidates of a search for
# this many, so its results are the first of that search's: a run that searched for 5
# answers the model's search for 3 without a second engine query (service.agent.search).
# Measured on the read question sets (227 answerable, 2026-11-27, docs/retrieval.md): at
# top_k 1, 2, 3 and 4 the deeper candidates found 2, 2, 1 and 1 expected pages more (net;
# at 1 and 2 they lost 5 and 1 questions while finding 7 and 3), rejections unchanged.
CONSISTENT_LIMIT = 5


@dataclass(frozen=True, slots=True)
class SearchSteps:
    """Which steps run and how (RAGAGENT_ settings, read at the composition root)."""

    hybrid: bool = False
    piece_weight: float = 0.0
    # Most chunks of one document in the results; 0: no limit.
    per_document: int = 0
    # The reranker sees this many times the requested results.
    rerank_depth: int = 3
    # The threshold applies to the reranker's scores (a cross-encoder's) instead of the
    # retrieval score; the reranker must then return calibrated scores.
    threshold_on_rerank: bool = False


def exact_prefix(filters: SearchFilters | None) -> str | None:
    """The URL prefix to refine by after the engine's match on its last "/", if any."""
    if filters is None or not filters.url_prefix or filters.url_prefix.endswith("/"):
        return None
    return filters.url_prefix


def scored(hits: Sequence[EngineHit], *, prefix: str | None) -> list[ScoredChunk]:
    """The engine's hits as chunks, in its order: refined to the exact URL prefix, scores
    clamped to 0..1."""
    out = []
    for hit in hits:
        chunk = chunk_from_payload(hit.payload)
        if prefix is not None and not chunk.url.startswith(prefix):
            continue
        out.append(ScoredChunk(chunk=chunk, score=max(0.0, min(1.0, hit.similarity))))
    return out


def at_least(hits: Sequence[ScoredChunk], threshold: float) -> list[ScoredChunk]:
    return [hit for hit in hits if hit.score >= threshold]


def diverse(hits: Sequence[ScoredChunk], per_document: int) -> list[ScoredChunk]:
    """The hits in order, keeping at most ``per_document`` chunks of each document: the
    top results then cover more pages (a page's third chunk rarely adds an answer another
    page lacks)."""
    if per_document <= 0:
        return list(hits)
    seen: dict[str, int] = {}
    kept = []
    for hit in hits:
        count = seen.get(hit.chunk.document_id, 0)
        if count < per_document:
            seen[hit.chunk.document_id] = count + 1
            kept.append(hit)
    return kept


class SearchPipeline:
    """A Retriever: the steps of the module docstring over one engine."""

    def __init__(
        self,
        engine: SearchEngine,
        embedder: Embedder,
        steps: SearchSteps = SearchSteps(),
        *,
        reranker: Reranker | None = None,
    ) -> None:
        self.engine = engine
        self.embedder = embedder
        self.steps = steps
        self.reranker = reranker
        # Results for any limit up to this are the first of the results for this limit: the
        # candidates are sized by it (search_vector), and the Agent is told it (runtime).
        self.consistent_limit = CONSISTENT_LIMIT

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
        vector = await query_vector(self.embedder, query, vectors, deadline)
        return await self.search_vector(
            vector, query=query, limit=limit, threshold=threshold, filters=filters,
            deadline=deadline, with_pieces=with_pieces,
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
        with_pieces: bool = False,
    ) -> list[ScoredChunk]:
        """The search after embedding (benchmarks time it apart from the embedding)."""
        steps = self.steps
        sized = max(limit, self.consistent_limit)
        wanted = sized * steps.rerank_depth if self.reranker is not None else sized
        prefix = exact_prefix(filters)
        fetch = wanted if prefix is None else min(wanted * _PREFIX_FACTOR, _PREFIX_MOST)
        if steps.per_document > 0:
            # Chunks past a page's first few are dropped: read more to still fill ``wanted``.
            fetch = min(max(fetch, wanted * _DIVERSE_FACTOR), _PREFIX_MOST)
        if steps.hybrid and query.strip():
            hits = await self.engine.fused(
                vector, query, limit=fetch, filters=filters, deadline=deadline
            )
        else:
            # With pieces, the engine's score is already the chunk's with its best piece.
            cut: float | None = threshold if threshold > 0 else None
            if steps.piece_weight > 0:
                fetch = max(fetch, PIECE_CANDIDATES)
            if steps.threshold_on_rerank and self.reranker is not None:
                cut = None
            hits = await self.engine.nearest(
                vector, limit=fetch, filters=filters, score_threshold=cut, deadline=deadline,
                piece_weight=steps.piece_weight, with_pieces=with_pieces,
            )  # fmt: skip
        candidates = scored(hits, prefix=prefix)
        on_rerank = steps.threshold_on_rerank and self.reranker is not None
        if not on_rerank:
            candidates = at_least(candidates, threshold)
        candidates = diverse(candidates, steps.per_document)[:wanted]
        if self.reranker is not None and candidates:
            candidates = await self.reranker.rerank(query, candidates, deadline=deadline)
            if on_rerank:
                candidates = at_least(candidates, threshold)
        return candidates[:limit]


class EngineSearch:
    """``Retriever.search`` for a store that is a :class:`SearchEngine` with an ``embedder``:
    the engine's cosine alone, through the default steps. The service itself searches through
    the pipeline the composition root builds, with its configured steps and reranker."""

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
        engine = cast("_EngineWithEmbedder", self)
        return await SearchPipeline(engine, engine.embedder).search(
            query, limit=limit, threshold=threshold, filters=filters, deadline=deadline,
            vectors=vectors, with_pieces=with_pieces,
        )  # fmt: skip


class _EngineWithEmbedder(SearchEngine, Protocol):
    @property
    def embedder(self) -> Embedder: ...
