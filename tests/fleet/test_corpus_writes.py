"""Corpus writes from several processes at once over one Qdrant (the stand-in, 5 ms a call):
every document's record and searchable chunks agree afterwards, an idle stream holds up
nobody and is ended by the idle timeout, and a writer that waits says so."""

from __future__ import annotations

import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest
from ragagent.v1 import corpus_pb2, corpus_pb2_grpc

from tests.fleet.qdrant_standin import qdrant_standin
from tests.fleet.support import fleet, inconsistent_documents, postgres_role
from tests.processes import REPO, command_env

PAGES = ("fleet/alpha.md", "fleet/beta.md", "fleet/gamma.md")
WORDS = "robots read sensors plan motions and move joints through the world they see"


def version(page: str, number: int) -> str:
    """Version ``number`` of a page: 1 to 4 long sections, so chunk counts differ by
    version and a writer's cleanup of "other" chunks matters."""
    sections = [
        f"## Part {s} of version {number}\n\n" + " ".join([f"{WORDS} {number} {s}."] * 12)
        for s in range(number % 4 + 1)
    ]
    return f"# {page} v{number}\n\n" + "\n\n".join(sections) + "\n"


def ingest(target: str, documents: dict[str, str], timeout: float = 120) -> str:
    requests = [
        corpus_pb2.IngestDocumentsRequest(document=corpus_pb2.Document(path=p, content=c))
        for p, c in documents.items()
    ]
    with grpc.insecure_channel(target) as channel:
        stub = corpus_pb2_grpc.CorpusServiceStub(channel)
        try:
            stub.IngestDocuments(iter(requests), timeout=timeout)
        except grpc.RpcError as error:
            return f"{error.code().name}: {error.details()}"
    return "OK"


@pytest.mark.timeout(600)
@pytest.mark.slow
def test_twenty_concurrent_conflicting_ingests_from_several_processes_leave_none_inconsistent(
    tmp_path: Path,
) -> None:
    collection = f"fleet_{uuid.uuid4().hex[:8]}"
    with qdrant_standin(latency=0.005) as qdrant, postgres_role() as dsn:
        with fleet(
            tmp_path, 2, qdrant_url=qdrant.url, database_url=dsn, qdrant_collection=collection
        ) as replicas:
            # Two `ragagent ingest` commands write versions 21 and 22 of every page too.
            folders = []
            for number in (21, 22):
                folder = tmp_path / f"cli-{number}"
                for page in PAGES:
                    (folder / page).parent.mkdir(parents=True, exist_ok=True)
                    (folder / page).write_text(version(page, number))
                folders.append(folder)
            commands = [
                subprocess.Popen(
                    [sys.executable, "-m", "service.cli", "ingest", str(folder)],
                    cwd=REPO,
                    env=command_env(
                        tmp_path / f"data-{folder.name}",
                        qdrant_url=qdrant.url,
                        qdrant_collection=collection,
                    ),
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
                for folder in folders
            ]
            # 20 streams, alternating between the replicas, each with its own version of
            # every page: all conflict with each other.
            with ThreadPoolExecutor(20) as pool:
                outcomes = list(
                    pool.map(
                        lambda n: ingest(replicas[n % 2].target, {p: version(p, n) for p in PAGES}),
                        range(1, 21),
                    )
                )
            finished = [c.communicate(timeout=300) for c in commands]
            codes = [c.returncode for c in commands]
        problems = inconsistent_documents(qdrant.local, collection)
    assert outcomes == ["OK"] * 20
    assert codes == [0, 0], finished
    assert problems == []
    print(f"20 streams over 2 replicas + 2 CLI ingests: {len(problems)} inconsistent documents")


@pytest.mark.slow
def test_an_idle_stream_holds_up_no_writer_and_is_ended_by_the_idle_timeout(
    tmp_path: Path,
) -> None:
    collection = f"fleet_{uuid.uuid4().hex[:8]}"
    release = threading.Event()

    def idle_stream() -> Iterator[corpus_pb2.IngestDocumentsRequest]:
        yield corpus_pb2.IngestDocumentsRequest(
            document=corpus_pb2.Document(path="idle/first.md", content=version("idle", 1))
        )
        release.wait(60)  # then sends nothing: the server's idle timeout ends the call

    with qdrant_standin(latency=0.005) as qdrant, postgres_role() as dsn:
        with fleet(
            tmp_path,
            2,
            qdrant_url=qdrant.url,
            database_url=dsn,
            qdrant_collection=collection,
            ingest_idle_timeout="3",
        ) as replicas:
            channel = grpc.insecure_channel(replicas[0].target)
            stub = corpus_pb2_grpc.CorpusServiceStub(channel)
            with ThreadPoolExecutor(1) as pool:
                idle = pool.submit(stub.IngestDocuments, idle_stream(), timeout=60)
                # Others write meanwhile, on the same replica and on the other one.
                assert ingest(replicas[0].target, {"idle/other.md": version("o", 2)}, 20) == "OK"
                assert ingest(replicas[1].target, {"idle/more.md": version("m", 3)}, 20) == "OK"
                deleted = stub.DeleteDocument(
                    corpus_pb2.DeleteDocumentRequest(document_id="idle/other.md"), timeout=20
                )
                assert not idle.done()  # all of that while the idle stream was still open
                with pytest.raises(grpc.RpcError) as ended:
                    idle.result(timeout=60)
            release.set()
            channel.close()
        problems = inconsistent_documents(qdrant.local, collection)
    assert deleted.chunks_deleted > 0
    assert ended.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    details = ended.value.details() or ""
    assert "sent nothing for 3 s" in details
    assert "1 documents (1 added, 0 updated)" in details
    assert problems == []
