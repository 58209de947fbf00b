"""Vectors of a chunk's quotable pieces, computed at ingest from the chunk's own model pass.

The extractive strategy ranks the pieces (sentences, list items, table rows) of the chunks a
question retrieved by their similarity to the question. Embedding them at question time
cost one model call per piece, hundreds of milliseconds before the first answer text on 2
busy cores. Instead, the model pass that embeds a chunk at ingest already holds one vector
per token: a piece's vector is the mean of its tokens' vectors (the same mean pooling that
makes the chunk's vector, over the piece's span), so it costs no model time at all. The
vectors are contextual: each token has seen the whole chunk.

They are stored with the chunk as float16, base64 text, one row per piece of
:func:`service.text.sentences.split_pieces` in order (a zero row where a piece could not be
placed in the text); ``FORMAT`` names the layout and the piece splitting it follows, so that
vectors made for other pieces are never used.
"""

from __future__ import annotations

import base64
import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

# Changing the piece splitter or the layout changes this, which makes old vectors unused.
FORMAT = "pieces-1"
_WORD = re.compile(r"[A-Za-z0-9]+")
# How far past a piece's first word its other words are looked for, in words.
_REACH = 2

Span = tuple[int, int]


def encode(matrix: npt.NDArray[np.floating]) -> str:
    """``FORMAT:rows:base64`` of the matrix as float16."""
    data = np.ascontiguousarray(matrix, dtype="<f2").tobytes()
    return f"{FORMAT}:{matrix.shape[0]}:{base64.b64encode(data).decode('ascii')}"


def decode(text: str, rows: int, dimension: int) -> npt.NDArray[np.float32] | None:
    """The stored matrix, or None when there is none or it was made for other pieces."""
    if not text:
        return None
    fmt, _, rest = text.partition(":")
    count, _, data = rest.partition(":")
    if fmt != FORMAT or count != str(rows):
        return None
    try:
        raw = base64.b64decode(data, validate=True)
    except ValueError:
        return None
    if len(raw) != rows * dimension * 2:
        return None
    return np.frombuffer(raw, dtype="<f2").astype(np.float32).reshape(rows, dimension)


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


def best_similarity(text: str, vector: npt.NDArray[np.float32]) -> float | None:
    """The highest cosine between the unit ``vector`` and a stored piece (rows are unit
    length, a zero row scores 0), or None when ``text`` holds no readable vectors."""
    fmt, _, rest = text.partition(":")
    count = rest.partition(":")[0]
    if fmt != FORMAT or not count.isdigit() or int(count) == 0:
        return None
    matrix = _decoded(text, int(count), vector.shape[0])
    if matrix is None:
        return None
    return float((matrix @ vector).max())


@functools.lru_cache(maxsize=1024)
def _decoded(text: str, rows: int, dimension: int) -> npt.NDArray[np.float32] | None:
    """:func:`decode`, kept for the chunks searched most: decoding was a third of what
    scoring by pieces cost a search (20 candidates, ~10 pieces each). At most 1,024
    matrices of ~10 x 384 float32, ~16 MB."""
    matrix = decode(text, rows, dimension)
    if matrix is not None:
        matrix.flags.writeable = False  # shared between searches
    return matrix


@dataclass(frozen=True, slots=True)
class PieceMatch:
    """Scores a chunk by its best piece as well as by itself, for a search.

    A chunk holds several facts; its one vector is the mean of all of them, so a question
    about one fact can sit closer to a chunk that is about the question's subject in
    general. The piece that states the fact matches that question better than its chunk
    does: a chunk scores ``max(cosine, weight * best piece cosine)``. ``weight`` < 1 keeps
    a short piece that merely repeats the question's words from outranking whole chunks.
    Measured on the four read question sets (tests/eval, 137 answerable, 137
    unanswerable, 2026-11-23): recall@5 0.920 -> 0.949, MRR 0.860 -> 0.879 at weight 0.9
    over 20 candidates, rejection unchanged (0.964); 0.85-0.92 within 0.01 of it.
    """

    vector: npt.NDArray[np.float32]
    weight: float

    @classmethod
    def of(cls, vector: Sequence[float], weight: float) -> PieceMatch:
        return cls(np.asarray(vector, dtype=np.float32), weight)

    def score(self, similarity: float, encoded: object) -> float:
        """The chunk's score from its cosine and its stored pieces (a payload value)."""
        if not isinstance(encoded, str) or not encoded:
            return similarity
        best = best_similarity(encoded, self.vector)
        return similarity if best is None else max(similarity, self.weight * best)
