"""Piece vectors: placed in the chunk's text, pooled from its model pass at ingest, stored
with the chunk by both stores, and used by the extractive strategy without a model call."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from service.ingest.loader import SourceDocument
from service.ingest.pipeline import Ingestor
from service.retrieval import piece_vectors
from service.retrieval.embedders import FastEmbedEmbedder
from service.text.sentences import split_pieces
from tests.helpers import local_embedder

PAGE = """---
title: Links and joints
---

# Links and joints

A **link** describes one rigid body of the robot, see [the spec](http://example.com) [2].

```xml
<link name="base"/>
```

| Part | Voltage |
|---|---|
| Battery pack | 12 V |

- A fixed joint attaches two links without motion.
- A revolute joint rotates around one axis.

The end of the page has one more sentence here. And another one follows it.
"""


def test_pieces_are_placed_in_the_text_in_order() -> None:
    text = PAGE.split("---\n", 2)[2]
    pieces = [p.text for p in split_pieces(text)]
    spans = piece_vectors.locate(text, pieces)
    assert len(spans) == len(pieces)
    placed = [text[s[0] : s[1]] for s in spans if s is not None]
    assert placed[0].startswith("A **link** describes one rigid body")
    assert any("Battery pack | 12 V" in p for p in placed)
    assert placed[-1] == "And another one follows it"
    starts = [s[0] for s in spans if s is not None]
    assert starts == sorted(starts)
    assert piece_vectors.locate("Nothing alike here.", ["Quite different words entirely."]) == [
        None
    ]


def test_encoding_round_trips_and_refuses_other_layouts() -> None:
    matrix = np.random.default_rng(1).normal(size=(3, 8)).astype(np.float32)
    text = piece_vectors.encode(matrix)
    decoded = piece_vectors.decode(text, 3, 8)
    assert decoded is not None
    np.testing.assert_allclose(decoded, matrix, atol=1e-2)
    assert piece_vectors.decode(text, 4, 8) is None  # made for other pieces
    assert piece_vectors.decode(text.replace("pieces-1", "pieces-0"), 3, 8) is None
    assert piece_vectors.decode("", 3, 8) is None
    assert piece_vectors.decode("pieces-1:3:not base64!", 3, 8) is None


async def test_one_model_pass_gives_the_chunk_vector_and_its_pieces_vectors() -> None:
    embedder = local_embedder()
    assert isinstance(embedder, FastEmbedEmbedder)
    ingestor = Ingestor(embedder, store=None)  # type: ignore[arg-type]
    prepared = ingestor.prepare(SourceDocument(path="links.md", content=PAGE))
    texts = list(prepared.embed_texts)
    vectors, encoded = await embedder.embed_with_pieces(
        texts, prepared.piece_spans, prepared.shifts
    )
    np.testing.assert_allclose(vectors, await embedder.embed_documents(texts), atol=1e-4)
    chunk = prepared.chunks[0]
    pieces = split_pieces(chunk.text)
    matrix = piece_vectors.decode(encoded[0], len(pieces), embedder.dimension)
    assert matrix is not None
    alone = np.asarray(await embedder.embed_documents([p.text for p in pieces]))
    similarity = np.sum(matrix * alone, axis=1)
    placed = [s is not None for s in prepared.piece_spans[0]]
    assert all(placed), prepared.piece_spans[0]
    # Contextual (each token saw the whole chunk, so short pieces lean towards it), yet
    # near the piece embedded alone, and nearer to it than to the other pieces.
    assert similarity.mean() > 0.6, similarity
    assert similarity.min() > 0.3, similarity
    # (Measured: 4 of 6; the two filler sentences at the end lean towards the links.)
    assert (np.argmax(matrix @ alone.T, axis=1) == np.arange(len(pieces))).mean() >= 0.6


async def test_an_ingested_chunk_carries_its_piece_vectors_through_the_store(
    tmp_path: Path,
) -> None:
    from service.config import Settings
    from service.runtime import Runtime

    runtime = await Runtime.open(
        Settings(data_dir=tmp_path, log_level="WARNING"), embedder=local_embedder()
    )
    try:
        await Ingestor(runtime.embedder, runtime.store).ingest(
            [SourceDocument(path="links.md", content=PAGE)]
        )
        [hit, *_] = await runtime.store.search("What does a link describe?", limit=1, threshold=0)
    finally:
        await runtime.close()
    pieces = split_pieces(hit.chunk.text)
    stored = piece_vectors.decode(hit.chunk.piece_vectors, len(pieces), 384)
    assert stored is not None
    assert (np.linalg.norm(stored, axis=1) > 0.99).sum() >= len(pieces) - 1


def test_a_chunk_scores_by_its_best_piece_when_it_has_readable_pieces() -> None:
    rows = np.zeros((3, 4), dtype=np.float32)
    rows[0] = [1, 0, 0, 0]
    rows[2] = [0, 0.6, 0.8, 0]  # row 1 is zero: a piece that could not be placed
    encoded = piece_vectors.encode(rows)
    query = np.asarray([0, 0.6, 0.8, 0], dtype=np.float32)
    assert piece_vectors.best_similarity(encoded, query) == pytest.approx(1.0, abs=1e-3)
    match = piece_vectors.PieceMatch.of(query.tolist(), 0.9)
    assert match.score(0.5, encoded) == pytest.approx(0.9, abs=1e-3)
    assert match.score(0.95, encoded) == 0.95  # the chunk itself matches better
    # Nothing readable: the chunk's own cosine, never an error.
    for stored in ("", None, 42, "pieces-0:3:AAAA", "pieces-1:x:AAAA", "pieces-1:0:",
                   "pieces-1:3:not base64!", piece_vectors.encode(rows[:, :2])):  # fmt: skip
        assert match.score(0.5, stored) == 0.5
