"""Extractive quotes that read on their own (issue 27): a chosen sentence that leans on the
one before ("It ...", "Similarly, ...") is quoted with it, or not at all."""

from __future__ import annotations

import pytest

from service.agent.anaphora import leans_back
from service.agent.extractive import _candidates
from service.agent.quote_context import Candidate, with_continuations
from service.domain import ScoredChunk, Source
from service.text.sentences import split_pieces
from tests.agent.support import chunk

TEXT = (
    "A node is a process that performs computation. It's an independent process with its own "
    "lifecycle. Similarly, a service answers one request at a time.\n\n"
    "## Topics\n\n"
    "It carries messages between nodes without either knowing the other."
)


@pytest.mark.parametrize(
    ("sentence", "expected"),
    [
        ("It's an independent process.", True),
        ("It\u2019s an independent process.", True),
        ("Similarly, a service answers.", True),
        ("These are the settings that matter.", True),
        ("This is why DDS matters.", True),
        ("That's the reason.", True),
        ("This project is licensed under the MIT License.", False),
        ("In addition, DDS discovers peers.", True),
        ("On the other hand, ROS 1 had a master.", True),
        ("ROS 2 uses DDS.", False),
        ("Theory says so.", False),
        ("Items are listed.", False),
        ("", False),
    ],
)
def test_a_sentence_leans_back_when_it_opens_with_a_referring_word(
    sentence: str, expected: bool
) -> None:
    assert leans_back(sentence) is expected


def _source() -> Source:
    return Source(ScoredChunk(chunk("nodes", TEXT), 0.9), 1)


def test_a_chosen_sentence_brings_the_ones_it_leans_on() -> None:
    source = _source()
    pieces = split_pieces(TEXT)
    similarly = next(i for i, p in enumerate(pieces) if p.text.startswith("Similarly"))
    chosen = [Candidate(source, similarly, pieces[similarly])]
    picked = with_continuations(chosen, {source.hit.chunk.chunk_id: pieces})
    assert [c.text.split()[0] for c in picked] == ["A", "It's", "Similarly,"]


def test_a_sentence_leaning_outside_its_chunk_is_not_a_candidate() -> None:
    source = _source()
    pieces = split_pieces(TEXT)
    found = _candidates([source], {source.hit.chunk.chunk_id: pieces}, strict=True)
    texts = [c.text for c in found]
    assert not any(t.startswith("It carries") for t in texts)  # after a heading: no antecedent
    assert any(t.startswith("It's an independent") for t in texts)
