"""Piece vectors: placed in the chunk's text, pooled from its model pass at ingest, stored
with the chunk by both stores, and used by the extractive strategy without a model call."""

from __future__ import annotations

from pathlib import Path

import numpy as np

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


def test_a_stored_row_is_read_only_when_made_for_the_chunks_pieces() -> None:
    rows = [[1.0, 0.0], [0.0, 0.0], [0.6, 0.8]]  # row 1: a piece that could not be placed
    found = piece_vectors.stored_row(rows, 3, 2)
    assert found is not None
    np.testing.assert_allclose(found, [0.6, 0.8])
    assert piece_vectors.stored_row(rows, 3, 1) is None
    assert piece_vectors.stored_row(rows, 4, 0) is None  # made for other pieces
    assert piece_vectors.stored_row(rows, 3, 3) is None
    assert piece_vectors.stored_row((), 3, 0) is None  # stored without pieces


async def test_one_model_pass_gives_the_chunk_vector_and_its_pieces_vectors() -> None:
    embedder = local_embedder()
    assert isinstance(embedder, FastEmbedEmbedder)
    ingestor = Ingestor(embedder, store=None)  # type: ignore[arg-type]
    prepared = ingestor.prepare(SourceDocument(path="links.md", content=PAGE))
    texts = list(prepared.embed_texts)
    vectors, rows = await embedder.embed_with_pieces(texts, prepared.piece_spans, prepared.shifts)
    np.testing.assert_allclose(vectors, await embedder.embed_documents(texts), atol=1e-4)
    chunk = prepared.chunks[0]
    pieces = split_pieces(chunk.text)
    matrix = np.asarray(rows[0])
    assert matrix.shape == (len(pieces), embedder.dimension)
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
        [hit, *_] = await runtime.store.search(
            "What does a link describe?", limit=1, threshold=0, with_pieces=True
        )
    finally:
        await runtime.close()
    pieces = split_pieces(hit.chunk.text)
    stored = np.asarray(hit.chunk.piece_vectors)
    assert stored.shape == (len(pieces), 384)
    assert (np.linalg.norm(stored, axis=1) > 0.99).sum() >= len(pieces) - 1
