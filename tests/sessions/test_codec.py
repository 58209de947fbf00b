"""How a turn's sources are kept: every field of the chunk but its piece vectors, read back
as the same sources."""

from __future__ import annotations

import json
from dataclasses import asdict, fields, replace

from service.domain import Chunk, ScoredChunk, Source
from service.sessions.codec import sources_from_json, sources_to_json
from tests.sessions.support import result


def test_a_source_keeps_every_field_of_its_chunk_but_the_piece_vectors() -> None:
    chunk = replace(
        result().sources[0].hit.chunk,
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
