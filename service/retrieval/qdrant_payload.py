"""How chunks live in Qdrant: the client, payloads, filters and per-document summaries.

Pure functions apart from :func:`open_qdrant_client`; the store in ``qdrant_store`` calls them.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from qdrant_client import AsyncQdrantClient, models

from service.access import FIELD, ReadAccess
from service.datadir import private_dir
from service.domain import SearchFilters
from service.errors import StoreLocked
from service.retrieval.piece_vectors import PIECES

# The dense vector's name (qdrant_calls imports this module's neighbours, not the reverse).
DENSE = "dense"


def open_qdrant_client(
    *, url: str | None, api_key: str | None, path: Path, timeout: float
) -> AsyncQdrantClient:
    """A client for the server at ``url``, or for the embedded store in ``path``."""
    if url:
        return AsyncQdrantClient(
            url=url,
            api_key=api_key,
            timeout=max(1, round(timeout)),
            # The version probe is a blocking request at start-up; compatibility is our pin.
            check_compatibility=False,
        )
    private_dir(path)  # under DATA_DIR, 0700 like the session database beside it
    try:
        return AsyncQdrantClient(path=str(path))
    except RuntimeError as exc:
        if "already accessed" in str(exc):
            raise StoreLocked(
                f"the embedded Qdrant store in {path} is open in another process (it is "
                "single-process): stop that process, ingest through the running server "
                "with `ragagent ingest --address`, or use a Qdrant server (RAGAGENT_QDRANT_URL)"
            ) from None
        raise


def match_value(key: str, value: str) -> models.FieldCondition:
    return models.FieldCondition(key=key, match=models.MatchValue(value=value))


def to_filter(filters: SearchFilters | None) -> tuple[models.Filter | None, str | None]:
    if filters is None or filters.empty:
        return None, None
    must: list[models.Condition] = []
    if filters.module:
        must.append(match_value("module", filters.module))
    if filters.chapter:
        must.append(match_value("chapter", filters.chapter))
    exact_prefix = None
    if filters.url_prefix:
        cut = filters.url_prefix.rfind("/")
        if cut >= 0:
            must.append(match_value("url_prefixes", filters.url_prefix[: cut + 1]))
        if cut != len(filters.url_prefix) - 1:
            exact_prefix = filters.url_prefix
    if filters.access is not None:
        must.append(readable(filters.access))
    return models.Filter(must=must), exact_prefix


def readable(access: ReadAccess) -> models.Filter:
    """The chunks ``access`` may read, as a condition of the engine's query: one of its
    grants among the chunk's labels (the keyword index answers it), or no label at all
    when unlabelled documents are visible (a chunk stored before labels existed has no
    field, which reads as unlabelled too)."""
    should: list[models.Condition] = [
        models.FieldCondition(key=FIELD, match=models.MatchAny(any=sorted(access.grants)))
    ]
    if access.unlabelled:
        should.append(models.IsEmptyCondition(is_empty=models.PayloadField(key=FIELD)))
    return models.Filter(should=should)


def piece_blend(
    vector: Sequence[float], weight: float, limit: int, query_filter: models.Filter | None
) -> list[models.Prefetch]:
    """The server's form of :func:`~service.retrieval.edge_payload.piece_blend`: the
    ``limit`` dense candidates, and the same rescored by MaxSim over their pieces."""
    query = list(vector)

    def dense() -> models.Prefetch:
        return models.Prefetch(query=query, using=DENSE, limit=limit, filter=query_filter)

    return [dense(), models.Prefetch(prefetch=dense(), query=[query], using=PIECES, limit=limit)]


def blend_formula(weight: float) -> models.FormulaQuery:
    """``max(cosine, weight * best piece)`` over :func:`piece_blend`'s two scores; a chunk
    without pieces has no second score: it counts 0."""
    return models.FormulaQuery(
        formula=models.MaxExpression(
            max=["$score[0]", models.MultExpression(mult=[weight, "$score[1]"])]
        ),
        defaults={"$score[1]": 0.0},
    )
