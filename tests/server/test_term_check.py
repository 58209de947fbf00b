"""The out-of-corpus term check: questions naming what the corpus never mentions."""

from __future__ import annotations

from pathlib import Path

from service.retrieval.lexical import Name, TermCheck
from service.retrieval.spelling import forms, open_compounds, roots, spellings, stems
from tests.helpers import add_documents, local_embedder, make_chunk, running_server


def test_specific_terms_are_rare_words_names_and_versions() -> None:
    check = TermCheck(local_embedder().count_tokens)
    terms = check.specific_terms("How do I set up a catkin workspace for ROS 1 Noetic on px4?")
    assert "catkin" in terms
    assert "px4" in terms
    # Ordinary words say nothing by their absence: paraphrases use them freely.
    assert "set" not in terms
    assert "how" not in terms


def test_plural_terms_are_looked_up_with_their_singular() -> None:
    assert TermCheck.variants("rosbags").split()[:2] == ["rosbags", "rosbag"]
    assert "class" in TermCheck.variants("class").split()


def test_inflected_terms_are_looked_up_in_every_form_they_may_come_from() -> None:
    assert stems("calibrating") == ["calibrat", "calibrate"]
    assert "plan" in stems("planned")
    assert "body" in stems("bodies")
    assert "tidy" in stems("tidying")
    assert stems("lying") == []  # a base under three letters is never a stem
    assert stems("class") == []
    assert stems("catkin") == []


def test_other_spellings_are_looked_up_too() -> None:
    # Derived, the other English, closed or open compounds: how readers and books differ.
    assert "bipedal" in spellings("biped")
    assert "visualization" in spellings("visualisation")
    assert "visualise" in spellings("visualize")
    assert "colour" in spellings("color")
    assert "grayscale" in spellings("greyscale")
    assert "calibrate" in forms("calibrating")
    assert forms("catkin")[0] == "catkin"
    whole = {"walk", "through", "fox", "glove"}.__contains__
    assert list(open_compounds("walkthrough", whole)) == [("walk", "through")]
    assert list(open_compounds("catkin", whole)) == []


def test_an_inflection_of_an_ordinary_word_is_ordinary() -> None:
    # The vocabulary splits "tidying" (tidy + ing) though "tidy" is one token: a reader's
    # inflection, not a rare term, whose absence from the book proves nothing.
    check = TermCheck(local_embedder().count_tokens)
    assert check.specific_terms("How is tidying a room broken down?") == []
    # A rare word stays rare however it is inflected.
    assert "catkins" in check.specific_terms("Which catkins build it?")


def test_a_word_built_from_an_ordinary_word_is_ordinary() -> None:
    # English affixes on a whole word: the vocabulary splits these, the reader meant words.
    assert "match" in roots("mismatch")
    assert "soft" in roots("softens")
    assert "implement" in roots("reimplementations")
    assert set(stems("tidying")) <= set(roots("tidying"))
    # Affixes that also make names are not stripped (Docker is no dock), nor short roots.
    assert roots("docker") == []
    assert roots("multicast") == []
    assert "act" not in roots("react")
    check = TermCheck(local_embedder().count_tokens)
    question = "Why does the mismatch in rates matter, and what softens the shadows?"
    assert check.specific_terms(question) == []
    assert check.specific_terms("Are there reimplementations of whisper?") == []
    assert "docker" in check.specific_terms("How do I run it in docker?")


def test_a_word_capitalised_inside_a_sentence_is_a_specific_term() -> None:
    check = TermCheck(local_embedder().count_tokens)
    # Ordinary words to the vocabulary, proper names here: the corpus must hold them.
    assert "hungarian" in check.specific_terms("How does the Hungarian algorithm match?")
    assert "piper" in check.specific_terms("Can it speak with the Piper engine?")
    # At the start of a sentence a capital says nothing; nor does a dotted abbreviation.
    assert check.specific_terms("Hungarian food? Piper said so.") == []
    assert check.capitalised("What is e.g. I.E. here") == set()
    # The pronoun is no part of a name: "when I SSH" names SSH alone.
    assert [n.words for n in TermCheck.names("What do I type when I SSH to it?")] == [("ssh",)]


def test_a_number_with_words_is_a_quantity_not_an_identifier() -> None:
    # "100-millisecond" may be written "100ms": not a compound whose parts must be adjacent.
    assert TermCheck.names("How many samples make a 100-millisecond chunk?") == []
    assert TermCheck.names("A 3-DOF arm") == []
    # A name described by an ordinary word: the name is a capitalised term, no compound.
    assert TermCheck.names("What card for the GPU-heavy parts?") == []
    assert TermCheck.capitalised("What card for the GPU-heavy parts?") == {"gpu"}
    assert Name(("micro", "ros"), True) in TermCheck.names("Is micro-ROS covered?")
    assert Name(("orb", "slam3"), True) in TermCheck.names("Is ORB-SLAM3 used?")
    assert [n.words for n in TermCheck.names("In Isaac Sim 2024.1")] == [
        ("2024", "1"),
        ("isaac", "sim"),
    ]


def test_agent_nouns_are_looked_up_with_their_verb() -> None:
    # Looked up only: the book writing "help" finds "helper"; "visualiser" -> visualize.
    assert {"help"} <= set(forms("helper"))
    assert {"visualizer", "visualise", "visualize"} <= set(forms("visualiser"))
    assert "analyzer" in forms("analyser")
    # Never proof that a word is ordinary language (Docker is no dock).
    assert roots("docker") == []


def test_names_are_told_by_their_spelling() -> None:
    def names(query: str) -> list[tuple[tuple[str, ...], bool]]:
        return [(n.words, n.adjacent) for n in TermCheck.names(query)]

    # Words the tokenizer knows whole, but written as names: an acronym, a capitalised run,
    # compound identifiers (whose parts must be adjacent).
    assert names("How do I spawn cars in CARLA?") == [(("carla",), False)]
    assert names("How do I use the Spot SDK with ros2_control?") == [
        (("spot", "sdk"), False),
        (("ros2", "control"), True),
    ]
    assert names("Is ORB-SLAM3 faster?") == [(("orb", "slam3"), True), (("orb", "slam3"), False)]
    # A capital opening a sentence, a hyphenated ordinary word: not names.
    assert names("Which real-world tasks? Gazebo runs them.") == []
    # Dotted abbreviations are not dotted identifiers (found by heldout2, 2026-11-22).
    assert names("Which layers, i.e. the parts, and what e.g. a node does?") == []
    assert names("Is it sold in the U.S. or elsewhere?") == []
    assert names("Does BehaviorTree.CPP run?") == [(("behaviortree", "cpp"), True)]


async def test_a_question_about_a_term_the_corpus_lacks_scores_lower(tmp_path: Path) -> None:
    docs = [
        make_chunk(
            "ros/build.md",
            "Build ROS 2 packages with colcon in a workspace, then source the setup file.",
        )
    ]
    async with running_server(tmp_path) as srv:
        await add_documents(srv.runtime, docs)
        known = await srv.runtime.store.search(
            "How do I build packages with colcon?", limit=1, threshold=0.0
        )
        unknown = await srv.runtime.store.search(
            "How do I build packages with catkin?", limit=1, threshold=0.0
        )
    assert known[0].score > 0.35
    # The same neighbour, but the question names a tool no chunk mentions.
    # (The inflected form of a word the chunk holds is not such a term: see below.)
    assert unknown[0].chunk.document_id == "ros/build.md"
    assert unknown[0].score < known[0].score * 0.7


async def test_the_check_can_be_disabled(tmp_path: Path) -> None:
    docs = [make_chunk("ros/build.md", "Build ROS 2 packages with colcon in a workspace.")]
    async with running_server(tmp_path, unknown_term_penalty=1.0) as srv:
        await add_documents(srv.runtime, docs)
        hits = await srv.runtime.store.search(
            "How do I build packages with catkin?", limit=1, threshold=0.0
        )
    assert hits[0].score > 0.3


async def test_a_rare_term_found_in_another_form_is_not_out_of_the_corpus(tmp_path: Path) -> None:
    docs = [make_chunk("ros/bags.md", "Record topics into a rosbag, then replay the rosbag.")]
    async with running_server(tmp_path) as srv:
        await add_documents(srv.runtime, docs)
        search = srv.runtime.store.search
        inflected = await search("Which topics get rosbagged?", limit=1, threshold=0.0)
        unknown = await search("Which topics get mcapped?", limit=1, threshold=0.0)
    assert inflected[0].score > 0.35
    assert unknown[0].score < inflected[0].score * 0.7


async def test_a_rare_term_the_book_spells_otherwise_is_not_out_of_the_corpus(
    tmp_path: Path,
) -> None:
    docs = [
        make_chunk(
            "sim/views.md",
            "A walk through of the depth visualization: a bipedal robot in the simulator.",
        )
    ]
    async with running_server(tmp_path) as srv:
        await add_documents(srv.runtime, docs)
        search = srv.runtime.store.search
        asked = "Is there a walkthrough of the depth visualisation for a biped?"
        otherwise = await search(asked, limit=1, threshold=0.0)
        unknown = await search("Is there a foxglove panel for a biped?", limit=1, threshold=0.0)
    assert otherwise[0].score > 0.35
    # A closed compound whose words the corpus holds only apart is still absent.
    assert unknown[0].score < otherwise[0].score * 0.7
