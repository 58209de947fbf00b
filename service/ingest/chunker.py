"""Cuts a parsed page into chunks that follow its headings and fit the embedding model.

Every chunk is measured as it will be embedded (context prefix included) with the
embedder's own token counter, so no chunk is silently truncated by the model. Sections are
never merged across top-level headings; subsections of one top-level section are packed
together while they fit. A unit too long for one chunk is split on paragraph, line,
sentence, word and finally character boundaries (code on lines, tables on rows with the
header repeated), and each piece of split prose repeats the last sentence or two of the
piece before it, so that a fact cut at a boundary is still found with its context.

Every greedy "add while it fits" loop finds how much fits by galloping (1, 2, 4, ...
items, then bisecting between the last fit and the first miss) instead of re-measuring the
growing chunk after each item: a chunk of L characters costs O(L log L) to measure, so a
document costs time linear in its length whatever its shape. Adding items one at a time
made a page of 2 MB of "[" or of deeply indented lists quadratic (minutes for one page).
The result is the same chunk boundaries wherever the token count only grows as text is
added, which holds for the tokenizers in use.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from service.ingest import budget
from service.ingest.document import Block, ParsedDocument, Section

CountTokens = Callable[[str], int]

# Bump when the chunking rules change, so that every document is re-indexed.
CHUNKER_VERSION = "1"

# A chunk holds at most this many characters per token of its budget. Prose has 4-5 and
# code rarely 10; only text that is mostly blank (a list indented 1,500 levels deep) comes
# near it. Without the cap such text made chunks of 80 kB, each measurement of which took
# seconds and could not be interrupted; with it no measurement exceeds a few kilobytes.
_MAX_CHARS_PER_TOKEN = 32

_SENTENCE_END = re.compile(r"(?<=[.!?:;])\s+(?=\S)")


@dataclass(frozen=True, slots=True)
class TextChunk:
    """One chunk: ``text`` is shown to readers, ``embed_text`` is what gets embedded."""

    text: str
    embed_text: str
    heading: str
    section: str
    position: int


@dataclass(frozen=True, slots=True)
class _Atom:
    text: str
    separator: str  # what joins it to the atom before it
    kind: str


class Chunker:
    """Splits documents into :class:`TextChunk` s of at most ``max_tokens`` embedded tokens."""

    def __init__(
        self,
        count_tokens: CountTokens,
        *,
        max_tokens: int = 256,
        overlap: float = 0.15,
        overlap_sentences: int = 2,
    ) -> None:
        if max_tokens < 32:
            raise ValueError("max_tokens must be at least 32")
        if not 0.0 <= overlap < 0.5:
            raise ValueError("overlap must be in [0, 0.5)")
        self._count = count_tokens
        self.max_tokens = max_tokens
        self._overlap_tokens = int(max_tokens * overlap)
        self._overlap_sentences = overlap_sentences
        self.version = (
            f"chunker-{CHUNKER_VERSION}/max{max_tokens}/ov{overlap:g}x{overlap_sentences}"
        )

    def chunk(self, document: ParsedDocument) -> list[TextChunk]:
        pieces: list[tuple[tuple[str, ...], str]] = []
        for group in _top_level_groups(document.sections):
            pieces.extend(self._pack(document.title, group))
        return [
            TextChunk(
                text=body,
                embed_text=self.embed_text(document.title, path, body),
                heading=" > ".join((document.title, *path)),
                section=path[0] if path else "",
                position=position,
            )
            for position, (path, body) in enumerate(pieces)
        ]

    def embed_text(self, title: str, path: Sequence[str], body: str) -> str:
        """The body behind a line naming the page and headings it comes from."""
        return f"{self._prefix(title, path)}\n\n{body}"

    def _prefix(self, title: str, path: Sequence[str]) -> str:
        # The context line may take at most a quarter of the budget; deep or long heading
        # paths are shortened (then cut) rather than crowding out the text itself.
        cap = self.max_tokens // 4
        for candidate in (" > ".join((title, *path)), " > ".join((title, *path[-1:])), title):
            if self._count(candidate) <= cap:
                return candidate
        return _longest_prefix(title, lambda text: self._count(text) <= cap)

    def _fits(self, title: str, path: Sequence[str], body: str) -> bool:
        budget.check()  # every measurement: a runaway document stops within one
        text = self.embed_text(title, path, body)
        if len(text) > self.max_tokens * _MAX_CHARS_PER_TOKEN:
            return False
        return self._count(text) <= self.max_tokens

    def _pack(self, title: str, units: list[Section]) -> list[tuple[tuple[str, ...], str]]:
        out: list[tuple[tuple[str, ...], str]] = []
        start = 0
        while start < len(units):
            unit = units[start]
            if not self._fits(title, *_render([unit])):
                out.extend((unit.path, body) for body in self._split(title, unit))
                start += 1
                continue
            first = start
            count = _most(
                lambda n: self._fits(title, *_render(units[first : first + n])),  # noqa: B023
                len(units) - first,
                known=1,
            )
            out.append(_render(units[first : first + count]))
            start += count
        return out

    def _split(self, title: str, unit: Section) -> list[str]:
        def fits(body: str) -> bool:
            return self._fits(title, unit.path, body)

        atoms: list[_Atom] = []
        for block in unit.blocks:
            for index, (text, separator) in enumerate(self._block_pieces(block, fits)):
                atoms.append(_Atom(text, "\n\n" if index == 0 else separator, block.kind))
        bodies: list[str] = []
        current: list[_Atom] = []
        start, guess = 0, 1
        while start < len(atoms):
            if current:
                bodies.append(_join(current))
                tail = self._overlap(current)
                atom = atoms[start]
                current = [tail, atom] if tail and fits(_join([tail, atom])) else [atom]
            else:
                current = [atoms[start]]
            start += 1
            head, first = current, start
            count = _most(
                lambda n: fits(_join([*head, *atoms[first : first + n]])),  # noqa: B023
                len(atoms) - first,
                guess=guess,
            )
            current = [*head, *atoms[first : first + count]]
            start += count
            guess = max(count, 1)
        if current:
            bodies.append(_join(current))
        return bodies

    def _overlap(self, atoms: list[_Atom]) -> _Atom | None:
        if atoms[-1].kind != "paragraph" or self._overlap_tokens <= 0:
            return None
        # The end of the last paragraph, which may span several atoms (its sentences).
        start = len(atoms) - 1
        while (
            start > 0 and atoms[start].separator != "\n\n" and atoms[start - 1].kind == "paragraph"
        ):
            start -= 1
        paragraph = _join(atoms[start:]).strip()
        sentences = _SENTENCE_END.split(paragraph)
        for take in range(min(self._overlap_sentences, len(sentences)), 0, -1):
            tail = " ".join(sentences[-take:])
            if self._count(tail) <= self._overlap_tokens and tail != _join(atoms).strip():
                return _Atom(tail, "", "paragraph")
        return None

    def _block_pieces(self, block: Block, fits: Callable[[str], bool]) -> list[tuple[str, str]]:
        if fits(block.render()):
            return [(block.render(), "")]
        if block.kind == "code":
            return [(p, "\n\n") for p in self._line_groups(block.text.split("\n"), fits, block)]
        if block.kind == "table":
            return [(p, "\n\n") for p in self._table_groups(block.text.split("\n"), fits)]
        return _split_text(block.text, fits, 0)

    def _line_groups(
        self, lines: list[str], fits: Callable[[str], bool], block: Block
    ) -> list[str]:
        def fenced(part: list[str]) -> str:
            return Block("code", "\n".join(part), block.language).render()

        groups: list[str] = []
        start = 0
        while start < len(lines):
            first = start
            count = _most(
                lambda n: fits(fenced(lines[first : first + n])),  # noqa: B023
                len(lines) - first,
            )
            if count:
                groups.append(fenced(lines[first : first + count]))
                start += count
                continue
            # One line longer than a chunk: cut it where it must be cut.
            parts = _split_text(lines[start], lambda t: fits(fenced([t])), 2)
            groups.extend(fenced([part]) for part, _ in parts)
            start += 1
        return groups

    def _table_groups(self, rows: list[str], fits: Callable[[str], bool]) -> list[str]:
        header, body = rows[0], rows[1:]
        groups: list[str] = []
        start = 0
        while start < len(body):
            first = start
            count = _most(
                lambda n: fits("\n".join([header, *body[first : first + n]])),  # noqa: B023
                len(body) - first,
            )
            if count:
                groups.append("\n".join([header, *body[first : first + count]]))
                start += count
                continue
            # A row too long even alone: cut it as prose.
            groups.extend(part for part, _ in _split_text(body[start], fits, 2))
            start += 1
        return groups or [part for part, _ in _split_text("\n".join(rows), fits, 0)]


def _top_level_groups(sections: Sequence[Section]) -> list[list[Section]]:
    """Sections grouped by their top-level heading (the text before any heading alone)."""
    groups: list[list[Section]] = []
    for section in sections:
        key = section.path[:1]
        if groups and key and groups[-1][0].path[:1] == key:
            groups[-1].append(section)
        else:
            groups.append([section])
    return groups


def _render(units: list[Section]) -> tuple[tuple[str, ...], str]:
    """(common heading path, body) of units packed together; deeper headings stay visible."""
    base = units[0].path
    for unit in units[1:]:
        size = 0
        while size < min(len(base), len(unit.path)) and base[size] == unit.path[size]:
            size += 1
        base = base[:size]
    parts: list[str] = []
    shown = {base}
    for unit in units:
        start = max(n for n in range(len(unit.path) + 1) if unit.path[:n] in shown)
        if start < len(unit.path):
            parts.append("#" * max(unit.level, 2) + " " + " > ".join(unit.path[start:]))
        shown.add(unit.path)
        parts.extend(block.render() for block in unit.blocks)
    return base, "\n\n".join(parts)


def _join(atoms: Sequence[_Atom]) -> str:
    return atoms[0].text + "".join(a.separator + a.text for a in atoms[1:])


def _split_text(text: str, fits: Callable[[str], bool], level: int) -> list[tuple[str, str]]:
    """Pieces that each fit, cut on lines, then sentences, then words, then characters."""
    if fits(text):
        return [(text, "")]
    if level == 0:
        parts, separator = text.split("\n"), "\n"
    elif level == 1:
        parts, separator = _SENTENCE_END.split(text), " "
    elif level == 2:
        parts, separator = text.split(" "), " "
    else:
        return _split_chars(text, fits)
    parts = [part for part in parts if part]
    if len(parts) == 1:
        return _split_text(parts[0], fits, level + 1)
    # Parts are measured in groups: when a group fits, each of its parts does, and only a
    # part too long alone is cut further (one measurement per word made prose slow).
    pieces: list[tuple[str, str]] = []
    start, guess = 0, 1
    while start < len(parts):
        first = start
        count = _most(
            lambda n: fits(separator.join(parts[first : first + n])),  # noqa: B023
            len(parts) - first,
            guess=guess,
        )
        if count:
            pieces.extend((part, separator) for part in parts[first : first + count])
            start += count
            guess = count
            continue
        sub = _split_text(parts[start], fits, level + 1)
        pieces.append((sub[0][0], separator))
        pieces.extend(sub[1:])
        start += 1
    return pieces


def _split_chars(text: str, fits: Callable[[str], bool]) -> list[tuple[str, str]]:
    pieces: list[tuple[str, str]] = []
    # Each lambda below is called before the loop moves on: binding its variables late is
    # what is wanted (hence the B023 exemptions).
    start, guess = 0, 0
    while start < len(text):
        first = start
        size = _most(
            lambda n: fits(text[first : first + n]),  # noqa: B023
            len(text) - first,
            guess=guess,
        )
        size = max(size, 1)
        pieces.append((text[first : first + size], ""))
        start += size
        guess = size  # the next piece of the same text is most likely as long
    return pieces


def _longest_prefix(text: str, fits: Callable[[str], bool]) -> str:
    return text[: _most(lambda n: fits(text[:n]), len(text))]


def _most(fits: Callable[[int], bool], limit: int, *, known: int = 0, guess: int = 0) -> int:
    """The largest ``n <= limit`` with ``fits(n)``, for ``fits`` true up to some point and
    false after it; ``known`` is a count already known to fit (0 fits by definition), and
    ``guess`` (when above ``known``) where the answer most likely is.

    Galloping away from the guess (or up from ``known``), then bisecting: O(log d) probes
    for an answer d away from where the search starts, the largest probe about twice the
    answer, so the cost follows the size of what fits, not the size of what is left.
    """
    if limit <= known:
        return limit
    low, high = known, limit + 1  # fits(low) holds; fits(high) does not (limit + 1: unknown)
    if guess > known:
        low, high = _around(fits, min(guess, limit), low, high)
    step = 1
    while high == limit + 1:  # gallop up
        probe = min(low + step, limit)
        if not fits(probe):
            high = probe
        elif probe == limit:
            return limit
        else:
            low = probe
        step *= 2
    while high - low > 1:
        middle = (low + high) // 2
        if fits(middle):
            low = middle
        else:
            high = middle
    return low


def _around(fits: Callable[[int], bool], guess: int, low: int, high: int) -> tuple[int, int]:
    """``(low, high)`` narrowed by probing the guess, then galloping down from it if needed."""
    if fits(guess):
        return guess, high
    high, step = guess, 1
    while high - step > low:
        probe = high - step
        if fits(probe):
            return probe, high
        high, step = probe, step * 2
    return low, high
