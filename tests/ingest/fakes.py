"""In-memory stand-ins for the embedder and the chunk store, honouring their contracts."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from service.access import ReadAccess
from service.domain import Chunk, Deadline, DocumentSummary
from service.errors import StoreUnavailable


def count_words(text: str) -> int:
    """A whitespace token counter: simple, and exact enough to reason about in tests."""
    return len(text.split())


class FakeEmbedder:
    """Deterministic 8-dimensional vectors from a hash of the text; counts every call."""

    def __init__(self, *, max_tokens: int = 256, model_name: str = "fake-embedder") -> None:
        self._max_tokens = max_tokens
        self._model_name = model_name
        self.calls: list[list[str]] = []

    @property
    def model_name(self) -> str:
        return self._model_name

    @property
    def dimension(self) -> int:
        return 8

    @property
    def max_tokens(self) -> int:
        return self._max_tokens

    def count_tokens(self, text: str) -> int:
        return count_words(text)

    @property
    def texts_embedded(self) -> int:
        return sum(len(batch) for batch in self.calls)

    async def embed_documents(
        self, texts: Sequence[str], *, deadline: Deadline | None = None
    ) -> list[list[float]]:
        self.calls.append(list(texts))
        return [self._vector(text) for text in texts]

    async def embed_query(self, text: str, *, deadline: Deadline | None = None) -> list[float]:
        return self._vector(text)

    @staticmethod
    def _vector(text: str) -> list[float]:
        digest = hashlib.sha256(text.encode()).digest()
        return [b / 255.0 for b in digest[:8]]


@dataclass
class MemoryStore:
    """A ChunkStore in a dict, writing like the real store: upsert first, then delete the
    document's other chunks. ``fail_after_upserts`` makes it fail mid-document, after that
    many single-point upserts in total, to imitate a crash."""

    points: dict[str, tuple[Chunk, list[float]]] = field(default_factory=dict)
    fail_after_upserts: int | None = None
    upserts: int = 0
    relabels: int = 0

    async def document_hashes(self, *, deadline: Deadline | None = None) -> dict[str, str]:
        # Only documents whose chunks are all of one version and all present.
        by_doc: dict[str, list[Chunk]] = {}
        for chunk, _ in self.points.values():
            by_doc.setdefault(chunk.document_id, []).append(chunk)
        result: dict[str, str] = {}
        for doc, chunks in by_doc.items():
            hashes = {c.document_hash for c in chunks}
            counts = {c.chunk_count for c in chunks}
            if len(hashes) == 1 and counts == {len(chunks)}:
                result[doc] = hashes.pop()
        return result

    async def replace_document(
        self,
        document_id: str,
        chunks: Sequence[Chunk],
        vectors: Sequence[Sequence[float]],
        *,
        deadline: Deadline | None = None,
    ) -> int:
        assert len(chunks) == len(vectors)
        for chunk, vector in zip(chunks, vectors, strict=True):
            assert chunk.document_id == document_id
            if self.fail_after_upserts is not None and self.upserts >= self.fail_after_upserts:
                raise StoreUnavailable("the fake store went away")
            self.points[chunk.chunk_id] = (chunk, list(vector))
            self.upserts += 1
        keep = {c.chunk_id for c in chunks}
        return self._remove(lambda c: c.document_id == document_id and c.chunk_id not in keep)

    async def delete_document(self, document_id: str, *, deadline: Deadline | None = None) -> int:
        return self._remove(lambda c: c.document_id == document_id)

    async def list_documents(
        self,
        *,
        after: str,
        limit: int,
        deadline: Deadline | None = None,
        access: ReadAccess | None = None,
    ) -> list[DocumentSummary]:
        counts: dict[str, int] = {}
        hashes: dict[str, str] = {}
        labels: dict[str, tuple[str, ...]] = {}
        for chunk, _ in self.points.values():
            if access is not None and not access.permits(chunk.access):
                continue
            counts[chunk.document_id] = counts.get(chunk.document_id, 0) + 1
            hashes[chunk.document_id] = chunk.document_hash
            labels[chunk.document_id] = chunk.access
        ids = sorted(doc for doc in counts if doc > after)[:limit]
        return [DocumentSummary(doc, hashes[doc], counts[doc], access=labels[doc]) for doc in ids]

    async def count(
        self, *, deadline: Deadline | None = None, access: ReadAccess | None = None
    ) -> tuple[int, int]:
        chunks = [c for c, _ in self.points.values() if access is None or access.permits(c.access)]
        return len({c.document_id for c in chunks}), len(chunks)

    async def document_access(
        self, *, deadline: Deadline | None = None
    ) -> dict[str, tuple[str, ...]]:
        return {c.document_id: c.access for c, _ in self.points.values()}

    async def set_document_access(
        self, document_id: str, labels: Sequence[str], *, deadline: Deadline | None = None
    ) -> int:
        self.relabels += 1
        mine = [cid for cid, (c, _) in self.points.items() if c.document_id == document_id]
        for cid in mine:
            chunk, vector = self.points[cid]
            self.points[cid] = (replace(chunk, access=tuple(labels)), vector)
        return len(mine)

    def chunks_of(self, document_id: str) -> list[Chunk]:
        found = [c for c, _ in self.points.values() if c.document_id == document_id]
        return sorted(found, key=lambda c: c.position)

    def _remove(self, matches: Callable[[Chunk], bool]) -> int:
        doomed = [cid for cid, (chunk, _) in self.points.items() if matches(chunk)]
        for cid in doomed:
            del self.points[cid]
        return len(doomed)
