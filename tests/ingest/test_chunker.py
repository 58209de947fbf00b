"""Chunking: heading structure, token bounds, overlap only where a unit had to be split."""

from __future__ import annotations

import itertools
import re
import textwrap
from collections.abc import Callable

import pytest

from service.config import default_model_dir
from service.ingest.chunker import Chunker, TextChunk
from service.ingest.markdown import parse_markdown
from tests.ingest.fakes import count_words

TOKENIZER = default_model_dir() / "tokenizer.json"


def chunks_of(text: str, *, max_tokens: int = 64, **kwargs: float) -> list[TextChunk]:
    document = parse_markdown(textwrap.dedent(text).lstrip("\n"), "docs/page.md")
    return Chunker(count_words, max_tokens=max_tokens, **kwargs).chunk(document)  # type: ignore[arg-type]


def sentences(count: int, word: str = "servo") -> str:
    """Distinct numbered sentences of six words each."""
    return " ".join(f"The {word} number {i} moves fast." for i in range(count))


def test_small_page_is_one_chunk_per_top_level_section() -> None:
    chunks = chunks_of("""
        # Rover Guide

        Welcome text.

        ## Wheels

        Four wheels.

        ### Tyres

        Rubber tyres.

        ## Battery

        One battery.
        """)
    assert [(c.heading, c.section, c.position) for c in chunks] == [
        ("Rover Guide", "", 0),
        ("Rover Guide > Wheels", "Wheels", 1),
        ("Rover Guide > Battery", "Battery", 2),
    ]
    assert chunks[1].text == "Four wheels.\n\n### Tyres\n\nRubber tyres."
    assert chunks[2].embed_text == "Rover Guide > Battery\n\nOne battery."


def test_a_lone_subsection_chunk_has_the_full_heading_path() -> None:
    chunks = chunks_of(f"""
        # G

        ## Wheels

        ### Tyres

        {sentences(8)}

        ### Rims

        {sentences(8, "rim")}
        """)
    assert [c.heading for c in chunks] == ["G > Wheels > Tyres", "G > Wheels > Rims"]
    assert all(c.section == "Wheels" for c in chunks)
    assert not chunks[0].text.startswith("#")


def test_chunks_never_straddle_top_level_sections() -> None:
    chunks = chunks_of("# T\n\n## A\n\nalpha.\n\n## B\n\nbeta.\n", max_tokens=200)
    assert [c.text for c in chunks] == ["alpha.", "beta."]


@pytest.mark.parametrize("max_tokens", [40, 64, 128])
def test_every_embedded_text_fits_the_limit(max_tokens: int) -> None:
    page = f"""
        # Limits

        ## Long prose

        {sentences(60)}

        {sentences(30, "motor")}

        ## One endless line

        {" ".join(f"w{i}" for i in range(500))}

        ## Code

        ```python
        {chr(10).join(f"        value_{i} = {i}" for i in range(120)).lstrip()}
        ```
        """
    chunks = chunks_of(page, max_tokens=max_tokens)
    assert len(chunks) > 10
    for chunk in chunks:
        assert count_words(chunk.embed_text) <= max_tokens
        assert chunk.text.strip()
    assert [c.position for c in chunks] == list(range(len(chunks)))


def test_split_prose_keeps_every_sentence_in_order() -> None:
    text = sentences(40)
    chunks = chunks_of(f"# T\n\n## S\n\n{text}\n")
    assert len(chunks) > 2
    seen: list[str] = []
    for chunk in chunks:
        for i in range(40):
            marker = f"number {i} "
            if marker in chunk.text and marker not in seen:
                seen.append(marker)
    assert seen == [f"number {i} " for i in range(40)]


def test_overlap_repeats_the_last_two_sentences_of_a_split() -> None:
    # 64 tokens * 0.2 = 12 tokens of overlap: exactly two six-word sentences.
    chunks = chunks_of(f"# T\n\n## S\n\n{sentences(40)}\n", max_tokens=64, overlap=0.2)
    assert len(chunks) > 3
    for before, after in itertools.pairwise(chunks):
        previous = re.findall(r"number (\d+) ", before.text)
        following = re.findall(r"number (\d+) ", after.text)
        assert following[:2] == previous[-2:]
        assert following[2] == str(int(previous[-1]) + 1)


def test_no_overlap_between_sections_or_with_overlap_disabled() -> None:
    text = f"# T\n\n## A\n\n{sentences(3)}\n\n## B\n\n{sentences(3, 'gear')}\n"
    chunks = chunks_of(text)
    assert "servo" not in chunks[1].text
    split = chunks_of(f"# T\n\n## S\n\n{sentences(40)}\n", overlap=0.0)
    joined = " ".join(c.text for c in split)
    assert joined.count("number 7 ") == 1


def test_paragraphs_are_split_before_sentences() -> None:
    paragraphs = "\n\n".join(sentences(4, f"p{i}") for i in range(6))
    chunks = chunks_of(f"# T\n\n## S\n\n{paragraphs}\n", overlap=0.0)
    for chunk in chunks:
        for part in chunk.text.split("\n\n"):
            # every paragraph in a chunk is whole: 4 sentences of one kind
            assert part.count("moves fast.") == 4


def test_code_is_split_on_lines_and_stays_fenced() -> None:
    lines = "\n".join(f"joint_{i} = {i}" for i in range(80))
    chunks = chunks_of(f"# T\n\n## Code\n\n```python\n{lines}\n```\n", overlap=0.0)
    assert len(chunks) > 2
    recovered: list[str] = []
    for chunk in chunks:
        assert chunk.text.startswith("```python\n")
        assert chunk.text.endswith("\n```")
        recovered.extend(chunk.text.split("\n")[1:-1])
    assert recovered == lines.split("\n")


def test_tables_are_split_on_rows_with_the_header_repeated() -> None:
    rows = "\n".join(f"| part {i} | {i} grams |" for i in range(60))
    chunks = chunks_of(f"# T\n\n## Parts\n\n| Part | Mass |\n|---|---|\n{rows}\n")
    assert len(chunks) > 2
    for chunk in chunks:
        assert chunk.text.startswith("Part | Mass\n")


def test_a_single_huge_word_is_cut_by_characters() -> None:
    chunks = chunks_of("# T\n\n## S\n\n" + "x" * 5000 + "\n", max_tokens=40)
    assert "".join(c.text for c in chunks) == "x" * 5000


def test_long_heading_paths_are_shortened_in_the_prefix_only() -> None:
    long_title = " ".join(["word"] * 30)
    chunks = chunks_of(f"# {long_title}\n\n## Short\n\ntext here\n", max_tokens=64)
    assert chunks[0].heading == f"{long_title} > Short"
    prefix = chunks[0].embed_text.split("\n\n")[0]
    assert count_words(prefix) <= 64 // 4
    assert count_words(chunks[0].embed_text) <= 64


def test_chunking_is_deterministic() -> None:
    page = f"# T\n\n## S\n\n{sentences(50)}\n\n### Sub\n\n{sentences(5, 'arm')}\n"
    assert chunks_of(page) == chunks_of(page)


def test_version_names_the_settings() -> None:
    assert Chunker(count_words).version != Chunker(count_words, max_tokens=128).version
    assert Chunker(count_words).version != Chunker(count_words, overlap=0.1).version


def test_bad_settings_are_rejected() -> None:
    with pytest.raises(ValueError, match="max_tokens"):
        Chunker(count_words, max_tokens=8)
    with pytest.raises(ValueError, match="overlap"):
        Chunker(count_words, overlap=0.9)


def test_empty_page_gives_no_chunks() -> None:
    assert chunks_of("---\ntitle: Empty\n---\n\n# Empty\n") == []


@pytest.fixture
def real_counter() -> Callable[[str], int]:
    if not TOKENIZER.is_file():
        pytest.skip(f"tokenizer not provisioned at {TOKENIZER}")
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(TOKENIZER))
    tokenizer.no_truncation()  # the shipped file truncates at 128; counting must see it all
    tokenizer.no_padding()
    return lambda text: len(tokenizer.encode(text).ids)


def test_bounds_hold_with_the_real_tokenizer(real_counter: Callable[[str], int]) -> None:
    page = textwrap.dedent(f"""
        # Tokeniser check

        ## Prose

        {sentences(80)} Übergrößenträger 日本語のテキスト ✅🚀 e.g. 3.14159 · 10⁻³.

        ## Code

        ```python
        {"; ".join(f"torque_limit_{i} = {i}.5" for i in range(100))}
        ```
        """)
    chunker = Chunker(real_counter, max_tokens=256)
    chunks = chunker.chunk(parse_markdown(page, "docs/t.md"))
    assert len(chunks) > 3
    for chunk in chunks:
        assert real_counter(chunk.embed_text) <= 256


def test_mostly_blank_text_is_cut_by_length_as_well_and_keeps_every_word() -> None:
    # A list indented ever deeper: few tokens, many characters (an attack on ingest time).
    page = "".join("  " * i + f"- item{i}\n" for i in range(400))
    chunks = Chunker(count_words, max_tokens=64).chunk(parse_markdown(page, "docs/deep.md"))
    assert len(chunks) > 1
    assert all(len(c.embed_text) <= 64 * 32 for c in chunks)
    words = [w for c in chunks for w in c.text.split() if w.startswith("item")]
    assert words == [f"item{i}" for i in range(400)]


@pytest.mark.parametrize(
    "page",
    [
        pytest.param("[" * 20_000, id="brackets"),
        pytest.param("".join("> " * (i % 300) + "words.\n" for i in range(300)), id="quotes"),
    ],
)
def test_pathological_pages_become_chunks_that_fit_and_keep_every_character(page: str) -> None:
    chunker = Chunker(lambda text: len(text) // 4 + 1, max_tokens=64)
    chunks = chunker.chunk(parse_markdown(page, "docs/x.md"))
    assert all(len(c.embed_text) // 4 + 1 <= 64 for c in chunks)
    if page.startswith("["):
        assert "".join(c.text for c in chunks) == page
