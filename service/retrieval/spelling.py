"""The forms in which a reader may write a word that the book writes in another.

The out-of-corpus term check (:mod:`service.retrieval.lexical`) takes a rare word absent
from every chunk as evidence that the question is about something the corpus lacks. A
word is also absent when the reader spells it otherwise than the book: inflected
("tidying" for *tidy*), derived ("biped" for *bipedal*), in the other English
("visualisation" for *visualization*), or a compound closed up ("walkthrough" for *walk
through*). Each function here proposes such forms; over-generation is harmless, since a
form is only ever looked up in the corpus's full-text index, and a non-word is found
nowhere. Measured on heldout2.jsonl (2026-11-22), these three kinds were the check's false
alarms on answerable questions; the forms are general English, not that set's words.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

# Inflections a reader adds to a word the book writes bare: suffix, and what replaces it.
_INFLECTIONS = (
    ("ies", ("y",)),
    ("ing", ("", "e")),
    ("ied", ("y",)),
    ("ed", ("", "e")),
    ("es", ("", "e")),
    ("ly", ("",)),
    ("s", ("",)),
)
# Suffixes that derive a word from the one a reader wrote: biped -> bipedal.
_DERIVATIONS = ("s", "al", "ic", "ical", "ed", "ing", "er", "ers", "ation", "ity")
# British and American spellings, each way: (one, other) replaced where ``one`` ends the
# word or comes before an inflection.
_ENGLISHES = (
    ("isation", "ization"),
    ("ise", "ize"),
    ("ised", "ized"),
    ("ising", "izing"),
    ("iser", "izer"),
    ("yse", "yze"),
    ("yser", "yzer"),
    ("our", "or"),
    ("tre", "ter"),
    ("ogue", "og"),
    ("ence", "ense"),
)
_ANYWHERE = (("grey", "gray"), ("aluminium", "aluminum"))
_MIN_STEM = 3
_MIN_PART = 3
# English affixes that build an ordinary word from another ("mismatch", "softens",
# "reimplementations"). Left out: affixes that also make names and trade terms from
# ordinary roots (-er: Docker; -less; de-; multi-: multicast; dis-; pre-), which lost
# rejected questions on the read sets when included.
_PREFIXES = ("re", "un", "mis", "non", "over", "under", "sub", "inter", "counter", "semi")
_SUFFIXES = (
    "ations", "ation", "ions", "ion", "ments", "ment", "ness", "ens", "en", "ity", "ities",
    "ize", "ise", "izes", "ises", "ful",
)  # fmt: skip
_MIN_ROOT = 4
_ROOT_DEPTH = 3


def stems(word: str) -> list[str]:
    """The forms ``word`` may be an inflection of, most likely first, without ``word``:
    "tidying" -> tidy, tidye; "planned" -> plann, planne, plan; "bodies" -> body."""
    found: list[str] = []
    for suffix, replacements in _INFLECTIONS:
        if not word.endswith(suffix) or (suffix == "s" and word.endswith("ss")):
            continue
        base = word[: -len(suffix)]
        if len(base) < _MIN_STEM:
            continue
        found += [base + r for r in replacements]
        # A doubled final consonant before -ing/-ed: planned -> plan, running -> run.
        if suffix in ("ing", "ed") and len(base) > _MIN_STEM and base[-1] == base[-2]:
            found.append(base[:-1])
        # tidying: base "tidy" already; -ying also comes from -ie (lying -> lie).
        if suffix == "ing" and base.endswith("y"):
            found.append(base[:-1] + "ie")
    return _new(word, found)


def roots(word: str) -> list[str]:
    """The words ``word`` may be built from by inflection and the affixes above, up to
    three deep, without ``word``: "reimplementations" -> reimplementation, ...,
    implement; "softens" -> soften, soft; "mismatch" -> match."""
    found: list[str] = []
    frontier = [word]
    for _ in range(_ROOT_DEPTH):
        made: list[str] = []
        for form in frontier:
            made += stems(form)  # as short as an inflection allows: "tugging" -> tug
            made += [
                root
                for root in (form[len(p) :] for p in _PREFIXES if form.startswith(p))
                if len(root) >= _MIN_ROOT
            ]
            for suffix in _SUFFIXES:
                base = form[: -len(suffix)]
                if form.endswith(suffix) and len(base) >= _MIN_ROOT:
                    made += [base, base + "e"]
        frontier = [m for m in _new(word, made) if m not in found]
        found += frontier
    return found


def spellings(word: str) -> list[str]:
    """Other spellings of ``word`` and of its stems: the other English's, and words derived
    from it ("visualisation" -> visualization; "biped" -> bipedal, bipeds, ...)."""
    found: list[str] = []
    for form in (word, *stems(word)):
        found += _other_english(form)
        found += [form + suffix for suffix in _DERIVATIONS]
        # The verb of an agent noun: "helper" -> help, "visualiser" -> visualise (-> ize).
        # Looked up only, never taken as proof that a word is ordinary: Docker is no dock.
        if form.endswith("er") and len(form) - 2 >= _MIN_ROOT:
            for verb in (form[:-2], form[:-1]):
                found += [verb, *_other_english(verb)]
    return _new(word, found)


def forms(word: str) -> list[str]:
    """``word`` and every form above, for one match-any lookup."""
    return [word, *_new(word, [*stems(word), *spellings(word)])]


def open_compounds(word: str, is_word: Callable[[str], bool]) -> Iterator[tuple[str, str]]:
    """The ways to write a closed compound as two words that ``is_word`` knows:
    "walkthrough" -> (walk, through)."""
    for cut in range(_MIN_PART, len(word) - _MIN_PART + 1):
        head, tail = word[:cut], word[cut:]
        if is_word(head) and is_word(tail):
            yield head, tail


def _other_english(word: str) -> list[str]:
    found = []
    for one, other in _ENGLISHES:
        for a, b in ((one, other), (other, one)):
            if word.endswith(a):
                found.append(word[: -len(a)] + b)
    for one, other in _ANYWHERE:
        for a, b in ((one, other), (other, one)):
            if a in word:
                found.append(word.replace(a, b))
    return found


def _new(word: str, found: list[str]) -> list[str]:
    return [f for f in dict.fromkeys(found) if f != word]
