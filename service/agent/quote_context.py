"""What a chosen piece brings along when the extractive strategy quotes it.

An enumeration is quoted whole: a chosen item of a short list brings the rest of it, a chosen
lead-in ending with ':' what it introduces. A chosen labelled value ("Location: ...") brings
the rest of its short record, a chosen code line the rest of its short block, and a sentence
that leans on the one before ("It ...", "Similarly, ...": :mod:`anaphora`) that one. An
answer stops growing past ``ANSWER_CHARS``. Each rule is about the document's structure, not
about any words: a quote must not point outside itself, nor cut off what it belongs to.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from service.agent.anaphora import leans_back
from service.agent.commands import code_blocks, command_pieces
from service.domain import Source
from service.text.sentences import Piece

# How many list items or table rows a chosen lead-in (ending with ":") brings along.
LEAD_IN_ITEMS = 3
# A chosen list item brings the rest of its list when the whole list is this short (and so
# do a labelled value its record, a code line its block).
LIST_CHARS = 300
# An answer stops growing once its quotes pass this many characters: the pick that passes it
# stays (with what it brings along), the less relevant ones after it are not quoted.
ANSWER_CHARS = 750
# How many sentences back a chosen one that leans on the one before may bring along.
ANTECEDENTS = 2
# A labelled value, a paragraph of its own: a short label, a colon, then the value ("Location:
# /usr/share/worlds/", "Total time: ~2 seconds from detection to grasp").
LABELLED_VALUE = re.compile(r"^[^\s:][^:]{0,40}:\s+\S")


@dataclass(frozen=True, slots=True)
class Candidate:
    """A piece of a source that may be quoted, at its position among its chunk's pieces."""

    source: Source
    position: int
    piece: Piece
    count: int = 0  # pieces in its chunk: the rows of the chunk's stored piece vectors

    @property
    def text(self) -> str:
        return self.piece.text


def within_length(chosen: list[Candidate], pieces: dict[str, list[Piece]]) -> list[Candidate]:
    """What the best of ``chosen`` (most relevant first) bring to quote, up to the first
    whose quotes pass ``ANSWER_CHARS`` (it stays: a long first pick is still an answer)."""
    picked: list[Candidate] = []
    for count in range(1, len(chosen) + 1):
        picked = with_continuations(chosen[:count], pieces)
        if sum(len(c.text) for c in picked) > ANSWER_CHARS:
            break
    return picked


def with_continuations(chosen: list[Candidate], pieces: dict[str, list[Piece]]) -> list[Candidate]:
    """The chosen in source then position order, each lead-in (ending with ':') followed by
    what it introduces: the next sentence, its whole list when short (``_with_list``), or up
    to ``LEAD_IN_ITEMS`` list items or rows; each chosen item of a short list with the rest
    of its list, a labelled value with the rest of its short record (``_with_record``), a
    code line with the rest of its short block (``_with_block``)."""
    picked = {(c.source.citation, c.position): c for c in chosen}
    for candidate in chosen:
        own = pieces[chunk_key(candidate.source)]
        _with_antecedents(candidate, own, picked)
        if (
            _with_list(candidate, own, picked)
            or _with_record(candidate, own, picked)
            or _with_block(candidate, own, picked)
        ):
            continue
        if not candidate.text.endswith(":"):
            continue
        following = own[candidate.position + 1 : candidate.position + 1 + LEAD_IN_ITEMS]
        for offset, piece in enumerate(following, start=1):
            if piece.detached or (offset > 1 and (piece.kind == "sentence")):
                break
            key = (candidate.source.citation, candidate.position + offset)
            picked.setdefault(key, Candidate(candidate.source, key[1], piece))
            if piece.kind == "sentence":
                break
    return [picked[key] for key in sorted(picked)]


def _list_span(own: list[Piece], position: int) -> tuple[int, int] | None:
    """The list (a run of items with nothing between) holding or introduced by the piece at
    ``position``, as a range of positions, with its lead-in when it has one."""
    if position >= len(own):
        return None  # a line of a code block
    piece = own[position]
    if piece.kind == "item":
        start = position
        while start > 0 and own[start - 1].kind == "item" and not own[start].detached:
            start -= 1
    elif piece.text.endswith(":") and position + 1 < len(own):
        start = position + 1
        if own[start].kind != "item" or own[start].detached:
            return None
    else:
        return None
    end = start + 1
    while end < len(own) and own[end].kind == "item" and not own[end].detached:
        end += 1
    before = own[start - 1] if start > 0 else None
    if before is not None and not own[start].detached and before.text.endswith(":"):
        start -= 1  # its lead-in
    return start, end


def _with_list(
    candidate: Candidate, own: list[Piece], picked: dict[tuple[int, int], Candidate]
) -> bool:
    """Adds the rest of a chosen item's list (or of the list a chosen lead-in introduces)
    when the whole list is short, ``LIST_CHARS`` at most: an enumeration is quoted whole."""
    span = _list_span(own, candidate.position)
    if span is None or sum(len(p.text) for p in own[span[0] : span[1]]) > LIST_CHARS:
        return False
    for position in range(*span):
        piece = own[position]
        if needs_antecedent(piece) and (position == 0 or piece.detached):
            continue  # a lead-in pointing outside its chunk: the items stand without it
        added = Candidate(candidate.source, position, piece)
        picked.setdefault((candidate.source.citation, position), added)
        _with_antecedents(added, own, picked)
    return True


def _with_record(
    candidate: Candidate, own: list[Piece], picked: dict[tuple[int, int], Candidate]
) -> bool:
    """Adds the other labelled values of a chosen one's record (a run of labelled values with
    nothing between: "Purpose: ...", "Example: ...") when the whole record is short,
    ``LIST_CHARS`` at most."""
    position = candidate.position
    if position >= len(own) or not _is_field(own[position]):
        return False
    start, end = position, position + 1
    while start > 0 and not own[start].detached and _is_field(own[start - 1]):
        start -= 1
    while end < len(own) and not own[end].detached and _is_field(own[end]):
        end += 1
    if end - start < 2 or sum(len(p.text) for p in own[start:end]) > LIST_CHARS:
        return False
    for at in range(start, end):
        picked.setdefault((candidate.source.citation, at), Candidate(candidate.source, at, own[at]))
    return True


def _with_block(
    candidate: Candidate, own: list[Piece], picked: dict[tuple[int, int], Candidate]
) -> bool:
    """Adds the other quotable lines of a chosen code line's block when they are short
    together, ``LIST_CHARS`` at most: a message definition, a short configuration."""
    if candidate.piece.kind != "code":
        return False
    first = code_start(candidate.source, own)
    offset = candidate.position - first
    for block in code_blocks(candidate.source.hit.chunk.text):
        if offset < len(block):
            break
        first, offset = first + len(block), offset - len(block)
    else:
        return False
    if len(block) < 2 or sum(len(p.text) for p in block) > LIST_CHARS:
        return False
    citation = candidate.source.citation
    # A line of a shell block may be quoted already, as the command it also is.
    commands = {
        c.text
        for (cited, _), c in picked.items()
        if cited == citation and c.piece.kind == "command"
    }
    for index, piece in enumerate(block):
        if piece.text not in commands:
            key = (citation, first + index)
            picked.setdefault(key, Candidate(candidate.source, key[1], piece))
    return True


def code_start(source: Source, own: list[Piece]) -> int:
    """The position given to a chunk's first code line: past its pieces and command lines."""
    return len(own) + len(command_pieces(source.hit.chunk.text))


def _is_field(piece: Piece) -> bool:
    """A labelled value: a sentence "label: value" (not a lead-in ending with ':')."""
    return (
        piece.kind == "sentence"
        and not piece.text.endswith(":")
        and bool(LABELLED_VALUE.match(piece.text))
    )


def _with_antecedents(
    candidate: Candidate, own: list[Piece], picked: dict[tuple[int, int], Candidate]
) -> None:
    """Adds the sentences a chosen one leans on ("It ...", "Similarly, ..."), up to
    ``ANTECEDENTS`` back, so that no quote points outside itself."""
    position, piece = candidate.position, candidate.piece
    for _ in range(ANTECEDENTS):
        if not needs_antecedent(piece) or piece.detached or position == 0:
            return
        position -= 1
        piece = own[position]
        key = (candidate.source.citation, position)
        picked.setdefault(key, Candidate(candidate.source, position, piece))


def needs_antecedent(piece: Piece) -> bool:
    return piece.kind == "sentence" and leans_back(piece.text)


def chunk_key(source: Source) -> str:
    return source.hit.chunk.chunk_id
