"""The extractive strategy: no language model; the answer quotes the most relevant sentences.

Sentences of the retrieved chunks are embedded with the same embedder as the corpus and
ranked by cosine similarity to the question, skipping near-duplicates of sentences already
chosen. The chosen ones are quoted in document order, each paragraph citing its source.
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
from service.domain import ResponseStatus, Source
from service.errors import DeadlineExceeded
from service.retrieval.base import Embedder

MAX_CANDIDATES = 300
# A sentence this similar to one already chosen says nothing new.
NEAR_DUPLICATE = 0.9
# Sentences far less relevant than the best one are filler, however few were found.
RELATIVE_FLOOR = 0.5
_DIVERSITY = 0.25

_FENCE = re.compile(r"^\s*(```|~~~)")
_NOT_PROSE = re.compile(r"^\s*(#|\||<|!\[|import\s|export\s|:::|---|\*\*\*|>\s*\[!)")
_LIST_ITEM = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+")
_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
_MARKUP = re.compile(r"\*\*|__|`")
# Bracketed numbers in the documents would read as citations of this answer.
_BRACKETED_NUMBER = re.compile(r"\s*\[\d+(?:\s*,\s*\d+)*\]")
_SENTENCE_BREAK = re.compile(r"(?:(?<=[.!?])|(?<=[.!?][\"')\]]))\s+(?=[\"'(]?[A-Z0-9])")
_ENDS_SENTENCE = re.compile(r"[.!?][\"')\]]?$")


@dataclass(frozen=True, slots=True)
class _Candidate:
    source: Source
    position: int
    text: str


async def run_extractive(run: Run, embedder: Embedder, *, sentences: int) -> Outcome:
    request = run.request
    run.model_name = embedder.model_name
    query = retrieval_query(request.query, request.history)
    sources = await run.retrieve(query, request.max_results)  # a tool call of its own
    candidates = _candidates(sources, strict=True) or _candidates(sources, strict=False)
    if not candidates:
        return await run.no_answer()
    run.phase = "tool"
    try:
        async with asyncio.timeout(run.deadline.remaining()):
            query_vector = await embedder.embed_query(query, deadline=run.deadline)
            vectors = await embedder.embed_documents(
                [c.text for c in candidates], deadline=run.deadline
            )
    except TimeoutError:
        raise DeadlineExceeded("the deadline ran out while ranking sentences") from None
    chosen = choose(np.asarray(query_vector), np.asarray(vectors), sentences)
    picked = sorted((candidates[i] for i in chosen), key=lambda c: (c.source.citation, c.position))
    for index, candidate in enumerate(picked):
        following = picked[index + 1] if index + 1 < len(picked) else None
        await run.write(candidate.text)
        if following is None or following.source.citation != candidate.source.citation:
            await run.write(f" [{candidate.source.citation}]")
            if following is not None:
                await run.write("\n\n")
        else:
            await run.write(" ")
    await run.end_answer()
    return Outcome(ResponseStatus.SUCCESS, "extractive", embedder.model_name)


def choose(
    query: npt.NDArray[np.floating], vectors: npt.NDArray[np.floating], count: int
) -> list[int]:
    """Indexes of up to ``count`` relevant, mutually distinct sentences (vectors normalised).

    Maximal marginal relevance: each pick is the most similar to the query, less a penalty
    for resembling what was already picked.
    """
    relevance = vectors @ query
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


def _candidates(sources: list[Source], *, strict: bool) -> list[_Candidate]:
    seen: set[str] = set()
    found: list[_Candidate] = []
    for source in sources:
        for position, sentence in enumerate(split_sentences(source.hit.chunk.text)):
            if sentence in seen or not _readable(sentence, strict=strict):
                continue
            seen.add(sentence)
            found.append(_Candidate(source, position, sentence))
            if len(found) == MAX_CANDIDATES:
                return found
    return found


def split_sentences(text: str) -> list[str]:
    """The prose sentences of a Markdown text: no code, headings, tables or markup."""
    paragraphs: list[list[str]] = [[]]
    in_code = False
    for line in text.splitlines():
        if _FENCE.match(line):
            in_code = not in_code
            paragraphs.append([])
        elif in_code or not line.strip() or _NOT_PROSE.match(line):
            paragraphs.append([])
        elif _LIST_ITEM.match(line):
            paragraphs.append([_LIST_ITEM.sub("", line)])  # an item stands on its own
            paragraphs.append([])
        else:
            paragraphs[-1].append(line.strip())
    result: list[str] = []
    for lines in paragraphs:
        if lines:
            prose = _BRACKETED_NUMBER.sub("", _MARKUP.sub("", _LINK.sub(r"\1", " ".join(lines))))
            result.extend(s.strip() for s in _SENTENCE_BREAK.split(prose) if s.strip())
    return result


def _readable(sentence: str, *, strict: bool) -> bool:
    words = len(sentence.split())
    if not strict:
        return words >= 4
    return 6 <= words <= 80 and bool(_ENDS_SENTENCE.search(sentence))
