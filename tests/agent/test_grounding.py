"""The grounding check, as a spec: each sentence's content words against the passages it
cites (service.agent.grounding)."""

from __future__ import annotations

import pytest

from service.agent import grounding
from service.agent.grounding import SUPPORT_THRESHOLD, check_grounding, split_answer

PASSAGES = {
    1: "ROS 2 nodes exchange messages over topics. The middleware underneath is DDS.",
    2: "Gazebo simulates physics, sensors and robots in a world file.",
}


def passage(number: int) -> str | None:
    return PASSAGES.get(number)


def test_a_sentence_is_supported_by_the_words_of_the_passages_it_cites() -> None:
    found = check_grounding(
        "ROS 2 nodes exchange messages over topics [1]. Gazebo runs on a quantum cluster [2].",
        passage,
    )
    assert not found.cites_nothing
    first, second = found.sentences
    assert first.citations == (1,)
    assert first.support == 1.0
    assert first.supported
    assert second.citations == (2,)
    assert second.support < SUPPORT_THRESHOLD  # "runs", "quantum", "cluster" are not in [2]
    assert not second.supported


def test_an_answer_citing_nothing_or_only_unknown_sources_cites_nothing() -> None:
    assert check_grounding("DDS is the middleware.", passage).cites_nothing
    unknown = check_grounding("DDS is the middleware [7].", passage)
    assert unknown.cites_nothing
    assert unknown.sentences[0].citations == ()
    assert unknown.sentences[0].support == 0.0


def test_a_sentence_without_content_words_is_supported_by_its_citation() -> None:
    [only] = check_grounding("It is so [1].", passage).sentences
    assert only.support == 1.0
    assert only.supported


def test_a_citation_after_the_full_stop_stays_with_its_sentence() -> None:
    assert split_answer("DDS is underneath. [1] Gazebo simulates physics [2].") == [
        "DDS is underneath. [1]",
        "Gazebo simulates physics [2].",
    ]


def test_several_citations_pool_their_passages_words() -> None:
    [only] = check_grounding("DDS and Gazebo simulate sensors [1, 2].", passage).sentences
    assert only.citations == (1, 2)
    assert only.supported


def test_each_cited_passage_is_read_once_per_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    read: list[str] = []
    words = grounding.content_words

    def counted(text: str) -> set[str]:
        read.append(text)
        return words(text)

    monkeypatch.setattr(grounding, "content_words", counted)
    answer = " ".join(["ROS 2 nodes exchange messages [1]. Gazebo simulates robots [2]."] * 20)
    found = check_grounding(answer, passage)
    assert len(found.sentences) == 40
    assert all(s.supported for s in found.sentences)
    assert sorted(t for t in read if t in PASSAGES.values()) == sorted(PASSAGES.values())
