"""Pieces of Markdown worth quoting, and the lexical side of ranking them.

A piece is a prose sentence, a list item or a table row (written as "header: cell" pairs).
Lexical overlap weighs each content word of the question by how rare it is among the
pieces, so that a question's specific terms count for more than its common ones.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

PieceKind = Literal["sentence", "item", "row", "command", "code"]

_FENCE = re.compile(r"^\s*(```|~~~)")
_NOT_PROSE = re.compile(r"^\s*(#|\||<|!\[|import\s|export\s|:::|---|\*\*\*|>\s*\[!)")
_TABLE_ROW = re.compile(r"^\s*\|.*\|\s*$")
_TABLE_RULE = re.compile(r"^\s*\|?\s*:?-{2,}:?\s*(\|\s*:?-{2,}:?\s*)*\|?\s*$")
_LIST_ITEM = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+")
_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
_MARKUP = re.compile(r"\*\*|__|`")
# Bracketed numbers in the documents would read as citations of this answer.
_BRACKETED_NUMBER = re.compile(r"\s*\[\d+(?:\s*,\s*\d+)*\]")
_SENTENCE_BREAK = re.compile(r"(?:(?<=[.!?])|(?<=[.!?][\"')\]]))\s+(?=[\"'(]?[A-Z0-9])")
_WORD = re.compile(r"[a-z0-9]+(?:[.-][a-z0-9]+)*")

_STOPWORD_TEXT = """a about above after again against all also am an and any are as at be because
been before being below between both but by can could did do does doing down during each few for
from further had has have having he her here hers him his how i if in into is it its itself just
me more most my no nor not of off on once only or other our ours out over own same she should so
some such than that the their theirs them then there these they this those through to too under
until up very was we were what when where which while who whom why will with would you your yours
used use using according describe described describes kind kinds many much way ways make makes
made one two three first must need needs shall may might get gets give gives called name"""
_STOPWORDS = frozenset(_STOPWORD_TEXT.split())


@dataclass(frozen=True, slots=True)
class Piece:
    text: str
    kind: PieceKind
    # Whether code, a heading or other markup separates it from the piece before.
    detached: bool = False


def split_pieces(text: str) -> list[Piece]:
    """The quotable pieces of a Markdown text, in order: no code, headings or markup."""
    splitter = _Splitter()
    for line in text.splitlines():
        splitter.feed(line)
    splitter.close()
    pieces: list[Piece] = []
    for kind, block, detached in splitter.blocks:
        prose = _clean(" ".join(block))
        parts = _SENTENCE_BREAK.split(prose) if kind == "sentence" else [prose]
        texts = [p.strip() for p in parts if p.strip()]
        pieces.extend(Piece(t, kind, detached=detached and i == 0) for i, t in enumerate(texts))
    return pieces


class _Splitter:
    """Groups lines into blocks: paragraphs, list items and table rows."""

    def __init__(self) -> None:
        self.blocks: list[tuple[PieceKind, list[str], bool]] = []
        self._lines: list[str] = []
        self._in_code = False
        self._detached = False
        self._header: list[str] = []

    def feed(self, line: str) -> None:
        is_row = not self._in_code and (bool(_TABLE_ROW.match(line)) or " | " in line)
        if not is_row:
            self._header = []
        if _FENCE.match(line):
            self.close()
            self._in_code, self._detached = not self._in_code, True
        elif self._in_code:
            return
        elif is_row:
            self.close()
            if not _TABLE_RULE.match(line):
                self._row([c.strip() for c in line.strip().strip("|").split("|")])
        elif not line.strip() or _NOT_PROSE.match(line):
            self.close()
            self._detached = self._detached or bool(line.strip())
        elif _LIST_ITEM.match(line):
            self.close()
            self._add("item", [_LIST_ITEM.sub("", line).strip()])  # an item stands on its own
        else:
            self._lines.append(line.strip())

    def close(self) -> None:
        if self._lines:
            self._add("sentence", self._lines)
        self._lines = []

    def _row(self, cells: list[str]) -> None:
        if self._header:
            self._add("row", [_row_text(self._header, cells)])
        else:
            self._header = cells  # the first row names the columns

    def _add(self, kind: PieceKind, lines: list[str]) -> None:
        self.blocks.append((kind, lines, self._detached))
        self._detached = False


def split_sentences(text: str) -> list[str]:
    """The texts of ``split_pieces``."""
    return [piece.text for piece in split_pieces(text)]


def _row_text(header: list[str], cells: list[str]) -> str:
    pairs = [
        f"{name}: {cell}" if name else cell
        for name, cell in zip(header + [""] * len(cells), cells, strict=False)
        if cell
    ]
    return ", ".join(pairs)


def _clean(text: str) -> str:
    return _BRACKETED_NUMBER.sub("", _MARKUP.sub("", _LINK.sub(r"\1", text)))


def content_words(text: str) -> set[str]:
    """The stemmed words of a text that carry meaning (no stop words)."""
    return {_stem(w) for w in _WORD.findall(text.lower()) if w not in _STOPWORDS}


def _stem(word: str) -> str:
    for suffix in ("ies", "ing", "ed", "es", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3 and not word[-2].isdigit():
            return word[: -len(suffix)] + ("y" if suffix == "ies" else "")
    return word


def lexical_overlap(query: str, texts: Sequence[str]) -> list[float]:
    """For each text, the share of the query's content words it contains, rare ones weighing
    more (inverse frequency among ``texts``); 0 to 1."""
    words = [content_words(t) for t in texts]
    wanted = content_words(query)
    frequency = Counter(w for found in words for w in found & wanted)
    total = len(texts)
    weight = {w: math.log((total + 1) / (frequency[w] + 0.5)) for w in wanted if frequency[w]}
    best = sum(weight.values())
    if best <= 0:
        return [0.0] * total
    return [sum(weight.get(w, 0.0) for w in found) / best for found in words]
