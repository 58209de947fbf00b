"""Pages built to stall ingestion, sent over gRPC to a server process (issue 26, item 2).

The shapes an attacker with ``corpus:write`` used: a megabyte of nested ``>`` quotes, a list
1,500 levels deep, 2 MB of ``[``. Each must either be indexed (parsing is linear) or fail
alone with INVALID_ARGUMENT once over its CPU budget; questions are answered meanwhile, and
SIGTERM stops the server within its grace period even while such a page is being parsed.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status
from ragagent.v1 import agent_pb2, agent_pb2_grpc, corpus_pb2, corpus_pb2_grpc

from tests.helpers import local_embedder
from tests.processes import server_process

GOOD = corpus_pb2.Document(
    path="servo.md", content="# Servos\n\nA servo motor holds its angle under load.\n"
)
BRACKETS = "[" * 2_000_000
GRACE_S = 3.0


def _ingest(stub: corpus_pb2_grpc.CorpusServiceStub, *docs: corpus_pb2.Document) -> object:
    requests = [corpus_pb2.IngestDocumentsRequest(document=d) for d in docs]
    return stub.IngestDocuments(iter(requests), timeout=120)


def _questions(target: str, stop: threading.Event, errors: list[str]) -> Iterator[float]:
    """Retrieve calls in a loop until ``stop``; their latencies, errors into ``errors``."""
    with grpc.insecure_channel(target) as channel:
        stub = agent_pb2_grpc.AgentServiceStub(channel)
        while not stop.is_set():
            started = time.perf_counter()
            try:
                reply = stub.Retrieve(agent_pb2.RetrieveRequest(query="servo angle"), timeout=30)
            except grpc.RpcError as exc:
                errors.append(f"{exc.code()}: {exc.details()}")
                continue
            if not reply.sources:
                errors.append("no sources")
            yield time.perf_counter() - started


@pytest.mark.slow
def test_a_costly_page_fails_alone_while_questions_are_answered(tmp_path: Path) -> None:
    local_embedder()  # skips where the model is not provisioned
    with server_process(tmp_path, ingest_document_cpu_seconds="1") as server:
        with grpc.insecure_channel(server.target) as channel:
            corpus = corpus_pb2_grpc.CorpusServiceStub(channel)
            _ingest(corpus, GOOD)
            stop, errors, latencies = threading.Event(), list[str](), list[float]()
            asker = threading.Thread(
                target=lambda: latencies.extend(_questions(server.target, stop, errors))
            )
            asker.start()
            try:
                bad = corpus_pb2.Document(path="bad.md", content=BRACKETS)
                after = corpus_pb2.Document(path="after.md", content="# After\n\nText.\n")
                with pytest.raises(grpc.RpcError) as raised:
                    _ingest(corpus, bad, after)
                # The server goes on: the next stream indexes its page.
                reply = _ingest(corpus, after)
            finally:
                stop.set()
                asker.join()
            listed = corpus.ListDocuments(corpus_pb2.ListDocumentsRequest(), timeout=30)
        log = server.log()
    error = raised.value
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, log
    status = rpc_status.from_call(error)  # type: ignore[arg-type]
    assert status is not None
    request = error_details_pb2.BadRequest()
    assert any(detail.Unpack(request) for detail in status.details)
    (violation,) = request.field_violations
    assert violation.field == "[0].document.content"
    assert "'bad.md' was not indexed" in violation.description
    assert reply.documents_added == 1  # type: ignore[attr-defined]
    assert sorted(d.document_id for d in listed.documents) == ["after.md", "servo.md"]
    assert not errors, errors
    assert latencies
    # A figure to report, not an assertion (timing belongs in benchmarks): the issue's
    # target is p99 < 100 ms while the costly page is parsed.
    ordered = sorted(latencies)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    print(
        f"Retrieve during the hostile ingest: {len(ordered)} calls, p50 "
        f"{ordered[len(ordered) // 2] * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms"
    )


@pytest.mark.parametrize(
    "content",
    [
        pytest.param(BRACKETS, id="2MB-of-brackets"),
        pytest.param("".join("  " * (i % 1500) + f"- item {i}\n" for i in range(1400)), id="lists"),
    ],
)
@pytest.mark.slow
def test_sigterm_stops_the_server_within_its_grace_period_mid_parse(
    tmp_path: Path, content: str
) -> None:
    local_embedder()
    # No budget: only the shutdown can stop the parse of this page early.
    settings = {"ingest_document_cpu_seconds": "0", "grace_period": str(GRACE_S)}
    with server_process(tmp_path, **settings) as server:
        sent = threading.Event()
        outcome: list[BaseException | object] = []

        def requests() -> Iterator[corpus_pb2.IngestDocumentsRequest]:
            yield corpus_pb2.IngestDocumentsRequest(
                document=corpus_pb2.Document(path="big.md", content=content)
            )
            sent.set()

        def ingest() -> None:
            with grpc.insecure_channel(server.target) as channel:
                stub = corpus_pb2_grpc.CorpusServiceStub(channel)
                try:
                    outcome.append(stub.IngestDocuments(requests(), timeout=120))
                except grpc.RpcError as exc:
                    outcome.append(exc)

        client = threading.Thread(target=ingest)
        client.start()
        assert sent.wait(60)
        started = time.monotonic()
        code = server.stop(timeout=GRACE_S + 20)
        took = time.monotonic() - started
        client.join()
        log = server.log()
    assert code == 0, log[-3000:]
    # The drain (calls ended, the pool's threads done, stores closed) fits the grace period;
    # the interpreter's own exit after it takes seconds more on a busy machine (measured
    # 4-6 s on 2 shared cores, with or without a parse), hence the looser bound on the whole.
    drained = _seconds_between(log, "shutting down", "stopped")
    # After the grace period the pool's threads and the stores close: about 1 s measured on
    # 2 loaded cores (4.03 s once in CI), against minutes before the parse could be stopped.
    assert drained <= GRACE_S + 3, f"drained in {drained:.1f} s; log:\n{log[-3000:]}"
    assert took < GRACE_S + 15, f"SIGTERM took {took:.1f} s; log:\n{log[-3000:]}"


def _seconds_between(log: str, first: str, second: str) -> float:
    """Seconds between the log lines whose event is ``first`` and ``second``."""
    times: dict[str, datetime] = {}
    for line in log.splitlines():
        with contextlib.suppress(ValueError):
            record = json.loads(line)
            if record.get("event") in (first, second):
                times[record["event"]] = datetime.fromisoformat(record["timestamp"])
    return (times[second] - times[first]).total_seconds()
