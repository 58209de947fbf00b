"""How a turn's sources are kept: every field of the chunk but its piece vectors, read back
as the same sources."""

from __future__ import annotations

import json
from dataclasses import asdict, fields, replace

from service.domain import Chunk, ScoredChunk, Source
from service.sessions.codec import sources_from_json, sources_to_json


def test_a_source_keeps_every_field_of_its_chunk_but_the_piece_vectors() -> None:
    chunk = Chunk(
        chunk_id="c-1",
        document_id="module-01/page.md",
        text="Links are rigid.",
        url="https://example.test/page",
        title="Links",
        module="module-01",
        position=3,
        access=("team-a", "team-b"),
        piece_vectors=[[0.1, 0.2], [0.3, 0.4]],
    )
    stored = json.loads(json.dumps(sources_to_json([Source(ScoredChunk(chunk, 0.8), 1)])))

    expected = asdict(replace(chunk, piece_vectors=()))
    assert stored[0]["chunk"] == json.loads(json.dumps(expected))
    assert set(stored[0]["chunk"]) == {f.name for f in fields(Chunk)}
    (source,) = sources_from_json(stored)
    read = source.hit.chunk
    assert replace(read, access=tuple(read.access)) == replace(chunk, piece_vectors=())
    assert (source.hit.score, source.citation) == (0.8, 1)
