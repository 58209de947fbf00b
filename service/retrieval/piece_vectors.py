"""Vectors of a chunk's quotable pieces, computed at ingest from the chunk's own model pass.

The extractive strategy ranks the pieces (sentences, list items, table rows) of the chunks a
question retrieved by their similarity to the question. Embedding them at question time
cost one model call per piece, hundreds of milliseconds before the first answer text on 2
busy cores. Instead, the model pass that embeds a chunk at ingest already holds one vector
per token: a piece's vector is the mean of its tokens' vectors (the same mean pooling that
makes the chunk's vector, over the piece's span), so it costs no model time at all. The
vectors are contextual: each token has seen the whole chunk.

They are stored with the chunk in the engine, as its named multivector ``pieces`` (float16,
dot product on unit rows, no HNSW graph: it is only read for the candidates a search already
found), one row per piece of :func:`service.text.sentences.split_pieces` in order (a zero row
where a piece could not be placed in the text). The engine itself scores a chunk by its best
piece (see :func:`piece_blend` in the stores), so a search decodes nothing; ``FORMAT`` names
the layout and the piece splitting it follows, and is part of ingestion's re-index key, so
that vectors made for other pieces are never used.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

# Changing the piece splitter or the layout changes this, which makes old vectors unused.
FORMAT = "pieces-2"  # pieces-1: float16 base64 text in the payload
# The engine's name of the multivector.
PIECES = "pieces"
_WORD = re.compile(r"[A-Za-z0-9]+")
# How far past a piece's first word its other words are looked for, in words.
_REACH = 2

Span = tuple[int, int]


def locate(text: str, pieces: Sequence[str]) -> list[Span | None]:
    """Where each piece lies in ``text`` (character offsets), in order.

    Pieces are cleaned text (markup, link targets and bracketed numbers gone; table rows
    rewritten as "header: cell"), so they are placed by their words: from where the last
    piece ended, the first of a piece's words found, then each further word found within
    reach. A piece with fewer than half of its words found is not placed (None).
    """
    words = [(m.group().lower(), m.start(), m.end()) for m in _WORD.finditer(text)]
    cursor = 0
    spans: list[Span | None] = []
    for piece in pieces:
        wanted = [w.lower() for w in _WORD.findall(piece)]
        span, cursor = _place(words, wanted, cursor)
        spans.append(span)
    return spans


def _place(
    words: list[tuple[str, int, int]], wanted: list[str], cursor: int
) -> tuple[Span | None, int]:
    if not wanted:
        return None, cursor
    reach = len(wanted) * _REACH + 8
    for first in range(cursor, len(words)):
        if words[first][0] not in wanted[:3]:
            continue
        found, last, at = 1, first, wanted.index(words[first][0]) + 1
        for index in range(first + 1, min(len(words), first + reach)):
            if at < len(wanted) and words[index][0] == wanted[at]:
                found, last, at = found + 1, index, at + 1
            elif words[index][0] in wanted[at + 1 : at + 3]:  # a word of the piece skipped
                at = wanted.index(words[index][0], at + 1) + 1
                found, last = found + 1, index
        if found * 2 >= len(wanted):
            return (words[first][1], words[last][2]), last + 1
    return None, cursor  # not placed: the next piece is looked for from the same point


def pool(
    tokens: npt.NDArray[np.floating],
    offsets: Sequence[tuple[int, int]],
    spans: Sequence[Span | None],
    *,
    shift: int = 0,
) -> npt.NDArray[np.float32]:
    """One L2-normalised row per span: the mean of the vectors of the tokens inside it
    (offsets of ``tokens`` are ``shift`` characters ahead of the spans); zero where no
    token is."""
    starts = np.asarray([s for s, _ in offsets]) - shift
    ends = np.asarray([e for _, e in offsets]) - shift
    real = ends > starts  # special and padding tokens have empty offsets
    out = np.zeros((len(spans), tokens.shape[1]), dtype=np.float32)
    for row, span in enumerate(spans):
        if span is None:
            continue
        inside = real & (starts >= span[0]) & (ends <= span[1])
        if not inside.any():
            continue
        mean = tokens[inside].mean(axis=0)
        norm = float(np.linalg.norm(mean))
        if norm > 0:
            out[row] = mean / norm
    return out


def stored_row(
    stored: Sequence[Sequence[float]], count: int, position: int
) -> npt.NDArray[np.float32] | None:
    """Row ``position`` of a chunk's stored vectors when they were made for its ``count``
    pieces and the piece was placed (a zero row was not); None otherwise."""
    if len(stored) != count or not 0 <= position < count:
        return None
    found = np.asarray(stored[position], dtype=np.float32)
    return found if found.any() else None


# How a search scores a chunk by its pieces (the stores ask their engine for it, see
# ``edge_store`` and ``qdrant_store``): a chunk holds several facts; its one vector is the
# mean of all of them, so a question about one fact can sit closer to a chunk that is about
# the question's subject in general. The piece that states the fact matches that question
# better than its chunk does: a chunk scores ``max(cosine, weight * best piece cosine)``
# (the best piece is the engine's MaxSim of the query over the chunk's pieces). ``weight``
# < 1 keeps a short piece that merely repeats the question's words from outranking whole
# chunks. Measured on the four read question sets (tests/eval, 137 answerable, 137
# unanswerable, 2026-11-23): recall@5 0.920 -> 0.949, MRR 0.860 -> 0.879 at weight 0.9 over
# 20 candidates, rejection unchanged (0.964); 0.85-0.92 within 0.01 of it.
