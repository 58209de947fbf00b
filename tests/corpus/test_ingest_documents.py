"""IngestDocuments over the wire: counts, options, validation mid-stream, cancellation and
concurrent streams."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from ragagent.v1 import agent_pb2, corpus_pb2

from service.ingest.loader import SourceDocument
from service.ingest.remote import ingest_remote
from tests.corpus.support import BASE_URL, PAGES, CorpusServer, corpus_server, documents, violations

NODES = "module-01-foundations/chapter-01-ros2/page-01-nodes.md"
URDF = "module-01-foundations/chapter-02-urdf/page-01-urdf.md"
WHISPER = "module-02-perception/chapter-04-speech/page-01-whisper.md"


def _message(
    path: str, content: str = "", options: corpus_pb2.IngestOptions | None = None
) -> corpus_pb2.IngestDocumentsRequest:
    return corpus_pb2.IngestDocumentsRequest(
        options=options,
        document=corpus_pb2.Document(path=path, content=content or PAGES.get(path, "")),
    )


async def _stream(
    srv: CorpusServer, messages: list[corpus_pb2.IngestDocumentsRequest]
) -> corpus_pb2.IngestDocumentsResponse:
    return await srv.corpus.IngestDocuments(iter(messages), timeout=60)


def _counts(response: corpus_pb2.IngestDocumentsResponse) -> tuple[int, int, int, int]:
    return (
        response.documents_added,
        response.documents_updated,
        response.documents_unchanged,
        response.documents_deleted,
    )


async def test_added_unchanged_updated_and_pruned(tmp_path: Path) -> None:
    async with corpus_server(tmp_path) as srv:
        first = await ingest_remote(srv.channel, documents(), base_url=BASE_URL, timeout=60)
        assert _counts(first) == (5, 0, 0, 0)
        assert first.chunks_written >= 5
        assert first.chunks_deleted == 0
        assert first.duration.ToNanoseconds() > 0

        again = await ingest_remote(srv.channel, documents(), base_url=BASE_URL, timeout=60)
        assert _counts(again) == (0, 0, 5, 0)
        assert again.chunks_written == 0

        changed = dict(PAGES)
        changed[URDF] += "\nA continuous joint rotates without limits, like a wheel.\n"
        updated = await ingest_remote(
            srv.channel, documents(changed), base_url=BASE_URL, timeout=60
        )
        assert _counts(updated) == (0, 1, 4, 0)
        assert updated.chunks_written >= 1

        kept = {path: text for path, text in PAGES.items() if path != WHISPER}
        pruned = await ingest_remote(
            srv.channel, documents(kept), base_url=BASE_URL, prune=True, timeout=60
        )
        assert pruned.documents_deleted == 1
        assert pruned.chunks_deleted >= 1
        listed = await srv.list_all()
        hits = await srv.agent.Retrieve(
            agent_pb2.RetrieveRequest(query="Which middleware carries ROS 2 messages?"),
            timeout=10,
        )
    assert [d.document_id for d in listed] == sorted(kept)
    # The base URL of the stream became the pages' URLs.
    assert hits.sources[0].document_id == NODES
    assert hits.sources[0].url.startswith(BASE_URL + "docs/module-01-foundations/")


async def test_only_the_first_messages_options_count(tmp_path: Path) -> None:
    async with corpus_server(tmp_path) as srv:
        await ingest_remote(srv.channel, documents({URDF: PAGES[URDF]}), timeout=60)
        response = await _stream(
            srv,
            [
                _message("intro.md", options=corpus_pb2.IngestOptions(base_url=BASE_URL)),
                # Options alone, on a later message: accepted, and ignored.
                corpus_pb2.IngestDocumentsRequest(
                    options=corpus_pb2.IngestOptions(base_url="https://other.example/", prune=True)
                ),
                _message(NODES),
            ],
        )
        listed = {d.document_id: d for d in await srv.list_all()}
    assert _counts(response) == (2, 0, 0, 0)
    assert set(listed) == {"intro.md", NODES, URDF}  # prune was not honoured
    assert listed[NODES].url.startswith(BASE_URL)
    assert listed[URDF].url == ""  # ingested earlier without a base URL


async def test_an_empty_stream_and_options_only_change_nothing(tmp_path: Path) -> None:
    async with corpus_server(tmp_path) as srv:
        await ingest_remote(srv.channel, documents(), timeout=60)
        empty = await _stream(srv, [])
        options_only = await _stream(
            srv, [corpus_pb2.IngestDocumentsRequest(options=corpus_pb2.IngestOptions())]
        )
        listed = await srv.list_all()
    assert _counts(empty) == _counts(options_only) == (0, 0, 0, 0)
    assert len(listed) == 5


async def test_prune_with_no_documents_empties_the_index(tmp_path: Path) -> None:
    async with corpus_server(tmp_path) as srv:
        await ingest_remote(srv.channel, documents(), timeout=60)
        response = await ingest_remote(srv.channel, [], prune=True, timeout=60)
        listed = await srv.list_all()
    assert response.documents_deleted == 5
    assert listed == []


async def test_empty_documents_count_as_updated_when_indexed_before(tmp_path: Path) -> None:
    async with corpus_server(tmp_path) as srv:
        await ingest_remote(srv.channel, documents(), timeout=60)
        emptied = await ingest_remote(
            srv.channel,
            [SourceDocument(URDF, "---\ntitle: gone\n---\n"), SourceDocument("new.md", "")],
            timeout=60,
        )
        again = await ingest_remote(srv.channel, [SourceDocument("new.md", "")], timeout=60)
        listed = {d.document_id for d in await srv.list_all()}
    # URDF had chunks (now removed): updated. new.md was never indexed: nothing changed.
    assert _counts(emptied) == (0, 1, 1, 0)
    assert emptied.chunks_deleted >= 1
    assert _counts(again) == (0, 0, 1, 0)
    assert URDF not in listed
    assert "new.md" not in listed


@pytest.mark.parametrize(
    ("bad_path", "reason"),
    [("module-01/../secret.md", "path.relative"), ("notes.txt", "string.pattern")],
)
async def test_a_bad_path_mid_stream_names_the_message_and_keeps_what_came_before(
    tmp_path: Path, bad_path: str, reason: str
) -> None:
    good = list(PAGES)
    stream = [
        _message(good[0]),
        _message(good[1]),
        _message(bad_path, "# x\n\ntext"),
        _message(good[2]),
    ]
    async with corpus_server(tmp_path) as srv:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await _stream(srv, stream)
        listed = {d.document_id: d for d in await srv.list_all()}
        complete = await srv.runtime.store.document_hashes()
        rerun = await _stream(srv, [stream[0], stream[1], stream[3]])
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert list(violations(caught.value)) == ["[2].document.path"]
    # The two documents before the bad one were written whole; nothing after it was.
    assert set(listed) == {good[0], good[1]}
    assert set(complete) == {good[0], good[1]}
    assert all(d.chunk_count > 0 for d in listed.values())
    assert _counts(rerun) == (1, 0, 2, 0)


async def test_a_path_sent_twice_names_the_second_message(tmp_path: Path) -> None:
    async with corpus_server(tmp_path) as srv:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await _stream(srv, [_message(NODES), _message(URDF), _message(NODES)])
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    (field, description), *_ = violations(caught.value).items()
    assert field == "[2].document.path"
    assert "twice" in description


async def test_a_bad_base_url_is_rejected_before_anything_is_written(tmp_path: Path) -> None:
    async with corpus_server(tmp_path) as srv:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await ingest_remote(srv.channel, documents(), base_url="ftp://robots.example/")
        listed = await srv.list_all()
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert list(violations(caught.value)) == ["[0].options.base_url"]
    assert listed == []


async def test_a_client_failing_mid_stream_cancels_without_pruning(tmp_path: Path) -> None:
    def failing() -> Iterator[SourceDocument]:
        yield SourceDocument("intro.md", PAGES["intro.md"])
        raise UnicodeError("a file that is not UTF-8")

    async with corpus_server(tmp_path) as srv:
        await ingest_remote(srv.channel, documents(), timeout=60)
        with pytest.raises(UnicodeError, match="not UTF-8"):
            await ingest_remote(srv.channel, failing(), prune=True, timeout=60)
        await asyncio.sleep(0.2)  # let the server see the cancellation
        listed = await srv.list_all()
        # The cancelled stream released the write lock.
        after = await asyncio.wait_for(ingest_remote(srv.channel, documents(), timeout=60), 30)
    assert len(listed) == 5
    assert _counts(after) == (0, 0, 5, 0)


async def test_concurrent_streams_keep_every_document_consistent(tmp_path: Path) -> None:
    same = documents()
    async with corpus_server(tmp_path) as srv:
        # The same new documents twice at once: each document is written one stream at a
        # time (the write lease), so either stream may write it, never both interleaved.
        one, two = await asyncio.gather(
            ingest_remote(srv.channel, same, base_url=BASE_URL, timeout=60),
            ingest_remote(srv.channel, same, base_url=BASE_URL, timeout=60),
        )
        extra = {f"extra/page-{i}.md": f"# Extra {i}\n\nSpare page number {i}.\n" for i in range(4)}
        left, right = await asyncio.gather(
            ingest_remote(srv.channel, documents(extra), timeout=60),
            ingest_remote(srv.channel, documents(PAGES), base_url=BASE_URL, prune=True, timeout=60),
        )
        listed = {d.document_id: d for d in await srv.list_all()}
        complete = await srv.runtime.store.document_hashes()
        stats = await srv.corpus.GetCorpusStats(corpus_pb2.GetCorpusStatsRequest(), timeout=10)
    for outcome in (one, two):
        assert outcome.documents_added + outcome.documents_unchanged == 5
        assert outcome.documents_updated == 0
    assert one.documents_added + two.documents_added >= 5
    assert left.documents_added == 4
    # Whichever ran second decided whether the extra pages survive the prune; either way
    # every listed document is complete and the counts agree.
    assert set(listed) in ({*PAGES}, {*PAGES, *extra})
    assert right.documents_deleted in (0, 4)
    assert set(listed) == set(complete)
    assert stats.document_count == len(listed)
    assert stats.chunk_count == sum(d.chunk_count for d in listed.values())
