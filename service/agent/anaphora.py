"""Sentences that lean on the one before: a quote must not start with a word that points
outside it ("It's an independent process...", "Similarly, ...") without its antecedent.

The test is a closed class of English words, not a list tuned to any document set: personal
and demonstrative pronouns and determiners that refer back, and the discourse connectives
that relate a sentence to the previous one. A sentence opening with one of them is quoted
together with the sentence before it, or not at all when its chunk does not hold that one.
"""

from __future__ import annotations

import re

_REFERRING = frozenset(
    [
        "it",
        "its",
        "it's",
        "they",
        "their",
        "theirs",
        "them",
        "they're",
        "they've",
        "he",
        "she",
        "his",
        "her",
        "hers",
        "him",
        "both",
        "either",
        "neither",
        "another",
        "latter",
        "former",
    ]
)
# Demonstratives refer back when they stand alone ("This is why...", "These are..."); as
# determiners ("This project is licensed...") the noun names what they point at.
_DEMONSTRATIVES = frozenset(["this", "these", "that", "those", "such"])
_AUXILIARIES = frozenset(
    [
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "being",
        "has",
        "have",
        "had",
        "do",
        "does",
        "did",
        "can",
        "could",
        "will",
        "would",
        "shall",
        "should",
        "may",
        "might",
        "must",
        "'s",
    ]
)
_CONNECTIVES = frozenset(
    [
        "similarly",
        "likewise",
        "however",
        "moreover",
        "furthermore",
        "additionally",
        "also",
        "therefore",
        "thus",
        "hence",
        "consequently",
        "instead",
        "otherwise",
        "nevertheless",
        "nonetheless",
        "meanwhile",
        "then",
        "besides",
        "accordingly",
        "alternatively",
        "conversely",
        "afterwards",
        "subsequently",
        "finally",
        "next",
    ]
)
_PHRASES = (
    "in addition",
    "in contrast",
    "by contrast",
    "as a result",
    "on the other hand",
    "for this reason",
    "in this case",
    "in that case",
    "in turn",
    "the latter",
    "the former",
    "this way",
    "as such",
)
_WORDS = re.compile(r"[A-Za-z']+")


def leans_back(sentence: str) -> bool:
    """Whether ``sentence`` opens with a word that needs the sentence before it."""
    words = [w.lower().replace("\u2019", "'") for w in _WORDS.findall(sentence[:60])]
    if not words:
        return False
    first = words[0]
    if first in _REFERRING or first in _CONNECTIVES:
        return True
    if first in _DEMONSTRATIVES or first.removesuffix("'s") in _DEMONSTRATIVES:
        second = words[1] if len(words) > 1 else ""
        return first.endswith("'s") or not second or second in _AUXILIARIES
    opening = " ".join(words[:4])
    return any(opening == p or opening.startswith(p + " ") for p in _PHRASES)
