"""What an ingest produces and reports: chunk ids, per-document outcomes and run totals.

Kept apart from the pipeline so that the servicer, the CLI and the stores can name these
without importing the machinery that makes them.
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

from service.domain import Chunk
from service.retrieval.piece_vectors import Span

# Fixed forever: changing it would give every chunk a new id.
CHUNK_NAMESPACE = uuid.UUID("5b0f6d1e-2c53-4c71-9d0e-6a8f3f1c2b7a")


def chunk_id(document_id: str, position: int) -> str:
    """The stable id of the chunk at ``position`` of a document."""
    return str(uuid.uuid5(CHUNK_NAMESPACE, f"{document_id}#{position}"))


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class DocumentStatus(StrEnum):
    """What an ingest did with one document."""

    ADDED = "added"  # no complete earlier version (new, or left half-written by a crash)
    UPDATED = "updated"  # an earlier version was replaced
    UNCHANGED = "unchanged"
    DELETED = "deleted"
    EMPTY = "empty"  # no text to index; any old chunks were removed
    RELABELLED = "relabelled"  # the text unchanged, who may read it changed (no re-embedding)


@dataclass(frozen=True, slots=True)
class IngestEvent:
    """Reported to the progress callback after each document."""

    document_id: str
    status: DocumentStatus
    chunks_written: int = 0
    chunks_deleted: int = 0
    warnings: tuple[str, ...] = ()


@dataclass(slots=True)
class IngestSummary:
    """Totals of one ingest run (becomes ragagent.v1.IngestDocumentsResponse)."""

    added: int = 0
    updated: int = 0
    unchanged: int = 0
    deleted: int = 0
    empty: int = 0
    relabelled: int = 0
    chunks_written: int = 0
    chunks_deleted: int = 0
    duration_s: float = 0.0
    warnings: list[str] = field(default_factory=list)

    def record(self, event: IngestEvent) -> None:
        counter = event.status.value
        setattr(self, counter, getattr(self, counter) + 1)
        self.chunks_written += event.chunks_written
        self.chunks_deleted += event.chunks_deleted
        self.warnings.extend(event.warnings)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class PreparedDocument:
    """A document parsed and chunked, ready to embed; ``embed_texts`` align with ``chunks``."""

    document_id: str
    document_hash: str
    chunks: tuple[Chunk, ...]
    embed_texts: tuple[str, ...]
    warnings: tuple[str, ...]
    # Where each chunk's quotable pieces lie in its text, and how far into its embed text
    # that text starts: the piece vectors are pooled from the chunk's model pass.
    piece_spans: tuple[tuple[Span | None, ...], ...] = ()
    shifts: tuple[int, ...] = ()
