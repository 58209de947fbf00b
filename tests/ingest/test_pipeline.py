"""The ingest pipeline against in-memory fakes: ids, payloads, updates, pruning, crashes."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime

import pytest

from service.domain import Deadline
from service.errors import DeadlineExceeded, DocumentNotFound, InvalidArgument, StoreUnavailable
from service.ingest.chunker import Chunker
from service.ingest.loader import SourceDocument
from service.ingest.outcome import (
    CHUNK_NAMESPACE,
    DocumentStatus,
    IngestEvent,
    chunk_id,
    sha256_hex,
)
from service.ingest.pipeline import Ingestor
from tests.ingest.fakes import FakeEmbedder, MemoryStore, count_words

BASE = "https://robots.example"
FIXED_TIME = datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC)


def long_page(title: str, sections: int = 3, sentences: int = 30) -> str:
    body = [f"---\ntitle: {title}\n---\n"]
    for s in range(sections):
        body.append(f"## Part {s}\n")
        body.append(" ".join(f"Fact {s}.{i} about {title} holds." for i in range(sentences)))
    return "\n\n".join(body) + "\n"


DOCS = [
    SourceDocument("module-01-base/chapter-01-io/page-01.md", long_page("Pins")),
    SourceDocument("module-01-base/chapter-01-io/page-02.md", long_page("Buses", 2)),
    SourceDocument("appendix/faq.mdx", "# FAQ\n\n## Why\n\nBecause.\n"),
    SourceDocument("intro.md", "---\nslug: /\ntitle: Welcome\n---\n\nHello there.\n"),
]


def make(
    store: MemoryStore | None = None, **kwargs: object
) -> tuple[Ingestor, FakeEmbedder, MemoryStore]:
    embedder = FakeEmbedder(max_tokens=64)
    store = store or MemoryStore()
    ingestor = Ingestor(embedder, store, batch_size=4, clock=lambda: FIXED_TIME, **kwargs)  # type: ignore[arg-type]
    return ingestor, embedder, store


def assert_consistent(
    store: MemoryStore, documents: list[SourceDocument], ingestor: Ingestor
) -> None:
    """Exactly the chunks a fresh ingest would produce: no orphans, duplicates or stale ones."""
    expected = {}
    for document in documents:
        prepared = ingestor.prepare(document, base_url=BASE)
        expected.update({c.chunk_id: c for c in prepared.chunks})
    stored = {cid: chunk for cid, (chunk, _) in store.points.items()}
    assert set(stored) == set(expected)
    for cid, chunk in stored.items():
        assert chunk == expected[cid]


async def test_first_ingest_adds_everything() -> None:
    ingestor, embedder, store = make()
    events: list[IngestEvent] = []
    summary = await ingestor.ingest(DOCS, base_url=BASE, progress=events.append)
    assert (summary.added, summary.updated, summary.unchanged, summary.deleted) == (4, 0, 0, 0)
    assert summary.chunks_written == len(store.points) == embedder.texts_embedded
    assert summary.chunks_deleted == 0
    assert summary.duration_s >= 0
    assert [e.document_id for e in events] == [d.path for d in DOCS]
    assert all(len(batch) <= 4 for batch in embedder.calls)
    assert_consistent(store, DOCS, ingestor)


async def test_chunk_payload_is_complete() -> None:
    ingestor, _, store = make()
    await ingestor.ingest(DOCS, base_url=BASE)
    chunks = store.chunks_of("module-01-base/chapter-01-io/page-01.md")
    assert len(chunks) > 3
    doc_hash = ingestor.document_hash(DOCS[0], BASE)
    for position, chunk in enumerate(chunks):
        assert chunk.chunk_id == chunk_id(chunk.document_id, position)
        assert chunk.position == position
        assert chunk.url == f"{BASE}/docs/module-01-base/chapter-01-io/page-01"
        assert chunk.title == "Pins"
        assert (chunk.module, chunk.chapter) == ("module-01-base", "chapter-01-io")
        assert chunk.section.startswith("Part ")
        assert chunk.heading == f"Pins > {chunk.section}"
        assert chunk.source_file == chunk.document_id
        assert chunk.content_hash == sha256_hex(chunk.text)
        assert chunk.document_hash == doc_hash
        assert chunk.chunk_count == len(chunks)
        assert chunk.created_at == "2026-03-04T05:06:07+00:00"
    (faq,) = store.chunks_of("appendix/faq.mdx")
    assert (faq.module, faq.chapter, faq.url) == ("", "", f"{BASE}/docs/appendix/faq")
    (intro,) = store.chunks_of("intro.md")
    assert intro.url == f"{BASE}/docs/"


async def test_embedded_text_carries_the_heading_context() -> None:
    ingestor, embedder, _ = make()
    await ingestor.ingest([DOCS[2]])
    assert embedder.calls == [["FAQ > Why\n\nBecause."]]


def test_chunk_ids_are_deterministic_uuid5() -> None:
    assert chunk_id("a/b.md", 3) == str(uuid.uuid5(CHUNK_NAMESPACE, "a/b.md#3"))
    assert chunk_id("a/b.md", 3) == chunk_id("a/b.md", 3)
    assert chunk_id("a/b.md", 3) != chunk_id("a/b.md", 4) != chunk_id("a/c.md", 3)
    assert uuid.UUID(chunk_id("x.md", 0)).version == 5


async def test_second_run_writes_and_embeds_nothing() -> None:
    ingestor, embedder, store = make()
    await ingestor.ingest(DOCS, base_url=BASE)
    calls, upserts = len(embedder.calls), store.upserts
    summary = await ingestor.ingest(DOCS, base_url=BASE)
    assert (summary.added, summary.updated, summary.unchanged) == (0, 0, 4)
    assert summary.chunks_written == summary.chunks_deleted == 0
    assert (len(embedder.calls), store.upserts) == (calls, upserts)


async def test_changed_document_is_replaced_without_stale_chunks() -> None:
    ingestor, _, store = make()
    await ingestor.ingest(DOCS, base_url=BASE)
    before = len(store.chunks_of(DOCS[0].path))
    shorter = SourceDocument(DOCS[0].path, long_page("Pins", sections=1, sentences=5))
    docs = [shorter, *DOCS[1:]]
    summary = await ingestor.ingest(docs, base_url=BASE)
    assert (summary.added, summary.updated, summary.unchanged) == (0, 1, 3)
    after = len(store.chunks_of(DOCS[0].path))
    assert summary.chunks_written == after
    assert summary.chunks_deleted == before - after > 0
    assert_consistent(store, docs, ingestor)


async def test_changed_settings_reindex_every_document() -> None:
    ingestor, _, store = make()
    await ingestor.ingest(DOCS, base_url=BASE)
    other_base = await ingestor.ingest(DOCS, base_url="https://elsewhere.example")
    assert other_base.updated == 4
    smaller, _, _ = make(store, chunker=Chunker(count_words, max_tokens=40))
    assert smaller.config_version != ingestor.config_version
    assert (await smaller.ingest(DOCS, base_url=BASE)).updated == 4


async def test_prune_deletes_documents_not_in_the_stream() -> None:
    ingestor, _, store = make()
    await ingestor.ingest(DOCS, base_url=BASE)
    gone = len(store.chunks_of(DOCS[1].path))
    kept = [DOCS[0], DOCS[2], DOCS[3]]
    no_prune = await ingestor.ingest(kept, base_url=BASE)
    assert no_prune.deleted == 0
    assert store.chunks_of(DOCS[1].path)
    summary = await ingestor.ingest(kept, base_url=BASE, prune=True)
    assert (summary.unchanged, summary.deleted, summary.chunks_deleted) == (3, 1, gone)
    assert store.chunks_of(DOCS[1].path) == []
    assert_consistent(store, kept, ingestor)


async def test_prune_pages_through_many_documents() -> None:
    ingestor, _, store = make()
    many = [SourceDocument(f"notes/n{i:03}.md", f"Note {i}.\n") for i in range(450)]
    await ingestor.ingest(many)
    summary = await ingestor.ingest(many[:10], prune=True)
    assert summary.deleted == 440
    assert (await store.count()) == (10, 10)


async def test_interrupted_ingest_is_completed_by_a_rerun() -> None:
    ingestor, _, store = make()
    old = [SourceDocument(d.path, long_page("Old", sections=4)) for d in DOCS[:2]]
    await ingestor.ingest(old, base_url=BASE)
    new = [
        SourceDocument(DOCS[0].path, long_page("New", sections=2)),  # fewer chunks than before
        SourceDocument(DOCS[1].path, long_page("New", sections=6)),  # more chunks than before
        DOCS[2],
    ]
    first = len(ingestor.prepare(new[0], base_url=BASE).chunks)
    # Crash in the middle of the second document, after the first was fully replaced.
    store.fail_after_upserts = store.upserts + first + 3
    with pytest.raises(StoreUnavailable):
        await ingestor.ingest(new, base_url=BASE)
    hashes = await store.document_hashes()
    assert DOCS[1].path not in hashes  # half old, half new: not reported as consistent
    assert hashes[DOCS[0].path] == ingestor.document_hash(new[0], BASE)

    store.fail_after_upserts = None
    summary = await ingestor.ingest(new, base_url=BASE, prune=True)
    # The half-written document had no complete version, so it counts as added.
    assert (summary.unchanged, summary.updated, summary.added) == (1, 0, 2)
    assert_consistent(store, new, ingestor)


async def test_crash_in_a_new_document_then_prune_removes_its_partial_chunks() -> None:
    ingestor, _, store = make()
    store.fail_after_upserts = 2
    with pytest.raises(StoreUnavailable):
        await ingestor.ingest([DOCS[0]], base_url=BASE)
    assert len(store.points) == 2
    assert await store.document_hashes() == {}
    store.fail_after_upserts = None
    summary = await ingestor.ingest([DOCS[2]], base_url=BASE, prune=True)
    assert summary.deleted == 1
    assert_consistent(store, [DOCS[2]], ingestor)


async def test_async_iterables_are_accepted() -> None:
    async def stream() -> AsyncIterator[SourceDocument]:
        for document in DOCS:
            yield document

    ingestor, _, store = make()
    summary = await ingestor.ingest(stream(), base_url=BASE)
    assert summary.added == 4
    assert_consistent(store, DOCS, ingestor)


async def test_empty_document_removes_old_chunks() -> None:
    ingestor, _, store = make()
    await ingestor.ingest([DOCS[2]])
    events: list[IngestEvent] = []
    summary = await ingestor.ingest(
        [SourceDocument(DOCS[2].path, "---\ntitle: x\n---\n")], progress=events.append
    )
    assert summary.empty == 1
    assert summary.chunks_deleted == 1
    assert events[0].status is DocumentStatus.EMPTY
    assert store.points == {}


async def test_broken_front_matter_is_ingested_with_a_warning() -> None:
    ingestor, _, store = make()
    summary = await ingestor.ingest([SourceDocument("bad.md", "---\na: [\n---\nText.\n")])
    assert summary.added == 1
    assert summary.warnings
    assert summary.warnings[0].startswith("bad.md: invalid YAML")
    assert store.chunks_of("bad.md")[0].text == "Text."


@pytest.mark.parametrize("path", ["", "/abs.md", "a\\b.md", "a/../b.md", "a//b.md"])
async def test_invalid_paths_are_rejected(path: str) -> None:
    ingestor, _, _ = make()
    with pytest.raises(InvalidArgument, match=r"document\.path"):
        await ingestor.ingest([SourceDocument(path, "x")])


async def test_duplicate_paths_are_rejected() -> None:
    ingestor, _, _ = make()
    with pytest.raises(InvalidArgument, match="appears twice"):
        await ingestor.ingest([DOCS[2], DOCS[2]])


async def test_expired_deadline_stops_before_the_next_document() -> None:
    ingestor, embedder, _ = make()
    with pytest.raises(DeadlineExceeded, match="running it again"):
        await ingestor.ingest(DOCS, deadline=Deadline.after(-1.0))
    assert embedder.calls == []


async def test_delete() -> None:
    ingestor, _, store = make()
    await ingestor.ingest(DOCS, base_url=BASE)
    count = len(store.chunks_of(DOCS[0].path))
    assert await ingestor.delete(DOCS[0].path) == count
    with pytest.raises(DocumentNotFound):
        await ingestor.delete(DOCS[0].path)


def test_bad_batch_size() -> None:
    with pytest.raises(ValueError, match="batch_size"):
        Ingestor(FakeEmbedder(), MemoryStore(), batch_size=0)


class InFlightEmbedder(FakeEmbedder):
    """Counts how many of its calls run at once (each yields to the loop once)."""

    def __init__(self) -> None:
        super().__init__(max_tokens=64)
        self.running = 0
        self.most = 0

    async def embed_documents(
        self, texts: Sequence[str], *, deadline: Deadline | None = None
    ) -> list[list[float]]:
        self.running += 1
        self.most = max(self.most, self.running)
        await asyncio.sleep(0.01)
        self.running -= 1
        return await super().embed_documents(texts, deadline=deadline)


@pytest.mark.parametrize("parallel", [1, 2, 3])
async def test_embedding_calls_run_side_by_side_and_vectors_stay_in_order(parallel: int) -> None:
    embedder = InFlightEmbedder()
    store = MemoryStore()
    ingestor = Ingestor(embedder, store, batch_size=8, parallel=parallel)
    await ingestor.ingest(DOCS, base_url=BASE)
    assert embedder.most == parallel
    assert all(len(batch) <= -(-8 // parallel) for batch in embedder.calls)
    for chunk, vector in store.points.values():
        expected = ingestor.prepare(
            next(d for d in DOCS if d.path == chunk.document_id), base_url=BASE
        )
        text = expected.embed_texts[chunk.position]
        assert vector == FakeEmbedder._vector(text)
