"""Vectors of pieces the extractive strategy has to embed itself: few, batched, remembered.

Pieces of chunks ingested with piece vectors need none of this (``piece_vectors``). For the
others (a store ingested before them, an embedder that cannot pool them), embedding every
piece one at a time cost up to 300 model calls per question (first answer text at 776 ms
p50). Instead only the pieces a cheap pre-ranking keeps are embedded (see ``extractive``),
in one call (the local embedder batches short texts by tokens), and every vector is
remembered by its text, so that pieces of chunks an earlier question retrieved cost nothing.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from service.domain import Deadline
from service.retrieval.base import Embedder, QueryVectors, query_vector

# 384-dimensional float32 vectors: 8,192 of them take 12.6 MB.
DEFAULT_CAPACITY = 8192


class SentenceVectors:
    """Embeds texts through ``embedder``, remembering the last ``capacity`` vectors.

    The cache is keyed by the text alone because one instance serves one embedder.
    """

    def __init__(self, embedder: Embedder, *, capacity: int = DEFAULT_CAPACITY) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self._embedder = embedder
        self._capacity = capacity
        self._cache: OrderedDict[str, npt.NDArray[np.float32]] = OrderedDict()

    @property
    def model_name(self) -> str:
        return self._embedder.model_name

    @property
    def dimension(self) -> int:
        return self._embedder.dimension

    def __len__(self) -> int:
        return len(self._cache)

    async def question(
        self, query: str, vectors: QueryVectors | None, deadline: Deadline | None
    ) -> npt.NDArray[np.float32]:
        """The question's vector: the run's (its search made it), else embedded now."""
        return np.asarray(
            await query_vector(self._embedder, query, vectors, deadline), dtype=np.float32
        )

    async def pieces(
        self, texts: Sequence[str], deadline: Deadline | None
    ) -> npt.NDArray[np.float32]:
        """One L2-normalised row per text, embedding what is not remembered in one call."""
        found = {text: self._cache[text] for text in texts if text in self._cache}
        missing = [text for text in dict.fromkeys(texts) if text not in found]
        if missing:
            vectors = await self._embedder.embed_documents(missing, deadline=deadline)
            for text, vector in zip(missing, vectors, strict=True):
                found[text] = np.asarray(vector, dtype=np.float32)
        for text in dict.fromkeys(texts):
            self._remember(text, found[text])
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        return np.vstack([found[text] for text in texts])

    def _remember(self, key: str, vector: npt.NDArray[np.float32]) -> None:
        self._cache[key] = vector
        self._cache.move_to_end(key)  # the most recently used are kept
        while len(self._cache) > self._capacity:
            self._cache.popitem(last=False)
