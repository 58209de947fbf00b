"""The protocols retrieval is built from; implementations are injected, never built inside."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from service.access import ReadAccess
from service.domain import Chunk, Deadline, DocumentSummary, ScoredChunk, SearchFilters


class Embedder(Protocol):
    """Turns text into vectors. Implementations run heavy work off the event loop."""

    @property
    def model_name(self) -> str:
        """Name of the model, stored with the collection to detect mismatches."""

    @property
    def dimension(self) -> int:
        """Length of every vector it returns."""

    @property
    def max_tokens(self) -> int:
        """Longest input, in tokens, that is embedded without being cut."""

    def count_tokens(self, text: str) -> int:
        """Tokens the model sees for this text (used by the chunker to size chunks)."""

    async def embed_documents(
        self, texts: Sequence[str], *, deadline: Deadline | None = None
    ) -> list[list[float]]:
        """Vectors for passages to be stored, in order, L2-normalised."""

    async def embed_query(self, text: str, *, deadline: Deadline | None = None) -> list[float]:
        """The vector of a search query, L2-normalised."""


class QueryVectors:
    """The query vectors one run has computed, by query text.

    An agentic run searches for the question itself, and the model's first search is
    usually the same words: embedding a query costs more than searching with its vector, so
    a run embeds each distinct query once. One run searches one store, whose embedder made
    every vector here; the memo lives as long as the run.
    """

    __slots__ = ("_vectors",)

    def __init__(self) -> None:
        self._vectors: dict[str, list[float]] = {}

    async def vector(self, query: str, embed: Callable[[], Awaitable[list[float]]]) -> list[float]:
        """The vector of ``query``, from ``embed()`` the first time it is asked for."""
        found = self._vectors.get(query)
        if found is None:
            found = await embed()
            self._vectors[query] = found
        return found


async def query_vector(
    embedder: Embedder, query: str, vectors: QueryVectors | None, deadline: Deadline | None
) -> list[float]:
    """``query``'s vector from ``vectors`` when the run has it, else embedded now."""
    if vectors is None:
        return await embedder.embed_query(query, deadline=deadline)
    return await vectors.vector(query, lambda: embedder.embed_query(query, deadline=deadline))


@runtime_checkable
class PieceEmbedder(Protocol):
    """An embedder that also gives the vectors of the quotable pieces of each text, from the
    same model pass (see ``service.retrieval.piece_vectors``)."""

    async def embed_with_pieces(
        self,
        texts: Sequence[str],
        spans: Sequence[Sequence[tuple[int, int] | None]],
        shifts: Sequence[int],
        *,
        deadline: Deadline | None = None,
    ) -> tuple[list[list[float]], list[list[list[float]]]]:
        """The texts' vectors (as ``embed_documents``) and their pieces' vectors."""


async def embed_chunks(
    embedder: Embedder,
    texts: Sequence[str],
    spans: Sequence[Sequence[tuple[int, int] | None]],
    shifts: Sequence[int],
    *,
    deadline: Deadline | None = None,
) -> tuple[list[list[float]], list[list[list[float]]]]:
    """Vectors and piece vectors where the embedder can give both, else vectors and none."""
    if isinstance(embedder, PieceEmbedder):
        return await embedder.embed_with_pieces(texts, spans, shifts, deadline=deadline)
    return await embedder.embed_documents(texts, deadline=deadline), [[] for _ in texts]


class Retriever(Protocol):
    """Finds the chunks most relevant to a query."""

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
        """At most ``limit`` chunks scoring at least ``threshold``, best first. ``vectors``:
        the run's query vectors, reused and added to (None: embed the query now).
        ``with_pieces``: each chunk's stored piece vectors too, for a caller that quotes by
        them (the extractive strategy); the others do without (see ``SearchEngine``)."""


@dataclass(frozen=True, slots=True)
class EngineHit:
    """One candidate as an engine returns it: the stored payload and its cosine."""

    payload: dict[str, Any]
    similarity: float


class SearchEngine(Protocol):
    """The thin port each store implements: one engine query, translated, nothing else."""

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
        """The ``limit`` chunks nearest to ``vector`` (cosine, best first). With a
        ``piece_weight``, the engine scores each ``max(cosine, piece_weight * its best
        piece's cosine)``, best first. ``with_pieces``: each hit carries its piece vectors
        where the store holds them (``service.retrieval.piece_vectors``); only asked for by
        a caller that reads them, since they cost a search about 2.5 ms in-process (their
        conversion) and about 30 kB a hit from a server (JSON floats)."""

    async def fused(
        self,
        vector: Sequence[float],
        query: str,
        *,
        limit: int,
        filters: SearchFilters | None,
        deadline: Deadline | None,
    ) -> list[EngineHit]:
        """Dense and BM25 candidates fused by rank (RRF), each with its cosine to ``vector``."""


class DocumentWrites(Protocol):
    """The document-level side of the store that ingestion uses (and metrics wrap)."""

    async def document_hashes(self, *, deadline: Deadline | None = None) -> dict[str, str]:
        """document_id -> document_hash of every indexed document."""

    async def replace_document(
        self,
        document_id: str,
        chunks: Sequence[Chunk],
        vectors: Sequence[Sequence[float]],
        *,
        deadline: Deadline | None = None,
    ) -> int:
        """Stores a document's chunks and removes any other chunk of it. Returns chunks removed."""

    async def delete_document(self, document_id: str, *, deadline: Deadline | None = None) -> int:
        """Removes every chunk of a document. Returns how many were removed."""

    async def list_documents(
        self,
        *,
        after: str,
        limit: int,
        deadline: Deadline | None = None,
        access: ReadAccess | None = None,
    ) -> list[DocumentSummary]:
        """Documents with id > after that ``access`` may read (None: all), ordered by id,
        at most limit."""

    async def count(
        self, *, deadline: Deadline | None = None, access: ReadAccess | None = None
    ) -> tuple[int, int]:
        """(documents, chunks) in the store that ``access`` may read (None: all)."""

    async def document_access(
        self, *, deadline: Deadline | None = None
    ) -> dict[str, tuple[str, ...]]:
        """document_id -> access labels (service.access) of every complete document."""

    async def set_document_access(
        self, document_id: str, labels: Sequence[str], *, deadline: Deadline | None = None
    ) -> int:
        """Gives a stored document new labels without re-embedding it; returns its chunks."""


class ChunkStore(DocumentWrites, SearchEngine, Retriever, Protocol):
    """Everything a store offers the rest of the service: search, documents, its identity.

    Two implementations: the embedded engine (qdrant-edge, under RAGAGENT_DATA_DIR) and a
    Qdrant server through qdrant-client (RAGAGENT_QDRANT_URL); the composition root picks one.
    """

    @property
    def collection(self) -> str:
        """The collection's name (reported by GetCorpusStats)."""

    @property
    def embedder(self) -> Embedder:
        """The embedder whose vectors the store holds."""

    async def close(self) -> None:
        """Releases the store; no call may follow."""
