"""The extractive strategy: no language model; the answer quotes the most relevant pieces.

The pieces (prose sentences, list items, table rows) of the retrieved chunks are ranked by
cosine similarity to the question plus their lexical overlap with its content words (rare
words weighing most); near-duplicates of pieces already chosen are skipped. Their vectors
were pooled from their chunk's model pass at ingest (``service.retrieval.piece_vectors``),
so that answering costs no model call but the question's own, which the embedder still
holds from the search. Chunks stored without them (ingested before, or by an embedder that
cannot give them) have their pieces embedded now: only the best ``EMBEDDED_CANDIDATES`` by
lexical overlap and chunk score, in one batch, remembered (``SentenceVectors``). Lines of
code blocks are candidates too, quoted as code: those sharing a word with the question, and
the command lines when it asks for a command (:mod:`commands`). What a chosen piece brings
along (the rest of a short list, record or block, what a lead-in introduces, the sentence a
leaning one needs) and where the answer stops growing is :mod:`quote_context`'s. A sentence
that leans on one its chunk does not hold is not quoted. The chosen are quoted in document
order, each paragraph citing its source. Deterministic: the same sources give the same answer.
"""

from __future__ import annotations

import asyncio
import re

import numpy as np
import numpy.typing as npt

from service.agent.commands import asks_for_command, code_lines, command_pieces
from service.agent.prompts import retrieval_query
from service.agent.quote_context import (
    LABELLED_VALUE,
    Candidate,
    chunk_key,
    code_start,
    needs_antecedent,
    within_length,
)
from service.agent.run import Outcome, Run
from service.agent.sentence_vectors import SentenceVectors
from service.domain import ResponseStatus, Source
from service.errors import DeadlineExceeded
from service.retrieval import piece_vectors
from service.text.sentences import Piece, content_words, lexical_overlap, split_pieces

MAX_CANDIDATES = 300
# Pieces embedded per question (RAGAGENT_EXTRACTIVE_CANDIDATES): the time to the first delta
# grows with them (one batched model call), the answer's quality too; chosen by measurement.
EMBEDDED_CANDIDATES = 24
# How much a piece's chunk score adds to its lexical overlap in the cheap pre-ranking.
CHUNK_SCORE_WEIGHT = 0.5
# A sentence this similar to one already chosen says nothing new.
NEAR_DUPLICATE = 0.9
# Sentences far less relevant than the best one are filler, however few were found.
RELATIVE_FLOOR = 0.5
_DIVERSITY = 0.25
# How much sharing the question's (rare) content words adds to the embedding similarity.
LEXICAL_WEIGHT = 0.5

_ENDS_SENTENCE = re.compile(r"[.!?][\"')\]]?$")
_CLOSED = re.compile(r"[.!?:;]$")
_CODE = ("command", "code")  # pieces from code blocks, quoted as code
_HAS_FACT = re.compile(r"\d|\b[A-Z][A-Za-z0-9]*[A-Z0-9]")  # a number, an acronym, a model name


async def run_extractive(
    run: Run,
    vectors: SentenceVectors,
    *,
    sentences: int,
    embedded: int = EMBEDDED_CANDIDATES,
) -> Outcome:
    request = run.request
    run.model_name = vectors.model_name
    query = retrieval_query(request.query, request.history)
    # A tool call of its own; the hits bring their stored piece vectors to quote by.
    sources = await run.retrieve(query, request.max_results, with_pieces=True)
    pieces = {chunk_key(source): split_pieces(source.hit.chunk.text) for source in sources}
    candidates = _candidates(sources, pieces, strict=True) or _candidates(
        sources, pieces, strict=False
    )
    if asks_for_command(request.query):
        candidates += _commands(sources, pieces, len(candidates))
    candidates += _code_lines(sources, pieces, candidates, request.query)
    if not candidates:
        return await run.no_answer()
    lexical = np.asarray(lexical_overlap(request.query, [c.text for c in candidates]))
    # Vectors stored at ingest where the chunk has them; of the others, only the best few
    # by the cheap pre-ranking are embedded now (chunks ingested before piece vectors).
    stored = [_stored_row(c, vectors.dimension) for c in candidates]
    unstored = [i for i, row in enumerate(stored) if row is None]
    worth = {
        unstored[i] for i in prerank([candidates[i] for i in unstored], lexical[unstored], embedded)
    }
    kept = [i for i, row in enumerate(stored) if row is not None or i in worth]
    candidates, lexical, rows = (
        [candidates[i] for i in kept],
        lexical[kept],
        [stored[i] for i in kept],
    )
    missing = [c.text for c, row in zip(candidates, rows, strict=True) if row is None]
    run.phase = "tool"
    try:
        async with asyncio.timeout(run.deadline.remaining()):
            # The question's vector is the one the search has just made (one per run).
            question = await vectors.question(query, run.searcher.vectors, run.deadline)
            fresh = await vectors.pieces(missing, run.deadline)
    except TimeoutError:
        raise DeadlineExceeded("the deadline ran out while ranking sentences") from None
    new = iter(fresh)
    matrix = np.vstack([row if row is not None else next(new) for row in rows])
    chosen = choose(question, matrix, sentences, bonus=lexical)
    picked = within_length([candidates[i] for i in chosen], pieces)
    for index, candidate in enumerate(picked):
        following = picked[index + 1] if index + 1 < len(picked) else None
        code = candidate.piece.kind in _CODE
        await run.write(f"`{candidate.text}`" if code else candidate.text)
        if following is not None and _unclosed_item(candidate, following):
            item = candidate.piece.kind != "sentence"
            await run.write(";" if item and following.piece.kind == candidate.piece.kind else ".")
        if following is None or following.source.citation != candidate.source.citation:
            await run.write(f" [{candidate.source.citation}]")
            if following is not None:
                await run.write("\n\n")
        else:
            await run.write(" ")
    await run.end_answer()
    return Outcome(ResponseStatus.SUCCESS, "extractive", vectors.model_name)


def _stored_row(candidate: Candidate, dimension: int) -> npt.NDArray[np.float32] | None:
    if candidate.piece.kind in _CODE:
        return None  # code lines have no stored vector (a code-only chunk stores 0 rows)
    chunk = candidate.source.hit.chunk
    row = piece_vectors.stored_row(chunk.piece_vectors, candidate.count, candidate.position)
    return row if row is not None and row.shape == (dimension,) else None


def prerank(
    candidates: list[Candidate], lexical: npt.NDArray[np.floating], count: int
) -> list[int]:
    """Indexes of the ``count`` candidates worth embedding, in their original order: the
    highest lexical overlap plus ``CHUNK_SCORE_WEIGHT`` times their chunk's score (so that,
    among pieces sharing no word with the question, those of the best chunks come first)."""
    if len(candidates) <= count:
        return list(range(len(candidates)))
    scores = [
        float(lexical[i]) + CHUNK_SCORE_WEIGHT * c.source.hit.score
        for i, c in enumerate(candidates)
    ]
    best = sorted(range(len(candidates)), key=lambda i: (-scores[i], i))[:count]
    return sorted(best)


def choose(
    query: npt.NDArray[np.floating],
    vectors: npt.NDArray[np.floating],
    count: int,
    *,
    bonus: npt.NDArray[np.floating] | None = None,
) -> list[int]:
    """Indexes of up to ``count`` relevant, mutually distinct sentences (vectors normalised).

    Relevance is the cosine similarity to the query plus ``LEXICAL_WEIGHT`` times ``bonus``
    (the lexical overlap, 0 to 1). Maximal marginal relevance: each pick is the most
    relevant, less a penalty for resembling what was already picked.
    """
    relevance = vectors @ query
    if bonus is not None:
        relevance = relevance + LEXICAL_WEIGHT * bonus
    similar = vectors @ vectors.T
    best = float(relevance.max())
    floor = best * RELATIVE_FLOOR if best > 0 else -1.0
    remaining = [i for i in range(len(vectors)) if relevance[i] >= floor]
    chosen: list[int] = []
    while remaining and len(chosen) < count:
        penalty = similar[remaining][:, chosen].max(axis=1) if chosen else 0.0
        scores = (1 - _DIVERSITY) * relevance[remaining] - _DIVERSITY * penalty
        pick = remaining.pop(int(np.argmax(scores)))
        if chosen and float(similar[pick, chosen].max()) > NEAR_DUPLICATE:
            continue
        chosen.append(pick)
    return chosen


def _unclosed_item(candidate: Candidate, following: Candidate) -> bool:
    """Whether an item, row or labelled value without closing punctuation has more of its
    source after it."""
    return (
        candidate.piece.kind in ("item", "row", "sentence")
        and following.source.citation == candidate.source.citation
        and not _CLOSED.search(candidate.text)
    )


def _candidates(
    sources: list[Source], pieces: dict[str, list[Piece]], *, strict: bool
) -> list[Candidate]:
    seen: set[str] = set()
    found: list[Candidate] = []
    for source in sources:
        own = pieces[chunk_key(source)]
        for position, piece in enumerate(own):
            if piece.text in seen or not _readable(piece, strict=strict):
                continue
            if needs_antecedent(piece) and (position == 0 or piece.detached):
                continue  # it points outside its chunk: nothing to quote it with
            if piece.text.endswith(":") and (
                position + 1 == len(own) or own[position + 1].detached
            ):
                continue  # a lead-in to what this chunk does not hold
            seen.add(piece.text)
            found.append(Candidate(source, position, piece, len(own)))
            if len(found) == MAX_CANDIDATES:
                return found
    return found


def _commands(sources: list[Source], pieces: dict[str, list[Piece]], have: int) -> list[Candidate]:
    """The command lines of the sources' code blocks, placed after each chunk's own pieces
    (positions past them; no stored vectors: embedded now, like any unstored piece)."""
    found: list[Candidate] = []
    seen: set[str] = set()
    for source in sources:
        start = len(pieces[chunk_key(source)])
        for offset, piece in enumerate(command_pieces(source.hit.chunk.text)):
            if piece.text in seen or have + len(found) >= MAX_CANDIDATES:
                continue
            seen.add(piece.text)
            found.append(Candidate(source, start + offset, piece, 0))
    return found


def _code_lines(
    sources: list[Source], pieces: dict[str, list[Piece]], have: list[Candidate], question: str
) -> list[Candidate]:
    """The code lines of the sources that share a content word with the question and are no
    candidate already (a command line), placed after each chunk's own pieces and command
    lines (embedded now, like commands)."""
    wanted = content_words(question)
    found: list[Candidate] = []
    seen = {c.text for c in have if c.piece.kind in _CODE}
    for source in sources:
        start = code_start(source, pieces[chunk_key(source)])
        for offset, piece in enumerate(code_lines(source.hit.chunk.text)):
            if piece.text in seen or len(have) + len(found) >= MAX_CANDIDATES:
                continue
            if content_words(piece.text) & wanted:
                seen.add(piece.text)
                found.append(Candidate(source, start + offset, piece, 0))
    return found


def _readable(piece: Piece, *, strict: bool) -> bool:
    """Whether a piece can stand as a quote: a whole sentence, a labelled value ("Location:
    /usr/share/worlds/", however short and unpunctuated), or a list item or table row that is
    not a bare label (it has a few words, or a number or a name)."""
    words = len(piece.text.split())
    if words > 80:
        return False
    if piece.kind != "sentence":
        return words >= 4 or (words >= 2 and bool(_HAS_FACT.search(piece.text)))
    if not strict:
        return words >= 4
    if piece.text.endswith(":"):
        return words >= 4
    if words >= 3 and LABELLED_VALUE.match(piece.text):
        return True  # a labelled value states its fact without a verb or a full stop
    return words >= 6 and bool(_ENDS_SENTENCE.search(piece.text))
