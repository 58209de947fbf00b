"""The extractive strategy: no language model; the answer quotes the most relevant pieces.

The pieces (prose sentences, list items, table rows) of every retrieved chunk are embedded
with the same embedder as the corpus and ranked by cosine similarity to the question plus
their lexical overlap with its content words, rare words weighing most; near-duplicates of
pieces already chosen are skipped. A chosen lead-in ending with ':' brings along what it
introduces. The chosen are quoted in document order, each paragraph citing its source.
Deterministic: the same sources give the same answer.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from service.agent.prompts import retrieval_query
from service.agent.run import Outcome, Run
from service.agent.sentences import Piece, lexical_overlap, split_pieces
from service.domain import ResponseStatus, Source
from service.errors import DeadlineExceeded
from service.retrieval.base import Embedder, query_vector

MAX_CANDIDATES = 300
# A sentence this similar to one already chosen says nothing new.
NEAR_DUPLICATE = 0.9
# Sentences far less relevant than the best one are filler, however few were found.
RELATIVE_FLOOR = 0.5
_DIVERSITY = 0.25
# How much sharing the question's (rare) content words adds to the embedding similarity.
LEXICAL_WEIGHT = 0.5
# How many list items or table rows a chosen lead-in (ending with ":") brings along.
LEAD_IN_ITEMS = 3

_ENDS_SENTENCE = re.compile(r"[.!?][\"')\]]?$")
_CLOSED = re.compile(r"[.!?:;]$")
_HAS_FACT = re.compile(r"\d|\b[A-Z][A-Za-z0-9]*[A-Z0-9]")  # a number, an acronym, a model name


@dataclass(frozen=True, slots=True)
class _Candidate:
    source: Source
    position: int
    piece: Piece

    @property
    def text(self) -> str:
        return self.piece.text


async def run_extractive(run: Run, embedder: Embedder, *, sentences: int) -> Outcome:
    request = run.request
    run.model_name = embedder.model_name
    query = retrieval_query(request.query, request.history)
    sources = await run.retrieve(query, request.max_results)  # a tool call of its own
    pieces = {_key(source): split_pieces(source.hit.chunk.text) for source in sources}
    candidates = _candidates(sources, pieces, strict=True) or _candidates(
        sources, pieces, strict=False
    )
    if not candidates:
        return await run.no_answer()
    run.phase = "tool"
    try:
        async with asyncio.timeout(run.deadline.remaining()):
            # Embedded once per run: the search just did it, with the store's embedder.
            question = await query_vector(embedder, query, run.searcher.vectors, run.deadline)
            vectors = await embedder.embed_documents(
                [c.text for c in candidates], deadline=run.deadline
            )
    except TimeoutError:
        raise DeadlineExceeded("the deadline ran out while ranking sentences") from None
    lexical = np.asarray(lexical_overlap(request.query, [c.text for c in candidates]))
    chosen = choose(np.asarray(question), np.asarray(vectors), sentences, bonus=lexical)
    picked = _with_continuations([candidates[i] for i in chosen], pieces)
    for index, candidate in enumerate(picked):
        following = picked[index + 1] if index + 1 < len(picked) else None
        await run.write(candidate.text)
        if following is not None and _unclosed_item(candidate, following):
            await run.write(";" if following.piece.kind == candidate.piece.kind else ".")
        if following is None or following.source.citation != candidate.source.citation:
            await run.write(f" [{candidate.source.citation}]")
            if following is not None:
                await run.write("\n\n")
        else:
            await run.write(" ")
    await run.end_answer()
    return Outcome(ResponseStatus.SUCCESS, "extractive", embedder.model_name)


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


def _with_continuations(
    chosen: list[_Candidate], pieces: dict[str, list[Piece]]
) -> list[_Candidate]:
    """The chosen in source then position order, each lead-in (ending with ':') followed by
    what it introduces: the next sentence, or up to ``LEAD_IN_ITEMS`` list items or rows."""
    picked = {(c.source.citation, c.position): c for c in chosen}
    for candidate in chosen:
        if not candidate.text.endswith(":"):
            continue
        own = pieces[_key(candidate.source)]
        following = own[candidate.position + 1 : candidate.position + 1 + LEAD_IN_ITEMS]
        for offset, piece in enumerate(following, start=1):
            if piece.detached or (offset > 1 and (piece.kind == "sentence")):
                break
            key = (candidate.source.citation, candidate.position + offset)
            picked.setdefault(key, _Candidate(candidate.source, key[1], piece))
            if piece.kind == "sentence":
                break
    return [picked[key] for key in sorted(picked)]


def _key(source: Source) -> str:
    return source.hit.chunk.chunk_id


def _unclosed_item(candidate: _Candidate, following: _Candidate) -> bool:
    """Whether an item or row without closing punctuation has more of its source after it."""
    return (
        candidate.piece.kind != "sentence"
        and following.source.citation == candidate.source.citation
        and not _CLOSED.search(candidate.text)
    )


def _candidates(
    sources: list[Source], pieces: dict[str, list[Piece]], *, strict: bool
) -> list[_Candidate]:
    seen: set[str] = set()
    found: list[_Candidate] = []
    for source in sources:
        own = pieces[_key(source)]
        for position, piece in enumerate(own):
            if piece.text in seen or not _readable(piece, strict=strict):
                continue
            if piece.text.endswith(":") and (
                position + 1 == len(own) or own[position + 1].detached
            ):
                continue  # a lead-in to what this chunk does not hold
            seen.add(piece.text)
            found.append(_Candidate(source, position, piece))
            if len(found) == MAX_CANDIDATES:
                return found
    return found


def _readable(piece: Piece, *, strict: bool) -> bool:
    """Whether a piece can stand as a quote: a whole sentence, or a list item or table row
    that is not a bare label (it has a few words, or a number or a name)."""
    words = len(piece.text.split())
    if words > 80:
        return False
    if piece.kind != "sentence":
        return words >= 4 or (words >= 2 and bool(_HAS_FACT.search(piece.text)))
    if not strict:
        return words >= 4
    if piece.text.endswith(":"):
        return words >= 4
    return words >= 6 and bool(_ENDS_SENTENCE.search(piece.text))
