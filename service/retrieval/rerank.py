"""Reranking after retrieval: a second look at the best candidates, in another light.

The engine ranks by embedding similarity (or its fusion with BM25); a reranker reorders a
few more candidates than asked for (the pipeline keeps the best). The lexical reranker keeps
the retrieval scores, so the confidence threshold keeps its meaning: it changes which of the
relevant chunks come first, never whether a question is answerable. A cross-encoder behind
an HTTP endpoint (:mod:`service.retrieval.http_rerank`) may also give the threshold its input.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Protocol

import qdrant_edge as qe

from service.domain import Deadline, ScoredChunk

# The engine's own analyser (the one its BM25 vectors use): English Snowball stems and stop
# words, words of three letters or more. No word list is written here.
_ANALYSER = qe.Bm25(qe.Bm25Config(language="english", min_token_len=3))


class Reranker(Protocol):
    """Reorders candidates for a query; returns them all, best first."""

    async def rerank(
        self, query: str, candidates: Sequence[ScoredChunk], *, deadline: Deadline | None = None
    ) -> list[ScoredChunk]: ...


def terms(text: str) -> frozenset[int]:
    """The text's terms as the engine's analyser sees them (stemmed, stop words gone)."""
    return frozenset(_ANALYSER.embed_query(text).indices)


class LexicalReranker:
    """Retrieval score plus a bonus for the query's terms found in the chunk's text and
    headings: exact terms (a node name, a parameter) that an embedding blurs."""

    def __init__(self, *, weight: float = 0.1) -> None:
        self.weight = weight

    async def rerank(
        self, query: str, candidates: Sequence[ScoredChunk], *, deadline: Deadline | None = None
    ) -> list[ScoredChunk]:
        wanted = terms(query)
        if not wanted or not candidates:
            return list(candidates)
        texts = [_chunk_terms(c.chunk.title, c.chunk.heading, c.chunk.text) for c in candidates]
        # Terms in every candidate tell them apart no better than none: weigh by rarity.
        df = {t: sum(t in found for found in texts) for t in wanted}
        idf = {t: math.log(1 + len(texts) / df[t]) if df[t] else 0.0 for t in wanted}
        total = sum(idf.values()) or 1.0

        def key(item: tuple[int, ScoredChunk]) -> float:
            i, hit = item
            return hit.score + self.weight * sum(idf[t] for t in wanted & texts[i]) / total

        return [hit for _, hit in sorted(enumerate(candidates), key=key, reverse=True)]


@functools.lru_cache(maxsize=1024)
def _chunk_terms(title: str, heading: str, text: str) -> frozenset[int]:
    """A chunk's terms, kept for the chunks searched most."""
    return terms(f"{title} {heading} {text}")
