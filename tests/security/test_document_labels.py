"""Document permissions below the RPCs: the label filter inside each store's query (the
embedded engine and the server path), the labels ingestion gives documents, and a change of
permissions applied without re-embedding. The RPC-level attack is test_document_access."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import pytest
import qdrant_edge as qe

from service.access import ADMIN_ONLY, ReadAccess, labels
from service.domain import Chunk, SearchFilters
from service.errors import InvalidArgument
from service.executor import BlockingExecutor
from service.ingest.frontmatter import without_access_key
from service.ingest.loader import SourceDocument
from service.ingest.outcome import DocumentStatus
from service.ingest.pipeline import Ingestor
from service.retrieval.base import ChunkStore
from service.retrieval.edge_shard import DENSE
from service.retrieval.edge_store import EdgeStore
from tests.ingest.fakes import FakeEmbedder, MemoryStore
from tests.retrieval.test_store_contract import WordsEmbedder, chunk, open_store, put

ALICE = ReadAccess.of("alice", ["robotics"])  # group robotics
BOB = ReadAccess.of("bob", ["finance"])
NOBODY_PUBLIC = ReadAccess.of("carol", [], unlabelled=True)
QUERY = "quarterly salary budget numbers"


@pytest.fixture(params=["edge", "server"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[ChunkStore]:
    executor = BlockingExecutor(2)
    opened: ChunkStore = await open_store(request.param, tmp_path, WordsEmbedder(), executor)
    yield opened
    await opened.close()
    await executor.shutdown()


def _labelled(doc: str, count: int, text: str, access: tuple[str, ...]) -> list[Chunk]:
    return [
        replace(chunk(doc, i, f"{text} part {i}", count=count), access=access) for i in range(count)
    ]


async def _corpus(store: ChunkStore) -> None:
    # Finance's pages match the query best; robotics' match it a little (one shared word).
    await put(store, _labelled("fin-salaries", 6, QUERY, labels(["finance"])))
    await put(store, _labelled("rob-arms", 5, "robot arm budget", labels(["robotics"])))
    await put(store, _labelled("pub-notes", 2, "salary notes", ()))
    await put(store, _labelled("alice-own", 1, "salary of alice", labels(principals=["alice"])))


async def test_top_k_are_k_readable_chunks_though_unreadable_ones_score_higher(
    store: ChunkStore,
) -> None:
    await _corpus(store)
    everything = await store.search(QUERY, limit=4, threshold=0.0)
    assert {h.chunk.document_id for h in everything} == {"fin-salaries"}
    mine = await store.search(QUERY, limit=4, threshold=0.0, filters=SearchFilters(access=ALICE))
    # Inside the query, not after it: four hits, none of finance's, though six of finance's
    # outscore every one of them.
    assert len(mine) == 4
    assert {h.chunk.document_id for h in mine} <= {"rob-arms", "alice-own"}
    ten = await store.search(QUERY, limit=10, threshold=0.0, filters=SearchFilters(access=ALICE))
    assert sorted(h.chunk.document_id for h in ten) == ["alice-own"] + ["rob-arms"] * 5


async def test_filters_naming_another_groups_document_find_nothing(store: ChunkStore) -> None:
    await _corpus(store)
    aimed = [
        SearchFilters(chapter="fin-salaries", access=ALICE),
        SearchFilters(module="fin", access=ALICE),
        SearchFilters(url_prefix="https://book.example/fin/", access=ALICE),
        SearchFilters(url_prefix="https://book.example/fin/salaries", access=ALICE),
    ]
    for filters in aimed:
        assert await store.search(QUERY, limit=10, threshold=0.0, filters=filters) == []
    bob = await store.search(
        QUERY, limit=10, threshold=0.0, filters=SearchFilters(chapter="fin-salaries", access=BOB)
    )
    assert len(bob) == 6


async def test_unlabelled_documents_are_for_admins_unless_the_corpus_is_public(
    store: ChunkStore,
) -> None:
    await _corpus(store)
    restricted = ReadAccess.of("carol", [])
    hidden = SearchFilters(access=restricted)
    assert await store.search(QUERY, limit=10, threshold=0.0, filters=hidden) == []
    public = await store.search(
        QUERY, limit=10, threshold=0.0, filters=SearchFilters(access=NOBODY_PUBLIC)
    )
    assert {h.chunk.document_id for h in public} == {"pub-notes"}
    # A principal's own document is its own: bob does not read alice's.
    bobs = await store.search(QUERY, limit=10, threshold=0.0, filters=SearchFilters(access=BOB))
    assert "alice-own" not in {h.chunk.document_id for h in bobs}


async def test_listings_and_counts_show_only_readable_documents(store: ChunkStore) -> None:
    await _corpus(store)
    listed = await store.list_documents(after="", limit=50, access=ALICE)
    assert [d.document_id for d in listed] == ["alice-own", "rob-arms"]
    assert listed[1].access == ("g:robotics",)
    assert await store.count(access=ALICE) == (2, 6)
    assert await store.count(access=NOBODY_PUBLIC) == (1, 2)
    assert await store.count() == (4, 14)
    assert (await store.document_access())["fin-salaries"] == ("g:finance",)


async def test_relabelling_changes_who_reads_without_rewriting_vectors(store: ChunkStore) -> None:
    await _corpus(store)
    moved = await store.set_document_access("fin-salaries", labels(["robotics"]))
    assert moved == 6
    alice = await store.search(QUERY, limit=3, threshold=0.0, filters=SearchFilters(access=ALICE))
    assert {h.chunk.document_id for h in alice} == {"fin-salaries"}
    assert alice[0].chunk.access == ("g:robotics",)
    as_bob = SearchFilters(access=BOB)
    assert await store.search(QUERY, limit=10, threshold=0.0, filters=as_bob) == []
    assert (await store.document_access())["fin-salaries"] == ("g:robotics",)
    assert await store.count(access=BOB) == (0, 0)


async def test_chunks_stored_before_labels_existed_read_as_unlabelled(tmp_path: Path) -> None:
    executor = BlockingExecutor(2)
    embedder = WordsEmbedder()
    store = await EdgeStore.open(tmp_path / "edge", embedder, collection="docs", executor=executor)
    try:
        old = chunk("old-page", 0, QUERY)
        point = store.chunk_points([old], [embedder.vector(old.text)])[0]
        payload = {k: v for k, v in point.payload.items() if k != "access"}
        # Written straight into the shard, as a writer that knew no labels left it.
        store._shard.update(
            qe.UpdateOperation.upsert_points(
                [qe.Point(point.id, {DENSE: embedder.vector(old.text)}, payload)]
            )
        )
        public = SearchFilters(access=NOBODY_PUBLIC)
        restricted = SearchFilters(access=ReadAccess.of("carol", []))
        assert len(await store.search(QUERY, limit=5, threshold=0.0, filters=public)) == 1
        assert await store.search(QUERY, limit=5, threshold=0.0, filters=restricted) == []
    finally:
        await store.close()
        await executor.shutdown()


# --- ingestion ------------------------------------------------------------------------


def _page(body: str, access: str = "") -> str:
    front = f"---\ntitle: Page\n{access}---\n" if access else "---\ntitle: Page\n---\n"
    return front + f"\n# Page\n\n{body}\n"


async def test_front_matter_and_options_label_every_chunk_and_a_relabel_embeds_nothing() -> None:
    embedder, store = FakeEmbedder(), MemoryStore()
    ingestor = Ingestor(embedder, store)
    docs = [
        SourceDocument("a.md", _page("Arms move.", "access:\n  groups: [robotics, ops]\n")),
        SourceDocument("b.md", _page("Budgets grow.", "access: {principals: [alice]}\n")),
        SourceDocument("c.md", _page("Notes.")),
    ]
    await ingestor.ingest(docs, access=labels(["staff"]))
    by_doc = {d: store.chunks_of(d)[0].access for d in ("a.md", "b.md", "c.md")}
    assert by_doc == {
        "a.md": ("g:ops", "g:robotics", "g:staff"),
        "b.md": ("g:staff", "p:alice"),
        "c.md": ("g:staff",),
    }
    embedded, upserts = embedder.texts_embedded, store.upserts
    # The same text, other readers: relabelled in place; nothing embedded or written again.
    summary = await ingestor.ingest(docs)
    assert embedded == embedder.texts_embedded
    assert upserts == store.upserts
    assert summary.relabelled == 3
    assert summary.unchanged == 0
    assert store.chunks_of("c.md")[0].access == ()
    again = await ingestor.ingest(docs)
    assert again.unchanged == 3
    assert again.relabelled == 0


async def test_unusable_access_key_refuses_the_document_and_broken_yaml_hides_it() -> None:
    ingestor = Ingestor(FakeEmbedder(), store := MemoryStore())
    for bad in ("access: robotics\n", "access: {groups: [[1]]}\n", "access: {team: [x]}\n"):
        with pytest.raises(InvalidArgument) as caught:
            await ingestor.ingest([SourceDocument("bad.md", _page("Text.", bad))])
        assert caught.value.violations[0].reason == "document.access_invalid"
    summary = await ingestor.ingest(
        [SourceDocument("broken.md", "---\naccess: {groups: [a\n---\n\nText here.\n")],
        access=labels(["everyone-else"]),
    )
    assert summary.added == 1
    assert store.chunks_of("broken.md")[0].access == (ADMIN_ONLY,)
    assert any("invalid YAML front matter" in w for w in summary.warnings)
    assert DocumentStatus.RELABELLED.value == "relabelled"


def test_the_hash_text_leaves_out_the_access_key_and_nothing_else() -> None:
    plain = "---\ntitle: A\ntags: [x]\n---\n\n# A\n\nText.\n"
    assert without_access_key(plain) == plain  # pages without the key hash as they always did
    assert without_access_key("# No front matter\n") == "# No front matter\n"
    block = (
        "---\ntitle: A\naccess:\n  groups:\n    - robotics\n\n  principals: [bo]\n"
        "tags: [x]\n---\n\n# A\n\nText.\n"
    )
    assert without_access_key(block) == plain
    flow = "---\ntitle: A\naccess: {groups: [finance]}\ntags: [x]\n---\n\n# A\n\nText.\n"
    assert without_access_key(flow) == plain
    # A layout the cut would change (a key continued unindented): hashed whole.
    odd = "---\naccess: {groups:\n[a]}\ntitle: A\n---\nText.\n"
    assert without_access_key(odd) == odd


async def test_a_shard_made_before_labels_gets_their_index_when_it_opens(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from service.retrieval import edge_shard

    executor = BlockingExecutor(2)
    try:
        with monkeypatch.context() as before:
            before.setattr(edge_shard, "LATER_INDEXES", ())
            old = await EdgeStore.open(tmp_path, WordsEmbedder(), collection="d", executor=executor)
            assert "access" not in old._shard.info().payload_schema
            await old.close()
        reopened = await EdgeStore.open(
            tmp_path, WordsEmbedder(), collection="d", executor=executor
        )
        assert "access" in reopened._shard.info().payload_schema
        await reopened.close()
    finally:
        await executor.shutdown()
