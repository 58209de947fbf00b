"""Citation spans: which words of the answer rest on which text of which passage.

For each sentence of the answer (:func:`sentence_spans`, the split the grounding check uses)
and each existing source it cites, one :class:`~service.domain.CitationSpan`: the sentence's
span in the answer, the span of the source's text that supports it, and a support score.

- A sentence that quotes its passage (the extractive strategy always does; a model may)
  is found in it, markup and spacing aside: the quote is that exact stretch of the passage,
  support 1.
- Otherwise the quote is the passage sentence sharing the largest share of the claim's
  content words (stop words dropped, crude stems: :func:`content_words`), and that share is
  the support.

Offsets count Unicode code points (Python string indices), as the proto documents. Lexical
on purpose, like the grounding check: no model call, microseconds per sentence, and it can
neither fail nor return a span outside its text.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from functools import lru_cache

from service.agent.grounding import citations_of
from service.domain import CitationSpan
from service.text.sentences import content_words

_BREAK = re.compile(r"(?<=[.!?])\s+|\n+")
_LEADING_CITATIONS = re.compile(r"(?:\s*\[\d+(?:\s*,\s*\d+)*\])+")  # match() anchors it
_CITATION = re.compile(r"\s*\[\d+(?:\s*,\s*\d+)*\]")
# A passage's sentences end with their punctuation, a blank line, or a line that opens a
# Markdown block (heading, quote, table, list item); a single newline inside prose does not.
_PASSAGE_BREAK = re.compile(r"(?<=[.!?])\s+|\n\s*\n\s*|\n(?=\s*(?:[#>|]|[-*+]\s|\d+[.)]\s))")
# Characters a quote may drop from its passage: Markdown emphasis and code marks.
_MARKUP = frozenset("*_`")
_MARKUP_RUN = re.compile(r"[*_`]+")
_SPACES = re.compile(r"\s+")
# In the lookup of a quote: markup may follow any character, spaces and markup any space.
_MARKS = "[*_`]*"
_GAP = r"[\s*_`]+"
# Text that may still become a citation of the sentence before ("DDS. [1]"): a sentence
# followed only by this is not complete yet.
_MAYBE_CITATION = re.compile(r"^[\s\[\d,\]]*$")


def sentence_spans(answer: str) -> list[tuple[int, int]]:
    """(start, end) of each sentence of ``answer``, stripped; a citation written after the
    full stop ("DDS. [1]") belongs to the sentence before it."""
    spans: list[tuple[int, int]] = []
    position = 0
    for match in [*_BREAK.finditer(answer), None]:
        end = match.start() if match is not None else len(answer)
        start = position
        position = match.end() if match is not None else len(answer)
        piece = answer[start:end]
        stripped = piece.strip()
        if not stripped:
            continue
        start += len(piece) - len(piece.lstrip())
        end = start + len(stripped)
        leading = _LEADING_CITATIONS.match(answer, start, end)
        if leading and spans:
            spans[-1] = (spans[-1][0], leading.end())
            start = leading.end()
            rest = answer[start:end]
            start += len(rest) - len(rest.lstrip())
        if start < end:
            spans.append((start, end))
    return spans


def has_break(text: str, start: int = 0) -> bool:
    """Whether ``text`` holds a sentence break at or after ``start`` (the punctuation that
    ends a sentence may lie before it)."""
    return _BREAK.search(text, start) is not None


def settled(answer: str, spans: list[tuple[int, int]] | None = None) -> int:
    """How many leading sentences of an answer still being written can no longer change
    (``spans``: its :func:`sentence_spans`, when the caller has them)."""
    spans = sentence_spans(answer) if spans is None else spans
    if not spans:
        return 0
    tail = answer[spans[-1][0] :]
    keep = 1 if not _MAYBE_CITATION.match(tail) else 2
    return max(0, len(spans) - keep)


def spans_of_sentence(
    answer: str, span: tuple[int, int], passage: Callable[[int], str | None]
) -> Iterator[CitationSpan]:
    """The citation spans of one sentence: one per existing source it cites."""
    sentence = answer[span[0] : span[1]]
    claim = _CITATION.sub("", sentence).strip()
    for number in citations_of(sentence):
        text = passage(number)
        if text is None:
            continue
        quote, support = locate(claim, text)
        yield CitationSpan(span[0], span[1], number, quote[0], quote[1], support)


def citation_spans(answer: str, passage: Callable[[int], str | None]) -> list[CitationSpan]:
    """Every citation span of ``answer``, in answer order; ``passage(n)``: source n's text."""
    return [
        found
        for span in sentence_spans(answer)
        for found in spans_of_sentence(answer, span, passage)
    ]


def locate(claim: str, passage: str) -> tuple[tuple[int, int], float]:
    """The span of ``passage`` that supports ``claim``, and how well (0-1)."""
    exact = _verbatim(claim, passage)
    if exact is not None:
        return exact, 1.0
    words = content_words(claim)
    best, best_score = (0, 0), -1.0
    for start, end, known in _indexed(passage).sentences:
        if not words:
            return (start, end), 1.0  # nothing to check ("Yes [1].")
        score = len(words & known) / len(words)
        if score > best_score:
            best, best_score = (start, end), score
    return best, round(max(best_score, 0.0), 4)


class _Index:
    """What matching needs of a passage, computed once and when first needed: an answer
    cites each passage many times, a quoting answer never needs its sentences' words."""

    __slots__ = ("_normal", "_passage", "_sentences")

    def __init__(self, passage: str) -> None:
        self._passage = passage
        self._normal: str | None = None
        self._sentences: list[tuple[int, int, set[str]]] | None = None

    @property
    def normal(self) -> str:
        if self._normal is None:
            self._normal = _normalized(self._passage)
        return self._normal

    @property
    def sentences(self) -> list[tuple[int, int, set[str]]]:
        if self._sentences is None:
            passage = self._passage
            self._sentences = [
                (start, end, content_words(passage[start:end]))
                for start, end in _passage_sentences(passage)
            ]
        return self._sentences


@lru_cache(maxsize=256)
def _indexed(passage: str) -> _Index:
    return _Index(passage)


def _passage_sentences(passage: str) -> Iterator[tuple[int, int]]:
    position = 0
    for match in [*_PASSAGE_BREAK.finditer(passage), None]:
        end = match.start() if match is not None else len(passage)
        piece = passage[position:end]
        stripped = piece.strip()
        if stripped:
            start = position + len(piece) - len(piece.lstrip())
            yield start, start + len(stripped)
        position = match.end() if match is not None else len(passage)


def _verbatim(claim: str, passage: str) -> tuple[int, int] | None:
    """Where ``claim`` occurs in ``passage`` ignoring markup and runs of spaces.

    The normalized passage (C-speed substitutions, kept per passage) rejects most claims;
    only a claim that is there is looked up again, markup-tolerant, for its exact span."""
    needle = _normalized(claim.rstrip(".;:!?"))
    if len(needle) < 12:  # too short to be a quote rather than a common phrase
        return None
    if needle not in _indexed(passage).normal:
        return None
    pieces = []
    for char in needle:
        pieces.append(_GAP if char == " " else re.escape(char) + _MARKS)
    found = re.search("".join(pieces), passage)
    if found is None:  # pragma: no cover (the normalized passage holds it)
        return None
    start, end = found.span()
    while end > start and passage[end - 1] in _MARKUP:
        end -= 1  # the markup that closes the quote's last word is not part of it
    return start, end


def _normalized(text: str) -> str:
    """The text without markup, its spaces collapsed."""
    return _SPACES.sub(" ", _MARKUP_RUN.sub("", text)).strip()
