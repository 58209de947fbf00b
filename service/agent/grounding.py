"""Does the answer rest on its sources? A cheap check, sentence by sentence.

Small models often cite nothing, or cite a passage and then write something else (SmolLM2
named the wrong robot and year with full confidence). So every answer carries its grounding:
whether it cites anything at all, and for each sentence the share of its content words
(stop words dropped, crude stems) that occur in the passages it cites. It is lexical on
purpose: no extra model call and no embedding per sentence, so it costs microseconds and
cannot fail. It catches invented names, numbers and dates, which is where small models go
wrong; it cannot catch a paraphrase that reverses a passage's meaning.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from service.domain import Grounding, SentenceSupport
from service.text.sentences import content_words

# A sentence with at least this share of its content words in its cited passages counts
# as supported (documented in ragagent.v1.SentenceSupport).
SUPPORT_THRESHOLD = 0.5

_CITATION = re.compile(r"\[(\d+(?:\s*,\s*\d+)*)\]")
_LEADING_CITATIONS = re.compile(r"^(?:\s*\[\d+(?:\s*,\s*\d+)*\])+")
_BREAK = re.compile(r"(?<=[.!?])\s+|\n+")


def split_answer(answer: str) -> list[str]:
    """The answer's sentences; a citation written after the full stop ("DDS. [1]") stays
    with the sentence before it."""
    sentences: list[str] = []
    for raw in _BREAK.split(answer):
        piece = raw.strip()
        leading = _LEADING_CITATIONS.match(piece)
        if leading and sentences:
            sentences[-1] += " " + leading.group(0).strip()
            piece = piece[leading.end() :].strip()
        if piece:
            sentences.append(piece)
    return sentences


def citations_of(sentence: str) -> tuple[int, ...]:
    found: list[int] = []
    for group in _CITATION.findall(sentence):
        for part in group.split(","):
            number = int(part)
            if number not in found:
                found.append(number)
    return tuple(found)


def check_grounding(answer: str, passage: Callable[[int], str | None]) -> Grounding:
    """The grounding of ``answer``; ``passage(n)`` is the text of source n (None: no such)."""
    supports: list[SentenceSupport] = []
    cited_any = False
    # Each passage's words once per answer: sentences mostly cite the same few passages, and
    # reading a passage again for each of them was most of the check's cost.
    passage_words: dict[int, set[str]] = {}
    for sentence in split_answer(answer):
        numbers = tuple(n for n in citations_of(sentence) if passage(n) is not None)
        cited_any = cited_any or bool(numbers)
        words = content_words(_CITATION.sub(" ", sentence))
        if not numbers:
            score = 0.0
        elif not words:
            score = 1.0  # nothing to check ("Yes [1].")
        else:
            known: set[str] = set()
            for number in numbers:
                if number not in passage_words:
                    passage_words[number] = content_words(passage(number) or "")
                known |= passage_words[number]
            score = len(words & known) / len(words)
        supports.append(
            SentenceSupport(sentence, numbers, round(score, 4), score >= SUPPORT_THRESHOLD)
        )
    return Grounding(cites_nothing=not cited_any, sentences=tuple(supports))
