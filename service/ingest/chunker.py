"""Cuts a parsed page into chunks that follow its headings and fit the embedding model.

Every chunk is measured as it will be embedded (context prefix included) with the
embedder's own token counter, so no chunk is silently truncated by the model. Sections are
never merged across top-level headings; subsections of one top-level section are packed
together while they fit. A unit too long for one chunk is split on paragraph, line,
sentence, word and finally character boundaries (code on lines, tables on rows with the
header repeated), and each piece of split prose repeats the last sentence or two of the
piece before it, so that a fact cut at a boundary is still found with its context.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from service.ingest.document import Block, ParsedDocument, Section

CountTokens = Callable[[str], int]

# Bump when the chunking rules change, so that every document is re-indexed.
CHUNKER_VERSION = "1"

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
        return self._count(self.embed_text(title, path, body)) <= self.max_tokens

    def _pack(self, title: str, units: list[Section]) -> list[tuple[tuple[str, ...], str]]:
        out: list[tuple[tuple[str, ...], str]] = []
        current: list[Section] = []
        for unit in units:
            if current and self._fits(title, *_render([*current, unit])):
                current.append(unit)
                continue
            if current:
                out.append(_render(current))
                current = []
            if self._fits(title, *_render([unit])):
                current = [unit]
            else:
                out.extend((unit.path, body) for body in self._split(title, unit))
        if current:
            out.append(_render(current))
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
        for atom in atoms:
            if not current or fits(_join([*current, atom])):
                current.append(atom)
                continue
            bodies.append(_join(current))
            tail = self._overlap(current)
            current = [tail, atom] if tail and fits(_join([tail, atom])) else [atom]
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
        current: list[str] = []
        for line in lines:
            if fits(fenced([*current, line])):
                current.append(line)
                continue
            if current:
                groups.append(fenced(current))
                current = []
            if fits(fenced([line])):
                current = [line]
            else:  # one line longer than a chunk: cut it where it must be cut
                parts = _split_text(line, lambda t: fits(fenced([t])), 2)
                groups.extend(fenced([part]) for part, _ in parts)
        if current:
            groups.append(fenced(current))
        return groups

    def _table_groups(self, rows: list[str], fits: Callable[[str], bool]) -> list[str]:
        header, groups, current = rows[0], [], [rows[0]]
        for row in rows[1:]:
            if fits("\n".join([*current, row])):
                current.append(row)
                continue
            if len(current) > 1:
                groups.append("\n".join(current))
            if fits(f"{header}\n{row}"):
                current = [header, row]
            else:  # a row too long even alone: cut it as prose
                groups.extend(part for part, _ in _split_text(row, fits, 2))
                current = [header]
        if len(current) > 1:
            groups.append("\n".join(current))
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
    if len(parts) == 1:
        return _split_text(text, fits, level + 1)
    pieces: list[tuple[str, str]] = []
    for part in parts:
        if not part:
            continue
        sub = _split_text(part, fits, level + 1)
        pieces.append((sub[0][0], separator))
        pieces.extend(sub[1:])
    return pieces


def _split_chars(text: str, fits: Callable[[str], bool]) -> list[tuple[str, str]]:
    pieces: list[tuple[str, str]] = []
    while text:
        head = _longest_prefix(text, fits) or text[:1]
        pieces.append((head, ""))
        text = text[len(head) :]
    return pieces


def _longest_prefix(text: str, fits: Callable[[str], bool]) -> str:
    low, high = 0, len(text)  # fits(text[:low]) holds, text[:high + 1] does not
    while low < high:
        middle = (low + high + 1) // 2
        if fits(text[:middle]):
            low = middle
        else:
            high = middle - 1
    return text[:low]
