"""The citation filter: invented citations vanish as the text streams, nothing else changes."""

from __future__ import annotations

import random

import pytest

from service.agent.citations import CitationFilter
from service.agent.sources import SourceBook
from service.domain import ScoredChunk
from tests.agent.support import chunk


def run_filter(pieces: list[str], valid: set[int]) -> tuple[list[str], list[int]]:
    citations = CitationFilter(valid)
    out = [citations.feed(piece) for piece in pieces]
    out.append(citations.finish())
    return out, citations.cited


def filtered(text: str, valid: set[int]) -> str:
    return "".join(run_filter([text], valid)[0])


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Links are rigid [1].", "Links are rigid [1]."),
        ("Links are rigid [9].", "Links are rigid."),
        ("Links [9] are rigid.", "Links are rigid."),
        ("Links are rigid [1][9][2].", "Links are rigid [1][2]."),
        ("Links are rigid [9][1].", "Links are rigid [1]."),
        ("Links are rigid [1, 9, 2].", "Links are rigid [1, 2]."),
        ("Links are rigid [1,2].", "Links are rigid [1,2]."),
        ("Links are rigid [9, 8].", "Links are rigid."),
        ("Links are rigid [1, 1].", "Links are rigid [1]."),
        ("Rigid [9]\n\nNext paragraph.", "Rigid\n\nNext paragraph."),
        ("Rigid [9], and more.", "Rigid, and more."),
        ("A list [a] and [link](http://x) stay.", "A list [a] and [link](http://x) stay."),
        ("Ranges [1-2] are text; so is []", "Ranges [1-2] are text; so is []"),
        ("An array[0] index.", "An array index."),
        ("Unclosed at the end [1", "Unclosed at the end"),
        ("Trailing space ", "Trailing space "),
        ("[" + "1" * 60 + "]", "[" + "1" * 60 + "]"),
    ],
)
def test_filters_citations(text: str, expected: str) -> None:
    assert filtered(text, {1, 2, 3}) == expected


def test_tracks_what_was_cited_in_order_of_appearance() -> None:
    _, cited = run_filter(["See [3] and [1, 9] and [3][2]."], {1, 2, 3})
    assert cited == [3, 1, 2]


def test_releases_text_as_soon_as_it_cannot_be_a_citation() -> None:
    citations = CitationFilter({1})
    assert citations.feed("Hello ") == "Hello"  # the space may precede a citation
    assert citations.feed("world [") == " world"
    assert citations.feed("see") == " [see"
    assert citations.feed(" [1") == ""
    assert citations.feed("] done") == " [1] done"


def test_valid_numbers_can_grow_while_streaming() -> None:
    book = SourceBook()
    citations = CitationFilter(book)
    assert citations.feed("Before [1].") == "Before."
    book.add([ScoredChunk(chunk("a", "text"), 0.5)])
    assert citations.feed(" After [1].") == " After [1]."


HALLUCINATING = (
    "Links are rigid bodies [1][9]. A joint [2] connects them [9]; see [1, 9] or "
    "[9, 2]. Arrays like x[0] and [links](u) stay. Finally [3] [9]"
)
EXPECTED = (
    "Links are rigid bodies [1]. A joint [2] connects them; see [1] or "
    "[2]. Arrays like x and [links](u) stay. Finally [3]"
)


@pytest.mark.parametrize("seed", range(300))
def test_any_split_of_the_stream_gives_the_same_answer(seed: int) -> None:
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(1, len(HALLUCINATING)), rng.randint(1, 40)))
    pieces = [
        HALLUCINATING[a:b] for a, b in zip([0, *cuts], [*cuts, len(HALLUCINATING)], strict=True)
    ]

    out, cited = run_filter(pieces, {1, 2, 3})

    assert "".join(out) == EXPECTED
    assert cited == [1, 2, 3]
    assert not any("9" in piece for piece in out), "no part of [9] is ever emitted"


def character_by_character(pieces: list[str], valid: set[int]) -> list[str]:
    """The filter's definition: each character through its state machine, no fast path."""
    citations = CitationFilter(valid)
    out: list[str] = []
    for piece in pieces:
        held: list[str] = []
        for char in piece:
            citations._step(char, held)
        out.append("".join(held))
    out.append(citations.finish())
    return out


@pytest.mark.parametrize("seed", range(200))
def test_a_delta_without_brackets_is_released_as_the_state_machine_would(seed: int) -> None:
    rng = random.Random(seed)
    text = "".join(rng.choice("ab  \t.,\n[1]9") for _ in range(rng.randint(1, 80)))
    cuts = sorted(rng.sample(range(1, len(text)), min(len(text) - 1, rng.randint(0, 12))))
    pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]

    assert run_filter(pieces, {1})[0] == character_by_character(pieces, {1})
