"""ListDocuments, DeleteDocument and GetCorpusStats over the wire."""

from __future__ import annotations

import base64
from pathlib import Path

import grpc
import pytest
from google.rpc import error_details_pb2
from ragagent.v1 import corpus_pb2

from service.api.corpus import decode_page_token, encode_page_token
from service.errors import InvalidArgument
from service.ingest.remote import ingest_remote
from tests.corpus.support import (
    BASE_URL,
    PAGES,
    corpus_server,
    documents,
    error_details,
    violations,
)

MANY = {
    f"module-0{i % 3}/chapter-0{i}/page-{i:02d}.md": f"# Page {i}\n\nRobot fact {i}.\n"
    for i in range(7)
}


async def test_listing_pages_through_every_document_once(tmp_path: Path) -> None:
    async with corpus_server(tmp_path) as srv:
        await ingest_remote(srv.channel, documents(MANY), base_url=BASE_URL, timeout=60)
        pages: list[corpus_pb2.ListDocumentsResponse] = []
        token = ""
        while True:
            page = await srv.corpus.ListDocuments(
                corpus_pb2.ListDocumentsRequest(page_size=3, page_token=token), timeout=10
            )
            pages.append(page)
            token = page.next_page_token
            if not token:
                break
        everything = await srv.corpus.ListDocuments(corpus_pb2.ListDocumentsRequest(), timeout=10)
    assert [len(p.documents) for p in pages] == [3, 3, 1]
    ids = [d.document_id for p in pages for d in p.documents]
    assert ids == sorted(MANY)
    # page_size 0 is the default of 50: everything, and no next page.
    assert [d.document_id for d in everything.documents] == ids
    assert everything.next_page_token == ""
    first = pages[0].documents[0]
    assert first.title == "Page 0"
    assert first.module == "module-00"
    assert first.chapter == "chapter-00"
    assert first.chunk_count == 1
    assert len(first.content_hash) == 64
    assert first.url.startswith(BASE_URL)
    assert first.ingested_at.seconds > 0


@pytest.mark.parametrize(
    "token",
    [
        "not a token!",
        base64.urlsafe_b64encode(b"\xff\xfe").decode(),  # not UTF-8
        encode_page_token("intro.md") + "=",  # padded: not as issued
    ],
)
async def test_a_token_that_was_not_issued_is_invalid_argument(tmp_path: Path, token: str) -> None:
    async with corpus_server(tmp_path) as srv:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await srv.corpus.ListDocuments(
                corpus_pb2.ListDocumentsRequest(page_token=token), timeout=10
            )
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert list(violations(caught.value)) == ["page_token"]


def test_page_tokens_round_trip_and_are_opaque() -> None:
    for document_id in ("intro.md", "module-01/ünïcode page.mdx", "a" * 1024):
        token = encode_page_token(document_id)
        assert decode_page_token(token) == document_id
        assert document_id not in token
        assert set(token) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
    with pytest.raises(InvalidArgument):
        decode_page_token("")


async def test_page_size_over_the_limit_is_invalid_argument(tmp_path: Path) -> None:
    async with corpus_server(tmp_path) as srv:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await srv.corpus.ListDocuments(
                corpus_pb2.ListDocumentsRequest(page_size=201), timeout=10
            )
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert list(violations(caught.value)) == ["page_size"]


async def test_delete_removes_every_chunk_then_not_found(tmp_path: Path) -> None:
    target = "module-01-foundations/chapter-01-ros2/page-01-nodes.md"
    async with corpus_server(tmp_path) as srv:
        await ingest_remote(srv.channel, documents(), timeout=60)
        before = {d.document_id: d for d in await srv.list_all()}
        deleted = await srv.corpus.DeleteDocument(
            corpus_pb2.DeleteDocumentRequest(document_id=target), timeout=10
        )
        after = {d.document_id for d in await srv.list_all()}
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await srv.corpus.DeleteDocument(
                corpus_pb2.DeleteDocumentRequest(document_id=target), timeout=10
            )
        # Deleted means deleted: re-ingesting adds it back.
        again = await ingest_remote(srv.channel, documents(), timeout=60)
    assert deleted.chunks_deleted == before[target].chunk_count >= 2
    assert after == set(PAGES) - {target}
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND
    details = error_details(caught.value)
    (resource,) = [d for d in details if isinstance(d, error_details_pb2.ResourceInfo)]
    assert resource.resource_type == "document"
    assert resource.resource_name == target
    (info,) = [d for d in details if isinstance(d, error_details_pb2.ErrorInfo)]
    assert info.reason == "DOCUMENT_NOT_FOUND"
    assert (again.documents_added, again.documents_unchanged) == (1, 4)


async def test_delete_of_a_malformed_id_is_invalid_argument(tmp_path: Path) -> None:
    async with corpus_server(tmp_path) as srv:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await srv.corpus.DeleteDocument(
                corpus_pb2.DeleteDocumentRequest(document_id="../outside.md"), timeout=10
            )
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert list(violations(caught.value)) == ["document_id"]


async def test_stats_describe_the_index(tmp_path: Path) -> None:
    async with corpus_server(tmp_path) as srv:
        empty = await srv.corpus.GetCorpusStats(corpus_pb2.GetCorpusStatsRequest(), timeout=10)
        await ingest_remote(srv.channel, documents(), timeout=60)
        full = await srv.corpus.GetCorpusStats(corpus_pb2.GetCorpusStatsRequest(), timeout=10)
        listed = await srv.list_all()
    assert (empty.document_count, empty.chunk_count) == (0, 0)
    assert full.document_count == len(PAGES)
    assert full.chunk_count == sum(d.chunk_count for d in listed)
    assert full.collection == srv.settings.qdrant_collection
    assert full.embedding_model == "sentence-transformers/all-MiniLM-L6-v2"
    assert full.vector_size == 384
