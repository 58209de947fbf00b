"""A chunk as a point's payload, the same in the embedded engine and on a server."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from service.access import FIELD
from service.domain import Chunk

_CHUNK_FIELDS = {f.name for f in fields(Chunk)}


def url_prefixes(url: str) -> list[str]:
    """Every prefix of ``url`` that ends at a "/", so prefix filters become exact matches."""
    return [url[: i + 1] for i, char in enumerate(url) if char == "/"]


def chunk_payload(chunk: Chunk) -> dict[str, Any]:
    """What a chunk's point carries as payload: the chunk but its piece vectors (a vector
    of the point's own), and the URL prefixes that prefix filters match."""
    payload = {name: getattr(chunk, name) for name in _CHUNK_FIELDS if name != "piece_vectors"}
    payload[FIELD] = list(chunk.access)
    payload["url_prefixes"] = url_prefixes(chunk.url)
    return payload


def chunk_from_payload(payload: dict[str, Any]) -> Chunk:
    chunk = {k: v for k, v in payload.items() if k in _CHUNK_FIELDS}
    if not isinstance(chunk.get("piece_vectors", ()), list | tuple):
        del chunk["piece_vectors"]  # an older layout's text (base64), not vectors
    if FIELD in chunk:
        chunk[FIELD] = tuple(chunk[FIELD] or ())
    return Chunk(**chunk)
