"""How chunks and per-document records are laid out in the embedded engine's points, and
the engine's filters for a search (pure functions; :mod:`edge_store` calls them)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import numpy as np
import qdrant_edge as qe

from service.access import FIELD, ReadAccess
from service.domain import Chunk, DocumentSummary, SearchFilters
from service.retrieval.edge_shard import DENSE
from service.retrieval.piece_vectors import PIECES

RECORD = "document"
RRF_K = 60  # RRF's usual constant: ranks past a few dozen weigh about the same


def cosine(query: Sequence[float], stored: object) -> float:
    """Cosine of a query vector and a stored dense one (0 when there is none)."""
    if not isinstance(stored, list) or not stored:
        return 0.0
    q = np.asarray(query, dtype=np.float32)
    v = np.asarray(stored, dtype=np.float32)
    norms = float(np.linalg.norm(q) * np.linalg.norm(v))
    return float(np.dot(q, v)) / norms if norms else 0.0


def piece_blend(
    vector: Sequence[float], weight: float, limit: int, edge_filter: qe.Filter | None
) -> tuple[list[qe.Prefetch], qe.Formula]:
    """The engine's query for ``max(cosine, weight * best piece)`` over the ``limit``
    nearest chunks (see service.retrieval.piece_vectors): the dense candidates, the same
    candidates rescored by MaxSim over their pieces, and the formula over both scores. A
    chunk without pieces has no second score: it counts 0."""
    query = list(vector)

    def dense() -> qe.Prefetch:
        return qe.Prefetch(
            limit=limit, query=qe.Query.Nearest(query, using=DENSE), filter=edge_filter
        )

    best_piece = qe.Prefetch(
        limit=limit, prefetches=[dense()], query=qe.Query.Nearest([query], using=PIECES)
    )
    score, piece = qe.Expression.Variable("$score[0]"), qe.Expression.Variable("$score[1]")
    formula = qe.Formula(
        qe.Expression.Max([score, qe.Expression.Mult([qe.Expression.Constant(weight), piece])]),
        defaults={"$score[1]": 0.0},
    )
    return [dense(), best_piece], formula


def hit_payload(payload: dict[str, Any] | None, vectors: object) -> dict[str, Any]:
    """A hit's payload with its stored piece vectors as the chunk's ``piece_vectors``."""
    found = vectors.get(PIECES) if isinstance(vectors, dict) else None
    return {**(payload or {}), "piece_vectors": found or ()}


def record_id(document_id: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"ragagent-document:{document_id}"))


def match(key: str, value: str) -> qe.FieldCondition:
    return qe.FieldCondition(key=key, match=qe.MatchValue(value))


def is_record() -> qe.Filter:
    return qe.Filter(must=[match("kind", RECORD)])


def to_edge_filter(filters: SearchFilters | None) -> tuple[qe.Filter | None, str | None]:
    """The engine's filter, and a URL prefix to refine by when it does not end at "/"."""
    if filters is None or filters.empty:
        return None, None
    must: list[qe.FieldCondition | qe.Filter] = []
    if filters.module:
        must.append(match("module", filters.module))
    if filters.chapter:
        must.append(match("chapter", filters.chapter))
    exact_prefix = None
    if filters.url_prefix:
        cut = filters.url_prefix.rfind("/")
        if cut >= 0:
            must.append(match("url_prefixes", filters.url_prefix[: cut + 1]))
        if cut != len(filters.url_prefix) - 1:
            exact_prefix = filters.url_prefix
    if filters.access is not None:
        must.append(edge_readable(filters.access))
    return qe.Filter(must=list(must)), exact_prefix


def edge_readable(access: ReadAccess) -> qe.Filter:
    """The chunks ``access`` may read, in the engine's query (see qdrant_payload.readable)."""
    should: list[qe.FieldCondition | qe.IsEmptyCondition] = [
        qe.FieldCondition(key=FIELD, match=qe.MatchAny(sorted(access.grants)))
    ]
    if access.unlabelled:
        should.append(qe.IsEmptyCondition(FIELD))
    return qe.Filter(should=list(should))


def document_record(document_id: str, chunks: Sequence[Chunk]) -> dict[str, Any]:
    first = chunks[0] if chunks else Chunk(chunk_id="", document_id=document_id, text="")
    return {
        "kind": RECORD,
        "record": {
            "document_id": document_id,
            "document_hash": first.document_hash,
            "chunk_count": len(chunks),
            "url": first.url,
            "title": first.title,
            "module": first.module,
            "chapter": first.chapter,
            "created_at": max((c.created_at for c in chunks), default=""),
            FIELD: list(first.access),
        },
    }


def summary(payload: dict[str, Any]) -> DocumentSummary:
    r = payload.get("record") or {}
    return DocumentSummary(
        document_id=str(r.get("document_id", "")),
        document_hash=str(r.get("document_hash", "")),
        chunk_count=int(r.get("chunk_count", 0)),
        url=str(r.get("url", "")),
        title=str(r.get("title", "")),
        module=str(r.get("module", "")),
        chapter=str(r.get("chapter", "")),
        ingested_at=parse_time(r.get("created_at")),
        access=tuple(str(label) for label in r.get(FIELD) or ()),
    )


def parse_time(value: object) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None
