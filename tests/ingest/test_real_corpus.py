"""The whole shared textbook goes through the parser, chunker and pipeline cleanly."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from service.config import default_model_dir
from service.ingest.chunker import Chunker
from service.ingest.loader import load_documents
from service.ingest.markdown import parse_markdown
from service.ingest.pipeline import Ingestor
from tests.ingest.fakes import FakeEmbedder, MemoryStore, count_words

pytestmark = pytest.mark.corpus

TOKENIZER = default_model_dir() / "tokenizer.json"
BASE = "https://physical-ai-robotics.dev"
MAX_TOKENS = 256


@pytest.fixture(scope="module")
def counter() -> Callable[[str], int]:
    """The embedding model's tokenizer when provisioned, else whitespace words."""
    if not TOKENIZER.is_file():
        return count_words
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(TOKENIZER))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return lambda text: len(tokenizer.encode(text).ids)


@pytest.mark.slow
def test_every_page_parses_and_chunks_within_the_bound(
    shared_corpus: Path, counter: Callable[[str], int]
) -> None:
    chunker = Chunker(counter, max_tokens=MAX_TOKENS)
    documents = list(load_documents(shared_corpus))
    assert len(documents) == 40
    for document in documents:
        parsed = parse_markdown(document.content, document.path, strict=True)
        assert parsed.title
        chunks = chunker.chunk(parsed)
        assert chunks, document.path
        for chunk in chunks:
            assert chunk.text.strip(), document.path
            assert counter(chunk.embed_text) <= MAX_TOKENS, (document.path, chunk.position)
            assert chunk.heading.startswith(parsed.title)


LEAKS = [
    re.compile(r"^(?:import|export) .*['\"];?$", re.M),  # ESM lines
    re.compile(r"\{/\*"),  # MDX comments
    re.compile(r"&(?:lt|gt|amp|nbsp);"),  # undecoded entities
    re.compile(r"</?(?:[A-Z]\w*(?:Table|Step|Accordion|Block)|Tabs|TabItem|details|summary)\b"),
    re.compile(r"^:::", re.M),  # admonition fences
]


def prose(text: str) -> str:
    """The text with fenced code removed: markup checks apply to prose only."""
    return re.sub(r"```.*?```", "", text, flags=re.S)


def test_mdx_markup_does_not_leak_into_chunks(shared_corpus: Path) -> None:
    chunker = Chunker(count_words, max_tokens=MAX_TOKENS)
    for document in load_documents(shared_corpus):
        text = "\n".join(c.text for c in chunker.chunk(parse_markdown(document.content)))
        outside_code = prose(text)
        for leak in LEAKS:
            assert not leak.search(outside_code), (document.path, leak.pattern)


def test_component_props_of_the_mdx_page_are_indexed(shared_corpus: Path) -> None:
    (page,) = shared_corpus.glob("module-03-*/chapter-07-*/*.mdx")
    text = "\n".join(b.text for s in parse_markdown(page.read_text()).sections for b in s.blocks)
    # Facts that exist only inside JSX props of custom components.
    for fact in ("GTX 1070", "525.60.13", "Vulkan", "omniverse-launcher-linux.AppImage"):
        assert fact in text


async def test_the_book_ingests_and_reingests_as_unchanged(shared_corpus: Path) -> None:
    store = MemoryStore()
    ingestor = Ingestor(FakeEmbedder(max_tokens=MAX_TOKENS), store)
    first = await ingestor.ingest(load_documents(shared_corpus), base_url=BASE)
    assert first.added == 40
    assert first.warnings == []
    second = await ingestor.ingest(load_documents(shared_corpus), base_url=BASE, prune=True)
    assert (second.unchanged, second.deleted, second.chunks_written) == (40, 0, 0)
    urls = {c.document_id: c.url for c, _ in store.points.values()}
    assert urls["intro.md"] == f"{BASE}/docs/"
    assert urls["00-introduction/INTRODUCTION.md"] == f"{BASE}/docs/introduction/INTRODUCTION"
    modules = {c.module for c, _ in store.points.values()}
    assert modules == {
        "",
        "module-01-foundations",
        "module-02-digital-twin",
        "module-03-ai-robot-brain",
        "module-04-vision-language-action",
    }
